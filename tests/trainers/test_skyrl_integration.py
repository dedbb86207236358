"""SkyRL integration: TurnRL ids as skyrl_gym envs, and TurnRL strategies called the way SkyRL calls an estimator.

The env half needs ``skyrl-gym`` (the ``[skyrl]`` extra). Three tests run SkyRL's trainer package itself (``skyrl``
0.3: its advantage-estimator registry, its ``RayPPOTrainer`` with the TurnRL hook, its ``SkyRLGymGenerator``);
``scripts/setup.sh`` installs it without its CUDA torch / vLLM pins, on Python 3.11 through
:mod:`trainers.integrations.skyrl_compat`, and they skip, saying how to install it, where it does not import. The
estimators themselves are plain functions and are checked here with SkyRL's keywords.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import functools
import importlib
import importlib.util
import json
import marshal
import os
import subprocess
import sys
import types

import gymnasium as gym
import numpy as np
import pytest

import agentgym_turn
from agentgym_turn.core import with_late_components
from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from agentgym_turn.policies import run_episode
from tests.envs.tau.conftest import fake_openai  # noqa: F401  (the local judge server fixture)
from tests.trainers.test_credit import make_episode
from tests.trainers.test_tarl_end_to_end import judge_reply
from trainers.credit import CreditConfig, get_strategy, needs_critic, tarl_score
from trainers.integrations import skyrl_compat
from trainers.integrations.skyrl_credit import (
    _PIP_CPU,
    HOOK_ATTR,
    RECORD_KEY,
    SUPPORTED,
    UNSUPPORTED,
    _skyrl_module,
    episodes_from_skyrl,
    estimator_names,
    make_estimator,
    records_from_env_metrics,
    register_skyrl_estimators,
    skyrl_batch_from_episodes,
    strategy_of,
    turnrl_trainer_class,
)
from trainers.integrations.turn_records import TurnRecord, as_numpy, batch_from_episodes, episodes_from_batch

skyrl_gym = pytest.importorskip("skyrl_gym")
torch = pytest.importorskip("torch")
from trainers.integrations.skyrl_turnrl import TurnRLTextEnv, dataset_rows, register_skyrl_envs  # noqa: E402

ALL_IDS = sorted(agentgym_turn.ENV_SPECS)
JUNK = ["", "hello", "<answer>", "{" * 50, "\x00\xff garbage </tool>"]


def scripted(env: gym.Env):
    """The env's most informative scripted policy (a reference/oracle plays several rewarded turns)."""
    policies = type(env.unwrapped).scripted_policies
    name = next((n for n in ("reference", "oracle", "bfs") if n in policies), sorted(policies)[0])
    return policies[name]


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_every_id_plays_as_a_skyrl_env_with_the_native_rewards(env_id):
    register_skyrl_envs()
    native = gym.make(env_id)
    _, reset_info = native.reset(seed=5)
    log = run_episode(native, scripted(native), seed=5)
    env = skyrl_gym.make(env_id, env_config={}, extras={"seed": 5, "max_turns": 1})
    assert isinstance(env, TurnRLTextEnv) and isinstance(env, skyrl_gym.Env)
    prompt, meta = env.init([])
    assert repr(prompt) == repr(log.history[: len(prompt)]) and meta["state_key"] == reset_info.get("state_key")
    outs = [env.step(action) for action in log.actions]
    assert [o["reward"] for o in outs] == log.rewards
    assert [o["done"] for o in outs] == [False] * (len(outs) - 1) + [True]
    assert [o["metadata"]["reward_components"] for o in outs] == [i["reward_components"] for i in log.infos]
    assert outs[-1]["metadata"]["terminated"] is log.terminated and outs[-1]["metadata"]["truncated"] is log.truncated
    metrics = env.get_metrics()
    record = records_from_env_metrics([metrics])[0]
    assert {k: v for k, v in metrics.items() if k != RECORD_KEY} == pytest.approx(log.metrics)
    late = log.infos[-1].get("late_reward_components")
    assert record.turn_rewards == with_late_components([i["reward_components"] for i in log.infos], late)
    assert record.step_rewards == log.rewards and record.env_id == env_id
    keys = [reset_info["state_key"]] + [i["state_key"] for i in log.infos[:-1]]
    assert record.state_keys == keys
    env.init([])  # bad action text never raises: it is an ordinary turn
    for text in JUNK:
        out = env.step(text)
        assert isinstance(out["reward"], float)
        assert set(out["metadata"]["reward_components"]) <= set(native.unwrapped.reward_levels)
        if out["done"]:
            break
    env.close()
    native.close()


