"""SkyRL integration: every ``TurnRL/*`` id as a ``skyrl_gym`` text env, paying its reward every turn.

Optional extra ``[skyrl]`` (``skyrl-gym``); the core never imports this module. Credit assignment inside SkyRL's
trainer (TurnRL's strategies as SkyRL advantage estimators) is :mod:`trainers.integrations.skyrl_credit`.

SkyRL's ``SkyRLGymGenerator`` builds one env per trajectory with ``skyrl_gym.make(env_class, env_config=...,
extras=row)``, where ``row`` is the dataset row minus its ``prompt`` and ``env_class`` columns; it calls
``init(prompt)`` once, then ``step(text)`` per generated turn until ``done``, stamps each step's ``reward`` on the
last token of that turn's response, and reads ``get_metrics()`` at the end. :class:`TurnRLTextEnv` maps that onto
the turn contract:

- ``init(prompt)`` resets the TurnRL env with the row's ``seed`` (or poses its ``task``) and returns the env's
  opening messages; a non-empty dataset prompt must equal them (a stale dataset fails loudly).
- ``step(text)`` plays the turn and returns ``{"observations", "reward", "done", "metadata"}``: ``reward`` is this
  turn's reward (the final step's includes late judge scores, as ``TurnEnv.step`` pays them), ``done`` is
  ``terminated or truncated`` and ``metadata`` keeps what a single ``done`` loses: ``terminated``, ``truncated``,
  ``reward_components``, ``late_reward_components``, ``state_key``, the episode metrics at the end. Bad action text
  never raises: the env answers it like any other turn.
- ``get_metrics()`` returns the numeric episode metrics plus a :class:`~trainers.integrations.turn_records.TurnRecord`
  under ``"turnrl_record"`` (per-turn components, levels, step rewards, anchor-state keys) for TurnRL's estimators;
  SkyRL's metric averaging skips it, as it skips every non-number.

Worked example (what SkyRL's generator does, with a scripted turn instead of a model)::

    >>> import skyrl_gym
    >>> from trainers.integrations.skyrl_turnrl import register_skyrl_envs
    >>> _ = register_skyrl_envs()
    >>> env = skyrl_gym.make("TurnRL/Sokoban-v2", env_config={}, extras={"seed": 0})
    >>> prompt, meta = env.init([])
    >>> [m["role"] for m in prompt]
    ['system', 'user']
    >>> out = env.step("I will go up. <answer>Up</answer>")
    >>> sorted(out), out["reward"], out["done"], out["metadata"]["reward_components"]["step_penalty"]
    (['done', 'metadata', 'observations', 'reward'], -0.1, False, -0.1)
    >>> env.step("no actions here")["done"], env.get_metrics()["turnrl_record"]["step_rewards"]
    (False, [-0.1, 0.0])

Dataset rows (:func:`dataset_rows`): ``prompt`` (the opening messages), ``env_class`` (the TurnRL id, registered with
skyrl_gym under the same name), ``seed`` and ``env_kwargs`` (a JSON object as a string, keyword arguments of
``gym.make``). SkyRL samples ``n_samples_per_prompt`` envs per row with the same extras, so a group poses one task.
The env's turn budget is part of its task: the ``max_turns`` SkyRL's generator adds to ``extras`` is not used.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

import agentgym_turn
from agentgym_turn.core import EPISODE_METRICS_KEY, Message, with_late_components
from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from trainers.integrations.turn_records import RECORD_KEY, TurnRecord

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as exc:  # the optional extra
    raise DependencyNotInstalled(
        f'skyrl_gym is not installed ({exc}); install it with `pip install "agentgym-turn[skyrl]"` '
        "(or `pip install skyrl-gym==0.4.0`)."
    ) from exc

ENTRY_POINT = f"{__name__}:TurnRLTextEnv"


def _mapping(value: Any, what: str) -> dict[str, Any]:
    """A dict from a Mapping, an OmegaConf node, a JSON object string or ``None``."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"{what}={value!r:.80} is not a JSON object ({exc}); write e.g. '{{\"k\": 1}}'."
            ) from exc
    if hasattr(value, "items"):
        return {str(k): v for k, v in value.items()}
    raise InvalidArgument(f"{what} must be a dict or a JSON object string, got {type(value).__name__}: {value!r:.80}.")


