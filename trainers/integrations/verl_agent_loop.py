"""A verl agent loop that plays any ``TurnRL/*`` env token-in-token-out through verl's rollout server.

verl (0.9.1, :data:`~trainers.integrations.verl_turnrl.VERL_VERSION`) instantiates an agent loop per sample and
awaits ``run(sampling_params, **row)``; the loop talks to the policy only through
``server_manager.generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput`` (token ids in, token ids
and log-probs out). :class:`TurnRLAgentLoop` plays the episode with this repo's own rollout code
(:func:`trainers.rollout.play`: the chat template's delta for each env message, the prefix invariant checked every
turn, late judge scores put on their turns), so an episode played inside verl has exactly the ids, masks and rewards
of one played by ``trainers.rollout.collect``; only the generator differs. It hands verl:

- ``prompt_ids``: the env's opening messages through the chat template; ``response_ids``: everything after
  (policy turns and the env's messages between them); ``response_mask``: 1 on the policy's tokens, 0 on the env's;
  ``response_logprobs``: the server's log-probs of the policy's tokens (0 on env tokens);
- ``rm_scores`` (the v1 trainer's token rewards): each turn's reward, every component the env paid at that turn,
  on that turn's last policy token; ``reward_score`` (the scalar verl's older trainer puts on the last token):
  the episode's return. The env is the reward function, so verl's reward loop is skipped for these rows;
- ``extra_fields``: ``turn_scores`` (each turn's reward, verl's own key), ``turnrl_record`` (the turn components and
  their levels, see :mod:`trainers.integrations.verl_turnrl`) and ``turnrl_metrics`` (the env's episode metrics).

A dataset row names its episode in ``extra_info``: ``{"env_id": "TurnRL/WikiTwoTurn-v2", "task": {...},
"seed": 3, "env_kwargs": {...}}`` (``task`` optional: the env draws one from ``seed``; ``task`` and ``env_kwargs``
may be JSON text); ``raw_prompt`` (verl requires it) is kept for logging only, the prompt is what the env's
``reset`` says. ``examples/verl/make_dataset.py`` builds such datasets. Register the loop with verl's agent-loop
config file (``examples/verl/agent_loop.yaml``)::

    - name: turnrl_agent
      _target_: trainers.integrations.verl_agent_loop.TurnRLAgentLoop

Turn limits, as keys of that config entry: ``max_turns`` (default ``rollout.multi_turn.max_assistant_turns``,
else the env's own budget, else :data:`DEFAULT_MAX_TURNS`) and ``max_tokens_per_turn`` (one turn's
``max_new_tokens``, default ``rollout.response_length``). The whole response stays within
``rollout.response_length`` (an episode that would exceed it is cut, ``truncated``).

:class:`CompletionsClient` is a ``server_manager`` for an OpenAI-compatible ``/v1/completions`` server that takes
token ids (vLLM's ``vllm serve``, or any server behind :class:`~trainers.engines.OpenAIEngine`), for running the
loop outside verl's own server fleet (evaluation, tests).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar
from uuid import uuid4

import gymnasium as gym
import numpy as np
import torch

import agentgym_turn  # noqa: F401  (registers the TurnRL/ ids)
from agentgym_turn.error import InvalidArgument
from trainers.engine_api import Generation, SamplingConfig
from trainers.engines import OpenAIEngine, stop_token_ids
from trainers.integrations.turn_records import RECORD_KEY, TurnRecord
from trainers.integrations.verl_turnrl import require_verl, response_start, turn_token_rewards
from trainers.rollout import RolloutConfig, Slot, play, start_slot

require_verl()

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

#: the agent name a dataset row gives to be played by :class:`TurnRLAgentLoop`
AGENT_NAME = "turnrl_agent"
#: turn budget when neither the env nor the config gives one
DEFAULT_MAX_TURNS = 8
#: episodes one agent-loop worker plays at once (each waits in a thread while the server generates)
EPISODE_THREADS = 256


class TurnRLAgentLoopOutput(AgentLoopOutput):
    """verl's ``AgentLoopOutput`` plus ``token_rewards``, which become the row's ``rm_scores`` (each turn's reward
    on its last policy token) instead of verl's single score on the last token."""

    token_rewards: list[float]

    def as_dict(self) -> dict[str, Any]:
        """verl's dict for the v1 trainer, with ``rm_scores`` = :attr:`token_rewards`."""
        output = super().as_dict()
        output.pop("token_rewards", None)
        output["rm_scores"] = torch.tensor(self.token_rewards, dtype=torch.float32)
        return output


