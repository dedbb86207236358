"""TurnRL's credit-assignment strategies as SkyRL advantage estimators: an adapter from SkyRL's batch to Episodes.

One implementation: the numbers come from :mod:`trainers.credit`. This module only converts SkyRL's batch into
:class:`~trainers.episode.Episode` objects and the strategy's per-token output back into SkyRL's tensors.

What SkyRL gives an estimator (``compute_advantages_and_returns`` in ``skyrl.backends.skyrl_train.utils.ppo_utils``,
skyrl 0.3; ``skyrl_train.utils.ppo_utils`` in the older skyrl-train package): ``token_level_rewards`` and
``response_mask`` of shape ``(batch, response_len)``, right-aligned (a row's response fills its last positions),
``index`` (one prompt uid per row: the group), ``values`` (the critic's V before each response token), ``gamma``,
``lambd``, ``grpo_norm_by_std`` and the ``AlgorithmConfig``. Its ``SkyRLGymGenerator`` stamps each ``env.step``
reward on the last token of that turn's response (SkyRL issue #201, PR #226), so one float per turn survives, and
the turn's components, their levels (``turn`` / ``outcome``) and the turns that paid 0 do not. Every TurnRL strategy
but the merged-reward ones needs them (MT-GRPO normalises turn and outcome rewards apart, TARL scales them apart,
PPO-OR drops the turn rewards), so the estimators also read, per row:

- ``loss_mask`` (SkyRL's own, 1 on the policy's tokens): each run of policy tokens is one turn;
- a :class:`TurnRecord` (env id, reward levels, each turn's components with late judge scores on their turns, each
  step's reward, terminated/truncated, anchor-state keys), which :class:`~trainers.integrations.skyrl_turnrl.
  TurnRLTextEnv` returns from ``get_metrics()`` under :data:`RECORD_KEY`; SkyRL's generator hands it back in
  ``generator_output["env_metrics"]``.

SkyRL's trainer does not pass either to an estimator, so :func:`turnrl_trainer_class` adds a two-method hook to its
``RayPPOTrainer``: it keeps the records when the batch is built and lends both to the estimator through the
``AlgorithmConfig`` SkyRL already passes (attribute :data:`HOOK_ATTR`, set only for the duration of the call).
Direct callers pass ``loss_mask=`` and ``turnrl_records=`` instead. Without them the estimators raise: a number
computed from what is left would be silently wrong.

Checks that catch a misaligned batch: each row's runs of policy tokens must number the record's turns, and the rewards
SkyRL stamped inside each turn's span (its tokens and the env tokens after it) must sum to that step's reward.

Worked example (one WikiTwoTurn row, response of 7 tokens; A = policy, E = env)::

    response         A  A  E  E  A  A  A
    loss_mask        1  1  0  0  1  1  1
    SkyRL rewards    0 .7  0  0  0  0 1.2       step rewards [0.7, 1.2]: one per turn, on its last token
    record turns     [{"tool_execution": .2, "search_answer": .5}, {"exact_match": 1, "xml_format": .2}]
    Episode          turn_index 0 0 -1 -1 1 1 1, turn_rewards = the record's, reward_levels = the env's

Limits: ``turn_ppo`` is not offered (it trains its critic only at turn starts, SkyRL trains it on every loss-mask
token); ``CreditConfig.use_loss_mask`` / ``use_advantage_mask`` must stay on (SkyRL applies its own loss mask);
SkyRL's step-wise trajectories, ``use_kl_in_reward`` and ``zero_reward_on_non_stop`` change the stamped rewards and
are refused by the checks; ``gamma``, ``lambd`` and ``grpo_norm_by_std`` are SkyRL's settings.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from trainers.credit import (
    STRATEGIES,
    CreditConfig,
    get_strategy,
    needs_critic,
    response_mask,
    reward_position,
    token_turns,
)
from trainers.episode import Episode

#: the key of the per-episode record in the env's ``get_metrics()`` (and so in SkyRL's ``env_metrics``)
RECORD_KEY = "turnrl_record"
#: SkyRL estimator names are this prefix + the strategy name (``turnrl_mt_grpo``)
ESTIMATOR_PREFIX = "turnrl_"
#: the attribute of SkyRL's ``AlgorithmConfig`` through which the trainer hook lends an estimator its inputs
HOOK_ATTR = "turnrl_batch_inputs"
#: strategies SkyRL cannot run as they are defined, and why
UNSUPPORTED: dict[str, str] = {
    "turn_ppo": "it trains the critic at turn starts only (value_masks), while SkyRL trains it on every loss-mask "
    "token; use 'mt_ppo'",
}
#: the strategies registered with SkyRL
SUPPORTED: tuple[str, ...] = tuple(name for name in STRATEGIES if name not in UNSUPPORTED)
#: CreditConfig fields that SkyRL's own settings provide when it calls an estimator
_SKYRL_KNOBS = {
    "gamma": "trainer.algorithm.gamma",
    "gae_lambda": "trainer.algorithm.lambd",
    "scale_by_std": "trainer.algorithm.grpo_norm_by_std",
}
_PIP = '`pip install "agentgym-turn[skyrl]"` and, for the trainer, `pip install "skyrl[fsdp]==0.3.0"` (Python 3.12)'
#: the CPU install the tests use (scripts/setup.sh): skyrl without its CUDA torch / vLLM pins, plus what it imports
_PIP_CPU = (
    '`pip install "agentgym-turn[skyrl]" ray omegaconf torchdata jaxtyping` then `pip install --no-deps skyrl==0.3.0` '
    "(Python 3.11 works through trainers.integrations.skyrl_compat)"
)


@dataclass(frozen=True)
class TurnRecord:
    """What a TurnRL env tells SkyRL's trainer about one finished (or cut) episode.

    Attributes:
        env_id: the TurnRL id (``TurnRL/WikiTwoTurn-v1``).
        reward_levels: the env's ``{component: "turn" | "outcome"}``.
        turn_rewards: one dict per policy turn: that turn's components, late ones (a judge's) on their turns.
        step_rewards: what each ``step`` returned, i.e. the float SkyRL stamped on the turn's last token (the final
            step's includes every late component).
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

    def to_metrics(self) -> dict[str, Any]:
        """A plain dict of lists and numbers (what ``get_metrics()`` carries under :data:`RECORD_KEY`)."""
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
                "TurnRLTextEnv.get_metrics()[RECORD_KEY]."
            )
        kw = {k: v for k, v in data.items() if k in fields}
        kw["turn_rewards"] = [{str(k): float(v) for k, v in t.items()} for t in kw["turn_rewards"]]
        kw["step_rewards"] = [float(r) for r in kw["step_rewards"]]
        kw["reward_levels"] = dict(kw["reward_levels"])
        if kw.get("state_keys") is not None:
            kw["state_keys"] = [str(k) for k in kw["state_keys"]]
        return cls(**kw)


