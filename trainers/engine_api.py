"""The interface every generation engine has: prompt token ids in, generated token ids and their log-probs out.

Token-in-token-out is what makes RL on chats correct: the ids an engine returns are exactly the ids the trainer
scores and trains, so nothing is re-tokenised between sampling and the update. The engines
(:mod:`trainers.engines`: vLLM, OpenAI-compatible HTTP; :mod:`trainers.engine_transformers`) and the code that
drives them (:mod:`trainers.rollout`, :mod:`trainers.ray_rollout`) all import these records from here.

Log-probs are those of the sampling distribution before top-p truncation: ``log_softmax(logits / temperature)``
(the update divides its logits by the same temperature, so the importance ratio starts at 1)::

    >>> SamplingConfig(max_new_tokens=8, temperature=0.0, seed=0)
    SamplingConfig(max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0)
    >>> Generation(token_ids=[5, 2], logprobs=[-0.1, -0.3], finished=True).finished
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentgym_turn.error import InvalidArgument


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample one batch. ``temperature == 0`` is greedy (log-probs then use temperature 1)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidArgument(f"max_new_tokens={self.max_new_tokens} must be >= 1.")
        if self.temperature < 0:
            raise InvalidArgument(f"temperature={self.temperature} must be >= 0 (0 = greedy).")
        if not 0 < self.top_p <= 1:
            raise InvalidArgument(f"top_p={self.top_p} must be in (0, 1].")


@dataclass
class Generation:
    """One sampled continuation: its ids (the stop token included when one was hit), their log-probs, and
    ``finished`` (a stop token ended it; ``False`` means ``max_new_tokens`` cut it)."""

    token_ids: list[int]
    logprobs: list[float]
    finished: bool


class Engine(Protocol):
    """What the rollout code needs from a generation engine."""

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        """Continue every prompt (token ids) until a stop token or ``sampling.max_new_tokens``."""
        ...

    def update_weights(self, model: Any) -> None:
        """Make the engine sample from ``model``'s current weights."""
        ...

    def close(self) -> None:
        """Release what the engine started (processes, temporary folders); idempotent, a no-op where it started
        nothing. Callers close an engine when done: a vLLM engine left to the interpreter's exit logs into streams
        that may already be closed."""
        ...