def _same_messages(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Equal roles and contents (a dataset's message structs may carry extra ``None`` fields)."""
    return len(a) == len(b) and all(
        x.get("role") == y.get("role") and repr(x.get("content")) == repr(y.get("content"))
        for x, y in zip(a, b, strict=True)
    )


class TurnRLTextEnv(BaseTextEnv):
    """A TurnRL env behind SkyRL's ``BaseTextEnv`` (``init`` / ``step`` / ``get_metrics``); see the module docstring.

    Args:
        env_config: SkyRL's per-env-class config (``environment.skyrl_gym.<env_class>``, usually empty); its
            ``env_kwargs`` are keyword arguments of ``gym.make``.
        extras: the dataset row: ``seed`` (int) or ``task`` (a task dict), optional ``env_kwargs`` (dict or JSON
            string, overriding ``env_config``'s).
        env_id: the TurnRL id (set by :func:`register_skyrl_envs` for each registered name).
    """

    def __init__(
        self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None, *, env_id: str
    ) -> None:
        super().__init__()
        if env_id not in agentgym_turn.ENV_SPECS:
            close = difflib.get_close_matches(str(env_id), agentgym_turn.ENV_SPECS, n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise InvalidArgument(
                f"env_id={env_id!r} is not a TurnRL id.{hint} Known: {sorted(agentgym_turn.ENV_SPECS)}."
            )
        extras = _mapping(extras, "extras")
        kwargs = {**_mapping(_mapping(env_config, "env_config").get("env_kwargs"), "env_config.env_kwargs")}
        kwargs.update(_mapping(extras.get("env_kwargs"), "extras['env_kwargs']"))
        self.seed: int | None = None if extras.get("seed") is None else int(extras["seed"])
        self.task: dict[str, Any] | None = None if extras.get("task") is None else _mapping(extras["task"], "task")
        if self.seed is None and self.task is None:
            raise InvalidArgument(
                f"the dataset row for {env_id} has neither 'seed' nor 'task'; SkyRL builds n_samples_per_prompt envs "
                "from one row and they must pose the same task. Build rows with dataset_rows()."
            )
        self.env_id = env_id
        self.env = gym.make(env_id, **kwargs)
        self.max_turns = getattr(self.env.unwrapped, "max_turns", None)
        self._step_rewards: list[float] = []
        self._components: list[dict[str, float]] = []
        self._late: list[dict[str, float]] | None = None
        self._keys: list[str | None] = []
        self._terminated = self._truncated = False

    def init(self, prompt: Sequence[Message] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Reset the TurnRL env and return its opening messages (the dataset's ``prompt``, if given, must match)."""
        options = None if self.task is None else {"task": self.task}
        messages, info = self.env.reset(seed=self.seed, options=options)
        if prompt and not _same_messages(prompt, messages):
            raise InvalidArgument(
                f"the dataset prompt for {self.env_id} (seed={self.seed}) differs from the env's opening messages; the "
                "dataset was built for another version or other env_kwargs. Rebuild it with dataset_rows()."
            )
        self.turns = 0
        self._step_rewards, self._components, self._late = [], [], None
        self._keys = [info.get("state_key")]
        self._terminated = self._truncated = False
        return messages, {"task_id": info.get("task_id"), "state_key": info.get("state_key")}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Play one assistant turn; ``reward`` is what the TurnRL env paid for it."""
        messages, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self._step_rewards.append(float(reward))
        self._components.append(dict(info["reward_components"]))
        self._keys.append(info.get("state_key"))
        if "late_reward_components" in info:
            self._late = [dict(t) for t in info["late_reward_components"]]
        self._terminated, self._truncated = bool(terminated), bool(truncated)
        metadata = {k: info[k] for k in ("late_reward_components", "state_key", EPISODE_METRICS_KEY) if k in info}
        metadata.update(turn=self.turns, reward_components=dict(info["reward_components"]))
        metadata.update(terminated=self._terminated, truncated=self._truncated)
        return BaseTextEnvStepOutput(
            observations=messages, reward=float(reward), done=self._terminated or self._truncated, metadata=metadata
        )

    def record(self) -> TurnRecord:
        """The episode so far as a :class:`TurnRecord` (late judge scores on their turns)."""
        keys = self._keys[: len(self._components)]
        return TurnRecord(
            env_id=self.env_id,
            reward_levels=dict(self.env.unwrapped.reward_levels),
            turn_rewards=with_late_components(self._components, self._late),
            step_rewards=list(self._step_rewards),
            terminated=self._terminated,
            truncated=self._truncated,
            state_keys=None if any(k is None for k in keys) else [str(k) for k in keys],
        )

    def get_metrics(self) -> dict[str, Any]:
        """The episode metrics (``env/return``, ``reward/<component>``, task metrics) and the TurnRL record."""
        metrics: dict[str, Any] = dict(self.env.unwrapped.episode_metrics())
        metrics[RECORD_KEY] = self.record().to_metrics()
        return metrics

    def close(self) -> None:
        """Close the TurnRL env."""
        self.env.close()


def register_skyrl_envs(env_ids: Sequence[str] | None = None) -> list[str]:
    """Register TurnRL ids (default: all) with skyrl_gym under the same names; idempotent; returns the ids.

    skyrl_gym has no plugin loading: call this in every process that builds envs (SkyRL's training entrypoint runs
    in a Ray task, so call it there too, as ``examples/skyrl/main_turnrl.py`` does).
    """
    ids = sorted(agentgym_turn.ENV_SPECS) if env_ids is None else list(env_ids)
    for env_id in ids:
        if env_id not in agentgym_turn.ENV_SPECS:
            raise InvalidArgument(f"{env_id!r} is not a TurnRL id; known: {sorted(agentgym_turn.ENV_SPECS)}.")
        if env_id not in skyrl_gym.registry:
            skyrl_gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"env_id": env_id})
    return ids


def dataset_rows(
    env_id: str, seeds: Sequence[int], env_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """SkyRL dataset rows for ``env_id``, one per seed: ``prompt``, ``env_class``, ``seed``, ``env_kwargs`` (JSON).

    The prompt is the env's opening for that seed, so SkyRL's prompt-length filter sees the real prompt and
    :meth:`TurnRLTextEnv.init` can check the row against the env. Envs whose prompts hold audio are refused (a
    text dataset cannot carry them, and SkyRL's text generator cannot tokenise them).
    """
    kwargs = dict(env_kwargs or {})
    env = TurnRLTextEnv(extras={"seed": 0, "env_kwargs": kwargs}, env_id=env_id)
    rows = []
    try:
        for seed in seeds:
            env.seed = int(seed)
            prompt, _ = env.init()
            if any(not isinstance(m["content"], str) for m in prompt):
                raise InvalidArgument(f"{env_id} opens with non-text content (audio); it cannot go in a text dataset.")
            rows.append(
                {
                    "prompt": prompt,
                    "env_class": env_id,
                    "seed": int(seed),
                    "env_kwargs": json.dumps(kwargs, sort_keys=True),
                }
            )
    finally:
        env.close()
    return rows
