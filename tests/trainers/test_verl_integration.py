"""verl integration: the batch adapter, TurnRL strategies inside verl's estimator registry, and the agent loop.

Runs with verl installed (``pip install "agentgym-turn[verl]"``); everything here is CPU-only. The estimators are
called through verl's own ``compute_advantage`` on hand-built ``DataProto`` batches and compared with
``trainers.credit`` on the same episodes. The agent loop is built by verl's ``AgentLoopBase`` and plays a real
TurnRL env against a real token-in-token-out HTTP server the test starts (SmolLM2-135M-Instruct through this repo's
transformers engine), reached through verl's ``server_manager.generate`` interface.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is not installed: pip install 'agentgym-turn[verl]'")
torch = pytest.importorskip("torch")

from agentgym_turn.error import DependencyNotInstalled, InvalidArgument  # noqa: E402
from trainers.credit import STRATEGIES, CreditConfig, get_strategy, needs_critic  # noqa: E402
from trainers.episode import Episode  # noqa: E402
from trainers.integrations import verl_turnrl as vt  # noqa: E402

LEVELS = {"tool": "turn", "fmt": "turn", "em": "outcome"}


def make_episode(group: int, turns: list[tuple[int, int, dict]], prompt: int = 3, keys: list[str] | None = None):
    """An episode: ``prompt`` prompt tokens, then per turn (policy tokens, env tokens after, reward components)."""
    ids, mask, turn_index = [7] * prompt, [0] * prompt, [-1] * prompt
    for k, (n_policy, n_env, _) in enumerate(turns):
        ids += [10 + k] * n_policy + [5] * n_env
        mask += [1] * n_policy + [0] * n_env
        turn_index += [k] * n_policy + [-1] * n_env
    return Episode(
        env_id="TurnRL/Toy-v0",
        group=group,
        token_ids=np.array(ids),
        loss_mask=np.array(mask),
        turn_index=np.array(turn_index),
        logprobs=np.zeros(len(ids)),
        turn_rewards=[dict(r) for _, _, r in turns],
        reward_levels=dict(LEVELS),
        terminated=True,
        state_keys=keys,
    )


@pytest.fixture()
def episodes() -> list[Episode]:
    """Two groups with unequal turn counts; the final turns pay turn-level and outcome components together."""
    return [
        make_episode(0, [(2, 3, {"tool": 0.2}), (3, 0, {"em": 1.0, "fmt": 0.1})], keys=["s0", "a"]),
        make_episode(0, [(4, 2, {"tool": 0.0}), (1, 0, {"em": 0.0, "fmt": -0.5})], keys=["s0", "b"]),
        make_episode(0, [(2, 0, {"em": 1.0})], prompt=5, keys=["s0"]),
        make_episode(1, [(3, 1, {"tool": 0.2}), (2, 2, {"tool": 0.2}), (2, 0, {"em": 1.0})], keys=["t", "u", "v"]),
        make_episode(1, [(1, 1, {"tool": -1.0}), (2, 0, {"em": 0.0, "fmt": 0.3})], keys=["t", "w"]),
    ]


def full_values(episodes: list[Episode], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=len(ep.token_ids) + 1) for ep in episodes]


def to_dataproto(batch: vt.VerlBatch):
    """The ``DataProto`` verl's agent loop manager collects: tensors plus one record dict per row."""
    from verl import DataProto

    tensors = {
        "responses": torch.tensor(batch.responses),
        "response_mask": torch.tensor(batch.response_mask),
        "token_level_rewards": torch.tensor(batch.token_level_rewards),
    }
    if batch.values is not None:
        tensors["values"] = torch.tensor(batch.values)
    records = np.empty(len(batch.records), dtype=object)
    records[:] = [r.to_metrics() for r in batch.records]
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": batch.index, vt.RECORD_KEY: records})


