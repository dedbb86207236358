"""τ-bench with a speaking customer (TARL ``003_…`` §4.3–4.4, Table 3): user turns arrive as 16 kHz audio.

The customer's text (scripted or LLM, exactly as in :class:`~envs.tau.env.TauEnv`) is put in spoken form
(:func:`envs.speech.spoken.to_spoken`: ids, zip codes and order numbers read digit by digit, symbols named),
synthesised by an offline voice (:mod:`envs.speech.tts`), optionally degraded to telephone quality, and delivered
as an audio user message. Tool results stay text, so a rollout interleaves speech and text::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/TauRetailSpeech-v2", voice="espeak")
    >>> messages, info = env.reset(seed=0, options={"task": {"id": "0"}})
    >>> part = messages[1]["content"][0]
    >>> part["type"], part["sampling_rate"], part["audio"].dtype
    ('audio', 16000, dtype('float32'))
    >>> env.unwrapped.spoken_turns[0].text.startswith("Hi.")   # what the customer said, as text
    True
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agentgym_turn.core import Message
from agentgym_turn.error import InvalidArgument
from agentgym_turn.tools import ToolFailure, call_tool
from envs.speech.asr import WhisperRecognizer, load_recognizer
from envs.speech.audio import SAMPLE_RATE, save_audio, telephone
from envs.speech.spoken import from_spoken, to_spoken
from envs.speech.tts import VOICES, Voice, load_voice
from envs.tau.env import TauEnv
from envs.tau.toolkit import bind_tools

# ---------------------------------------------------------------------------------------------- constants
AUDIO_FORMATS = ("wav", "flac")
#: read-only lookups that name the task's customer, tried in this order on the gold actions
_USER_LOOKUPS = ("find_user_id_by_name_zip", "find_user_id_by_email")
PROFILE_HEADER = (
    "# The customer\nThe customer on this call has already been authenticated; do not ask them to identify "
    "themselves again. Their profile (the output of get_user_details):"
)


@dataclass(frozen=True)
class SpokenTurn:
    """One spoken customer turn: the simulator's text, the spoken form that was synthesised, the audio, and (with
    ``asr_cascade=True``) what the recogniser heard after :func:`~envs.speech.spoken.from_spoken`."""

    text: str
    spoken: str
    audio: np.ndarray
    transcript: str | None = None


# ---------------------------------------------------------------------------------------------- pure functions
_PHONE_MEMO: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
_PHONE_MEMO_ENTRIES = 64


def telephone_memo(audio: np.ndarray) -> np.ndarray:
    """:func:`~envs.speech.audio.telephone` of a voice's memoised (read-only) audio, memoised by identity.

    The memo holds the input array, so its ``id`` cannot be reused while the entry lives.
    """
    hit = _PHONE_MEMO.get(id(audio))
    if hit is not None and hit[0] is audio:
        _PHONE_MEMO.move_to_end(id(audio))
        return hit[1]
    out = telephone(audio, SAMPLE_RATE)
    out.flags.writeable = False
    _PHONE_MEMO[id(audio)] = (audio, out)
    while len(_PHONE_MEMO) > _PHONE_MEMO_ENTRIES:
        _PHONE_MEMO.popitem(last=False)
    return out


def audio_message(audio: np.ndarray, sampling_rate: int = SAMPLE_RATE) -> Message:
    """A user chat message whose content is one audio part (HF multimodal chat format)."""
    return {"role": "user", "content": [{"type": "audio", "audio": audio, "sampling_rate": sampling_rate}]}


def save_episode(env: Any, directory: str | Path, *, audio_format: str = "flac") -> Path:
    """Write a speech env's conversation to ``directory``: one audio file per spoken turn plus ``conversation.json``.

    The JSON holds ``spoken_turns`` (``{"path", "sampling_rate", "text", "spoken", "transcript"}`` per customer
    turn, in order) and ``messages``, the history with every audio part replaced by ``{"type": "audio", "path":
    <file name>, "sampling_rate": 16000}``. Returns the JSON's path.
    """
    if audio_format not in AUDIO_FORMATS:
        raise InvalidArgument(f"audio_format={audio_format!r}; use one of {list(AUDIO_FORMATS)}.")
    base = env.unwrapped
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    turns = []
    paths_by_audio: dict[int, str] = {}
    for i, turn in enumerate(getattr(base, "spoken_turns", [])):
        name = f"user_{i:03d}.{audio_format}"
        save_audio(directory / name, turn.audio, SAMPLE_RATE)
        paths_by_audio[id(turn.audio)] = name
        turns.append(
            {
                "path": name,
                "sampling_rate": SAMPLE_RATE,
                "text": turn.text,
                "spoken": turn.spoken,
                "transcript": turn.transcript,
            }
        )
    messages = []
    for message in base.history:
        content = message["content"]
        if not isinstance(content, str):
            content = [
                {"type": "audio", "path": paths_by_audio.get(id(p["audio"])), "sampling_rate": p["sampling_rate"]}
                if p.get("type") == "audio"
                else dict(p)
                for p in content
            ]
        messages.append({**message, "content": content})
    record = {
        "env_id": base.spec.id if getattr(base, "spec", None) else type(base).__name__,
        "task_id": (base.task or {}).get("id"),
        "voice": getattr(base, "voice_name", None),
        "telephone": getattr(base, "telephone", None),
        "spoken_turns": turns,
        "messages": messages,
    }
    path = directory / "conversation.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- env
class TauSpeechEnv(TauEnv):
    """τ-bench retail / airline whose customer speaks (TARL §4.3: text user simulation, then TTS).

    ## Description
    :class:`~envs.tau.env.TauEnv` (same tasks, tools, database, customer simulators, verifier and TARL judge)
    with every customer turn delivered as speech. The customer's text is rewritten in spoken form as τ²-bench's
    voice-call guidelines ask callers to speak (``sofia_garcia_4452`` -> "sofia underscore garcia underscore
    four, four, five, two"; ``#W7678072`` -> "hash W, seven, six, ..."; emails with "at" and "dot"; small numbers
    and dollar amounts as words), then synthesised offline: ``voice="piper"`` (default; the MIT
    ``en_US-joe-medium`` VITS voice on onnxruntime) or ``voice="espeak"`` (espeak-ng, ~10x faster, harder to
    recognise). ``telephone=True`` passes the audio through 8 kHz G.711 μ-law and back, like τ²-bench's voice mode.

    ## Observation
    As :class:`~envs.tau.env.TauEnv`, except that each customer message is
    ``{"role": "user", "content": [{"type": "audio", "audio": float32 array, "sampling_rate": 16000}]}`` (mono,
    deterministic: the same text gives the same samples). The text behind each one is in
    ``env.unwrapped.spoken_turns`` (and in ``info["user_reply"]`` as in the text env), for logging and for
    :func:`save_episode`; an agent under evaluation must not read it. For text-only policies,
    ``asr_cascade=True`` (or the :class:`envs.speech.cascade.ASRCascade` wrapper) delivers Whisper tiny.en's
    transcript instead, after :func:`~envs.speech.spoken.from_spoken`: ``{"role": "user", "content": "..."}``.

    ## Action
    As :class:`~envs.tau.env.TauEnv`: the assistant's whole turn as text (tool calls or a reply).

    ## Rewards
    As :class:`~envs.tau.env.TauEnv`: ``task`` (outcome, ``R ∈ {0, 1}``), and with ``judge=`` each turn's raw judge
    score ``judge`` (turn, ``-1 / 0 / 1``) as a late turn reward in the final ``info["late_reward_components"]``;
    TARL's scaling is the trainer's (``env/tarl_score`` reports it). The judge reads the customer's text.

    ## Episode End
    As :class:`~envs.tau.env.TauEnv` (customer stop / transfer / out-of-scope markers, a successful transfer call,
    or ``max_turns`` agent turns). A reply that ends the episode is not synthesised.

    ## Arguments
    ``gym.make("TurnRL/TauRetailSpeech-v2", voice="piper", telephone=False, authenticated=False,
    asr_cascade=False, split="train", disjoint_held_out=True, user="scripted", judge=None, max_turns=30)``;
    ``TurnRL/TauAirlineSpeech-v2`` takes the same. Every :class:`~envs.tau.env.TauEnv` argument is accepted (the
    held-out tasks: ``split="test"``).
    ``voice``: ``"piper"`` or ``"espeak"``; ``telephone``: 8 kHz μ-law channel; ``asr_cascade``: transcripts
    instead of audio (see Observation). ``authenticated=True`` is TARL's speech evaluation
    (§4.4): the authentication step is skipped by giving the agent the customer's profile (``get_user_details``
    of the task's customer, found from the gold actions) at the end of the system prompt; a task whose gold
    actions name no customer keeps the plain prompt (``env.unwrapped.profile_user_id`` is then ``None``).

    ## Version History
    Each version's id makes it; the kwargs give the same env under the newest id (the airline ids alike):

    * ``TurnRL/TauRetailSpeech-v0`` = ``gym.make("TurnRL/TauRetailSpeech-v2", user="scripted-v0", split="test",
      disjoint_held_out=False)`` (it warns): v0's customer, spoken; with ``judge=`` it pays v1's judge rewards.
    * ``TurnRL/TauRetailSpeech-v1`` = ``gym.make("TurnRL/TauRetailSpeech-v2", split="test",
      disjoint_held_out=False)`` (it warns).
    * ``TurnRL/TauRetailSpeech-v2`` = ``gym.make("TurnRL/TauRetailSpeech-v2")``.

    * v0: initial version. Choices: SeedTTS (the paper's voice) is not available offline, so the customer speaks
      with a local piper voice whose two VITS noise scales are 0 (deterministic audio); ids are read in spoken
      form before synthesis (the paper gives no rule; τ²-bench's voice guidelines do); ``#`` is read "hash"; the
      paper's speech evaluation drops retail's authentication step by handing the agent the user profile, but
      not how: ``authenticated=True`` appends the ``get_user_details`` output to the system prompt (off by
      default, so training keeps the full task, as the paper's speech rollouts do).
    * v1: the text env's v1 (the scripted customer says its facts only when asked and confirms only the task's
      gold actions), so its spoken turns changed with it; and its judge contract: raw per-turn ``judge`` scores as
      late turn rewards, ``task = R`` with or without a judge (v0: ``10 R``, ``judge_major``, ``judge_minor``,
      scaled a second time by the trainer).
    * Every id, no version bump: the episode metrics moved from ``info["episode"]`` to ``info["episode_metrics"]``
      (:data:`agentgym_turn.core.EPISODE_METRICS_KEY`), so Gymnasium's ``RecordEpisodeStatistics`` can add its
      own ``info["episode"]``; rewards, tasks and the metrics themselves are unchanged.
    * v2: the text env's v2: training no longer poses the held-out tasks. v0 and v1 defaulted to ``split="test"``,
      their held-out split; v2 defaults to ``split="train"`` without the training tasks of a test task's family
      (``disjoint_held_out=True``; retail 52 of 74 remain, airline 26 of 30), held-out ``test`` unchanged. TARL's
      speech rollouts (003 §4.3) train on its synthesised retail tasks, not on τ-bench's, and evaluate on
      τ-bench's retail test tasks.
    """

    shared_attributes: ClassVar[tuple[str, ...]] = (*TauEnv.shared_attributes, "_voice", "_recognizer")

    def __init__(
        self,
        domain: str = "retail",
        *,
        voice: str = "piper",
        telephone: bool = False,
        authenticated: bool = False,
        asr_cascade: bool = False,
        **kwargs: Any,
    ):
        if voice not in VOICES:
            raise InvalidArgument(f"voice={voice!r} is not a voice; use one of {list(VOICES)}.")
        self._voice: Voice = load_voice(voice)
        self.voice_name = voice
        self.telephone = bool(telephone)
        self.authenticated = bool(authenticated)
        self.asr_cascade = bool(asr_cascade)
        self._recognizer: WhisperRecognizer | None = load_recognizer() if self.asr_cascade else None
        self.profile_user_id: str | None = None  # whose profile the system prompt holds (authenticated=True)
        self.spoken_turns: list[SpokenTurn] = []
        super().__init__(domain, **kwargs)

    def task_user_id(self) -> str | None:
        """The current task's customer, read off its gold actions: a ``user_id`` argument, else the result of a
        ``find_user_id_*`` lookup, else the owner of an ``order_id`` (read-only tools on this episode's database)."""
        assert self._db is not None and self._task is not None
        actions = self._task["evaluation_criteria"].get("actions") or []
        tools = bind_tools(self._tool_defs, self._db.conn)
        for action in actions:
            args = action.get("arguments") or {}
            if isinstance(args.get("user_id"), str):
                return args["user_id"]
            if action.get("name") in _USER_LOOKUPS and action["name"] in tools:
                found = call_tool(tools, action["name"], args)
                if not isinstance(found, ToolFailure):
                    return found
        for action in actions:
            order_id = (action.get("arguments") or {}).get("order_id")
            if isinstance(order_id, str) and "get_order_details" in tools:
                found = call_tool(tools, "get_order_details", {"order_id": order_id})
                if not isinstance(found, ToolFailure):
                    return json.loads(found).get("user_id")
        return None

    def system_prompt(self) -> str:
        """The text env's system prompt; with ``authenticated=True`` followed by the customer's profile."""
        prompt = super().system_prompt()
        if not self.authenticated or self._db is None or self._task is None:
            return prompt
        self.profile_user_id = user_id = self.task_user_id()
        if user_id is None:
            return prompt  # nothing to authenticate against (e.g. an airline task without customer actions)
        profile = call_tool(bind_tools(self._tool_defs, self._db.conn), "get_user_details", {"user_id": user_id})
        if isinstance(profile, ToolFailure):
            raise InvalidArgument(f"task {self._task.get('id')!r}: get_user_details failed: {profile.message}")
        return f"{prompt}\n\n{PROFILE_HEADER}\n{profile}"

    def speak(self, text: str) -> SpokenTurn:
        """The customer's ``text`` in spoken form and as 16 kHz float32 audio (telephone-degraded if asked)."""
        spoken = to_spoken(text)
        audio = self._voice.synthesize(spoken)
        if self.telephone:
            audio = telephone_memo(audio)
        return SpokenTurn(text=text, spoken=spoken, audio=audio)

    def _begin(self, task: dict[str, Any]) -> list[Message]:
        self.spoken_turns = []
        self.profile_user_id = None
        return super()._begin(task)

    def _user_message(self, text: str) -> Message:
        turn = self.speak(text)
        if self._recognizer is not None:
            heard = from_spoken(self._recognizer.transcribe(turn.audio))
            turn = dataclasses.replace(turn, transcript=heard)
            self.spoken_turns.append(turn)
            return {"role": "user", "content": heard}
        self.spoken_turns.append(turn)
        return audio_message(turn.audio)
