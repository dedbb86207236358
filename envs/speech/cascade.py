"""ASR cascade: run a speech env with a text-only policy, which sees Whisper transcripts instead of audio.

TARL Table 3 compares the same agent with a text customer and a speaking one. For a text-only model the speech
side is a cascade: recognise each audio user turn, then (by default) undo the spoken form of ids with
:func:`envs.speech.spoken.from_spoken`, the inverse text normalisation a production recogniser applies::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = ASRCascade(gym.make("TurnRL/TauRetailSpeech-v2"))
    >>> messages, info = env.reset(seed=0, options={"task": {"id": "0"}})
    >>> heard = messages[1]["content"]                # 'Hi, you received your order #W2378156 and wish to ...'
    >>> "#W2378156" in heard and "19122" in heard     # the order number and zip code came through exactly
    True

:func:`speech_gap` plays the same tasks with the same policy on the text env and on the cascade and reports the
success rates side by side, the text-vs-speech gap of TARL Table 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym_turn.core import Message
from envs.speech.asr import WhisperRecognizer, load_recognizer
from envs.speech.spoken import from_spoken

# A text policy: the conversation it has seen so far (text only) -> its next turn.
TextPolicy = Callable[[list[Message]], str]


# ---------------------------------------------------------------------------------------------- pure functions
def transcribe_messages(
    messages: list[Message], recognizer: WhisperRecognizer, *, inverse_normalize: bool = True
) -> list[Message]:
    """``messages`` with every audio part replaced by its transcript; a message left with one text part becomes
    a plain-text message (``{"role": "user", "content": "..."}``)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append(message)
            continue
        texts = []
        for part in content:
            if part.get("type") == "audio":
                text = recognizer.transcribe(np.asarray(part["audio"], dtype=np.float32), int(part["sampling_rate"]))
                texts.append(from_spoken(text) if inverse_normalize else text)
            elif part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            else:
                texts.append(f"[{part.get('type')}]")
        out.append({**message, "content": " ".join(texts)})
    return out


# ---------------------------------------------------------------------------------------------- wrapper
class ASRCascade(gym.Wrapper):
    """Replaces each audio user message of a speech env by its Whisper transcript (see the module docstring).

    Attributes:
        recognizer: the shared Whisper tiny.en recogniser unless one is given.
        inverse_normalize: apply :func:`~envs.speech.spoken.from_spoken` to transcripts (default ``True``).
        transcripts: the text the policy saw for each audio message this episode, in order.
    """

    def __init__(
        self, env: gym.Env, *, recognizer: WhisperRecognizer | None = None, inverse_normalize: bool = True
    ) -> None:
        super().__init__(env)
        self.recognizer = recognizer or load_recognizer()
        self.inverse_normalize = inverse_normalize
        self.transcripts: list[str] = []

    def _text(self, messages: list[Message]) -> list[Message]:
        out = transcribe_messages(messages, self.recognizer, inverse_normalize=self.inverse_normalize)
        self.transcripts.extend(
            new["content"] for old, new in zip(messages, out, strict=True) if not isinstance(old["content"], str)
        )
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.transcripts = []
        messages, info = self.env.reset(seed=seed, options=options)
        return self._text(messages), info

    def step(self, action: str):
        messages, reward, terminated, truncated, info = self.env.step(action)
        return self._text(messages), reward, terminated, truncated, info


@dataclass
class GapReport:
    """Success of one policy on the same tasks with a text customer and with a speaking one (via the cascade)."""

    task_ids: list[str]
    text_rewards: list[float] = field(default_factory=list)
    speech_rewards: list[float] = field(default_factory=list)

    @property
    def text_success(self) -> float:
        return float(np.mean(self.text_rewards)) if self.text_rewards else float("nan")

    @property
    def speech_success(self) -> float:
        return float(np.mean(self.speech_rewards)) if self.speech_rewards else float("nan")

    @property
    def gap(self) -> float:
        """Text minus speech success (positive: speech hurts)."""
        return self.text_success - self.speech_success


def play(env: gym.Env, policy: TextPolicy, task_id: str, *, seed: int = 0, max_turns: int = 100) -> float:
    """One episode of ``policy`` (which sees the text conversation) on task ``task_id``; the episode's return."""
    messages, _ = env.reset(seed=seed, options={"task": {"id": task_id}})
    seen = list(messages)
    total = 0.0
    for _ in range(max_turns):
        action = policy(seen)
        seen.append({"role": "assistant", "content": action})
        messages, reward, terminated, truncated, _ = env.step(action)
        seen.extend(messages)
        total += float(reward)
        if terminated or truncated:
            break
    return total


def speech_gap(
    text_env: gym.Env, speech_env: gym.Env, policy: TextPolicy, task_ids: Sequence[str], *, seed: int = 0
) -> GapReport:
    """Play ``policy`` on each task in ``text_env`` and in ``speech_env`` (wrapped in :class:`ASRCascade` unless it
    is one already) and collect both returns."""
    if not isinstance(speech_env, ASRCascade):
        speech_env = ASRCascade(speech_env)
    report = GapReport(task_ids=[str(t) for t in task_ids])
    for task_id in report.task_ids:
        report.text_rewards.append(play(text_env, policy, task_id, seed=seed))
        report.speech_rewards.append(play(speech_env, policy, task_id, seed=seed))
    return report