def response_slices(episodes: list[Episode], arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [a[vt.response_start(ep) :] for ep, a in zip(episodes, arrays, strict=True)]


def test_round_trip_rebuilds_the_episodes_response_spans(episodes):
    batch = vt.verl_batch_from_episodes(episodes, width=12)
    assert batch.responses.shape == (5, 12)
    # rewards sit on each turn's last policy token: row 0 = [A A E E E A A A], 0.2 at col 1 and 1.1 at col 7
    np.testing.assert_allclose(batch.token_level_rewards[0, :8], [0, 0.2, 0, 0, 0, 0, 0, 1.1], atol=1e-6)
    assert batch.response_mask[0].tolist() == [1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    back = vt.episodes_from_verl(batch.token_level_rewards, batch.response_mask, batch.index, batch.records)
    for ep, rebuilt in zip(episodes, back, strict=True):
        s = vt.response_start(ep)
        assert rebuilt.turn_index.tolist() == ep.turn_index[s:].tolist()
        assert rebuilt.loss_mask.tolist() == ep.loss_mask[s:].tolist()
        assert rebuilt.turn_rewards == ep.turn_rewards and rebuilt.reward_levels == ep.reward_levels
        assert rebuilt.state_keys == ep.state_keys and rebuilt.terminated
    assert [ep.group for ep in back] == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("strategy", vt.SUPPORTED)
def test_registered_estimator_inside_verl_equals_trainers_credit(strategy, episodes):
    from verl.trainer.ppo import core_algos

    names = vt.register_verl_estimators()
    assert "turnrl_" + strategy in names and "turnrl_" + strategy in core_algos.ADV_ESTIMATOR_REGISTRY
    values = full_values(episodes) if needs_critic(strategy) else None
    batch = vt.verl_batch_from_episodes(episodes, values=values, width=14)
    data = vt.compute_turnrl_advantage(to_dataproto(batch), "turnrl_" + strategy, config={"gamma": 1.0, "lam": 1.0})
    want = get_strategy(strategy)(episodes, values, CreditConfig())
    adv = data.batch["advantages"].numpy()
    for i, a in enumerate(response_slices(episodes, want.advantages)):
        np.testing.assert_allclose(adv[i, : len(a)], a, rtol=1e-5, atol=1e-5, err_msg=f"{strategy} row {i}")
        assert not adv[i, len(a) :].any()
    if want.returns is not None:
        ret = data.batch["returns"].numpy()
        for i, r in enumerate(response_slices(episodes, want.returns)):
            np.testing.assert_allclose(ret[i, : len(r)], r, rtol=1e-5, atol=1e-5)


def test_verl_settings_override_the_credit_config(episodes):
    """verl's algorithm.norm_adv_by_std_in_grpo / gamma / lam reach the strategy; the numbers follow them."""
    vt.register_verl_estimators(["mt_grpo", "mt_ppo"])
    batch = vt.verl_batch_from_episodes(episodes)
    data = vt.compute_turnrl_advantage(to_dataproto(batch), "turnrl_mt_grpo", config={"norm_adv_by_std_in_grpo": False})
    want = get_strategy("mt_grpo")(episodes, None, CreditConfig(scale_by_std=False))
    for i, a in enumerate(response_slices(episodes, want.advantages)):
        np.testing.assert_allclose(data.batch["advantages"].numpy()[i, : len(a)], a, rtol=1e-5, atol=1e-6)
    values = full_values(episodes, seed=1)
    batch = vt.verl_batch_from_episodes(episodes, values=values)
    data = vt.compute_turnrl_advantage(to_dataproto(batch), "turnrl_mt_ppo", config={"gamma": 0.9, "lam": 0.8})
    want = get_strategy("mt_ppo")(episodes, values, CreditConfig(gamma=0.9, gae_lambda=0.8))
    for i, a in enumerate(response_slices(episodes, want.advantages)):
        np.testing.assert_allclose(data.batch["advantages"].numpy()[i, : len(a)], a, rtol=1e-5, atol=1e-5)


def test_estimators_refuse_what_they_cannot_compute_honestly(episodes):
    vt.register_verl_estimators(["mt_grpo", "mt_ppo"])
    batch = vt.verl_batch_from_episodes(episodes)
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = to_dataproto(batch)
    with pytest.raises(InvalidArgument, match="turnrl_sync"):  # verl's stock trainer passes no records
        compute_advantage(data, adv_estimator="turnrl_mt_grpo", config={})
    with pytest.raises(InvalidArgument, match="critic values"):  # ...and no values but to its own 'gae'
        vt.verl_advantages(
            "mt_ppo",
            CreditConfig(),
            token_level_rewards=batch.token_level_rewards,
            response_mask=batch.response_mask,
            index=batch.index,
            records=batch.records,
        )
    kl_shaped = batch.token_level_rewards - 0.01 * batch.response_mask  # algorithm.use_kl_in_reward
    with pytest.raises(InvalidArgument, match="use_kl_in_reward"):
        vt.verl_advantages(
            "mt_grpo",
            CreditConfig(),
            token_level_rewards=kl_shaped,
            response_mask=batch.response_mask,
            index=batch.index,
            records=batch.records,
        )
    with pytest.raises(InvalidArgument, match="turn_ppo"):
        vt.make_verl_estimator("turn_ppo")
    with pytest.raises(InvalidArgument, match=r"algorithm\.lam"):
        vt.make_verl_estimator("mt_ppo", CreditConfig(gae_lambda=0.9))
    assert set(vt.SUPPORTED) == set(STRATEGIES) - {"turn_ppo"}


def test_another_verl_release_is_refused_with_the_pinned_install(monkeypatch):
    import verl

    assert vt.require_verl() is verl and verl.__version__ == vt.VERL_VERSION
    monkeypatch.setattr(verl, "__version__", "0.8.0")
    with pytest.raises(DependencyNotInstalled, match=r"verl 0\.8\.0 is installed.*agentgym-turn\[verl\]"):
        vt.require_verl()


# --------------------------------------------------------------------------------------------------------------
# The agent loop against a real local token server
# --------------------------------------------------------------------------------------------------------------


class _CompletionsHandler(BaseHTTPRequestHandler):
    """``POST /v1/completions`` with token-id prompts, answered by the server's engine (vLLM's reply format)."""

    def do_POST(self) -> None:
        from trainers.engine_api import SamplingConfig

        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        sampling = SamplingConfig(
            max_new_tokens=body["max_tokens"], temperature=body["temperature"], seed=body.get("seed")
        )
        with self.server.lock:  # type: ignore[attr-defined]
            gens = self.server.engine.generate(body["prompt"], sampling)  # type: ignore[attr-defined]
        choices = [
            {
                "index": i,
                "finish_reason": "stop" if g.finished else "length",
                "logprobs": {"tokens": [f"token_id:{t}" for t in g.token_ids], "token_logprobs": g.logprobs},
            }
            for i, g in enumerate(gens)
        ]
        payload = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def serve(engine) -> tuple[ThreadingHTTPServer, str]:
    """Start a ``/v1/completions`` token server for ``engine`` on a free local port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CompletionsHandler)
    server.engine = engine
    server.lock = threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def smollm2_server():
    """A real token-in-token-out server: SmolLM2-135M-Instruct through TransformersEngine."""
    from agentgym_turn.models import load_causal_lm
    from trainers.engine_transformers import TransformersEngine
    from trainers.engines import stop_token_ids

    torch.set_num_threads(1)
    model, tokenizer = load_causal_lm("smollm2")
    model.eval()
    server, url = serve(TransformersEngine(model, stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id))
    yield url, tokenizer
    stop(server)


def build_agent_loop(base_url: str, tokenizer, *, max_tokens_per_turn: int, response_length: int = 512):
    """TurnRLAgentLoop built the way verl's AgentLoopWorker builds it (hydra instantiate from the registry)."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from trainers.engines import stop_token_ids
    from trainers.integrations import verl_agent_loop as val

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 1024,
                    "response_length": response_length,
                    "multi_turn": {"max_assistant_turns": None},
                }
            },
            "data": {},
        }
    )
    return hydra.utils.instantiate(
        config={**_agent_loop_registry[val.AGENT_NAME], "max_tokens_per_turn": max_tokens_per_turn},
        trainer_config=DictConfigWrap(config=config),
        server_manager=val.CompletionsClient(base_url, "smollm2", stop_token_ids(tokenizer)),
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def run_rows_raw(agent, rows: list[dict]) -> list:
    """verl's worker awaits one ``run(sampling_params, **row)`` per row concurrently; so do we."""

    async def play_all():
        return await asyncio.gather(*[agent.run(dict(SAMPLING), **row) for row in rows])

    return asyncio.run(play_all())


def run_rows(agent, infos: list[dict]) -> list:
    """Rows that carry only ``extra_info`` (and verl's ``raw_prompt`` / ``index``)."""
    return run_rows_raw(agent, [{"raw_prompt": [], "extra_info": info, "index": i} for i, info in enumerate(infos)])


def check_output(out, tokenizer) -> None:
    """The invariants of a TurnRL row: turns, rewards on their last tokens, log-probs on policy tokens only."""
    from trainers.rollout import decode

    record = out.extra_fields[vt.RECORD_KEY]
    mask = np.array(out.response_mask, dtype=bool)
    ends = np.flatnonzero(mask & ~np.concatenate([mask[1:], [False]]))
    assert len(ends) == len(record["turn_rewards"]) >= 1 and mask[0]
    rewards = np.array(out.token_rewards)
    np.testing.assert_allclose(rewards[ends], record["step_rewards"], atol=1e-6)
    assert np.count_nonzero(rewards) == np.count_nonzero(record["step_rewards"])
    assert out.reward_score == pytest.approx(sum(record["step_rewards"]))
    assert out.extra_fields["turn_scores"] == record["step_rewards"]
    prompt_text = decode(tokenizer, out.prompt_ids)
    assert prompt_text.startswith("<|im_start|>system") and prompt_text.endswith("<|im_start|>assistant\n")
    logprobs = np.array(out.response_logprobs)
    assert len(logprobs) == len(out.response_ids) and (logprobs[mask] <= 0).all() and not logprobs[~mask].any()
    row = out.as_dict()  # the v1 trainer's row: rm_scores carries the per-turn rewards
    assert torch.equal(row["rm_scores"], torch.tensor(out.token_rewards, dtype=torch.float32))
    assert row["response_mask"].tolist() == out.response_mask and "token_rewards" not in row
    assert out.metrics.generate_sequences > 0 and out.metrics.tool_calls > 0


@pytest.mark.slow
def test_agent_loop_plays_wiki_two_turn_through_smollm2(smollm2_server):
    """SmolLM2 sampling through the server (its rewards are mostly 0: it rarely follows the tool format)."""
    from trainers.integrations import verl_agent_loop as val

    base_url, tokenizer = smollm2_server
    agent = build_agent_loop(base_url, tokenizer, max_tokens_per_turn=24)
    assert isinstance(agent, val.TurnRLAgentLoop)
    outputs = run_rows(agent, [{"env_id": "TurnRL/WikiTwoTurn-v2", "seed": s} for s in (0, 1)])
    for out in outputs:
        check_output(out, tokenizer)
        assert all(len(t) for t in out.extra_fields[vt.RECORD_KEY]["turn_rewards"])


class TextPolicyEngine:
    """A scripted policy behind the server: search the question, then answer with the first retrieved line.

    It reads only the prompt ids (as a real model does), writes WikiTwoTurn's ``<tool>`` calls or SearchR1's
    ``<search>`` tags, and gives each token log-prob -0.5.
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate(self, prompts, sampling):
        from trainers.engine_api import Generation
        from trainers.rollout import decode, encode

        gens = []
        for ids in prompts:
            text = decode(self.tokenizer, ids)
            last_user = text.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
            wiki = "wiki_search" in text
            if "<result>" in last_user or "<information>" in last_user:
                body = last_user.split(">", 1)[1].strip().split("\n")[0].replace("Doc 1(Title: ", "").split(")")[0]
                reply = f"<{'reasoning' if wiki else 'think'}>Read it.</{'reasoning' if wiki else 'think'}>\n"
                reply += f"<answer>{body[:40]}</answer>"
            else:
                question = last_user.replace("Question:", "").strip()[:80]
                call = {"name": "wiki_search", "args": {"query": question}}
                reply = (
                    f"<reasoning>Search.</reasoning>\n<tool>{json.dumps(call)}</tool>"
                    if wiki
                    else f"<think>Search.</think><search>{question}</search>"
                )
            out = [*encode(self.tokenizer, reply), self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
            out = out[: sampling.max_new_tokens]
            gens.append(Generation(out, [-0.5] * len(out), finished=len(out) <= sampling.max_new_tokens))
        return gens

    def update_weights(self, model) -> None:
        raise NotImplementedError


@pytest.fixture(scope="module")
def text_policy_server(tokenizer):
    server, url = serve(TextPolicyEngine(tokenizer))
    yield url
    stop(server)


@pytest.mark.parametrize("env_id", ["TurnRL/WikiTwoTurn-v2", "TurnRL/SearchR1-v2"])
def test_agent_loop_episode_equals_trainers_rollout_and_feeds_the_estimator(env_id, text_policy_server, tokenizer):
    """Inside verl the episode has exactly the ids, masks and rewards trainers.rollout gives it; its row then goes
    through verl's compute_advantage with a TurnRL estimator and matches trainers.credit."""
    import gymnasium as gym

    from trainers.engines import stop_token_ids
    from trainers.rollout import RolloutConfig, engine_actor, play, start_slot

    agent = build_agent_loop(text_policy_server, tokenizer, max_tokens_per_turn=96, response_length=1536)
    seeds = (3, 4)
    outputs = run_rows(agent, [{"env_id": env_id, "seed": s} for s in seeds])
    reference = []
    for s, out in zip(seeds, outputs, strict=True):
        check_output(out, tokenizer)
        env = gym.make(env_id)
        slot, _ = start_slot(env, env_id, 0, tokenizer, s)
        cfg = RolloutConfig(
            max_new_tokens=96, max_context=len(slot.token_ids) + 1536, max_turns=env.unwrapped.max_turns
        )
        [done] = play([slot], engine_actor(TextPolicyEngine(tokenizer), cfg), tokenizer, stop_token_ids(tokenizer), cfg)
        ep = done.to_episode(tree=False)
        assert ep.token_ids.tolist() == out.prompt_ids + out.response_ids
        assert ep.loss_mask.tolist() == [0] * len(out.prompt_ids) + out.response_mask
        assert out.extra_fields[vt.RECORD_KEY]["turn_rewards"] == ep.turn_rewards
        reference.append(ep)
    assert any(ep.total_reward != 0 for ep in reference) and max(ep.num_turns for ep in reference) >= 2
    vt.register_verl_estimators(["mt_grpo", "tarl"])
    batch = vt.verl_batch_from_episodes(reference)
    for strategy in ("mt_grpo", "tarl"):
        data = vt.compute_turnrl_advantage(to_dataproto(batch), "turnrl_" + strategy, config={})
        want = get_strategy(strategy)(reference, None, CreditConfig())
        for i, a in enumerate(response_slices(reference, want.advantages)):
            np.testing.assert_allclose(data.batch["advantages"].numpy()[i, : len(a)], a, atol=1e-5)


def test_agent_loop_names_a_missing_env_id():
    from trainers.integrations.verl_agent_loop import episode_spec

    with pytest.raises(InvalidArgument, match="env_id"):
        episode_spec({"task": {}}, 0)
    assert episode_spec({"env_id": "TurnRL/SearchR1-v2", "seed": 4}, 9) == ("TurnRL/SearchR1-v2", None, 4, {})


# --------------------------------------------------------------------------------------------------------------
# verl's v1 trainer: the turnrl_sync hook over a real TransferQueue, and the plugin that registers it
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_turnrl_sync_trainer_lends_records_and_values_to_verls_compute_advantage(episodes):
    """verl's own v1 ``_compute_advantage`` (rows read from and written back to a real TransferQueue on a local Ray)
    with the TurnRL hook: MT-PPO advantages and returns equal trainers.credit's."""
    ray = pytest.importorskip("ray")
    tq = pytest.importorskip("transfer_queue")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    values = full_values(episodes, seed=2)
    batch = vt.verl_batch_from_episodes(episodes, values=values)
    spans = vt.span_mask(batch.response_mask).sum(axis=1)
    keys = [f"{batch.index[i]}_{i}_0" for i in range(len(episodes))]  # verl's {uid}_{session}_{output} keys
    rows = [
        {
            "uid": str(batch.index[i]),
            "response_mask": torch.tensor(batch.response_mask[i, :n]),
            "rm_scores": torch.tensor(batch.token_level_rewards[i, :n]),
            "values": torch.tensor(batch.values[i, :n]),
            "extra_fields": {vt.RECORD_KEY: batch.records[i].to_metrics()},
        }
        for i, n in enumerate(spans)
    ]
    ray.init(address="local", num_cpus=4, include_dashboard=False)  # logical CPUs: TQ's actors take one each
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        meta = tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(rows))
        cls = vt.turnrl_trainer_class()
        assert get_trainer_cls(vt.TRAINER_MODE) is cls
        trainer = cls.__new__(cls)  # only what _compute_advantage reads: the config and whether a critic runs
        trainer.config = OmegaConf.create(
            {
                "algorithm": {"adv_estimator": "turnrl_mt_ppo", "gamma": 1.0, "lam": 1.0, "use_kl_in_reward": False},
                "actor_rollout_ref": {"rollout": {"n": 3}},
            }
        )
        trainer.use_critic = True
        trainer._compute_advantage(meta, metrics={})
        got = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "returns"])
    finally:
        tq.close()
        ray.shutdown()
    want = get_strategy("mt_ppo")(episodes, values, CreditConfig())
    for i, (a, r) in enumerate(
        zip(response_slices(episodes, want.advantages), response_slices(episodes, want.returns), strict=True)
    ):
        np.testing.assert_allclose(got["advantages"][i].numpy(), a, atol=1e-5)
        np.testing.assert_allclose(got["returns"][i].numpy(), r, atol=1e-5)