def test_module_docstring_example_runs():
    module = importlib.import_module("trainers.integrations.skyrl_turnrl")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_dataset_rows_read_the_way_skyrl_reads_them(tmp_path):
    datasets = pytest.importorskip("datasets")
    register_skyrl_envs(["TurnRL/Arithmetic-v0"])
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in dataset_rows("TurnRL/Arithmetic-v0", [3, 4])))
    rows = list(datasets.load_dataset("json", data_files=str(path), keep_in_memory=True)["train"])  # PromptDataset
    for row in rows:
        extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
        env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
        assert env.init(row["prompt"])[0] == row["prompt"]
    assert rows[0]["prompt"] != rows[1]["prompt"]
    env = skyrl_gym.make("TurnRL/Arithmetic-v0", env_config={}, extras={"seed": 3})
    with pytest.raises(InvalidArgument, match="differs from the env's opening"):
        env.init(rows[1]["prompt"])
    with pytest.raises(InvalidArgument, match="neither 'seed' nor 'task'"):
        skyrl_gym.make("TurnRL/Arithmetic-v0", env_config={}, extras={"max_turns": 3})
    with pytest.raises(InvalidArgument, match="not a JSON object"):
        skyrl_gym.make("TurnRL/Arithmetic-v0", env_config={}, extras={"seed": 1, "env_kwargs": "{oops"})
    with pytest.raises(InvalidArgument, match="Did you mean"):
        TurnRLTextEnv(extras={"seed": 0}, env_id="TurnRL/Arithmetc-v0")


# --------------------------------------------------------------------------------------------------------------
# The adapter and the estimators
# --------------------------------------------------------------------------------------------------------------

LEVELS = {"tool": "turn", "fmt": "turn", "em": "outcome"}


def batch_episodes():
    """Two groups: unequal turn counts, a zero-reward turn, an answer at turn 0, a negative turn, a truncation."""
    specs = [
        (0, [(2, 2), (3, 0)], [{"tool": 0.2}, {"em": 1.0, "fmt": 0.1}], ["s", "a"], True),
        (0, [(1, 3), (2, 0)], [{"tool": 0.0}, {"em": 0.0, "fmt": 0.1}], ["s", "b"], True),
        (0, [(2, 0)], [{"em": 1.0, "tool": 0.2}], ["s"], True),
        (1, [(1, 1), (2, 1), (1, 0)], [{"tool": 0.2}, {"tool": -0.5}, {"em": 1.0}], ["r", "x", "y"], True),
        (1, [(2, 1), (1, 1), (2, 0)], [{"tool": 0.2}, {"tool": 0.0}, {"fmt": 0.1}], ["r", "x", "z"], False),
    ]
    out = []
    for group, turns, rewards, keys, done in specs:
        ep = make_episode(turns, rewards, group=group, prompt=3, levels=LEVELS, terminated=done, truncated=not done)
        out.append(dataclasses.replace(ep, state_keys=keys))
    return out


