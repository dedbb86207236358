"""TurnRL's credit-assignment strategies as verl advantage estimators: an adapter from verl's batch to Episodes.

One implementation: the numbers come from :mod:`trainers.credit`. This module converts verl's batch into
:class:`~trainers.episode.Episode` objects and the strategy's output back into verl's tensors; the SkyRL integration
(:mod:`trainers.integrations.skyrl_credit`) does the same for SkyRL; both build on
:mod:`trainers.integrations.turn_records` (the per-row :class:`TurnRecord` and the batch <-> Episodes conversions).
The agent loop that plays TurnRL envs inside verl lives in :mod:`trainers.integrations.verl_agent_loop`.

Pinned and tested against verl 0.9.1 (:data:`VERL_VERSION`): ``pip install "agentgym-turn[verl]"`` installs it
without its dependency list, which pins a CUDA torch and vLLM (see the README's "Scale: verl").

What verl gives an estimator (``compute_advantage`` in ``verl.trainer.ppo.ray_trainer``, called by the v1 trainer's
``_compute_advantage``): ``token_level_rewards`` and ``response_mask`` of shape ``(batch, response_len)``, left
aligned (a row's response starts at column 0; ``response_mask`` is 1 on the policy's own tokens only, 0 on env
tokens and padding), ``index`` (the prompt uid of each row: the group) and ``config`` (``algorithm``: ``gamma``,
``lam``, ``norm_adv_by_std_in_grpo``). The TurnRL agent loop puts each turn's reward (every component paid at that
turn, late judge scores included) on that turn's last policy token. One float per turn survives, and the turn's
components and their levels (``turn`` / ``outcome``) do not, while every strategy but the merged-reward ones needs
them (MT-GRPO normalises turn and outcome rewards apart, TARL scales them apart, PPO-OR drops the turn rewards).
verl also keeps the critic's ``values`` from every estimator but its own ``gae``. So the estimators read, per row:

- a :class:`~trainers.integrations.turn_records.TurnRecord` (env id, reward levels, each turn's components, each
  step's reward, terminated/truncated, anchor-state keys), which the agent loop stores in the row's
  ``extra_fields[RECORD_KEY]``;
- for the PPO family, the critic's ``values`` (V before each response token, verl's layout).

verl's trainer passes neither to an estimator, so :func:`turnrl_trainer_class` registers a v1 trainer
(``trainer.v1.trainer_mode=turnrl_sync``) whose ``_compute_advantage`` reads both for the batch and lends them to
the estimator for the duration of verl's own call (:func:`lend`). verl's registries are per process, so
:mod:`trainers.integrations.verl_plugin` (``VERL_USE_EXTERNAL_MODULES``) fills them in each of its processes.
A ``DataProto`` with records in ``non_tensor_batch`` goes through :func:`compute_turnrl_advantage`; direct
callers pass ``records=`` and ``values=``. Without records the estimators raise: a number computed from what is
left would be silently wrong. verl's older trainer (``trainer.use_v1=false``, deprecated) is not supported: it
rebuilds ``rm_scores`` as one score on the last token, which the check below refuses.

Checks that catch a misaligned batch: each row's runs of policy tokens must number the record's turns, and its
token rewards must be exactly the record's turn rewards on those turns' last tokens (so
``algorithm.use_kl_in_reward`` is refused: use ``actor.use_kl_loss``).

Worked example (one WikiTwoTurn row, response of 7 tokens then padding; A = policy, E = env)::

    responses        A  A  E  E  A  A  A  pad
    response_mask    1  1  0  0  1  1  1  0
    rm_scores        0 .7  0  0  0  0 1.2 0      each turn's reward on its last policy token
    record turns     [{"tool_execution": .2, "search_answer": .5}, {"exact_match": 1, "xml_format": .2}]
    Episode          turn_index 0 0 -1 -1 1 1 1, turn_rewards = the record's, reward_levels = the env's

Limits: ``turn_ppo`` is not offered (it trains its critic only at turn starts; verl trains it on every
``response_mask`` token); ``CreditConfig.use_loss_mask`` / ``use_advantage_mask`` stay on (verl applies
``response_mask`` to every loss); ``gamma``, ``gae_lambda`` and ``scale_by_std`` come from verl's ``algorithm``
config (``gamma``, ``lam``, ``norm_adv_by_std_in_grpo``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from trainers.credit import CreditConfig, place_rewards
from trainers.episode import Episode
from trainers.integrations.skyrl_credit import (
    ESTIMATOR_PREFIX,
    SUPPORTED,
    UNSUPPORTED,
    estimator_names,
    make_estimator,
    refuse_trainer_knobs,
    skyrl_advantages,
    strategy_of,
)
from trainers.integrations.turn_records import (
    RECORD_KEY,
    TurnRecord,
    as_numpy,
    batch_from_episodes,
    episodes_from_batch,
    records_from_rows,
)

#: the verl release this integration is written and tested against
VERL_VERSION = "0.9.1"
#: verl's ``trainer.v1.trainer_mode`` of the trainer that lends TurnRL estimators their records and values
TRAINER_MODE = "turnrl_sync"
_PIP = (
    f'`pip install "agentgym-turn[verl]"` (verl=={VERL_VERSION} without its torch/vLLM pins, see the README\'s '
    '"Scale: verl")'
)
#: CreditConfig fields that verl's ``algorithm`` config provides when it calls an estimator
_VERL_KNOBS = {
    "gamma": "algorithm.gamma",
    "gae_lambda": "algorithm.lam",
    "scale_by_std": "algorithm.norm_adv_by_std_in_grpo",
}
#: verl settings that change token rewards after the env (named when a batch's rewards do not match its records)
_REWARD_SETTINGS = "algorithm.use_kl_in_reward, or verl's older trainer (trainer.use_v1=false)"
_LENT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("turnrl_verl_lent", default=None)

__all__ = [
    "ESTIMATOR_PREFIX",
    "RECORD_KEY",
    "SUPPORTED",
    "UNSUPPORTED",
    "VERL_VERSION",
    "TurnRecord",
    "VerlBatch",
    "compute_turnrl_advantage",
    "episodes_from_verl",
    "estimator_names",
    "lend",
    "register_verl_estimators",
    "strategy_of",
    "turnrl_trainer_class",
    "verl_advantages",
    "verl_batch_from_episodes",
]


def require_verl() -> Any:
    """Import verl (lazily); a missing or different version raises with the install command."""
    try:
        import verl
    except ImportError as exc:
        raise DependencyNotInstalled(f"verl is not installed ({exc}); install it with {_PIP}.") from exc
    if getattr(verl, "__version__", None) != VERL_VERSION:
        raise DependencyNotInstalled(
            f"verl {getattr(verl, '__version__', '?')} is installed, but this integration is written against verl "
            f"{VERL_VERSION} (its agent-loop and estimator APIs change between releases); install it with {_PIP}."
        )
    return verl


# --------------------------------------------------------------------------------------------------------------
# Episodes <-> verl's batch layout
# --------------------------------------------------------------------------------------------------------------


def turn_token_rewards(ep: Episode) -> np.ndarray:
    """Per-token rewards of the whole episode: each turn's reward on its last policy token (float32)."""
    return place_rewards(ep, [ep.turn_reward(k) for k in range(ep.num_turns)], 0.0).astype(np.float32)


