"""Scripted Sokoban players: the BFS oracle (optimal, 100% success on filtered rooms), an exploring BFS player for
varied cold-start demonstrations, and a uniform random one.

>>> import gymnasium as gym, agentgym_turn
>>> from agentgym_turn.policies import get_scripted_policy, run_episode
>>> env = gym.make("TurnRL/Sokoban-v2")
>>> run_episode(env, get_scripted_policy(env, "bfs"), seed=3).metrics["env/success"]
1.0
>>> run_episode(env, get_scripted_policy(env, "bfs_explore"), seed=3).metrics["env/success"]
1.0
"""

from __future__ import annotations

import numpy as np

from agentgym_turn.core import TurnEnv
from envs.sokoban.board import DIRECTIONS, apply_move
from envs.sokoban.rewards import ACTION_SEPARATOR
from envs.sokoban.solver import first_move_costs, shortest_solution

#: How often ``bfs_explore`` opens a turn with a detour: a move off every shortest solution that still leaves one
#: within the actions left (a step away and back, or a longer way round).
DETOUR_PROB = 0.2


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


def bfs_explore_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Solve like the oracle, but vary the path the way a sampled model would: each action is drawn uniformly among
    the moves that start a shortest solution (several, where the room allows: around a box either way, the walk
    before a push in either order), and with probability :data:`DETOUR_PROB` a turn opens with a non-fatal
    detour instead: a move that starts no shortest solution but leaves one within the actions left in the episode.
    Success stays 1.0 on rooms the oracle solves; ``rng`` alone decides the variation."""
    board = env.board  # type: ignore[attr-defined]
    k = env.max_actions_per_turn  # type: ignore[attr-defined]
    left = (env.max_turns - env.turn) * k  # type: ignore[attr-defined]  # actions left in the episode, this turn's too
    actions: list[str] = []
    shortest: int | None = None
    detour: str | None = None
    while len(actions) < k and not board.solved:
        costs = {d: c for d, c in first_move_costs(board, left).items() if c is not None}
        if not costs:
            break  # a dead end: nothing solves the room from here
        best = min(costs.values())
        detours = sorted(d for d, c in costs.items() if c > best)
        if not actions and detours and rng.random() < DETOUR_PROB:
            options = detours
        else:
            options = sorted(d for d, c in costs.items() if c == best)
        choice = options[int(rng.integers(len(options)))]
        if not actions:
            shortest, detour = best, (None if costs[choice] == best else choice)
        actions.append(choice)
        board = apply_move(board, choice).board
        left -= 1
    if not actions:
        return format_turn("The room cannot be solved from here.", ["Up"])
    thought = f"A shortest solution from here has {shortest} actions"
    if detour is not None:
        thought += f"; {detour} first still leaves one within the actions left"
    return format_turn(f"{thought}. I play {', '.join(actions)}.", actions)


def random_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """1..max_actions_per_turn uniformly random directions in a well-formed turn."""
    n = int(rng.integers(1, env.max_actions_per_turn + 1))  # type: ignore[attr-defined]
    names = list(DIRECTIONS)
    return format_turn("Random moves.", [names[int(i)] for i in rng.integers(0, len(names), size=n)])