def records_from_env_metrics(env_metrics: Sequence[Mapping[str, Any] | None]) -> list[TurnRecord]:
    """One :class:`TurnRecord` per row of SkyRL's ``generator_output["env_metrics"]``; a row without one raises."""
    out = []
    for i, metrics in enumerate(env_metrics):
        if not metrics or RECORD_KEY not in metrics:
            raise InvalidArgument(
                f"row {i} of env_metrics has no {RECORD_KEY!r}: every row of a TurnRL estimator's batch must come "
                "from a TurnRL env (env_class 'TurnRL/...' or 'turnrl'); other env classes need SkyRL's own estimators."
            )
        out.append(TurnRecord.from_metrics(metrics[RECORD_KEY]))
    return out


@dataclass
class SkyRLBatch:
    """The response half of a SkyRL training batch, as numpy arrays in SkyRL's layout (right-aligned rows).

    Attributes:
        token_level_rewards: float32 ``(B, L)``: each step's reward on its turn's last token.
        response_mask: int ``(B, L)``: 1 on the row's response tokens (its last ``n_i`` positions).
        loss_mask: float32 ``(B, L)``: 1 on the policy's tokens.
        index: the prompt uid of each row (rows with one uid form a group).
        records: the :class:`TurnRecord` of each row.
        values: float32 ``(B, L)`` critic values V(s_t) before each response token, or ``None``.
    """

    token_level_rewards: np.ndarray
    response_mask: np.ndarray
    loss_mask: np.ndarray
    index: list[str]
    records: list[TurnRecord]
    values: np.ndarray | None = None