def skyrl_call(name, batch, values=None, config=None, with_inputs=True):
    """The estimator called with exactly the keywords SkyRL's compute_advantages_and_returns passes."""
    extra = {"loss_mask": torch.tensor(batch.loss_mask), "turnrl_records": batch.records} if with_inputs else {}
    return make_estimator(name)(
        token_level_rewards=torch.tensor(batch.token_level_rewards),
        response_mask=torch.tensor(batch.response_mask),
        index=batch.index,
        values=None if values is None else torch.tensor(values),
        grpo_norm_by_std=True,
        gamma=1.0,
        lambd=1.0,
        config=config,
        **extra,
    )


@pytest.mark.parametrize("name", SUPPORTED)
def test_registered_estimators_equal_trainers_credit(name):
    episodes = batch_episodes()
    rng = np.random.default_rng(0)
    values = [rng.normal(size=len(ep.token_ids) + 1) for ep in episodes] if needs_critic(name) else None
    batch = skyrl_batch_from_episodes(episodes, values, width=12)
    want = get_strategy(name)(episodes, values, CreditConfig())
    adv, ret = skyrl_call(name, batch, None if values is None else batch.values)
    assert isinstance(adv, torch.Tensor) and adv.shape == (5, 12) and adv.dtype == torch.float32
    for i, ep in enumerate(episodes):
        span = np.flatnonzero(np.arange(len(ep.token_ids)) >= np.flatnonzero(ep.loss_mask)[0])
        cols = np.flatnonzero(batch.response_mask[i])
        np.testing.assert_allclose(adv[i, cols].numpy(), want.advantages[i][span], atol=1e-5)
        np.testing.assert_allclose(ret[i, cols].numpy(), (want.returns or want.advantages)[i][span], atol=1e-5)
        assert not adv[i, : cols[0]].any() and not want.advantages[i][: span[0]].any()
    assert np.abs(adv.numpy()).sum() > 0  # the batch separates every strategy from zero


def test_adapter_round_trip():
    episodes = batch_episodes()
    batch = skyrl_batch_from_episodes(episodes)
    assert (batch.response_mask.sum(axis=1) == [len(ep.token_ids) - 3 for ep in episodes]).all()
    assert batch.response_mask[:, -1].all()  # right-aligned, as SkyRL lays out responses
    back, layout = episodes_from_skyrl(
        batch.token_level_rewards, batch.response_mask, batch.loss_mask, batch.index, batch.records
    )
    for ep, got in zip(episodes, back, strict=True):
        np.testing.assert_array_equal(got.loss_mask, ep.loss_mask[3:])
        np.testing.assert_array_equal(got.turn_index, ep.turn_index[3:])
        assert got.turn_rewards == ep.turn_rewards and got.reward_levels == ep.reward_levels
        assert (got.terminated, got.truncated, got.state_keys) == (ep.terminated, ep.truncated, ep.state_keys)
    assert [ep.group for ep in back] == [0, 0, 0, 1, 1]
    again = skyrl_batch_from_episodes(back, width=batch.response_mask.shape[1])
    np.testing.assert_array_equal(again.token_level_rewards, batch.token_level_rewards)
    np.testing.assert_array_equal(again.loss_mask, batch.loss_mask)
    assert again.records == batch.records and layout.rows == [0, 1, 2, 3, 4]


