"""Scripted Sokoban players: the BFS oracle (optimal, 100% success on filtered rooms) and a uniform random one.

>>> import gymnasium as gym, agentgym_turn
>>> from agentgym_turn.policies import get_scripted_policy, run_episode
>>> env = gym.make("TurnRL/Sokoban-v1")
>>> run_episode(env, get_scripted_policy(env, "bfs"), seed=3).metrics["env/success"]
1.0
"""

from __future__ import annotations

import numpy as np

from agentgym_turn.core import TurnEnv
from envs.sokoban.board import DIRECTIONS
from envs.sokoban.rewards import ACTION_SEPARATOR
from envs.sokoban.solver import shortest_solution


def format_turn(thought: str, actions: list[str]) -> str:
    """A well-formed turn: ``<think>thought</think><answer>A || B</answer>``."""
    return f"<think>{thought}</think><answer>{f' {ACTION_SEPARATOR} '.join(actions)}</answer>"


def bfs_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Play the next moves of a shortest solution from the current board (re-planned every turn)."""
    board = env.board  # type: ignore[attr-defined]
    plan = shortest_solution(board)
    if not plan:
        # No solution exists from here (a dead end): any legal-looking move keeps the turn well-formed.
        return format_turn("The room cannot be solved from here.", ["Up"])
    k = env.max_actions_per_turn  # type: ignore[attr-defined]
    return format_turn(f"A shortest solution has {len(plan)} actions: {', '.join(plan)}.", plan[:k])


def random_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """1..max_actions_per_turn uniformly random directions in a well-formed turn."""
    n = int(rng.integers(1, env.max_actions_per_turn + 1))  # type: ignore[attr-defined]
    names = list(DIRECTIONS)
    return format_turn("Random moves.", [names[int(i)] for i in rng.integers(0, len(names), size=n)])