def response_start(ep: Episode) -> int:
    """Where verl's response begins: the episode's first policy token (everything before it is the prompt)."""
    policy = np.flatnonzero(ep.loss_mask)
    if len(policy) == 0:
        raise InvalidArgument(f"an {ep.env_id} episode has no policy tokens; verl has no response to train on.")
    return int(policy[0])


@dataclass
class VerlBatch:
    """The response half of a verl training batch, as numpy arrays in verl's layout (left-aligned rows).

    Attributes:
        responses: int64 ``(B, L)`` response token ids (0 in padding).
        response_mask: int64 ``(B, L)``: 1 on the policy's tokens, 0 on env tokens and padding.
        token_level_rewards: float32 ``(B, L)``: each turn's reward on its last policy token.
        index: the prompt uid of each row (rows with one uid form a group).
        records: the :class:`TurnRecord` of each row.
        values: float32 ``(B, L)`` critic values V(s_t) before each response token, or ``None``.
    """

    responses: np.ndarray
    response_mask: np.ndarray
    token_level_rewards: np.ndarray
    index: np.ndarray
    records: list[TurnRecord]
    values: np.ndarray | None = None


def verl_batch_from_episodes(
    episodes: Sequence[Episode], values: Sequence[np.ndarray] | None = None, width: int | None = None
) -> VerlBatch:
    """The batch verl builds from these episodes through the agent loop (the inverse of :func:`episodes_from_verl`).

    A row's response runs from the episode's first policy token to its end; ``values[i]`` (TurnRL layout,
    ``n + 1`` entries) gives the row's values at the same positions. ``width`` pads every row to that many columns
    (default: the longest response).
    """
    for ep in episodes:
        response_start(ep)  # an episode without policy tokens has no verl row
    rows = batch_from_episodes(episodes, values, width, align="left")
    return VerlBatch(
        responses=rows.responses,
        response_mask=rows.loss_mask.astype(np.int64),
        token_level_rewards=rows.token_level_rewards,
        index=np.array(rows.index, dtype=object),
        records=rows.records,
        values=rows.values,
    )