def test_left_and_right_layouts_hold_the_same_rows():
    """turn_records builds SkyRL's right-aligned rows and verl's left-aligned ones from one code path."""
    episodes = batch_episodes()
    rng = np.random.default_rng(2)
    values = [rng.normal(size=len(ep.token_ids) + 1) for ep in episodes]
    right = batch_from_episodes(episodes, values, width=12, align="right")
    left = batch_from_episodes(episodes, values, width=12, align="left")
    for i, ep in enumerate(episodes):
        r, n = right.response_mask[i] > 0, len(ep.token_ids) - 3
        assert left.response_mask[i, :n].all() and not left.response_mask[i, n:].any() and r.sum() == n
        for field in ("token_level_rewards", "loss_mask", "responses", "values"):
            np.testing.assert_array_equal(getattr(left, field)[i, :n], getattr(right, field)[i, r])
        np.testing.assert_array_equal(right.responses[i, r], ep.token_ids[3:])
    assert left.records == right.records == [TurnRecord.from_episode(ep) for ep in episodes]
    episodes_left, _ = episodes_from_batch(
        left.token_level_rewards, left.response_mask, left.loss_mask, left.index, left.records, reward_settings="x"
    )
    assert [ep.turn_rewards for ep in episodes_left] == [ep.turn_rewards for ep in episodes]
    with pytest.raises(InvalidArgument, match="align='middle'"):
        batch_from_episodes(episodes, align="middle")
    with pytest.raises(InvalidArgument, match=r"row 1 of env_metrics has no 'turnrl_record'"):
        records_from_env_metrics([{RECORD_KEY: right.records[0].to_metrics()}, {"env/return": 1.0}])
    bf16 = torch.tensor([[0.5, 1.25]], dtype=torch.bfloat16)
    assert as_numpy(bf16, np.float32).tolist() == [[0.5, 1.25]] and as_numpy(bf16, np.float64).dtype == np.float64


def test_padding_rows_and_the_trainer_hook_path():
    episodes = batch_episodes()
    batch = skyrl_batch_from_episodes(episodes)
    padded = dataclasses.replace(
        batch,
        token_level_rewards=np.vstack([batch.token_level_rewards, batch.token_level_rewards[:1]]),
        response_mask=np.vstack([batch.response_mask, batch.response_mask[:1]]),
        loss_mask=np.vstack([batch.loss_mask, np.zeros_like(batch.loss_mask[:1])]),
        index=[*batch.index, "pad"],
    )
    lent = {"loss_mask": torch.tensor(padded.loss_mask), "records": padded.records}
    config = types.SimpleNamespace(**{HOOK_ATTR: lent})  # what the hook attaches to SkyRL's AlgorithmConfig
    adv, _ = skyrl_call("mt_grpo", padded, config=config, with_inputs=False)
    ref, _ = skyrl_call("mt_grpo", batch)
    assert torch.equal(adv[:5], ref) and not adv[5].any()


def test_estimator_refuses_what_it_cannot_compute():
    batch = skyrl_batch_from_episodes(batch_episodes())
    with pytest.raises(InvalidArgument, match="turnrl_trainer_class"):
        skyrl_call("mt_grpo", batch, with_inputs=False)  # SkyRL's stock trainer passes no turn structure
    swapped = dataclasses.replace(
        batch, records=[batch.records[2], *batch.records[1:2], batch.records[0], *batch.records[3:]]
    )
    with pytest.raises(InvalidArgument, match="runs of policy tokens"):
        skyrl_call("mt_grpo", swapped)
    zeroed = dataclasses.replace(batch, token_level_rewards=np.zeros_like(batch.token_level_rewards))
    with pytest.raises(InvalidArgument, match="zero_reward_on_non_stop"):
        skyrl_call("grpo_or", zeroed)
    with pytest.raises(InvalidArgument, match="critic values"):
        skyrl_call("mt_ppo", batch)
    with pytest.raises(InvalidArgument, match="not offered"):
        make_estimator("turn_ppo")
    with pytest.raises(InvalidArgument, match=r"trainer\.algorithm\.gamma"):
        make_estimator("mt_ppo", CreditConfig(gamma=0.9))
    with pytest.raises(InvalidArgument, match="use_loss_mask"):
        make_estimator("mt_grpo", CreditConfig(use_loss_mask=False))
    with pytest.raises(InvalidArgument, match="Did you mean"):
        strategy_of("turnrl_mt_grop")
    assert strategy_of("turnrl_tarl") == "tarl" and set(SUPPORTED) | set(UNSUPPORTED) >= {"mt_grpo", "mt_ppo", "tarl"}