@pytest.mark.slow
def test_plugin_registers_estimators_and_trainer_in_every_verl_process():
    """``VERL_USE_EXTERNAL_MODULES=trainers.integrations.verl_plugin``: a fresh process that imports verl has both."""
    import os
    import subprocess
    import sys

    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "from verl.trainer.ppo.v1 import get_trainer_cls\n"
        "print(get_trainer_cls('turnrl_sync').__name__, get_adv_estimator_fn('turnrl_tarl').args[0])\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "trainers.integrations.verl_plugin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["TurnRLTrainer", "tarl"]


def test_example_dataset_rows_reach_the_agent_loop_through_verls_dataset(tmp_path, text_policy_server, tokenizer):
    """examples/verl/make_dataset.py -> verl's RLHFDataset -> TurnRLAgentLoop.run(**row): the episode of the row."""
    import importlib.util
    from pathlib import Path

    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = Path(__file__).resolve().parents[2] / "examples" / "verl" / "make_dataset.py"
    spec = importlib.util.spec_from_file_location("make_dataset", path)
    make_dataset = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_dataset)
    make_dataset.main(["--env", "TurnRL/WikiTwoTurn-v2", "--out", str(tmp_path), "--train", "2", "--val", "1"])
    data_config = OmegaConf.create(
        {"max_prompt_length": 1024, "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path)}
    )
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, data_config)
    assert len(dataset) == 2
    row = dataset[1]
    assert row["agent_name"] == "turnrl_agent" and row["index"] == 1
    agent = build_agent_loop(text_policy_server, tokenizer, max_tokens_per_turn=96)
    [out] = run_rows_raw(agent, [row])
    check_output(out, tokenizer)
    from trainers.rollout import encode, render

    assert out.prompt_ids == encode(tokenizer, render(tokenizer, list(row["raw_prompt"]), generation_prompt=True))


