"""TurnRL's credit-assignment strategies as SkyRL advantage estimators: an adapter from SkyRL's batch to Episodes.

One implementation: the numbers come from :mod:`trainers.credit`. This module only converts SkyRL's batch into
:class:`~trainers.episode.Episode` objects and the strategy's per-token output back into SkyRL's tensors, with the
record and the conversions it shares with the verl integration (:mod:`trainers.integrations.turn_records`).

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
from typing import Any

import numpy as np

from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from trainers.credit import STRATEGIES, CreditConfig, get_strategy, needs_critic
from trainers.episode import Episode
from trainers.integrations.turn_records import (
    RECORD_KEY,
    BatchLayout,
    TurnBatch,
    TurnRecord,
    as_numpy,
    batch_from_episodes,
    episodes_from_batch,
    records_from_rows,
)

__all__ = [  # RECORD_KEY and TurnRecord live in turn_records; re-exported for SkyRL-side imports
    "ESTIMATOR_PREFIX",
    "HOOK_ATTR",
    "RECORD_KEY",
    "SUPPORTED",
    "UNSUPPORTED",
    "SkyRLBatch",
    "TurnRecord",
    "episodes_from_skyrl",
    "estimator_names",
    "is_turnrl_estimator",
    "make_estimator",
    "records_from_env_metrics",
    "register_skyrl_estimators",
    "skyrl_advantages",
    "skyrl_batch_from_episodes",
    "strategy_of",
    "turnrl_trainer_class",
]
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


#: what SkyRL's settings that change the stamped rewards are, and what to do about them (for the checks' message)
_REWARD_SETTINGS = (
    "generator.zero_reward_on_non_stop, trainer.algorithm.use_kl_in_reward: turn those off for TurnRL estimators "
    "(use_kl_loss keeps the KL term)"
)
#: the response half of a SkyRL training batch (right-aligned rows; ``responses`` is not part of SkyRL's batch)
SkyRLBatch = TurnBatch


def records_from_env_metrics(env_metrics: Sequence[Mapping[str, Any] | None]) -> list[TurnRecord]:
    """One :class:`TurnRecord` per row of SkyRL's ``generator_output["env_metrics"]``; a row without one raises."""
    return records_from_rows(
        env_metrics,
        field="env_metrics",
        source="a TurnRL env (env_class 'TurnRL/...'); other env classes need SkyRL's own estimators",
    )


def skyrl_batch_from_episodes(
    episodes: Sequence[Episode], values: Sequence[np.ndarray] | None = None, width: int | None = None
) -> TurnBatch:
    """The batch SkyRL would build for these episodes (the inverse of :func:`episodes_from_skyrl`).

    Rows are right-aligned, as SkyRL lays out responses; each turn's total reward sits on its last policy token
    (where SkyRL's generator stamps it). See :func:`~trainers.integrations.turn_records.batch_from_episodes`.
    """
    return batch_from_episodes(episodes, values, width, align="right")


def episodes_from_skyrl(
    token_level_rewards: Any,
    response_mask: Any,
    loss_mask: Any,
    index: Sequence[Any],
    records: Sequence[TurnRecord],
) -> tuple[list[Episode], BatchLayout]:
    """SkyRL's batch as :class:`Episode` objects (response tokens only) and where each one sits in the batch.

    Rows past ``len(records)`` are SkyRL's padding rows and get no episode. See
    :func:`~trainers.integrations.turn_records.episodes_from_batch`.
    """
    return episodes_from_batch(
        token_level_rewards, response_mask, loss_mask, index, records, reward_settings=_REWARD_SETTINGS
    )


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
        v = as_numpy(values, np.float32)
        vals = [np.concatenate([v[r, c], [0.0]]) for r, c in zip(layout.rows, layout.cols, strict=True)]
    out = get_strategy(strategy)(episodes, vals, credit_cfg)
    adv = layout.scatter(out.advantages)
    ret = adv.copy() if out.returns is None else layout.scatter(out.returns)
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
    refuse_trainer_knobs(cfg, _SKYRL_KNOBS, "SkyRL")
    return functools.partial(skyrl_advantages, strategy, cfg)


def refuse_trainer_knobs(cfg: CreditConfig, knobs: Mapping[str, str], trainer: str) -> None:
    """Raise when ``cfg`` changes a field that the trainer's own config supplies when it calls the estimator.

    ``knobs`` maps each such CreditConfig field to the trainer's setting (``{"gamma": "trainer.algorithm.gamma"}``).
    """
    default = CreditConfig()
    changed = [name for name in knobs if getattr(cfg, name) != getattr(default, name)]
    if changed:
        raise InvalidArgument(
            f"CreditConfig fields {changed} come from {trainer}'s config when it calls the estimator; set "
            f"{', '.join(knobs[n] for n in changed)} there instead."
        )


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