def episode_spec(extra_info: Any, index: Any) -> tuple[str, dict | None, int, dict]:
    """``(env_id, task, seed, env_kwargs)`` of a dataset row's ``extra_info``; a missing env id names the fix."""
    info = dict(extra_info or {})
    env_id = info.get("env_id")
    if not isinstance(env_id, str) or not env_id:
        raise InvalidArgument(
            f"the row's extra_info {info!r:.200} has no 'env_id'; TurnRL rows need extra_info={{'env_id': "
            "'TurnRL/WikiTwoTurn-v2', 'task': {...}, 'seed': N}} (examples/verl/make_dataset.py writes them)."
        )
    seed = info.get("seed", index if index is not None else 0)
    task, env_kwargs = info.get("task"), info.get("env_kwargs")
    task = json.loads(task) if isinstance(task, str) else task  # parquet rows carry them as JSON text
    env_kwargs = json.loads(env_kwargs) if isinstance(env_kwargs, str) else env_kwargs
    return env_id, (dict(task) if task else None), int(seed), dict(env_kwargs or {})


@register(AGENT_NAME)
class TurnRLAgentLoop(AgentLoopBase):
    """Plays one TurnRL episode per sample through verl's ``server_manager`` (see the module docstring)."""

    _free_envs: ClassVar[dict[tuple[str, str], list[gym.Env]]] = {}
    _envs_lock: ClassVar[threading.Lock] = threading.Lock()
    _threads: ClassVar[ThreadPoolExecutor | None] = None

    def __init__(
        self, *args: Any, max_tokens_per_turn: int | None = None, max_turns: int | None = None, **kwargs: Any
    ) -> None:
        """verl's arguments, plus two the agent-loop config file may set: ``max_tokens_per_turn`` (one turn's
        ``max_new_tokens``, default ``rollout.response_length``) and ``max_turns`` (default
        ``rollout.multi_turn.max_assistant_turns``, else the env's own budget)."""
        super().__init__(*args, **kwargs)
        multi_turn = self.rollout_config.get("multi_turn", None) or {}
        self.max_turns: int | None = max_turns or multi_turn.get("max_assistant_turns", None)
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.max_new_tokens = int(max_tokens_per_turn or self.response_length)
        if self.max_new_tokens < 1 or (self.max_turns is not None and self.max_turns < 1):
            raise InvalidArgument(
                f"max_tokens_per_turn={max_tokens_per_turn} and max_turns={self.max_turns} must be >= 1 (or null)."
            )
        self.stop_ids = stop_token_ids(self.tokenizer)

    # ------------------------------------------------------------------------------------------------ envs
    def _take_env(self, env_id: str, env_kwargs: dict) -> gym.Env:
        key = (env_id, repr(sorted(env_kwargs.items())))
        with self._envs_lock:
            free = self._free_envs.setdefault(key, [])
            if free:
                return free.pop()
        return gym.make(env_id, **env_kwargs)

    def _give_back(self, env_id: str, env_kwargs: dict, env: gym.Env) -> None:
        with self._envs_lock:
            self._free_envs.setdefault((env_id, repr(sorted(env_kwargs.items()))), []).append(env)

    @classmethod
    def _pool(cls) -> ThreadPoolExecutor:
        """The worker's threads for env steps and chat-template work (the event loop only awaits the server)."""
        with cls._envs_lock:
            if cls._threads is None:
                cls._threads = ThreadPoolExecutor(max_workers=EPISODE_THREADS, thread_name_prefix="turnrl-episode")
            return cls._threads

    # ------------------------------------------------------------------------------------------------ generation
    async def _generate(
        self, prompt_ids: Sequence[int], budget: int, sampling_params: dict, request_id: str, timing: dict
    ) -> Generation:
        params = {**sampling_params, "max_tokens": int(budget), "stop_token_ids": list(self.stop_ids)}
        start = time.perf_counter()
        out: TokenOutput = await self.server_manager.generate(
            request_id=request_id, prompt_ids=list(prompt_ids), sampling_params=params
        )
        timing["generate_sequences"] += time.perf_counter() - start
        ids = [int(t) for t in out.token_ids][:budget]
        logprobs = [float(x) for x in (out.log_probs or [0.0] * len(ids))][: len(ids)]
        return Generation(ids, logprobs, finished=bool(ids) and ids[-1] in self.stop_ids)

    def _actor(self, loop: asyncio.AbstractEventLoop, sampling_params: dict, request_id: str, timing: dict) -> Any:
        """A :data:`trainers.rollout.Actor` that runs in a worker thread and awaits the server on ``loop``."""

        def act(slots: list[Slot], budgets: list[int]) -> list[Generation]:
            futures = [
                asyncio.run_coroutine_threadsafe(
                    self._generate(s.token_ids, b, sampling_params, request_id, timing), loop
                )
                for s, b in zip(slots, budgets, strict=True)
            ]
            return [f.result() for f in futures]

        return act

    # ------------------------------------------------------------------------------------------------ run
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        env_id, task, seed, env_kwargs = episode_spec(kwargs.get("extra_info"), kwargs.get("index"))
        loop, threads = asyncio.get_running_loop(), self._pool()
        start, timing = time.perf_counter(), {"generate_sequences": 0.0}
        env = await loop.run_in_executor(threads, self._take_env, env_id, env_kwargs)
        try:
            slot, _ = await loop.run_in_executor(threads, start_slot, env, env_id, 0, self.tokenizer, seed, task)
            prompt_len = len(slot.token_ids)
            if prompt_len > self.prompt_length:
                raise InvalidArgument(
                    f"{env_id}'s opening messages take {prompt_len} tokens, more than rollout.prompt_length="
                    f"{self.prompt_length}; raise data.max_prompt_length (verl sets prompt_length from it)."
                )
            env_turns = getattr(env.unwrapped, "max_turns", None)
            cfg = RolloutConfig(
                max_new_tokens=min(self.max_new_tokens, self.response_length),
                max_context=prompt_len + self.response_length,
                max_turns=int(self.max_turns or env_turns or DEFAULT_MAX_TURNS),
            )
            actor = self._actor(loop, sampling_params, uuid4().hex, timing)
            [done] = await loop.run_in_executor(threads, play, [slot], actor, self.tokenizer, self.stop_ids, cfg)
            episode = done.to_episode(tree=False)
        finally:
            self._give_back(env_id, env_kwargs, env)
        # verl's timing keys: the server's time, and the rest (env steps, chat template) as its "tool_calls"
        timing["tool_calls"] = time.perf_counter() - start - timing["generate_sequences"]
        return self.output_of(episode, prompt_len, len(done.messages), bool(sampling_params.get("logprobs")), timing)

    def output_of(
        self, episode: Any, prompt_len: int, num_messages: int, logprobs: bool, timing: dict[str, float]
    ) -> TurnRLAgentLoopOutput:
        """verl's output for a played episode whose first ``prompt_len`` tokens are the prompt."""
        if response_start(episode) != prompt_len:
            raise InvalidArgument("the episode's first policy token does not follow its prompt (internal error).")
        rewards = turn_token_rewards(episode)[prompt_len:]
        record = TurnRecord.from_episode(episode)
        return TurnRLAgentLoopOutput(
            prompt_ids=episode.token_ids[:prompt_len].tolist(),
            response_ids=episode.token_ids[prompt_len:].tolist(),
            response_mask=episode.loss_mask[prompt_len:].astype(np.int64).tolist(),
            response_logprobs=episode.logprobs[prompt_len:].tolist() if logprobs else None,
            reward_score=episode.total_reward,
            token_rewards=rewards.tolist(),
            num_turns=num_messages,
            metrics=timing,
            extra_fields={
                "turn_scores": list(record.step_rewards),
                "tool_rewards": [],
                RECORD_KEY: record.to_metrics(),
                "turnrl_metrics": dict(episode.metrics),
            },
        )


class CompletionsClient:
    """verl's ``server_manager`` interface over an OpenAI-compatible ``/v1/completions`` token server.

    ``generate`` sends the prompt ids and verl's sampling parameters (``max_tokens``, ``temperature``, ``top_p``,
    ``stop_token_ids``) through :class:`~trainers.engines.OpenAIEngine` and returns verl's ``TokenOutput``.
    """

    def __init__(self, base_url: str, model: str, stop_ids: Sequence[int] = ()) -> None:
        self.engine = OpenAIEngine(base_url, model, stop_token_ids=list(stop_ids))

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        """One continuation of ``prompt_ids`` (the HTTP call runs in a worker thread)."""
        temperature = float(sampling_params.get("temperature", 1.0))
        sampling = SamplingConfig(
            max_new_tokens=int(sampling_params.get("max_tokens", 128)),
            temperature=temperature,
            top_p=float(sampling_params.get("top_p", 1.0)),
            seed=sampling_params.get("seed"),
        )
        [gen] = await asyncio.get_running_loop().run_in_executor(None, self.engine.generate, [prompt_ids], sampling)
        return TokenOutput(
            token_ids=list(gen.token_ids),
            log_probs=list(gen.logprobs),
            stop_reason="completed",
        )