# --------------------------------------------------------------------------------------------------------------
# SkyRL's trainer package on Python 3.11 (trainers.integrations.skyrl_compat)
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("from typing import TypedDict", "from typing_extensions import TypedDict"),
        (
            "from typing import Any, TypedDict as TD, Literal",
            "from typing import Any, Literal\nfrom typing_extensions import TypedDict as TD",
        ),
        ("from typing import Any", "from typing import Any"),
        (
            "import typing\nclass A(typing.TypedDict):\n    x: int",
            "import typing\n\nclass A(typing.TypedDict):\n    x: int",
        ),
        ("from .typing import TypedDict", "from .typing import TypedDict"),
        ("def f():\n    from typing import TypedDict", "def f():\n    from typing_extensions import TypedDict"),
    ],
)
def test_compat_rewrite_moves_only_typings_typeddict(source, want):
    assert ast.unparse(skyrl_compat.typeddict_from_typing_extensions(ast.parse(source))) == want


def test_compat_module_docstring_example_runs():
    result = doctest.testmod(skyrl_compat)
    assert result.attempted > 0 and result.failed == 0


def test_compat_makes_skyrls_pydantic_models_import_without_changing_the_install():
    """On Python < 3.12, skyrl.tinker.types fails to import as installed, and imports through the finder with
    typing_extensions' TypedDict, whose pydantic model validates; the installed bytecode cache keeps the original code.
    On 3.12+ the finder is not installed and skyrl imports as it is."""
    if importlib.util.find_spec("skyrl") is None:
        pytest.skip(f"skyrl is not installed; {_PIP_CPU}")
    plain = "import skyrl.tinker.types"
    shim = "from trainers.integrations import skyrl_compat; assert skyrl_compat.install() == skyrl_compat.needed(); "
    check = (
        "import typing_extensions, skyrl.tinker.types as t, sys; "
        "assert (t.TypedDict is typing_extensions.TypedDict) == (sys.version_info < (3, 12)); "
        "kw = {'pixel_values': None, 'image_grid_thw': None}; "
        "assert t.RenderedModelInput(prompt_ids=[1], multi_modal_kwargs=kw).multi_modal_kwargs == kw; "
        "print(t.__spec__.loader.get_filename('skyrl.tinker.types'))"
    )
    run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=120)
    bare = run([sys.executable, "-c", plain])
    if skyrl_compat.needed():
        assert bare.returncode != 0 and "typing_extensions.TypedDict" in bare.stderr, bare.stderr[-2000:]
    else:
        assert bare.returncode == 0, bare.stderr[-2000:]
    fixed = run([sys.executable, "-c", shim + check])
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    path = fixed.stdout.strip()
    cached = importlib.util.cache_from_source(path)
    if os.path.exists(cached):  # written by the plain import, never by the finder
        with open(cached, "rb") as f:
            code = marshal.loads(f.read()[16:])
        assert "typing_extensions" not in code.co_names and "typing_extensions" not in code.co_consts
    assert skyrl_compat.install() == skyrl_compat.needed() and skyrl_compat.install() == skyrl_compat.needed()
    assert sum(type(f).__name__ == "_Finder" for f in sys.meta_path) == int(skyrl_compat.needed())  # idempotent


def test_registers_with_skyrls_advantage_estimator_registry():
    try:
        registry = _skyrl_module("ppo_utils").AdvantageEstimatorRegistry
    except DependencyNotInstalled as exc:
        pytest.skip(str(exc))
    names = register_skyrl_estimators()
    assert names == estimator_names() and register_skyrl_estimators() == names  # idempotent
    batch = skyrl_batch_from_episodes(batch_episodes())
    kwargs = {"loss_mask": torch.tensor(batch.loss_mask), "turnrl_records": batch.records}
    got = registry.get("turnrl_mt_grpo")(
        token_level_rewards=torch.tensor(batch.token_level_rewards),
        response_mask=torch.tensor(batch.response_mask),
        index=batch.index,
        values=None,
        grpo_norm_by_std=True,
        gamma=1.0,
        lambd=1.0,
        config=None,
        **kwargs,
    )
    assert torch.equal(got[0], skyrl_call("mt_grpo", batch)[0])