def test_rows_through_verls_own_batching_keep_records_but_its_last_token_score_is_refused(
    text_policy_server, tokenizer
):
    """verl's AgentLoopWorker pads and batches the loop's outputs into a DataProto (``_agent_loop_postprocess`` +
    ``_postprocess``, the older trainer's path): the records survive in ``non_tensor_batch``, but its ``rm_scores``
    hold one score on the last token, which the estimators refuse; the per-turn layout (the v1 row's) is accepted
    and gives trainers.credit's numbers."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    agent = build_agent_loop(text_policy_server, tokenizer, max_tokens_per_turn=96, response_length=512)
    outputs = run_rows(agent, [{"env_id": "TurnRL/WikiTwoTurn-v2", "seed": s} for s in (5, 6, 7)])
    worker = AgentLoopWorker.__new__(AgentLoopWorker)  # what its postprocessing reads, without Ray or a model
    worker.rollout_config = OmegaConf.create({"prompt_length": 1024, "response_length": 512})
    worker.tokenizer, worker.processor, worker.reward_loop_worker_handles = tokenizer, None, None
    worker.distillation_enabled, worker.mm_processor_kwargs = False, {}

    async def postprocess():
        return [await worker._agent_loop_postprocess(o, False, raw_prompt=[]) for o in outputs]

    data = worker._postprocess(asyncio.run(postprocess()), input_non_tensor_batch={"uid": np.array(["q"] * 3)})
    assert data.batch["rm_scores"].shape == (3, 512) and vt.RECORD_KEY in data.non_tensor_batch
    assert any(len(o.extra_fields[vt.RECORD_KEY]["turn_rewards"]) == 2 for o in outputs)
    vt.register_verl_estimators(["mt_grpo"])
    data.batch["token_level_rewards"] = data.batch["rm_scores"]  # what the older trainer does
    with pytest.raises(InvalidArgument, match="use_v1"):
        vt.compute_turnrl_advantage(data, "turnrl_mt_grpo", config={})
    data.batch["token_level_rewards"] = torch.stack(
        [torch.nn.functional.pad(o.as_dict()["rm_scores"], (0, 512 - len(o.token_rewards))) for o in outputs]
    )
    data = vt.compute_turnrl_advantage(data, "turnrl_mt_grpo", config={})
    records = [vt.TurnRecord.from_metrics(o.extra_fields[vt.RECORD_KEY]) for o in outputs]
    rebuilt = vt.episodes_from_verl(data.batch["token_level_rewards"], data.batch["response_mask"], ["q"] * 3, records)
    want = get_strategy("mt_grpo")(rebuilt, None, CreditConfig())
    for i, a in enumerate(want.advantages):
        np.testing.assert_allclose(data.batch["advantages"][i, : len(a)].numpy(), a, atol=1e-6)