def span_mask(response_mask: Any) -> np.ndarray:
    """Each row's span as the adapter reads it: columns 0 to the row's last policy token (int64, ``(B, L)``)."""
    policy = as_numpy(response_mask) > 0
    last = np.where(policy.any(axis=1), policy.shape[1] - 1 - np.argmax(policy[:, ::-1], axis=1), -1)
    return (np.arange(policy.shape[1])[None, :] <= last[:, None]).astype(np.int64)


def episodes_from_verl(
    token_level_rewards: Any, response_mask: Any, index: Sequence[Any], records: Sequence[TurnRecord]
) -> list[Episode]:
    """verl's batch as :class:`Episode` objects (the response span of each row: column 0 to its last policy token).

    ``Episode.token_ids`` holds -1: credit assignment reads only masks, turns and rewards.
    """
    mask = as_numpy(response_mask)
    episodes, _ = episodes_from_batch(
        token_level_rewards, span_mask(mask), mask, index, records, reward_settings=_REWARD_SETTINGS
    )
    return episodes


def records_from_extra_fields(extra_fields: Sequence[Mapping[str, Any] | None]) -> list[TurnRecord]:
    """One :class:`TurnRecord` per row of verl's ``extra_fields`` (what the agent loop stored under RECORD_KEY)."""
    return records_from_rows(
        extra_fields,
        field="the batch's extra_fields",
        source="the TurnRL agent loop (agent_name 'turnrl_agent'); other rows need verl's own estimators",
    )


# --------------------------------------------------------------------------------------------------------------
# The estimators
# --------------------------------------------------------------------------------------------------------------