def test_trainer_hook_inside_skyrls_trainer(tokenizer):
    """SkyRL's own RayPPOTrainer turns a generator output into a batch and calls the TurnRL estimator through the hook
    (no Ray workers: the batch is split for one data-parallel worker)."""
    try:
        trainer_cls = turnrl_trainer_class()
        config_mod = importlib.import_module("skyrl.train.config")
    except DependencyNotInstalled as exc:
        pytest.skip(str(exc))
    register_skyrl_estimators(["mt_grpo", "mt_ppo"])
    extra = make_episode([(1, 0)], [{"em": 0.0}], group=1, prompt=3, levels=LEVELS)
    episodes = [*batch_episodes(), extra]  # SkyRL wants groups of n_samples_per_prompt = 3
    batch = skyrl_batch_from_episodes(episodes)
    rows = [np.flatnonzero(m) for m in batch.response_mask]
    output = {
        "prompt_token_ids": [[tokenizer.eos_token_id] * 3 for _ in episodes],
        "response_ids": [list(range(len(cols))) for cols in rows],
        "rewards": [batch.token_level_rewards[i, cols].tolist() for i, cols in enumerate(rows)],
        "loss_masks": [batch.loss_mask[i, cols].astype(int).tolist() for i, cols in enumerate(rows)],
        "env_metrics": [{"env/return": 0.0, RECORD_KEY: r.to_metrics()} for r in batch.records],
    }
    rng = np.random.default_rng(1)
    values = [rng.normal(size=len(ep.token_ids) + 1) for ep in episodes]
    for name, vals in (("mt_grpo", None), ("mt_ppo", values)):
        cfg = config_mod.SkyRLTrainConfig()
        cfg.trainer.algorithm.advantage_estimator = f"turnrl_{name}"
        cfg.generator.inference_engine.enable_ray_prometheus_stats = False  # no Ray cluster to scrape
        cfg.trainer.train_batch_size = cfg.trainer.policy_mini_batch_size = 2  # two prompts (groups)
        cfg.generator.n_samples_per_prompt = 3
        trainer = trainer_cls(cfg, None, tokenizer, None, None, None)
        trainer.dispatch = types.SimpleNamespace(get_lcm_dp_size=lambda: 1)
        data = trainer.convert_to_training_input(dict(output), [str(ep.group) for ep in episodes])
        with_values = skyrl_batch_from_episodes(episodes, vals)
        data["values"] = None if vals is None else torch.tensor(with_values.values)
        data = trainer.compute_advantages_and_returns(data)
        want = get_strategy(name)(episodes, vals, CreditConfig())
        for i, (ep, cols) in enumerate(zip(episodes, rows, strict=True)):
            span = np.arange(3, len(ep.token_ids))
            np.testing.assert_allclose(data["advantages"][i, cols].numpy(), want.advantages[i][span], atol=1e-5)
        assert not hasattr(cfg.trainer.algorithm, HOOK_ATTR)  # lent for the call only
    stock = trainer_cls.__mro__[1](cfg, None, tokenizer, None, None, None)  # SkyRL's RayPPOTrainer, no hook
    stock.dispatch = trainer.dispatch
    data = stock.convert_to_training_input(dict(output), [str(ep.group) for ep in episodes])
    data["values"] = torch.tensor(with_values.values)
    with pytest.raises(InvalidArgument, match="turnrl_trainer_class"):
        stock.compute_advantages_and_returns(data)


class ScriptedEngine:
    """Stands in for SkyRL's inference engine (the model): each session answers with its next scripted turn, as real
    token ids of the test tokenizer ending in its end-of-turn token. SkyRL's generator calls only these two methods."""

    def __init__(self, tokenizer, scripts: dict[str, list[str]]):
        self.tokenizer, self.scripts = tokenizer, {k: list(v) for k, v in scripts.items()}

    async def generate(self, input_batch, model=None):
        text = self.scripts[input_batch["session_ids"][0]].pop(0)
        ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return {"responses": [text], "response_ids": [ids], "stop_reasons": ["stop"], "response_logprobs": None}

    async def finish_session(self, session_id):
        assert not self.scripts[session_id], f"session {session_id} ended before its script"


