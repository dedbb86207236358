"""Play a TurnRL env with one of its scripted policies and print what happened.

    python -m agentgym_turn.play --env TurnRL/WikiTwoTurn-v2 --policy reference --episodes 20 --show 1

Prints the first ``--show`` conversations in full, then the mean of every episode metric over ``--episodes``
episodes (seeds ``seed``, ``seed+1``, ...). Useful to see an env's prompt, feedback and rewards without a model.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import gymnasium as gym
import numpy as np

import agentgym_turn
from agentgym_turn.error import InvalidArgument
from agentgym_turn.policies import EpisodeLog, get_scripted_policy, run_episode


def _content(m: dict) -> str:
    c = m["content"]
    return c if isinstance(c, str) else "[" + ", ".join(p.get("type", "?") for p in c) + "]"


def format_episode(log: EpisodeLog) -> str:
    """The conversation of a played episode, each assistant turn followed by its reward and components."""
    lines, turn = [], 0
    for m in log.history:
        lines.append(f"[{m['role']}] {_content(m)}")
        if m["role"] == "assistant" and turn < len(log.rewards):
            lines.append(f"    -> reward {log.rewards[turn]:+.3f} {log.infos[turn]['reward_components']}")
            turn += 1
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the CLI; return the mean episode metrics."""
    ap = argparse.ArgumentParser(prog="python -m agentgym_turn.play", description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="TurnRL/WikiTwoTurn-v2", help="a registered TurnRL id")
    ap.add_argument("--policy", default="reference", help="the name of one of the env's scripted policies")
    ap.add_argument("--episodes", type=int, default=10, help="how many episodes to play")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    ap.add_argument("--show", type=int, default=1, help="print this many full conversations")
    args = ap.parse_args(argv)
    if args.episodes < 1:
        raise InvalidArgument(f"--episodes {args.episodes} must be >= 1.")
    if args.env not in agentgym_turn.ENV_SPECS:
        raise InvalidArgument(f"--env {args.env!r} is not a TurnRL id; registered: {sorted(agentgym_turn.ENV_SPECS)}.")
    env = gym.make(args.env)
    policy = get_scripted_policy(env, args.policy)
    sums: dict[str, list[float]] = defaultdict(list)
    start = time.perf_counter()
    for i in range(args.episodes):
        log = run_episode(env, policy, seed=args.seed + i)
        if i < args.show:
            print(f"=== episode {i} (seed {args.seed + i}) ===")
            print(format_episode(log))
        for key, value in log.metrics.items():
            sums[key].append(value)
    elapsed = time.perf_counter() - start
    means = {k: float(np.mean(v)) for k, v in sorted(sums.items())}
    print(f"=== {args.env} · policy {args.policy} · {args.episodes} episodes · {args.episodes / elapsed:.1f} ep/s ===")
    for key, value in means.items():
        print(f"{key:32s} {value:.4f}")
    env.close()
    return means


if __name__ == "__main__":
    main()