def skyrl_batch_from_episodes(
    episodes: Sequence[Episode], values: Sequence[np.ndarray] | None = None, width: int | None = None
) -> SkyRLBatch:
    """The batch SkyRL would build for these episodes (the inverse of :func:`episodes_from_skyrl`).

    A row's response runs from the episode's first policy token to its end; each turn's total reward sits on its
    last policy token (where SkyRL's generator stamps it); ``values[i]`` (TurnRL layout, ``n + 1`` entries) gives the
    row's values on the same positions. ``width`` pads every row to that many columns (default: the longest).
    """
    spans = [np.flatnonzero(response_mask(ep)) for ep in episodes]
    longest = max((len(s) for s in spans), default=0)
    width = longest if width is None else width
    if width < longest:
        raise InvalidArgument(f"width={width} is shorter than the longest response ({longest} tokens).")
    b = len(episodes)
    rewards, rmask = np.zeros((b, width), np.float32), np.zeros((b, width), np.int64)
    lmask, vals = np.zeros((b, width), np.float32), np.zeros((b, width), np.float32)
    records = []
    for i, (ep, span) in enumerate(zip(episodes, spans, strict=True)):
        cols = np.arange(width - len(span), width)
        rmask[i, cols] = 1
        lmask[i, cols] = ep.loss_mask[span]
        for k in range(ep.num_turns):
            if len(span):
                rewards[i, cols[reward_position(ep, k) - span[0]]] += ep.turn_reward(k)
        if values is not None:
            vals[i, cols] = np.asarray(values[i], dtype=np.float32)[span]
        records.append(
            TurnRecord(
                env_id=ep.env_id,
                reward_levels=dict(ep.reward_levels),
                turn_rewards=[dict(t) for t in ep.turn_rewards],
                step_rewards=[ep.turn_reward(k) for k in range(ep.num_turns)],
                terminated=ep.terminated,
                truncated=ep.truncated,
                state_keys=None if ep.state_keys is None else list(ep.state_keys),
            )
        )
    index = [str(ep.group) for ep in episodes]
    return SkyRLBatch(rewards, rmask, lmask, index, records, vals if values is not None else None)


def _numpy(x: Any, dtype: Any) -> np.ndarray:
    """A torch tensor or array-like as a numpy array (on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy() if dtype is np.float32 else x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _row_turns(loss_mask: np.ndarray, num_turns: int, row: int, env_id: str) -> np.ndarray:
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


def _check_stamped(ep: Episode, stamped: np.ndarray, record: TurnRecord, row: int) -> None:
    """The rewards SkyRL stamped inside each turn's span must sum to that step's reward."""
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
            f"row {row} ({ep.env_id}): SkyRL's token rewards sum to {got.round(4).tolist()} per turn but the env paid "
            f"{want.round(4).tolist()}; records and rows are misaligned, or rewards were changed after the env "
            "(generator.zero_reward_on_non_stop, trainer.algorithm.use_kl_in_reward): turn those off for TurnRL "
            "estimators (use_kl_loss keeps the KL term)."
        )


@dataclass
class _Layout:
    """Where each episode sits in the batch: its row and its response columns."""

    rows: list[int]
    cols: list[np.ndarray]
    shape: tuple[int, int]


def episodes_from_skyrl(
    token_level_rewards: Any,
    response_mask: Any,
    loss_mask: Any,
    index: Sequence[Any],
    records: Sequence[TurnRecord],
) -> tuple[list[Episode], _Layout]:
    """SkyRL's batch as :class:`Episode` objects (response tokens only) and where each one sits in the batch.

    Rows past ``len(records)`` are SkyRL's padding rows and get no episode. ``Episode.token_ids`` holds -1: an
    estimator never sees the ids, and credit assignment reads only masks, turns and rewards.
    """
    rewards = _numpy(token_level_rewards, np.float32)
    rmask, lmask = _numpy(response_mask, np.float32), _numpy(loss_mask, np.float32)
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
    episodes, layout = [], _Layout([], [], rewards.shape)
    for i, record in enumerate(records):
        cols = np.flatnonzero(rmask[i] > 0)
        turn_index = _row_turns(lmask[i, cols], len(record.turn_rewards), i, record.env_id)
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
        _check_stamped(ep, rewards[i, cols], record, i)
        episodes.append(ep)
        layout.rows.append(i)
        layout.cols.append(cols)
    return episodes, layout


def _scatter(per_episode: Sequence[np.ndarray], layout: _Layout) -> np.ndarray:
    out = np.zeros(layout.shape, dtype=np.float32)
    for row, cols, values in zip(layout.rows, layout.cols, per_episode, strict=True):
        out[row, cols] = values
    return out


def _like(x: np.ndarray, ref: Any) -> Any:
    """``x`` as a tensor on ``ref``'s device and dtype when ``ref`` is a torch tensor, else as it is."""
    if hasattr(ref, "new_tensor"):
        return ref.new_tensor(x)
    return x


