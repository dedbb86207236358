"""TurnRL/CreditChain-v0: scripted scores on the held-out set, and how cleanly each credit strategy credits the pick.

    python bench/credit_chain_oracle.py                 # about 20 s, no model
    python bench/credit_chain_oracle.py --groups 400 --group-size 8

**Scores.** Each scripted policy plays every held-out task (``split="test"``, 48 tasks: 24 clue words x both
option orders) at horizons 2, 4 and 8 (``noise=1``): ``env/success`` (right pick) and the mean return.
``first_option`` is the position baseline (it picks the option shown first).

**Credit.** Groups of ``--group-size`` episodes per task, played by ``random_choice`` (what the family's cold start
imitates), go through ``trainers.credit``'s critic-free strategies exactly as a training batch would (one token per
turn: the numbers per turn are what matter; the env's anchor-state keys ride along for ``gigpo``). For each setting
(the env's ``PRESETS`` with a few kwargs changed, rows ``SETTINGS``) and horizon, the table gives the correlation,
over every episode, between turn 1's advantage and whether turn 1's pick was right (1: the pick alone sets its
credit; 0: its credit is noise), and the paired 95% bootstrap interval (resampling groups) of ``mt_grpo``'s and
``gigpo``'s correlation minus ``grpo_or``'s. The env's docstring holds the table and its reading: turn-level
credit must beat outcome-only credit under ``noisy_outcome`` (horizon >= 3) and ``flaky_outcome``, must tie where
no turn-level reward exists, and loses under the default ``umbrella``, whose noise is turn-level.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import agentgym_turn
from agentgym_turn.policies import ScriptedPolicy, get_scripted_policy, run_episode
from agentgym_turn.registration import held_out_kwargs
from trainers.credit import CreditConfig, get_strategy, token_turns
from trainers.episode import Episode

ENV_ID = "TurnRL/CreditChain-v0"
HORIZONS = (2, 4, 8)
POLICIES = ("oracle", "random_choice", "first_option", "wrong")
STRATEGIES = ("grpo_or", "grpo_mr", "rloo", "mt_grpo", "mt_grpo_rtg", "gigpo")
#: The credit table's rows: (label, gym.make kwargs); each is run at every horizon of HORIZONS.
SETTINGS: tuple[tuple[str, dict], ...] = (
    ("noise 0", {"noise": 0.0}),
    ("umbrella (default)", {"preset": "umbrella"}),
    ("umbrella, noise 0.1", {"preset": "umbrella", "noise": 0.1}),
    ("umbrella, reveal", {"preset": "umbrella", "reveal": True}),
    ("noisy_outcome, no reveal", {"preset": "noisy_outcome", "reveal": False}),
    ("noisy_outcome", {"preset": "noisy_outcome"}),
    ("flaky_outcome, no reveal", {"preset": "flaky_outcome", "reveal": False}),
    ("flaky_outcome", {"preset": "flaky_outcome"}),
    ("flaky_outcome, noise 1", {"preset": "flaky_outcome", "noise": 1.0}),
)


def scores(horizon: int, seeds: int) -> dict[str, tuple[float, float]]:
    """``{policy: (mean success, mean return)}`` over every held-out task, ``seeds`` episodes each."""
    env = gym.make(ENV_ID, horizon=horizon, noise=1.0, **held_out_kwargs(ENV_ID))
    out = {}
    for name in POLICIES:
        policy = get_scripted_policy(env, name)
        logs = [run_episode(env, policy, seed=s * 10_000 + i, options={"task": t})
                for s in range(seeds) for i, t in enumerate(env.unwrapped.tasks)]  # fmt: skip
        out[name] = (float(np.mean([g.metrics["env/success"] for g in logs])),
                     float(np.mean([g.metrics["env/return"] for g in logs])))  # fmt: skip
    return out


def play(env: gym.Env, policy: ScriptedPolicy, seed: int, task: dict, group: int) -> Episode:
    """One episode as the trainer carries it: one token per turn after a one-token prompt, the per-turn reward
    components and the anchor-state keys (reset's key for turn 1, step k's for turn k + 1)."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed, options={"task": task})
    keys, rewards, terminated = [info["state_key"]], [], False
    while not terminated:
        _, _, terminated, _, info = env.step(policy(env.unwrapped, rng))
        rewards.append(dict(info["reward_components"]))
        keys.append(info.get("state_key"))
    n = len(rewards)
    return Episode(env_id=ENV_ID, group=group, token_ids=np.arange(n + 1), loss_mask=[0] + [1] * n,
                   turn_index=[-1, *range(n)], logprobs=np.zeros(n + 1), turn_rewards=rewards,
                   reward_levels=dict(env.unwrapped.reward_levels), terminated=True, state_keys=keys[:n],
                   metrics=dict(info["episode_metrics"]))  # fmt: skip