def check_turn_rewards(token_level_rewards: Any, response_mask: Any, records: Sequence[TurnRecord]) -> None:
    """Each row's token rewards must be its turns' rewards on their last policy tokens, and nothing else."""
    rewards, policy = as_numpy(token_level_rewards, np.float64), as_numpy(response_mask) > 0
    for i, record in enumerate(records):
        ends = np.flatnonzero(policy[i] & ~np.append(policy[i, 1:], False))
        want = np.zeros(rewards.shape[1])
        if len(ends) == len(record.step_rewards):
            want[ends] = record.step_rewards
        if not np.allclose(rewards[i], want, rtol=1e-5, atol=1e-4):
            raise InvalidArgument(
                f"row {i} ({record.env_id}): its token rewards are not the env's {len(record.step_rewards)} turn "
                f"rewards {np.round(record.step_rewards, 4).tolist()} on the last tokens of its {len(ends)} turns. "
                "TurnRL estimators need the rows the TurnRL agent loop writes for verl's v1 trainer (rm_scores), "
                "unchanged: turn algorithm.use_kl_in_reward off (actor.use_kl_loss keeps the KL term); the older "
                "trainer (trainer.use_v1=false) puts one score on the last token and is not supported."
            )


@contextlib.contextmanager
def lend(records: Sequence[TurnRecord], values: Any = None) -> Iterator[None]:
    """Hand TurnRL estimators the batch's records (and critic values) while verl's ``compute_advantage`` runs."""
    token = _LENT.set({"records": list(records), "values": values})
    try:
        yield
    finally:
        _LENT.reset(token)


def _algo(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def verl_advantages(
    strategy: str,
    cfg: CreditConfig,
    *,
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any] | None = None,
    config: Any = None,
    records: Sequence[TurnRecord] | None = None,
    values: Any = None,
    **verl_kwargs: Any,
) -> tuple[Any, Any]:
    """A TurnRL strategy called the way verl calls a registered estimator; returns ``(advantages, returns)``.

    ``records`` and ``values`` come from the caller or, inside verl's trainer, from :func:`lend` (the
    ``turnrl_sync`` trainer does it). ``config`` is verl's ``algorithm`` config: its ``gamma``, ``lam`` and
    ``norm_adv_by_std_in_grpo`` override ``cfg``'s. Other verl keywords (``reward_baselines``) are not used.
    Critic-free strategies return their advantages as the returns, as verl's GRPO does.
    """
    lent = _LENT.get()
    if lent is not None:
        records = lent["records"] if records is None else records
        values = lent["values"] if values is None else values
    if records is None:
        raise InvalidArgument(
            f"the TurnRL estimator {ESTIMATOR_PREFIX + strategy!r} needs each row's TurnRL record (turn components "
            f"and their levels), which verl's stock trainer does not pass to an estimator. Train with "
            f"trainer.v1.trainer_mode={TRAINER_MODE} (see examples/verl/), or pass records= yourself."
        )
    if index is None:
        raise InvalidArgument("TurnRL estimators need index (the uid of each row) to form groups; verl passes it.")
    from trainers.credit import needs_critic

    if needs_critic(strategy) and values is None:
        raise InvalidArgument(
            f"{ESTIMATOR_PREFIX + strategy!r} needs critic values, which verl passes only to its own 'gae': set "
            f"critic.enable=True and trainer.v1.trainer_mode={TRAINER_MODE}, or pick a critic-free strategy such as "
            "turnrl_mt_grpo."
        )
    check_turn_rewards(token_level_rewards, response_mask, records)
    return skyrl_advantages(
        strategy,
        cfg,
        token_level_rewards=token_level_rewards,
        response_mask=span_mask(response_mask),
        loss_mask=as_numpy(response_mask),
        index=list(index),
        values=values,
        gamma=float(_algo(config, "gamma", cfg.gamma)),
        lambd=float(_algo(config, "lam", cfg.gae_lambda)),
        grpo_norm_by_std=bool(_algo(config, "norm_adv_by_std_in_grpo", cfg.scale_by_std)),
        turnrl_records=records,
    )


def make_verl_estimator(strategy: str, cfg: CreditConfig | None = None) -> functools.partial:
    """The verl estimator for ``strategy`` (a picklable ``partial`` of :func:`verl_advantages`)."""
    cfg = CreditConfig() if cfg is None else cfg
    refuse_trainer_knobs(cfg, _VERL_KNOBS, "verl")
    make_estimator(strategy, cfg)  # the checks shared with SkyRL: a supported name, loss and advantage masks on
    return functools.partial(verl_advantages, strategy, cfg)


