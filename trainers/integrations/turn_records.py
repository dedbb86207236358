"""Per-turn records of TurnRL episodes beside an external trainer's batch, and the conversions between the two.

An external trainer (SkyRL, verl) keeps one float per turn of a TurnRL episode: each step's reward, placed on the
turn's last token. TurnRL's strategies also need the turn's reward components and their levels (MT-GRPO normalises
turn and outcome rewards apart, TARL scales them apart, PPO-OR drops the turn rewards), so each row travels with a
:class:`TurnRecord` under :data:`RECORD_KEY` (in SkyRL's ``env_metrics``, in verl's ``extra_fields``). This module
holds what both integrations share: the record, the reader of a batch's records, and the conversions between
:class:`~trainers.episode.Episode` objects and a batch's response rows (:class:`TurnBatch`), with the checks that
catch a misaligned batch. :mod:`trainers.integrations.skyrl_credit` and :mod:`trainers.integrations.verl_turnrl`
add each trainer's layout, estimator signature and trainer hook.

Worked example (one WikiTwoTurn row, response of 7 tokens; A = policy, E = env)::

    response         A  A  E  E  A  A  A
    loss_mask        1  1  0  0  1  1  1
    rewards          0 .7  0  0  0  0 1.2       step rewards [0.7, 1.2]: one per turn, on its last policy token
    record turns     [{"tool_execution": .2, "search_answer": .5}, {"exact_match": 1, "xml_format": .2}]
    Episode          turn_index 0 0 -1 -1 1 1 1, turn_rewards = the record's, reward_levels = the env's

SkyRL right-aligns a row's response in the batch (``align="right"``), verl left-aligns it (``align="left"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agentgym_turn.error import InvalidArgument
from trainers.credit import response_mask, reward_position, token_turns
from trainers.episode import Episode

#: the key of a row's record in the trainer's per-row metadata (SkyRL's ``env_metrics``, verl's ``extra_fields``)
RECORD_KEY = "turnrl_record"


@dataclass(frozen=True)
class TurnRecord:
    """What a TurnRL env tells an external trainer about one finished (or cut) episode.

    Attributes:
        env_id: the TurnRL id (``TurnRL/WikiTwoTurn-v2``).
        reward_levels: the env's ``{component: "turn" | "outcome"}``.
        turn_rewards: one dict per policy turn: that turn's components, late ones (a judge's) on their turns.
        step_rewards: what each ``step`` returned, i.e. the float the trainer placed on the turn's last token (the
            final step's includes every late component).
        terminated: the episode ended inside the task; ``truncated``: it was cut by an external limit.
        state_keys: each turn's anchor-state key (GiGPO), ``None`` when the env reports none.
    """

    env_id: str
    reward_levels: dict[str, str]
    turn_rewards: list[dict[str, float]]
    step_rewards: list[float]
    terminated: bool
    truncated: bool = False
    state_keys: list[str] | None = None

    def __post_init__(self) -> None:
        if len(self.step_rewards) != len(self.turn_rewards):
            raise InvalidArgument(
                f"TurnRecord of {self.env_id} has {len(self.step_rewards)} step rewards for "
                f"{len(self.turn_rewards)} turns; give one per turn."
            )
        if self.state_keys is not None and len(self.state_keys) != len(self.turn_rewards):
            raise InvalidArgument(
                f"TurnRecord of {self.env_id} has {len(self.state_keys)} state keys for {len(self.turn_rewards)} turns."
            )

    @classmethod
    def from_episode(cls, ep: Episode) -> TurnRecord:
        """The record of an episode played natively (each step's reward is the turn's total)."""
        return cls(
            env_id=ep.env_id,
            reward_levels=dict(ep.reward_levels),
            turn_rewards=[dict(t) for t in ep.turn_rewards],
            step_rewards=[ep.turn_reward(k) for k in range(ep.num_turns)],
            terminated=ep.terminated,
            truncated=ep.truncated,
            state_keys=None if ep.state_keys is None else list(ep.state_keys),
        )

    def to_metrics(self) -> dict[str, Any]:
        """A plain dict of lists and numbers (what a row carries under :data:`RECORD_KEY`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_metrics(cls, data: Mapping[str, Any]) -> TurnRecord:
        """Rebuild a record from :meth:`to_metrics`'s dict; a dict missing fields names them."""
        fields = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = sorted(required - set(data)) if isinstance(data, Mapping) else sorted(required)
        if missing:
            raise InvalidArgument(
                f"a TurnRL record lacks {missing} (got {type(data).__name__} {data!r:.120}); it must come from "
                "TurnRecord.to_metrics() (what TurnRL's SkyRL env and verl agent loop store under RECORD_KEY)."
            )
        kw = {k: v for k, v in data.items() if k in fields}
        kw["turn_rewards"] = [{str(k): float(v) for k, v in t.items()} for t in kw["turn_rewards"]]
        kw["step_rewards"] = [float(r) for r in kw["step_rewards"]]
        kw["reward_levels"] = dict(kw["reward_levels"])
        if kw.get("state_keys") is not None:
            kw["state_keys"] = [str(k) for k in kw["state_keys"]]
        return cls(**kw)


def records_from_rows(rows: Sequence[Mapping[str, Any] | None], *, field: str, source: str) -> list[TurnRecord]:
    """One :class:`TurnRecord` per row's metadata dict (``row[RECORD_KEY]``); a row without one raises.

    ``field`` names the rows in the message (``env_metrics``); ``source`` says where TurnRL rows come from and what
    other rows need.
    """
    out = []
    for i, row in enumerate(rows):
        if not row or RECORD_KEY not in row:
            raise InvalidArgument(
                f"row {i} of {field} has no {RECORD_KEY!r}: every row of a TurnRL estimator's batch must come from "
                f"{source}."
            )
        out.append(TurnRecord.from_metrics(row[RECORD_KEY]))
    return out


def as_numpy(x: Any, dtype: Any = None) -> np.ndarray:
    """A torch tensor or array-like as a numpy array on the CPU; a float ``dtype`` also converts bf16 tensors."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if dtype is not None and np.dtype(dtype).kind == "f":
            x = x.double() if np.dtype(dtype).itemsize > 4 else x.float()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


# --------------------------------------------------------------------------------------------------------------
# Episodes -> batch
# --------------------------------------------------------------------------------------------------------------


@dataclass
class TurnBatch:
    """The response half of a training batch for some episodes, as numpy arrays (one row per episode).

    Attributes:
        token_level_rewards: float32 ``(B, L)``: each step's reward on its turn's last policy token.
        response_mask: int64 ``(B, L)``: 1 on the row's response tokens (from its first policy token to its end).
        loss_mask: float32 ``(B, L)``: 1 on the policy's tokens.
        responses: int64 ``(B, L)``: the response token ids, 0 in padding.
        index: the prompt uid of each row (rows with one uid form a group).
        records: the :class:`TurnRecord` of each row.
        values: float32 ``(B, L)`` critic values V(s_t) before each response token, or ``None``.
    """

    token_level_rewards: np.ndarray
    response_mask: np.ndarray
    loss_mask: np.ndarray
    responses: np.ndarray
    index: list[str]
    records: list[TurnRecord]
    values: np.ndarray | None = None


def batch_from_episodes(
    episodes: Sequence[Episode],
    values: Sequence[np.ndarray] | None = None,
    width: int | None = None,
    *,
    align: Literal["left", "right"],
) -> TurnBatch:
    """The batch a trainer builds for these episodes (the inverse of :func:`episodes_from_batch`).

    A row's response runs from the episode's first policy token to its end, at the row's start (``align="left"``,
    verl) or end (``"right"``, SkyRL); each turn's total reward sits on its last policy token; ``values[i]``
    (TurnRL layout, ``n + 1`` entries) gives the row's values on the same positions. ``width`` pads every row to that
    many columns (default: the longest response).
    """
    if align not in ("left", "right"):
        raise InvalidArgument(f"align={align!r}; use 'left' (verl's layout) or 'right' (SkyRL's).")
    spans = [np.flatnonzero(response_mask(ep)) for ep in episodes]
    longest = max((len(s) for s in spans), default=0)
    width = longest if width is None else width
    if width < longest:
        raise InvalidArgument(f"width={width} is shorter than the longest response ({longest} tokens).")
    b = len(episodes)
    rewards, rmask = np.zeros((b, width), np.float32), np.zeros((b, width), np.int64)
    lmask, vals = np.zeros((b, width), np.float32), np.zeros((b, width), np.float32)
    ids = np.zeros((b, width), np.int64)
    for i, (ep, span) in enumerate(zip(episodes, spans, strict=True)):
        cols = np.arange(len(span)) if align == "left" else np.arange(width - len(span), width)
        rmask[i, cols] = 1
        lmask[i, cols] = ep.loss_mask[span]
        ids[i, cols] = ep.token_ids[span]
        for k in range(ep.num_turns):
            if len(span):
                rewards[i, cols[reward_position(ep, k) - span[0]]] += ep.turn_reward(k)
        if values is not None:
            vals[i, cols] = np.asarray(values[i], dtype=np.float32)[span]
    records = [TurnRecord.from_episode(ep) for ep in episodes]
    index = [str(ep.group) for ep in episodes]
    return TurnBatch(rewards, rmask, lmask, ids, index, records, vals if values is not None else None)


# --------------------------------------------------------------------------------------------------------------
# Batch -> episodes, and back for the advantages
# --------------------------------------------------------------------------------------------------------------


def row_turns(loss_mask: np.ndarray, num_turns: int, row: int, env_id: str) -> np.ndarray:
    """Turn index per response token: the k-th run of policy tokens is turn k, -1 elsewhere."""
    policy = loss_mask > 0
    starts = policy & ~np.concatenate([[False], policy[:-1]])
    runs = int(starts.sum())
    if runs not in (0, num_turns):
        raise InvalidArgument(
            f"row {row} ({env_id}) has {runs} runs of policy tokens in its loss_mask but its TurnRL record has "
            f"{num_turns} turns; the records are misaligned with the batch rows, or a generator setting "
            "(custom chat template, step-wise trajectories) changed the layout."
        )
    return np.where(policy, np.cumsum(starts) - 1, -1).astype(np.int32)


def check_stamped(ep: Episode, stamped: np.ndarray, record: TurnRecord, row: int, reward_settings: str) -> None:
    """The rewards inside each turn's span (its tokens and the env tokens after it) must sum to that step's reward.

    ``reward_settings`` names the trainer's settings that change rewards after the env, for the message.
    """
    turns = token_turns(ep) if ep.loss_mask.any() else np.full(len(stamped), -1)
    if ep.loss_mask.any() and stamped[turns < 0].any():
        raise InvalidArgument(f"row {row} ({ep.env_id}) has a reward before its first policy token.")
    got = (
        np.bincount(turns[turns >= 0], weights=stamped[turns >= 0], minlength=ep.num_turns)
        if ep.loss_mask.any()
        else np.array([stamped.sum()])
    )
    want = np.array(record.step_rewards) if ep.loss_mask.any() else np.array([sum(record.step_rewards)])
    if not np.allclose(got, want, rtol=1e-5, atol=1e-4):
        raise InvalidArgument(
            f"row {row} ({ep.env_id}): the batch's token rewards sum to {got.round(4).tolist()} per turn but the env "
            f"paid {want.round(4).tolist()}; records and rows are misaligned, or rewards were changed after the env "
            f"({reward_settings})."
        )


@dataclass
class BatchLayout:
    """Where each episode sits in the batch: its row and its response columns."""

    rows: list[int]
    cols: list[np.ndarray]
    shape: tuple[int, int]

    def scatter(self, per_episode: Sequence[np.ndarray]) -> np.ndarray:
        """Per-episode arrays (one entry per response column) as a float32 ``(B, L)`` array, 0 elsewhere."""
        out = np.zeros(self.shape, dtype=np.float32)
        for row, cols, values in zip(self.rows, self.cols, per_episode, strict=True):
            out[row, cols] = values
        return out


def episodes_from_batch(
    token_level_rewards: Any,
    response_mask: Any,
    loss_mask: Any,
    index: Sequence[Any],
    records: Sequence[TurnRecord],
    *,
    reward_settings: str,
) -> tuple[list[Episode], BatchLayout]:
    """A batch's rows as :class:`Episode` objects (response tokens only) and where each one sits in the batch.

    ``response_mask`` marks each row's span (the columns that become the episode), ``loss_mask`` the policy's tokens
    in it. Rows past ``len(records)`` are padding rows and get no episode. ``Episode.token_ids`` holds -1: credit
    assignment reads only masks, turns and rewards. ``reward_settings`` is for :func:`check_stamped`'s message.
    """
    rewards = as_numpy(token_level_rewards, np.float32)
    rmask, lmask = as_numpy(response_mask, np.float32), as_numpy(loss_mask, np.float32)
    if rewards.ndim != 2 or rewards.shape != rmask.shape or rewards.shape != lmask.shape:
        raise InvalidArgument(
            f"token_level_rewards {rewards.shape}, response_mask {rmask.shape} and loss_mask {lmask.shape} must all "
            "be (batch, response_len)."
        )
    if len(records) > rewards.shape[0] or len(index) < len(records):
        raise InvalidArgument(
            f"{len(records)} TurnRL records and {len(index)} uids for a batch of {rewards.shape[0]} rows; give one "
            "record and one uid per (unpadded) row."
        )
    groups: dict[Any, int] = {}
    episodes, layout = [], BatchLayout([], [], rewards.shape)
    for i, record in enumerate(records):
        cols = np.flatnonzero(rmask[i] > 0)
        turn_index = row_turns(lmask[i, cols], len(record.turn_rewards), i, record.env_id)
        ep = Episode(
            env_id=record.env_id,
            group=groups.setdefault(index[i], len(groups)),
            token_ids=np.full(len(cols), -1),
            loss_mask=(turn_index >= 0).astype(np.int8),
            turn_index=turn_index,
            logprobs=np.zeros(len(cols)),
            turn_rewards=[dict(t) for t in record.turn_rewards],
            reward_levels=dict(record.reward_levels),  # type: ignore[arg-type]
            terminated=record.terminated,
            truncated=record.truncated or not record.terminated,
            state_keys=None if record.state_keys is None else list(record.state_keys),
        )
        check_stamped(ep, rewards[i, cols], record, i, reward_settings)
        episodes.append(ep)
        layout.rows.append(i)
        layout.cols.append(cols)
    return episodes, layout