def skyrl_advantages(
    strategy: str,
    cfg: CreditConfig,
    *,
    token_level_rewards: Any,
    response_mask: Any,
    index: Sequence[Any],
    values: Any = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    grpo_norm_by_std: bool = True,
    config: Any = None,
    loss_mask: Any = None,
    turnrl_records: Sequence[TurnRecord] | None = None,
    **skyrl_kwargs: Any,
) -> tuple[Any, Any]:
    """A TurnRL strategy called the way SkyRL calls an advantage estimator; returns ``(advantages, returns)``.

    ``loss_mask`` and ``turnrl_records`` come from the caller or, inside SkyRL's trainer, from the hook of
    :func:`turnrl_trainer_class` (``config.turnrl_batch_inputs``). ``gamma``, ``lambd`` and ``grpo_norm_by_std``
    override ``cfg.gamma``, ``cfg.gae_lambda`` and ``cfg.scale_by_std``; other SkyRL keywords are not used.
    Critic-free strategies return their advantages as the returns, as SkyRL's GRPO does.
    """
    lent = getattr(config, HOOK_ATTR, None)
    if lent is not None:
        loss_mask = lent["loss_mask"] if loss_mask is None else loss_mask
        turnrl_records = lent["records"] if turnrl_records is None else turnrl_records
    if loss_mask is None or turnrl_records is None:
        raise InvalidArgument(
            f"the TurnRL estimator {ESTIMATOR_PREFIX + strategy!r} needs each row's loss_mask and TurnRL record (turn "
            "components and their levels), which SkyRL's stock trainer does not pass to an estimator. Train with "
            "trainers.integrations.skyrl_credit.turnrl_trainer_class() (see examples/skyrl/main_turnrl.py), or pass "
            "loss_mask= and turnrl_records= when calling it yourself."
        )
    credit_cfg = dataclasses.replace(
        cfg, gamma=float(gamma), gae_lambda=float(lambd), scale_by_std=bool(grpo_norm_by_std)
    )
    episodes, layout = episodes_from_skyrl(token_level_rewards, response_mask, loss_mask, index, turnrl_records)
    vals = None
    if needs_critic(strategy):
        if values is None:
            raise InvalidArgument(
                f"{ESTIMATOR_PREFIX + strategy!r} needs critic values (values=None): set trainer.critic.model.path, "
                "or pick a critic-free strategy such as turnrl_mt_grpo."
            )
        v = _numpy(values, np.float32)
        vals = [np.concatenate([v[r, c], [0.0]]) for r, c in zip(layout.rows, layout.cols, strict=True)]
    out = get_strategy(strategy)(episodes, vals, credit_cfg)
    adv = _scatter(out.advantages, layout)
    ret = adv.copy() if out.returns is None else _scatter(out.returns, layout)
    return _like(adv, token_level_rewards), _like(ret, token_level_rewards)


def make_estimator(strategy: str, cfg: CreditConfig | None = None) -> functools.partial:
    """The SkyRL estimator for ``strategy`` (a picklable ``partial`` of :func:`skyrl_advantages`)."""
    if strategy in UNSUPPORTED:
        raise InvalidArgument(f"strategy {strategy!r} is not offered to SkyRL: {UNSUPPORTED[strategy]}.")
    get_strategy(strategy)  # a typo raises with the close names
    cfg = CreditConfig() if cfg is None else cfg
    if not (cfg.use_loss_mask and cfg.use_advantage_mask):
        raise InvalidArgument(
            "CreditConfig.use_loss_mask and use_advantage_mask must stay True with SkyRL: its trainer applies its own "
            "loss mask to the policy loss and trains the critic on it."
        )
    default = CreditConfig()
    changed = [name for name in _SKYRL_KNOBS if getattr(cfg, name) != getattr(default, name)]
    if changed:
        raise InvalidArgument(
            f"CreditConfig fields {changed} come from SkyRL's config when it calls the estimator; set "
            f"{', '.join(_SKYRL_KNOBS[n] for n in changed)} there instead."
        )
    return functools.partial(skyrl_advantages, strategy, cfg)


def _skyrl_module(name: str) -> Any:
    """Import ``skyrl.<name>`` (skyrl >= 0.3) or the older ``skyrl_train`` layout; a clear error when neither works.

    On Python < 3.12 :func:`trainers.integrations.skyrl_compat.install` first lets skyrl's pydantic models import.
    """
    import importlib

    from trainers.integrations import skyrl_compat

    skyrl_compat.install()
    new, old = {
        "ppo_utils": ("skyrl.backends.skyrl_train.utils.ppo_utils", "skyrl_train.utils.ppo_utils"),
        "trainer": ("skyrl.train.trainer", "skyrl_train.trainer"),
    }[name]
    errors = []
    for module in (new, old):
        try:
            return importlib.import_module(module)
        except Exception as exc:  # ImportError, or an error raised while skyrl imports
            errors.append(f"{module}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    raise DependencyNotInstalled(
        f"SkyRL's trainer is not importable here ({'; '.join(errors)}). It is skyrl 0.3 (which holds skyrl-train): "
        f"for training, {_PIP}; to run it on this env's CPU torch (as the tests do), {_PIP_CPU}."
    )


