"""The training record: one episode as token ids, masks, turn indices and per-turn rewards.

Rollouts produce :class:`Episode` objects; credit-assignment strategies (``trainers/credit.py``) turn a batch of
them into per-token advantages; the update consumes those. Token-in-token-out: ``token_ids`` are exactly the ids
the engine generated (policy tokens) interleaved with the chat template's deltas for the env's messages.

Example: a two-turn WikiTwoTurn episode (P = prompt, A = policy, E = env tokens)::

    token_ids   P P P P A A A E E E E A A
    loss_mask   0 0 0 0 1 1 1 0 0 0 0 1 1
    turn_index -1-1-1-1 0 0 0-1-1-1-1 1 1
    turn_rewards = [{"tool_execution": 0.2, "search_answer": 0.5}, {"exact_match": 1.0, ...}]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentgym_turn.core import RewardLevel


@dataclass
class Episode:
    """One trajectory of one env, ready for credit assignment.

    Attributes:
        env_id: the Gymnasium id the episode came from (``TurnRL/WikiTwoTurn-v2``).
        group: episodes sampled for the same task share a group id (GRPO/RLOO normalise within a group).
        token_ids: the whole sequence, prompt included (int64).
        loss_mask: 1 where the policy generated the token, 0 for prompt and env tokens.
        turn_index: for each token, the 0-based index of the policy turn it belongs to; -1 for prompt/env tokens.
        logprobs: the behaviour policy's log-probability of each token (0 where ``loss_mask`` is 0).
        turn_rewards: one dict per policy turn: that turn's reward components as the env paid them, late ones
            included (a judge's score of turn k, reported at the end in ``info["late_reward_components"][k]``, is
            in ``turn_rewards[k]``).
        reward_levels: the env's ``{component: "turn" | "outcome"}``.
        terminated: the episode ended inside the task; ``truncated``: it was cut by an external limit.
        node_ids: for tree rollouts, one id per turn naming the tree node that turn's text belongs to; episodes
            sharing a turn-k node share the whole prefix up to and including turn k. ``None`` for flat groups.
        state_keys: one anchor-state key per turn, the state that turn acted in (``info["state_key"]`` of the
            ``reset``/``step`` before it, see :mod:`agentgym_turn.core`); ``None`` when the env provides none. GiGPO
            groups turns of a group's episodes by these keys.
        metrics: the env's episode metrics (final ``info["episode_metrics"]``).
    """

    env_id: str
    group: int
    token_ids: np.ndarray
    loss_mask: np.ndarray
    turn_index: np.ndarray
    logprobs: np.ndarray
    turn_rewards: list[dict[str, float]]
    reward_levels: dict[str, RewardLevel]
    terminated: bool
    truncated: bool = False
    node_ids: list[str] | None = None
    state_keys: list[str] | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.token_ids = np.asarray(self.token_ids, dtype=np.int64)
        self.loss_mask = np.asarray(self.loss_mask, dtype=np.int8)
        self.turn_index = np.asarray(self.turn_index, dtype=np.int32)
        self.logprobs = np.asarray(self.logprobs, dtype=np.float32)
        n = len(self.token_ids)
        for name in ("loss_mask", "turn_index", "logprobs"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Episode.{name} has {len(getattr(self, name))} entries for {n} tokens.")
        if np.any((self.loss_mask == 1) != (self.turn_index >= 0)):
            raise ValueError("Episode.turn_index must be >= 0 exactly where loss_mask is 1.")
        if self.node_ids is not None and len(self.node_ids) != len(self.turn_rewards):
            raise ValueError(f"Episode.node_ids has {len(self.node_ids)} ids for {len(self.turn_rewards)} turns.")
        if self.state_keys is not None and len(self.state_keys) != len(self.turn_rewards):
            raise ValueError(
                f"Episode.state_keys has {len(self.state_keys)} keys for {len(self.turn_rewards)} turns; "
                "give one per turn."
            )

    @property
    def num_turns(self) -> int:
        """How many policy turns the episode has."""
        return len(self.turn_rewards)

    def level_reward(self, level: RewardLevel, turn: int | None = None) -> float:
        """Sum of the components of ``level`` ("turn" or "outcome"), over one turn or (``turn=None``) all."""
        turns = self.turn_rewards if turn is None else [self.turn_rewards[turn]]
        return float(sum(v for tr in turns for k, v in tr.items() if self.reward_levels.get(k) == level))

    def turn_reward(self, turn: int) -> float:
        """Everything paid at ``turn`` (turn-level and outcome components)."""
        return float(sum(self.turn_rewards[turn].values()))

    @property
    def total_reward(self) -> float:
        """The episode's return: every component of every turn."""
        return float(sum(sum(tr.values()) for tr in self.turn_rewards))

    def last_token_of_turn(self, turn: int) -> int:
        """Position of the last policy token of ``turn`` (where PPO places that turn's reward)."""
        where = np.flatnonzero(self.turn_index == turn)
        if len(where) == 0:
            raise ValueError(f"turn {turn} has no policy tokens")
        return int(where[-1])
