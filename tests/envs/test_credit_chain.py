"""CreditChain (a turn-level credit diagnostic after bsuite's umbrella_length): rewards per horizon, noise, reveal,
hostile text, forks, the held-out split, the scripted policies' scores, the cold start and a tiny GRPO CLI run."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agentgym_turn
from agentgym_turn.core import EPISODE_METRICS_KEY
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.policies import get_scripted_policy, run_episode
from agentgym_turn.registration import held_out_kwargs
from envs.credit_chain import (
    CUE_PAIRS,
    PRESETS,
    CreditChainEnv,
    build_tasks,
    distractor_noise,
    outcome_paid,
    parse_answer,
    parse_choice,
)

gym.register_envs(agentgym_turn)
ENV_ID = "TurnRL/CreditChain-v0"
REPO = Path(__file__).resolve().parents[2]
TASK = {"frame": "Forecast", "cue": "drizzle", "options": ["sunglasses", "umbrella"], "answer": "umbrella"}


def play(env: gym.Env, policy: str, seed: int = 0, task: dict | None = None):
    return run_episode(env, get_scripted_policy(env, policy), seed=seed, options={"task": task} if task else None)


# ---------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<choice>umbrella</choice>", "umbrella"),
        ("<CHOICE> Umbrella. </Choice>", "umbrella"),
        ("<choice>sunglasses</choice> no, <choice>umbrella</choice>", "umbrella"),  # the last one counts
        ("<choice>umbrella or sunglasses</choice>", None),
        ("<choice>coat</choice>", None),  # not an option of this task
        ("umbrella", None),
        ("<choice>umbrella", None),
        ("", None),
    ],
)
def test_parse_choice(text, expected):
    assert parse_choice(text, ["sunglasses", "umbrella"]) == expected


def test_parse_answer():
    assert parse_answer("<answer> 7 </answer>") == "7"
    assert parse_answer("<answer>a</answer><answer> </answer>") == "a"
    assert parse_answer("<answer></answer>") is None and parse_answer("7") is None


# ---------------------------------------------------------------------------------------------------- rewards
@pytest.mark.parametrize("horizon", [2, 3, 5, 8])
@pytest.mark.parametrize("reveal", [False, True])
@pytest.mark.parametrize(("policy", "right"), [("oracle", 1.0), ("wrong", 0.0)])
def test_rewards_per_turn_at_each_horizon(horizon, reveal, policy, right):
    env = gym.make(ENV_ID, horizon=horizon, noise=0.5, reveal=reveal)
    log = play(env, policy, seed=horizon)
    comps = [info["reward_components"] for info in log.infos]
    assert len(log.rewards) == horizon and log.terminated and not log.truncated
    assert comps[0] == ({"choice": right} if reveal else {})
    assert all(list(c) == ["distractor"] and abs(c["distractor"]) == 0.5 for c in comps[1:-1])
    assert comps[-1] == {"outcome": right}
    assert log.rewards == [sum(c.values()) for c in comps]
    m = log.metrics
    assert m["env/success"] == right and m["env/choice_valid"] == 1.0 and m["env/answer_rate"] == 1.0
    assert m["reward/outcome"] == right and m["env/horizon"] == horizon
    assert m["env/distractor_return"] == pytest.approx(sum(c.get("distractor", 0.0) for c in comps))
    assert m["env/return"] == pytest.approx(right * (1 + reveal) + m["env/distractor_return"])


def test_a_missing_or_malformed_pick_is_a_wrong_pick_and_says_so():
    env = gym.make(ENV_ID, horizon=3, reveal=True)
    env.reset(seed=0, options={"task": TASK})
    messages, reward, _, _, info = env.step("I'd take the umbrella.")
    assert reward == 0.0 and info["reward_components"] == {"choice": 0.0} and info["choice"] is None
    assert messages[0]["content"].startswith("Error: no <choice> naming sunglasses or umbrella")
    env.step("<choice>umbrella</choice>")  # too late: only turn 1 picks
    _, reward, terminated, _, info = env.step("<answer>done</answer>")
    assert terminated and reward == 0.0 and info[EPISODE_METRICS_KEY]["env/choice_valid"] == 0.0


def test_the_text_never_tells_a_right_pick_from_a_wrong_one():
    seen = {}
    for policy in ("oracle", "wrong"):
        env = gym.make(ENV_ID, horizon=5, reveal=True)
        log = play(env, policy, seed=4)
        seen[policy] = [m for m in log.history if m["role"] != "assistant"]
    assert seen["oracle"] == seen["wrong"]


# ---------------------------------------------------------------------------------------------------- noise
def test_noise_has_mean_zero_the_given_scale_and_ignores_the_action():
    scale, values = 0.7, []
    for seed in range(300):
        runs = {}
        for policy in ("oracle", "wrong", "junk"):
            env = CreditChainEnv(horizon=6, noise=scale)
            env.reset(seed=seed)
            paid = []
            for turn in range(6):
                text = "%%%" if policy == "junk" else get_scripted_policy(env, policy)(env, np.random.default_rng(turn))
                paid.append(env.step(text)[-1]["reward_components"].get("distractor"))
            runs[policy] = paid
        assert runs["oracle"] == runs["wrong"] == runs["junk"]  # whatever the agent does
        values += runs["oracle"][1:5]
    values = np.array(values)
    assert set(np.round(values, 9)) == {-scale, scale}
    assert abs(values.mean()) < 4 * scale / np.sqrt(len(values))  # 1200 draws: mean 0 within 4 standard errors
    assert np.sqrt(np.mean(values**2)) == pytest.approx(scale)  # +-scale: the std around 0 is the scale
    assert abs(values.std() - scale) < 0.02


def test_zero_noise_pays_zero_and_the_same_seed_poses_the_same_episode_at_every_setting():
    openings = set()
    for noise, reveal in [(0.0, False), (2.0, False), (0.5, True)]:
        env = gym.make(ENV_ID, horizon=6, noise=noise, reveal=reveal)
        log = play(env, "oracle", seed=11)
        openings.add(repr([m for m in log.history if m["role"] != "assistant"]))
        paid = [info["reward_components"]["distractor"] for info in log.infos[1:-1]]
        if noise == 0.0:
            assert paid == [0.0] * 4
        else:
            assert np.all(np.abs(paid) == noise)
    assert len(openings) == 1  # the task, the requests, the noise signs: only their size differs


def test_fixed_distractors_ask_say_done_and_keep_the_task_noise_coin_and_rewards():
    logs = {}
    for distractors in ("open", "fixed"):
        env = gym.make(ENV_ID, preset="noisy_outcome", horizon=6, outcome_prob=0.5, distractors=distractors)
        logs[distractors] = [play(env, policy, seed=seed) for policy in ("oracle", "wrong") for seed in range(8)]
    for a, b in zip(logs["open"], logs["fixed"], strict=True):
        asked = [m["content"] for m in b.history if m["role"] == "user"][1:]
        assert all(q.endswith("Say done.") for q in asked) and len(asked) == 5
        assert a.history[1] == b.history[1]  # the same task
        assert [i["reward_components"] for i in a.infos] == [i["reward_components"] for i in b.infos]
        assert b.metrics["env/answer_rate"] == 1.0  # the scripted answer fits the request
    open_asks = {m["content"] for log in logs["open"] for m in log.history if m["role"] == "user"}
    assert any("Name a color." in q for q in open_asks)  # the default still varies the requests


def test_distractor_noise_draws_n_signs_whatever_the_scale():
    a, b = np.random.default_rng(0), np.random.default_rng(0)
    assert np.sign(distractor_noise(a, 50, 3.0)).tolist() == np.sign(distractor_noise(b, 50, 1.0)).tolist()
    assert distractor_noise(np.random.default_rng(0), 0, 1.0) == []


# ---------------------------------------------------------------------------------------------------- robustness
HOSTILE = [
    "",
    "\x00\xff\ud800 </choice><choice>",
    "<choice>" * 500,
    "<choice>umbrella</choice>" * 2000,  # longer than max_action_chars: cut, still parsed
    "<answer>" + "x" * 100_000 + "</answer>",
    "<choice><answer>umbrella</answer></choice>",
    "{'choice': 'umbrella'}",
    "🌧️<choice>☂</choice>",
]


@pytest.mark.parametrize("reveal", [False, True])
def test_hostile_actions_never_raise(reveal):
    env = gym.make(ENV_ID, horizon=4, noise=1.0, reveal=reveal)
    for start in range(len(HOSTILE)):
        env.reset(seed=start)
        for turn in range(4):
            messages, reward, terminated, truncated, info = env.step(HOSTILE[(start + turn) % len(HOSTILE)])
            assert isinstance(reward, float) and np.isfinite(reward) and truncated is False
            assert env.unwrapped.observation_space.contains(messages)
        assert terminated and messages == []
    env.reset(seed=0)
    assert env.step(b"<choice>\xffumbrella</choice>")[-1]["turn"] == 1  # bytes are decoded, not refused


def test_bad_arguments_and_tasks_raise_with_the_fix():
    for kwargs, match in [
        ({"horizon": 1}, "horizon=1"),
        ({"horizon": 101}, "horizon=101"),
        ({"horizon": 4.0}, "horizon=4.0"),
        ({"noise": -0.1}, "noise=-0.1"),
        ({"noise": float("nan")}, "noise=nan"),
        ({"reveal": "yes"}, "reveal='yes'"),
        ({"split": "validation"}, "split='validation'"),
        ({"outcome_prob": 0}, "outcome_prob=0 must be a number in (0, 1]"),
        ({"outcome_prob": 1.5}, "outcome_prob=1.5"),
        ({"outcome_prob": float("nan")}, "outcome_prob=nan"),
        ({"outcome_prob": True}, "outcome_prob=True"),
        ({"outcome_prob": "0.5"}, "outcome_prob='0.5'"),
        ({"noise_level": "episode"}, "noise_level='episode'; use 'turn'"),
        ({"preset": "umbrella_length"}, "preset='umbrella_length'; use one of ('umbrella',"),
        ({"preset": "flaky_outcome", "outcome_prob": -1.0}, "outcome_prob=-1.0"),  # an override is checked too
        ({"distractors": "none"}, "distractors='none'; use 'open'"),
        ({"pairs": "Mop"}, "pairs='Mop' names ['mop']; use frame names from ('Forecast',"),
        ({"pairs": ""}, "pairs='' names nothing"),
        ({"pairs": 3}, "pairs=3; use None (all four)"),
    ]:
        with pytest.raises(InvalidArgument, match=re.escape(match)):
            CreditChainEnv(**kwargs)
    env = CreditChainEnv()
    for task in [{"cue": "rain"}, {**TASK, "answer": "coat"}, {**TASK, "options": ["umbrella", "umbrella"]}]:
        with pytest.raises(InvalidTask, match="needs 'cue'"):
            env.reset(options={"task": task})


# ---------------------------------------------------------------------------------------------------- forks, keys
def test_fork_is_independent_and_keeps_the_noise():
    env = CreditChainEnv(horizon=5, noise=1.0, reveal=True)
    env.reset(seed=2, options={"task": TASK})
    env.step("<choice>umbrella</choice>")
    child = env.fork()
    assert child.history == env.history and child.np_random is not env.np_random
    child_paid = [child.step("<answer>1</answer>")[1] for _ in range(3)]
    assert env.turn == 1 and len(env.history) == len(child.history) - 6  # the parent did not move
    parent_paid = [env.step("junk")[1] for _ in range(3)]
    assert child_paid == parent_paid  # drawn at reset: a fork keeps the episode's noise


def test_state_key_holds_the_pick():
    keys = {}
    for pick in ("umbrella", "sunglasses", "none"):
        env = CreditChainEnv(horizon=4, noise=1.0)
        env.reset(seed=5, options={"task": TASK})
        keys[pick] = env.step(f"<choice>{pick}</choice>")[-1]["state_key"]
    assert len(set(keys.values())) == 3


# ---------------------------------------------------------------------------------------------------- the split
def test_held_out_split_is_disjoint_by_content_and_duplicate_free():
    train, test = build_tasks("train"), build_tasks("test")
    assert (len(train), len(test)) == (144, 48)
    for tasks in (train, test):
        assert len({t["id"] for t in tasks}) == len(tasks)
        assert len({(t["cue"], tuple(t["options"])) for t in tasks}) == len(tasks)
        assert all(t["answer"] in t["options"] for t in tasks)
    train_cues, test_cues = {t["cue"] for t in train}, {t["cue"] for t in test}
    assert not train_cues & test_cues
    every_word = [w for p in CUE_PAIRS for side in (*p.train, *p.test) for w in side]
    assert len(every_word) == len(set(every_word)) == 96  # each clue word calls for one option only
    # no held-out clue text appears anywhere in a training prompt (as a word or inside one)
    env = CreditChainEnv(split="train")
    train_text = " ".join(m["content"] for t in train for m in env.reset(seed=0, options={"task": t})[0]).lower()
    assert not [w for w in test_cues if w in train_text]
    assert held_out_kwargs(ENV_ID) == {"split": "test"}
    held = gym.make(ENV_ID, **held_out_kwargs(ENV_ID))
    drawn = {held.reset(seed=s)[1]["task_id"] for s in range(400)}
    assert drawn == {t["id"] for t in test}  # the draw covers the held-out set and nothing else


@pytest.mark.parametrize("pairs", ["Map", "map, Forecast", ["Problem"]])
def test_pairs_pose_only_the_named_option_pairs_and_keep_the_split_clean(pairs):
    names = {n.strip().lower() for n in (pairs.split(",") if isinstance(pairs, str) else pairs)}
    by_split = {}
    for split in ("train", "test"):
        env = gym.make(ENV_ID, split=split, pairs=pairs).unwrapped
        everything = build_tasks(split)
        assert env.tasks == [t for t in everything if t["frame"].lower() in names]  # same tasks, same order
        assert len(env.tasks) == len(names) * (36 if split == "train" else 12)
        drawn = {env.reset(seed=s)[1]["task_id"] for s in range(1000)}
        assert drawn == {t["id"] for t in env.tasks}  # the draw covers the named pairs and nothing else
        by_split[split] = {t["cue"] for t in env.tasks}
        for side in (0, 1):  # each option is called for by half of the tasks: both directions of the mapping
            assert sum(t["answer"] == t["options"][side] for t in env.tasks) == len(env.tasks) // 2
    assert not by_split["train"] & by_split["test"]


# ---------------------------------------------------------------------------------------------------- policies
def scores(policy: str, horizon: int, seeds: int = 1) -> np.ndarray:
    """``env/success`` of ``policy`` on every held-out task, ``seeds`` times each."""
    env = gym.make(ENV_ID, horizon=horizon, noise=1.0, **held_out_kwargs(ENV_ID))
    tasks = env.unwrapped.tasks
    return np.array([play(env, policy, seed=s * 1000 + i, task=t).metrics["env/success"]
                     for s in range(seeds) for i, t in enumerate(tasks)])  # fmt: skip


@pytest.mark.parametrize("horizon", [2, 4, 8])
def test_scripted_policies_score_over_the_whole_held_out_set(horizon):
    assert scores("oracle", horizon).mean() == 1.0
    assert scores("wrong", horizon).mean() == 0.0
    assert scores("first_option", horizon).mean() == 0.5  # both orders of every clue: exactly half
    random = scores("random_choice", horizon, seeds=4)  # 192 episodes: 0.5 +- 0.036 (1 s.e.)
    assert abs(random.mean() - 0.5) < 0.15


def test_the_family_cold_start_is_random_picks():
    from trainers.rl import RLConfig
    from trainers.sft import family_defaults, parse_sft_config

    assert family_defaults([ENV_ID])["policy"] == "scripted:random_choice"
    assert parse_sft_config(["--env", ENV_ID]).policy == "scripted:random_choice"
    assert RLConfig(env=[ENV_ID], sft_episodes=2).sft_policy == "scripted:random_choice"


@pytest.mark.slow  # loading transformers for the tokenizer takes 5-15 s on 2 busy cores
def test_cold_start_explores_half_right_picks_in_both_directions():
    """The family's cold start (``trainers.sft`` defaults): random picks, so demonstrations of either option, right
    about half the time, through the same rollout code (tokenizer only, no model)."""
    pytest.importorskip("transformers")
    from agentgym_turn.models import load_tokenizer
    from trainers.rollout import EnvPool, RolloutConfig
    from trainers.sft import demonstrations

    tok = load_tokenizer("smollm2")
    demos = demonstrations(EnvPool([ENV_ID]), tok, "scripted:random_choice", 64, 0, RolloutConfig(32, 512, 8))
    right = [ep.metrics["env/success"] for ep in demos]
    first_turns = {tok.decode(ep.token_ids[ep.turn_index == 0]) for ep in demos}
    assert all(ep.terminated and len(ep.turn_rewards) == 4 for ep in demos)
    assert 0.3 < np.mean(right) < 0.7 and len(first_turns) >= 6


@pytest.mark.slow  # loading transformers for the tokenizer takes 5-15 s on 2 busy cores
def test_balanced_cold_start_shows_every_task_with_both_options_in_one_step():
    """``--warm-start balanced``: each demonstrated task twice in a row, once per option (so each option of every
    pair equally often, right exactly half the time), and the SFT steps keep the two together."""
    pytest.importorskip("transformers")
    from agentgym_turn.models import load_tokenizer
    from trainers.rollout import EnvPool, RolloutConfig
    from trainers.sft import demonstrations, parse_sft_config, sft_batches

    cfg = parse_sft_config(["--env", ENV_ID, "--warm-start", "balanced", "--episodes", "48"])
    assert (cfg.policy, cfg.group_size, cfg.assign) == ("scripted:first_option,scripted:second_option", 2, "cycle")
    tok = load_tokenizer("smollm2")
    demos = demonstrations(EnvPool([ENV_ID]), tok, cfg.policy, cfg.episodes, 0, RolloutConfig(32, 512, 8),
                           group_size=cfg.group_size, assign=cfg.assign)  # fmt: skip
    picks = [tok.decode(ep.token_ids[ep.turn_index == 0]) for ep in demos]
    pairs = list(zip(demos[::2], demos[1::2], strict=True))
    assert len(pairs) == 24 and all(a.group == b.group for a, b in pairs)
    assert all(picks[2 * g] != picks[2 * g + 1] for g in range(24))
    assert [a.metrics["env/success"] + b.metrics["env/success"] for a, b in pairs] == [1.0] * 24
    counts = Counter(picks)
    for a, b in (("umbrella", "sunglasses"), ("coat", "shorts"), ("boat", "car"), ("doctor", "mechanic")):
        assert counts[f"<choice>{a}</choice><|im_end|>"] == counts[f"<choice>{b}</choice><|im_end|>"]
    for batch in sft_batches(len(demos), cfg.batch_episodes, 1, 0, cfg.group_size):
        assert {demos[i].group for i in batch[::2]} == {demos[i].group for i in batch[1::2]}


# ---------------------------------------------------------------------------------------------------- trainer
@pytest.mark.slow
def test_tiny_grpo_cli_run_with_a_folded_in_cold_start(tmp_path):
    """``python -m trainers.grpo --env TurnRL/CreditChain-v0 --sft-episodes N`` runs end to end (a tiny random Llama
    with SmolLM2's tokenizer, the transformers engine, one RL step and a held-out evaluation)."""
    pytest.importorskip("torch")
    from agentgym_turn.models import load_tokenizer
    from tests.trainers.conftest import tiny_llama

    tok = load_tokenizer("smollm2")
    model_dir = tmp_path / "tiny"
    tiny_llama(len(tok)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "run"
    args = [sys.executable, "-m", "trainers.grpo", "--env", ENV_ID, "--env-kwarg", "horizon=3", "--model",
            str(model_dir), "--steps", "1", "--tasks-per-step", "2", "--group-size", "2", "--max-new-tokens", "4",
            "--max-context", "384", "--no-bf16", "--threads", "1", "--sft-episodes", "2", "--sft-batch-episodes",
            "2", "--eval-every", "1", "--eval-tasks", "2", "--engine", "transformers",
            "--out-dir", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "cold start: 2 scripted episodes (scripted:random_choice)" in res.stdout
    assert "[rl] done" in res.stdout and (out / "checkpoint-000001").is_dir()


# ---------------------------------------------------------------------------------------------------- regimes
def finish(env: CreditChainEnv, pick: str) -> list[dict[str, float]]:
    """Play ``pick`` at turn 1 and answer the rest; every turn's reward components."""
    comps = [env.step(f"<choice>{pick}</choice>")[-1]["reward_components"]]
    while env.turn < env.horizon:
        comps.append(env.step("<answer>x</answer>")[-1]["reward_components"])
    return comps


@pytest.mark.parametrize("prob", [0.3, 0.8])
def test_a_flaky_outcome_pays_a_right_pick_with_its_probability_and_a_wrong_one_never(prob):
    n = 1500
    paid = {"umbrella": [], "sunglasses": []}
    for pick in paid:
        env = CreditChainEnv(horizon=2, reveal=True, outcome_prob=prob)
        for seed in range(n):
            env.reset(seed=seed, options={"task": TASK})
            first, last = finish(env, pick)
            assert first == {"choice": float(pick == "umbrella")}  # the revealed choice stays exact
            paid[pick].append(last["outcome"])
    right = np.array(paid["umbrella"])
    assert set(right) == {0.0, 1.0} and abs(right.mean() - prob) < 4 * np.sqrt(prob * (1 - prob) / n)
    assert paid["sunglasses"] == [0.0] * n


def test_the_outcome_coin_is_drawn_at_reset_kept_by_forks_and_monotone_in_the_probability():
    forks = []
    for seed in range(40):
        env = CreditChainEnv(horizon=4, outcome_prob=0.5)
        env.reset(seed=seed, options={"task": TASK})
        env.step("<choice>umbrella</choice>")
        child = env.fork()
        outcome = finish(child, "ignored")[-1]["outcome"]
        while env.turn < env.horizon:
            last = env.step("anything")[-1]["reward_components"]
        assert last["outcome"] == outcome  # the fork pays what its parent pays
        forks.append(outcome)
    assert 0 < sum(forks) < 40  # both coins came up
    for seed in range(40):
        paid = []
        for prob in (0.2, 0.5, 0.9, 1.0):
            env = CreditChainEnv(horizon=3, outcome_prob=prob)
            env.reset(seed=seed, options={"task": TASK})
            paid.append(finish(env, "umbrella")[-1]["outcome"])
        assert paid == sorted(paid) and paid[-1] == 1.0  # paid at p: paid at every larger p
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert [outcome_paid(a, 0.4) for _ in range(50)] <= [outcome_paid(b, 0.6) for _ in range(50)]


def test_outcome_level_noise_pays_the_same_steps_under_the_outcome_level():
    logs = {}
    for level in ("turn", "outcome"):
        env = gym.make(ENV_ID, horizon=7, noise=0.5, noise_level=level)  # 5 draws: their sum is never 0
        logs[level] = play(env, "oracle", seed=9)
    assert logs["turn"].rewards == logs["outcome"].rewards
    levels = CreditChainEnv.reward_levels
    for turn, (t, o) in enumerate(zip(logs["turn"].infos, logs["outcome"].infos, strict=True)):
        t, o = t["reward_components"], o["reward_components"]
        if 0 < turn < 6:
            assert list(o) == ["outcome_noise"] and o["outcome_noise"] == t["distractor"]
    assert levels["outcome_noise"] == "outcome" and levels["distractor"] == "turn"
    m = logs["outcome"].metrics
    assert m["reward/outcome_noise"] == m["env/distractor_return"] != 0 and m["reward/distractor"] == 0.0


def test_presets_set_the_regime_and_explicit_kwargs_override_them():
    assert set(PRESETS) == {"umbrella", "noisy_outcome", "flaky_outcome"}
    default, umbrella = CreditChainEnv(), CreditChainEnv(preset="umbrella")
    for env in (default, umbrella):
        assert (env.noise, env.noise_level, env.reveal, env.outcome_prob) == (1.0, "turn", False, 1.0)
    for name, values in PRESETS.items():
        env = gym.make(ENV_ID, preset=name).unwrapped
        assert {k: getattr(env, k) for k in values} == values
    env = CreditChainEnv(preset="flaky_outcome", noise=1.0, reveal=False)
    assert (env.noise, env.noise_level, env.reveal, env.outcome_prob) == (1.0, "turn", False, 0.25)


# ---------------------------------------------------------------------------------------------------- credit
def first_turn_credit(horizon: int, groups: int = 24, group_size: int = 8, **kwargs) -> tuple[np.ndarray, dict]:
    """``(right pick, {strategy: turn-1 advantage})`` over random-pick groups, through ``trainers.credit`` with one
    token per turn and the env's anchor-state keys (what bench/credit_chain_oracle.py measures, on fewer groups)."""
    from trainers.credit import CreditConfig, get_strategy, token_turns
    from trainers.episode import Episode

    env = gym.make(ENV_ID, horizon=horizon, split="test", **kwargs)
    policy, tasks, episodes = get_scripted_policy(env, "random_choice"), env.unwrapped.tasks, []
    for g in range(groups):
        for j in range(group_size):
            rng = np.random.default_rng(g * 1000 + j)
            keys, comps = [env.reset(seed=g * 1000 + j, options={"task": tasks[g % len(tasks)]})[1]["state_key"]], []
            for _ in range(horizon):
                info = env.step(policy(env.unwrapped, rng))[-1]
                keys.append(info.get("state_key"))
                comps.append(info["reward_components"])
            episodes.append(Episode(env_id=ENV_ID, group=g, token_ids=np.arange(horizon + 1),
                                    loss_mask=[0] + [1] * horizon, turn_index=[-1, *range(horizon)],
                                    logprobs=np.zeros(horizon + 1), turn_rewards=comps,
                                    reward_levels=dict(env.unwrapped.reward_levels), terminated=True,
                                    state_keys=keys[:horizon], metrics=info["episode_metrics"]))  # fmt: skip
    right = np.array([ep.metrics["env/success"] for ep in episodes])
    first = {}
    for name in ("grpo_or", "mt_grpo", "gigpo"):
        adv = get_strategy(name)(episodes, None, CreditConfig()).advantages
        first[name] = np.array([a[token_turns(ep) == 0][0] for a, ep in zip(adv, episodes, strict=True)])
    return right, first


def test_turn_level_credit_wins_ties_and_loses_where_the_docstring_says():
    """The docstring's table on 24 groups of 8 (fixed seeds, ~0.5 s): margins far outside the seed-to-seed spread
    (about +-0.04 at this size)."""

    def gain(horizon: int, **kwargs) -> dict[str, float]:
        right, first = first_turn_credit(horizon, **kwargs)
        base = np.corrcoef(first["grpo_or"], right)[0, 1]
        return {k: float(np.corrcoef(first[k], right)[0, 1] - base) for k in ("mt_grpo", "gigpo")}

    for horizon, preset in [(4, "noisy_outcome"), (2, "flaky_outcome"), (4, "flaky_outcome")]:
        g = gain(horizon, preset=preset)  # must win: 0.45 to 0.6 for mt_grpo, 0.2 to 0.55 for gigpo
        assert g["mt_grpo"] > 0.3 and g["gigpo"] > 0.1, (horizon, preset, g)
    assert gain(4)["mt_grpo"] < -0.25  # must lose: the default's turn-level noise (measured -0.4)
    assert gain(2, preset="noisy_outcome")["mt_grpo"] == pytest.approx(0.0, abs=1e-9)  # no distractor
    right, first = first_turn_credit(2, preset="noisy_outcome")  # A^T = A^O at turn 1: GRPO-OR's doubled
    assert np.allclose(first["mt_grpo"], 2 * first["grpo_or"]) and first["grpo_or"].std() > 0
    right, first = first_turn_credit(4, preset="noisy_outcome", reveal=False)  # no turn-level reward at all
    assert np.array_equal(first["mt_grpo"], first["grpo_or"]) and first["grpo_or"].std() > 0


def _fake_final_eval(run: Path, pick_of, later: str = "done") -> None:
    """A finished run's ``final-eval`` as ``leaderboards.evaluate`` writes it (summary and transcripts) for the Map
    pair's 12 held-out tasks x 2 trials, each trial picking ``pick_of(task)``, answering turn 2 ``later`` and scored
    by the env's own rule."""
    import json

    from trainers.rollout import distinct_task_seeds

    kwargs = {"horizon": 4, "pairs": "Map", "preset": "noisy_outcome", "split": "test"}
    env = gym.make("TurnRL/CreditChain-v0", **kwargs)
    tasks = [env.unwrapped.draw_task(s) for s in distinct_task_seeds(env, 12345, 12)]
    env.close()
    (run / "final-eval" / "transcripts").mkdir(parents=True)
    summary = {"env_id": "TurnRL/CreditChain-v0", "env_kwargs": kwargs, "seed": 12345, "episodes": 12, "trials": 2}
    (run / "final-eval" / "CreditChain-v0.jsonl").write_text(json.dumps(summary) + "\n")
    with open(run / "final-eval" / "transcripts" / "CreditChain-v0.jsonl", "w") as f:
        for i, task in enumerate(tasks):
            for trial in range(2):
                pick = pick_of(task)
                text = (
                    f"<choice>{pick}</choice><|im_end|>\n<|im_start|>user\nTurn 2/4. Name an animal.<|im_end|>\n"
                    f"<|im_start|>assistant\n<answer>{later}</answer><|im_end|>"
                )
                success = float(parse_choice(text, task["options"]) == task["answer"])
                f.write(
                    json.dumps({"task": i, "trial": trial, "metrics": {"env/success": success}, "text": text}) + "\n"
                )


def test_sampled_picks_reads_the_clue_gap_from_a_final_evaluation(tmp_path: Path) -> None:
    """bench/credit_chain_picks.py --sampled: always right -> gap 1; one option whatever the clue -> gap 0 and half
    right, all of it on one option's tasks; a later answer naming an option counts as an echo, another word does not;
    two runs' picks are compared episode by episode, and only when they evaluated the same tasks; a transcript that does
    not match its recovered task is refused, naming the run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("picks", Path(__file__).parents[2] / "bench/credit_chain_picks.py")
    picks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(picks)

    _fake_final_eval(tmp_path / "right", lambda task: task["answer"])
    right = picks.sampled_picks(tmp_path / "right")
    assert right["success"] == 1.0 and right["clue gap"] == 1.0 and right["episodes"] == 24
    assert right["Map: P(boat | boat right)"] == 1.0 and right["Map: P(boat | other right)"] == 0.0
    assert right["later answers"] == 24 and right["option echo"] == 0.0  # "done" names no option

    _fake_final_eval(tmp_path / "boat", lambda task: "boat", later="a Boat")  # whole word, any case
    boat = picks.sampled_picks(tmp_path / "boat")
    assert boat["success"] == 0.5 and boat["clue gap"] == 0.0 and boat["invalid"] == 0 and boat["option echo"] == 1.0
    assert boat["boat tasks: success"] == 1.0 and boat["car tasks: success"] == 0.0  # the lean, per option
    assert right["boat tasks: success"] == right["car tasks: success"] == 1.0
    assert picks.picks_alike(tmp_path / "right", tmp_path / "boat") == (12, 24)  # alike on the `boat` tasks only
    assert picks.picks_alike(tmp_path / "boat", tmp_path / "boat") == (24, 24)
    _fake_final_eval(tmp_path / "boats", lambda task: "car", later="boathouse")  # not the word itself
    assert picks.sampled_picks(tmp_path / "boats")["option echo"] == 0.0

    _fake_final_eval(tmp_path / "bad", lambda task: "lift")
    bad = picks.sampled_picks(tmp_path / "bad")
    assert bad["invalid"] == 24 and bad["success"] == 0.0 and math.isnan(bad["clue gap"])
    lines = (tmp_path / "bad" / "final-eval" / "transcripts" / "CreditChain-v0.jsonl").read_text().splitlines()
    (tmp_path / "bad" / "final-eval" / "transcripts" / "CreditChain-v0.jsonl").write_text(
        "\n".join(line.replace('"env/success": 0.0', '"env/success": 1.0') for line in lines) + "\n"
    )
    with pytest.raises(SystemExit, match="bad: task 0 trial 0 scored True but picked None"):
        picks.sampled_picks(tmp_path / "bad")
    with pytest.raises(SystemExit, match="no final-eval"):
        picks.sampled_picks(tmp_path)
    summary = tmp_path / "boats" / "final-eval" / "CreditChain-v0.jsonl"
    summary.write_text(summary.read_text().replace('"seed": 12345', '"seed": 7'))
    with pytest.raises(SystemExit, match="evaluated different tasks \\(seed 12345 vs 7\\)"):
        picks.picks_alike(tmp_path / "right", tmp_path / "boats")