def estimator_names(strategies: Sequence[str] | None = None) -> list[str]:
    """SkyRL names of ``strategies`` (default: every supported one): ``turnrl_<strategy>``."""
    return [ESTIMATOR_PREFIX + s for s in (SUPPORTED if strategies is None else strategies)]


def register_skyrl_estimators(strategies: Sequence[str] | None = None, cfg: CreditConfig | None = None) -> list[str]:
    """Register ``turnrl_<strategy>`` in SkyRL's ``AdvantageEstimatorRegistry``; returns the names.

    Idempotent: a name already registered is left as it is. Call it before SkyRL's ``validate_cfg`` (which checks
    ``trainer.algorithm.advantage_estimator`` against the registry) and before ``ray.init``, as SkyRL's custom
    estimator example does, so its registry actor hands the functions to the workers.
    """
    estimators = {name: make_estimator(name, cfg) for name in (SUPPORTED if strategies is None else strategies)}
    registry = _skyrl_module("ppo_utils").AdvantageEstimatorRegistry
    known = set(registry.list_available())
    for name, fn in estimators.items():
        if ESTIMATOR_PREFIX + name not in known:
            registry.register(ESTIMATOR_PREFIX + name, fn)
    return estimator_names(list(estimators))


def is_turnrl_estimator(name: str) -> bool:
    """Whether SkyRL's ``advantage_estimator`` setting names a TurnRL estimator."""
    return str(name).startswith(ESTIMATOR_PREFIX)


def strategy_of(name: str) -> str:
    """The TurnRL strategy behind the SkyRL estimator ``name`` (``turnrl_mt_grpo`` -> ``mt_grpo``)."""
    strategy = str(name).removeprefix(ESTIMATOR_PREFIX)
    if not is_turnrl_estimator(name) or strategy not in SUPPORTED:
        close = difflib.get_close_matches(str(name), estimator_names(), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise InvalidArgument(f"{name!r} is not a TurnRL estimator.{hint}")
    return strategy


@functools.cache
def turnrl_trainer_class() -> type:
    """SkyRL's ``RayPPOTrainer`` with the hook that hands TurnRL estimators their loss masks and records.

    Two overrides: ``convert_to_training_input`` keeps each row's :class:`TurnRecord` (from ``env_metrics``) in the
    batch metadata, and ``compute_advantages_and_returns`` lends them, with the batch's ``loss_mask``, to the estimator
    through ``AlgorithmConfig`` for the duration of SkyRL's own call. Other estimators run unchanged. (SkyRL's
    fully-async trainer is a separate class and has no such hook here.)
    """
    base = _skyrl_module("trainer").RayPPOTrainer

    class TurnRLTrainer(base):  # type: ignore[misc, valid-type]
        """``RayPPOTrainer`` whose TurnRL estimators see the turn structure (see :func:`turnrl_trainer_class`)."""

        def convert_to_training_input(self, generator_output: Any, uids: list[str]) -> Any:
            batch = super().convert_to_training_input(generator_output, uids)
            if is_turnrl_estimator(self.cfg.trainer.algorithm.advantage_estimator):
                if self.cfg.generator.step_wise_trajectories:
                    raise InvalidArgument(
                        "TurnRL estimators need whole trajectories; set generator.step_wise_trajectories=false."
                    )
                batch.metadata[RECORD_KEY] = records_from_env_metrics(generator_output["env_metrics"])
            return batch

        def compute_advantages_and_returns(self, data: Any) -> Any:
            algorithm = self.cfg.trainer.algorithm
            if not is_turnrl_estimator(algorithm.advantage_estimator):
                return super().compute_advantages_and_returns(data)
            records = data.metadata.pop(RECORD_KEY, None)  # None: the estimator says what is missing
            setattr(algorithm, HOOK_ATTR, {"loss_mask": data["loss_mask"], "records": records})
            try:
                return super().compute_advantages_and_returns(data)
            finally:
                delattr(algorithm, HOOK_ATTR)

    return TurnRLTrainer