def register_verl_estimators(strategies: Sequence[str] | None = None, cfg: CreditConfig | None = None) -> list[str]:
    """Register ``turnrl_<strategy>`` in verl's advantage-estimator registry (``register_adv_est``); returns the names.

    Idempotent: a name already registered is left as it is. verl's registry is a dict in each process, so this must
    run in the process that calls ``compute_advantage`` (the trainer); :func:`turnrl_trainer_class` does it.
    """
    require_verl()
    from verl.trainer.ppo import core_algos

    names = []
    for strategy in SUPPORTED if strategies is None else strategies:
        name = ESTIMATOR_PREFIX + strategy
        if name not in core_algos.ADV_ESTIMATOR_REGISTRY:
            core_algos.register_adv_est(name)(make_verl_estimator(strategy, cfg))
        names.append(name)
    return names


def compute_turnrl_advantage(data: Any, adv_estimator: str, config: Any = None) -> Any:
    """verl's own ``compute_advantage`` on a ``DataProto`` whose rows carry TurnRL records in
    ``non_tensor_batch[RECORD_KEY]`` (one dict per row, where verl's agent-loop worker collects ``extra_fields``),
    with the records and ``batch["values"]`` (when present) lent to the estimator. ``token_level_rewards`` must be
    in the TurnRL layout (each turn's reward on its last token). Returns ``data`` with ``advantages`` and
    ``returns`` set."""
    require_verl()
    from verl.trainer.ppo.ray_trainer import compute_advantage

    if RECORD_KEY not in data.non_tensor_batch:
        raise InvalidArgument(
            f"the DataProto has no non_tensor_batch[{RECORD_KEY!r}]; its rows must come from the TurnRL agent loop."
        )
    records = [TurnRecord.from_metrics(r) for r in data.non_tensor_batch[RECORD_KEY]]
    values = data.batch.get("values", None)
    with lend(records, values):
        return compute_advantage(data, adv_estimator=adv_estimator, config=config)


# --------------------------------------------------------------------------------------------------------------
# The trainer hook (verl's v1 trainer)
# --------------------------------------------------------------------------------------------------------------


def _compute_advantage_with_records(trainer: Any, base_method: Any, batch: Any, metrics: dict) -> Any:
    """Run verl's ``_compute_advantage`` with the batch's records and values lent to TurnRL estimators."""
    if not str(trainer.config.algorithm.adv_estimator).startswith(ESTIMATOR_PREFIX):
        return base_method(batch, metrics=metrics)
    import transfer_queue as tq

    fields = ["extra_fields", "values"] if trainer.use_critic else ["extra_fields"]
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    extra = data["extra_fields"]
    records = records_from_extra_fields(extra.tolist() if hasattr(extra, "tolist") else list(extra))
    values = data["values"].to_padded_tensor(0.0) if trainer.use_critic else None
    with lend(records, values):
        return base_method(batch, metrics=metrics)


@functools.cache
def turnrl_trainer_class() -> type:
    """verl's synchronous v1 trainer with the TurnRL hook, registered as ``trainer.v1.trainer_mode=turnrl_sync``.

    One override: ``_compute_advantage`` reads each row's TurnRL record (``extra_fields``) and, with a critic, its
    values, and lends them to the estimator for verl's own call; other estimators run unchanged. It also registers
    the TurnRL estimators in the trainer's process.
    """
    require_verl()
    from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

    register_verl_estimators()

    @register_trainer(TRAINER_MODE)
    class TurnRLTrainer(PPOTrainerSync):  # type: ignore[misc, valid-type]
        """verl's ``PPOTrainerSync`` whose TurnRL estimators see each row's record and the critic's values."""

        def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
            return _compute_advantage_with_records(self, super()._compute_advantage, batch, metrics)

    return TurnRLTrainer