def first_turn_credit(
    kwargs: dict, groups: int, group_size: int, strategies: tuple[str, ...] = STRATEGIES, seed: int = 0
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(right, {strategy: turn-1 advantage})`` over ``groups`` x ``group_size`` random-pick episodes of
    ``gym.make(ENV_ID, **kwargs)`` (group g poses task g of the split, its episodes seeded ``seed``, ``g``, ``j``)."""
    env = gym.make(ENV_ID, **kwargs)
    policy = get_scripted_policy(env, "random_choice")
    tasks = env.unwrapped.tasks
    episodes = [play(env, policy, seed + g * 1000 + j, tasks[g % len(tasks)], g)
                for g in range(groups) for j in range(group_size)]  # fmt: skip
    right = np.array([ep.metrics["env/success"] for ep in episodes])
    cfg = CreditConfig()
    first = {}
    for name in strategies:
        adv = get_strategy(name)(episodes, None, cfg).advantages
        first[name] = np.array([a[token_turns(ep) == 0][0] for a, ep in zip(adv, episodes, strict=True)])
    return right, first


def corr(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; 0.0 when either side is constant."""
    return float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else 0.0


def paired_interval(
    right: np.ndarray, a: np.ndarray, b: np.ndarray, group_size: int, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """95% bootstrap interval of ``corr(a, right) - corr(b, right)``, resampling whole groups (paired: both
    strategies credit the same episodes)."""
    rng = np.random.default_rng(seed)
    n_groups = len(right) // group_size
    diffs = []
    for _ in range(resamples):
        idx = (rng.integers(n_groups, size=n_groups)[:, None] * group_size + np.arange(group_size)).ravel()
        diffs.append(corr(a[idx], right[idx]) - corr(b[idx], right[idx]))
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


def credit_table(kwargs: dict, groups: int, group_size: int) -> tuple[dict[str, float], dict[str, tuple]]:
    """``{strategy: corr(turn-1 advantage, right pick)}`` and, for mt_grpo and gigpo, the paired 95% interval of
    their correlation minus grpo_or's."""
    right, first = first_turn_credit(kwargs, groups, group_size)
    out = {name: corr(a, right) for name, a in first.items()}
    ci = {name: paired_interval(right, first[name], first["grpo_or"], group_size) for name in ("mt_grpo", "gigpo")}
    return out, ci


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4, help="episodes per held-out task for the scores")
    parser.add_argument("--groups", type=int, default=200, help="task groups per credit setting")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per group (GRPO's G)")
    args = parser.parse_args()
    gym.register_envs(agentgym_turn)
    t0 = time.perf_counter()
    print(f"held-out scores ({ENV_ID}, split=test, noise=1, {args.seeds} episodes per task): success / return")
    print(f"{'horizon':>8} " + " ".join(f"{p:>20}" for p in POLICIES))
    for h in HORIZONS:
        row = scores(h, args.seeds)
        print(f"{h:>8} " + " ".join(f"{row[p][0]:>11.3f} / {row[p][1]:>6.2f}" for p in POLICIES))
    print(f"\ncorr(turn-1 advantage, right pick), random picks, {args.groups} groups x {args.group_size}; "
          "[paired 95% interval of mt_grpo / gigpo minus grpo_or]")  # fmt: skip
    print(f"{'setting':<26} {'H':>2} " + " ".join(f"{s:>11}" for s in STRATEGIES) + "  mt-or, gigpo-or")
    for label, kwargs in SETTINGS:
        for h in HORIZONS:
            row, ci = credit_table({**kwargs, "horizon": h}, args.groups, args.group_size)
            cis = "  ".join(f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in ci.values())
            print(f"{label:<26} {h:>2} " + " ".join(f"{row[s]:>11.2f}" for s in STRATEGIES) + f"  {cis}")
    print(f"\n({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