def native_group(env_id, seed, group, size=4):
    """Play ``env_id`` natively for one task with each scripted policy (a different rng per member): the actions and
    one-token-per-turn Episodes carrying the native per-turn rewards and state keys."""
    env = gym.make(env_id)
    policies = type(env.unwrapped).scripted_policies
    actions, episodes = [], []
    for j, name in enumerate((sorted(policies) * size)[:size]):
        _, info = env.reset(seed=seed)
        keys, rng, acts, infos, done = [info["state_key"]], np.random.default_rng(j), [], [], False
        while not done:
            acts.append(policies[name](env.unwrapped, rng))
            _, _, term, trunc, info = env.step(acts[-1])
            infos.append(info)
            keys.append(info["state_key"])
            done = term or trunc
        k = len(acts)
        turns = with_late_components([i["reward_components"] for i in infos], infos[-1].get("late_reward_components"))
        episodes.append(
            dataclasses.replace(
                make_episode([(1, 0)] * k, turns, group=group, prompt=0, levels=env.unwrapped.reward_levels),
                state_keys=keys[:k],
            )
        )
        actions.append(acts)
    env.close()
    return actions, episodes


def test_skyrl_generator_and_trainer_reproduce_trainers_credit(tokenizer):
    """SkyRL's own generator plays TurnRL envs (scripted turns instead of a model) and SkyRL's trainer, with the hook,
    computes TurnRL advantages: each turn's advantage equals trainers.credit on the same episodes played natively."""
    try:
        trainer_cls = turnrl_trainer_class()
        config_mod = importlib.import_module("skyrl.train.config")
        gen_mod = importlib.import_module("skyrl.train.generators.skyrl_gym_generator")
        base = importlib.import_module("skyrl.train.generators.base")
    except (DependencyNotInstalled, ImportError) as exc:
        pytest.skip(str(exc))
    import asyncio

    register_skyrl_envs()
    names = ["mt_grpo", "tarl", "grpo_or", "gigpo", "mt_rloo_rtg"]
    register_skyrl_estimators(names)
    tasks = [("TurnRL/Sokoban-v2", 3), ("TurnRL/WikiTwoTurn-v2", 0)]
    played = [native_group(env_id, seed, g) for g, (env_id, seed) in enumerate(tasks)]
    size = len(played[0][0])
    cfg = config_mod.SkyRLTrainConfig()
    cfg.generator.max_input_length = 8192
    cfg.generator.n_samples_per_prompt = size
    cfg.generator.inference_engine.enable_ray_prometheus_stats = False
    cfg.trainer.train_batch_size = cfg.trainer.policy_mini_batch_size = len(tasks)
    scripts, inputs = {}, {k: [] for k in ("prompts", "env_classes", "env_extras", "trajectory_ids")}
    for g, ((env_id, seed), (actions, _)) in enumerate(zip(tasks, played, strict=True)):
        row = dataset_rows(env_id, [seed])[0]
        for rep, acts in enumerate(actions):
            scripts[f"{g}_{rep}"] = acts
            inputs["prompts"].append(row["prompt"])
            inputs["env_classes"].append(env_id)
            inputs["env_extras"].append({"seed": seed, "env_kwargs": row["env_kwargs"]})
            inputs["trajectory_ids"].append(base.TrajectoryID(instance_id=str(g), repetition_id=rep))
    generator = gen_mod.SkyRLGymGenerator(
        cfg.generator, cfg.environment.skyrl_gym, ScriptedEngine(tokenizer, scripts), tokenizer
    )
    output = asyncio.run(generator.generate({**inputs, "sampling_params": None, "batch_metadata": None}))
    episodes = [ep for _, eps in played for ep in eps]
    for name in names:
        cfg.trainer.algorithm.advantage_estimator = f"turnrl_{name}"
        trainer = trainer_cls(cfg, None, tokenizer, None, None, None)
        trainer.dispatch = types.SimpleNamespace(get_lcm_dp_size=lambda: 1)
        data = trainer.convert_to_training_input(dict(output), [t.instance_id for t in inputs["trajectory_ids"]])
        data["values"] = None
        data = trainer.compute_advantages_and_returns(data)
        want = get_strategy(name)(episodes, None, CreditConfig()).advantages
        for i, ep in enumerate(episodes):
            mask = data["loss_mask"][i].numpy() > 0
            runs = np.cumsum(mask & ~np.concatenate([[False], mask[:-1]])) - 1
            got = [data["advantages"][i].numpy()[mask & (runs == k)] for k in range(ep.num_turns)]
            assert all(len(g) and np.allclose(g, want[i][k], atol=1e-5) for k, g in enumerate(got)), (name, i)
    mt = get_strategy("mt_grpo")(episodes, None, CreditConfig()).advantages  # the batch is not degenerate:
    assert len({ep.num_turns for ep in episodes}) > 1 and any(len(set(np.round(a, 4))) > 1 for a in mt)


