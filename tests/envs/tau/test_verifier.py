"""The verifier's two protocols (TARL §2.1: without the output check; its Appendix D: with it), and what a do-nothing
agent scores under each: the numbers the leaderboard's τ-bench note quotes."""

from __future__ import annotations

import pytest

from envs.tau.env import TauEnv, no_tools_policy


def do_nothing_successes(domain: str, split: str, output_check: bool) -> tuple[int, int]:
    """Successes of an agent that only ever says it cannot help (the customer then ends the call), over every task."""
    env = TauEnv(domain, split=split, output_check=output_check)
    wins = 0
    for task in env._tasks:
        env.reset(seed=0, options={"task": {"id": task["id"]}})
        _, _, terminated, _, info = env.step(no_tools_policy(env, None))  # type: ignore[arg-type]
        assert terminated and info["end_reason"] == "user_stop"
        wins += int(info["episode_metrics"]["env/success"])
    env.close()
    return wins, len(env._tasks)


@pytest.mark.parametrize(
    ("domain", "split", "without", "with_check"),
    [
        ("airline", "test", (7, 20), (7, 20)),  # 35 % either way: above Qwen3-8B's reported 32 % (003 Table 1)
        ("airline", "all", (24, 50), (23, 50)),  # 48 % / 46 %
        ("retail", "test", (4, 40), (2, 40)),  # 10 % / 5 %
    ],
)
def test_do_nothing_agent_under_both_protocols(domain: str, split: str, without: tuple, with_check: tuple) -> None:
    assert do_nothing_successes(domain, split, output_check=False) == without
    assert do_nothing_successes(domain, split, output_check=True) == with_check
