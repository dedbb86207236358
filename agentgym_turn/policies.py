"""Scripted policies: deterministic (or seeded) agents that exercise an env without a language model.

A scripted policy is a function ``policy(env, rng) -> str`` that reads the unwrapped env's ``task`` and
``history`` and returns the assistant's next turn. Oracle policies may read the task's gold data: they exist to
prove an env solvable, to give a metric's ceiling, and to generate demonstrations for a trainer's cold start.

Each env class lists its policies in the class attribute ``scripted_policies: dict[str, ScriptedPolicy]``;
:func:`get_scripted_policy` finds one by name and :func:`run_episode` plays one episode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_turn.core import EPISODE_METRICS_KEY, Message, TurnEnv
from agentgym_turn.error import InvalidArgument

ScriptedPolicy = Callable[[TurnEnv, np.random.Generator], str]


def get_scripted_policy(env: gym.Env, name: str) -> ScriptedPolicy:
    """The scripted policy ``name`` of ``env`` (wrapped or not); the error lists the available names."""
    base = env.unwrapped
    policies: dict[str, ScriptedPolicy] = getattr(type(base), "scripted_policies", {})
    if name not in policies:
        raise InvalidArgument(f"{type(base).__name__} has no scripted policy {name!r}; available: {sorted(policies)}.")
    return policies[name]


@dataclass
class EpisodeLog:
    """One played episode: the actions, the per-turn rewards and infos, and the final conversation."""

    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False

    @property
    def metrics(self) -> dict[str, float]:
        """The episode metrics from the final ``info["episode_metrics"]`` (empty if the episode did not finish)."""
        return dict(self.infos[-1].get(EPISODE_METRICS_KEY, {})) if self.infos else {}


def run_episode(
    env: gym.Env,
    policy: ScriptedPolicy,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    max_turns: int = 1000,
) -> EpisodeLog:
    """Play one episode of ``env`` with ``policy`` (seeded from ``seed``) and return its log."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed, options=options)
    log = EpisodeLog()
    for _ in range(max_turns):
        action = policy(env.unwrapped, rng)
        _, reward, terminated, truncated, info = env.step(action)
        log.actions.append(action)
        log.rewards.append(float(reward))
        log.infos.append(info)
        if terminated or truncated:
            log.terminated, log.truncated = bool(terminated), bool(truncated)
            break
    log.history = list(env.unwrapped.history)
    return log