def test_late_judge_scores_reach_their_turns_through_skyrl(fake_openai):  # noqa: F811
    """TauRetail with a judge (a local OpenAI-compatible server with fixed scores): the final step pays every late
    score, where SkyRL stamps it, while the record puts each on its turn: TARL through the adapter sees 003's numbers.
    """
    register_skyrl_envs(["TurnRL/TauRetail-v1"])
    fake_openai.replies = [judge_reply(None), judge_reply(1)]
    records = []
    for _ in range(2):
        native = gym.make("TurnRL/TauRetail-v1")
        actions = run_episode(native, scripted(native), seed=0).actions
        native.close()
        extras = {"seed": 0, "env_kwargs": {"judge": fake_openai.spec("judge")}}
        env = skyrl_gym.make("TurnRL/TauRetail-v1", env_config={}, extras=extras)
        env.init([])
        outs = [env.step(a) for a in actions]
        records.append(env.record())
        late = outs[-1]["metadata"]["late_reward_components"]
        assert late == [{"judge": t["judge"]} for t in records[-1].turn_rewards]
    perfect, flawed = records
    n = len(perfect.turn_rewards)
    assert n >= 3 and perfect.turn_rewards == [{"judge": 1.0}] * (n - 1) + [{"task": 1.0, "judge": 1.0}]
    assert perfect.step_rewards == [0.0] * (n - 1) + [1.0 + n] and flawed.turn_rewards[1] == {"judge": -1.0}
    # one policy token and one env token per turn, each step's reward on its turn's token, as SkyRL lays a row out
    width = 2 * n - 1
    rewards = np.zeros((2, width), np.float32)
    rewards[:, ::2] = [r.step_rewards for r in records]
    loss = np.tile((np.arange(width) % 2 == 0).astype(np.float32), (2, 1))
    kwargs = {"response_mask": torch.ones(2, width), "index": ["t", "t"], "loss_mask": torch.tensor(loss)}
    adv, _ = make_estimator("tarl")(token_level_rewards=torch.tensor(rewards), turnrl_records=records, **kwargs)
    episodes = [
        make_episode([(1, 1)] * (n - 1) + [(1, 0)], r.turn_rewards, prompt=0, levels=r.reward_levels) for r in records
    ]
    want = get_strategy("tarl")(episodes, None, CreditConfig()).advantages
    np.testing.assert_allclose(adv.numpy()[:, ::2], [w[::2] for w in want], atol=1e-6)
    assert tarl_score(episodes[0], CreditConfig()) == pytest.approx(15.0) and adv[0, 0] > 0 > adv[1, 0]
