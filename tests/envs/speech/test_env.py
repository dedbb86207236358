"""The speech τ-bench env (audio user turns), saving episodes, and the ASR cascade end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentgym_turn.error import InvalidArgument
from agentgym_turn.spaces import is_message
from envs.speech.audio import SAMPLE_RATE, load_audio
from envs.speech.cascade import ASRCascade, speech_gap
from envs.speech.env import TauSpeechEnv, save_episode
from envs.speech.spoken import to_spoken
from envs.tau.env import TauEnv

LOOKUP = (
    '<tool_call>{{"name": "find_user_id_by_name_zip", "arguments": '
    '{{"first_name": "Yusuf", "last_name": "Rossi", "zip": "{zip}"}}}}</tool_call>'
)


@pytest.fixture(scope="module")
def speech_env():
    env = TauSpeechEnv("retail", voice="espeak")
    yield env
    env.close()


def test_user_turns_are_audio_and_tools_stay_text(speech_env):
    messages, _ = speech_env.reset(seed=0, options={"task": {"id": "0"}})
    assert [m["role"] for m in messages] == ["system", "user"] and isinstance(messages[0]["content"], str)
    (part,) = messages[1]["content"]
    assert part["type"] == "audio" and part["sampling_rate"] == SAMPLE_RATE
    audio = part["audio"]
    assert audio.dtype == np.float32 and audio.ndim == 1 and np.isfinite(audio).all() and np.abs(audio).max() > 0.05
    turn = speech_env.spoken_turns[0]
    assert turn.text.startswith("Hi.") and turn.spoken == to_spoken(turn.text) and turn.audio is audio
    speech_env.step("What is your zip code?")  # the scripted customer gives facts only when asked
    assert "one, nine, one, two, two" in speech_env.spoken_turns[1].spoken  # the zip code 19122, digit by digit
    messages, reward, terminated, _, _ = speech_env.step(LOOKUP.format(zip="19122"))
    assert messages == [{"role": "tool", "name": "find_user_id_by_name_zip", "content": "yusuf_rossi_9620"}]
    assert reward == 0.0 and not terminated
    messages, _, terminated, _, _ = speech_env.step("Could you tell me more?")
    assert not terminated and messages[0]["content"][0]["type"] == "audio" and len(speech_env.spoken_turns) == 3


def test_same_seed_same_audio_and_fork(speech_env):
    first, _ = speech_env.reset(seed=3)
    again, _ = speech_env.reset(seed=3)
    assert np.array_equal(first[1]["content"][0]["audio"], again[1]["content"][0]["audio"])
    fork = speech_env.fork()
    assert fork._voice is speech_env._voice  # the voice (an onnxruntime session for piper) is shared, not copied
    assert all(is_message(m) for m in fork.history)


def test_episode_saves_with_its_audio(speech_env, tmp_path):
    speech_env.reset(seed=0, options={"task": {"id": "0"}})
    speech_env.step("Could you repeat that?")
    path = save_episode(speech_env, tmp_path, audio_format="flac")
    record = json.loads(path.read_text())
    parts = [p for m in record["messages"] if isinstance(m["content"], list) for p in m["content"]]
    assert [p["path"] for p in parts] == ["user_000.flac", "user_001.flac"]
    assert [t["path"] for t in record["spoken_turns"]] == ["user_000.flac", "user_001.flac"]
    assert record["spoken_turns"][0]["text"] == speech_env.spoken_turns[0].text
    audio, rate = load_audio(tmp_path / "user_000.flac")
    assert rate == SAMPLE_RATE and audio.shape == speech_env.spoken_turns[0].audio.shape
    with pytest.raises(InvalidArgument, match="audio_format"):
        save_episode(speech_env, tmp_path, audio_format="mp3")


def test_bad_voice_is_rejected():
    with pytest.raises(InvalidArgument, match="voice='nope'"):
        TauSpeechEnv("retail", voice="nope")


def _lookup_policy(seen):
    """A text policy that acts on what it heard: asks for the caller's zip code, then looks them up by it."""
    import re

    users = [m["content"] for m in seen if m["role"] == "user"]
    if len(users) == 1:
        return "Could you tell me your name, zip code and order id?"
    if len(users) == 2 and seen[-1]["role"] == "user":
        zips = re.findall(r"\b\d{5}\b", users[-1])
        return LOOKUP.format(zip=zips[-1] if zips else "none")
    return "Thank you, goodbye."


def test_cascade_end_to_end_with_the_scripted_user(recognizer):
    env = ASRCascade(TauSpeechEnv("retail", voice="piper"), recognizer=recognizer)
    messages, _ = env.reset(seed=0, options={"task": {"id": "0"}})
    assert isinstance(messages[1]["content"], str) and env.transcripts == [messages[1]["content"]]
    seen = [*messages, {"role": "assistant", "content": _lookup_policy(messages)}]
    messages, _, _, _, _ = env.step(seen[-1]["content"])
    assert "#W2378156" in messages[0]["content"] and "19122" in messages[0]["content"]  # ids heard exactly
    messages, _, _, _, _ = env.step(_lookup_policy([*seen, *messages]))
    assert messages[0]["content"] == "yusuf_rossi_9620"  # the id the agent heard found the customer
    built_in = TauSpeechEnv("retail", asr_cascade=True)  # the same cascade inside the env, for CLIs
    built_in_messages, _ = built_in.reset(seed=0, options={"task": {"id": "0"}})
    assert built_in_messages[1] == {"role": "user", "content": env.transcripts[0]}
    assert built_in.spoken_turns[0].transcript == env.transcripts[0]
    assert built_in.fork()._recognizer is built_in._recognizer  # Whisper is shared by forks, not copied
    built_in.close()
    report = speech_gap(TauEnv("retail"), env, _lookup_policy, ["0"])
    assert report.text_rewards == report.speech_rewards == [0.0]  # nothing exchanged: both fail the task
    assert report.gap == 0.0
    env.close()


def test_authenticated_gives_the_profile_instead_of_the_login():
    env = TauSpeechEnv("retail", voice="espeak", authenticated=True)
    messages, _ = env.reset(seed=0, options={"task": {"id": "0"}})
    assert env.profile_user_id == "yusuf_rossi_9620"
    system = messages[0]["content"]
    assert "already been authenticated" in system and '"user_id": "yusuf_rossi_9620"' in system
    plain = TauSpeechEnv("retail", voice="espeak")
    assert (
        plain.reset(seed=0, options={"task": {"id": "0"}})[0][0]["content"]
        == env.system_prompt().split("\n\n# The customer")[0]
    )
    env.close()
    plain.close()
