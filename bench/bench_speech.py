"""Benchmark of speech mode (run: ``python bench/bench_speech.py [--tasks 8]``).

Measures, in one run on this machine, per voice (piper, espeak) and channel (clean, 8 kHz μ-law telephone):
  * load time of each model (piper ONNX session, Whisper tiny.en);
  * synthesis real-time factor (synthesis seconds / audio seconds; < 1 is faster than real time), memo off;
  * recognition real-time factor of Whisper tiny.en (int8, 2 threads) on that audio;
  * id recall: the share of the ids, zip codes, order numbers and emails in the text that come back exactly after
    TTS -> ASR -> :func:`from_spoken`, on the customers' answers to identity questions in the first ``--tasks`` retail
    and airline tasks and on a small table of hard sentences (names inside ids), plus a "raw" row where the
    customer's text is synthesised without the spoken form; and the share of messages whose every id is heard
    (a text-only agent behind the ASR cascade can act on those without asking again: the perception side of the
    text-vs-speech gap).
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass, field

import numpy as np

HARD = [
    "Hi, my user id is sofia_garcia_4452.",
    "My name is Yusuf Rossi and my zip code is 19122.",
    "I want to return order #W7678072 please.",
    "My email is noah_brown_7922@example.com.",
    "My email is james.taylor7043@example.com.",
    "The reservation code is ABC123 and I live in 78705.",
    "Please use gift card gift_card_5727330 for order #W2378156.",
    "I am Mia Li, user id mia_li_3668.",
    "My zip is 46201 and the item id is 8084436579.",
]
# what counts as an id in a customer's text: emails, then tokens holding a digit or an underscore
_IDS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|#?\b[\w]*(?:\d|_)[\w]*\b")


def ids_in(text: str) -> list[str]:
    """The ids, numbers and emails of ``text`` that a listener must get exactly (3+ characters)."""
    return [m.strip(".") for m in _IDS.findall(text) if len(m.strip(".")) >= 3]


@dataclass
class Row:
    voice: str
    channel: str
    form: str
    audio_s: float = 0.0
    synth_s: float = 0.0
    asr_s: float = 0.0
    ids: int = 0
    hits: int = 0
    texts_with_ids: int = 0
    texts_all_heard: int = 0
    misses: list[str] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=8, help="customer answers per domain (retail, airline)")
    args = parser.parse_args()

    from envs.speech.asr import load_recognizer
    from envs.speech.audio import telephone
    from envs.speech.spoken import from_spoken, to_spoken
    from envs.speech.tts import EspeakVoice, PiperVoice
    from envs.tau.data import load_domain
    from envs.tau.user import ScriptedUser

    t = time.perf_counter()
    piper = PiperVoice()
    piper_load = time.perf_counter() - t
    t = time.perf_counter()
    asr = load_recognizer()
    asr_load = time.perf_counter() - t
    voices = {"piper": piper, "espeak": EspeakVoice()}
    print(f"load: piper {piper_load:.2f} s, whisper tiny.en {asr_load:.2f} s")

    texts = list(HARD)
    for domain in ("retail", "airline"):
        data = load_domain(domain)
        for task in data.split_tasks("test")[: args.tasks]:
            user = ScriptedUser()  # it gives its ids only when asked: its answer to every identity question
            user.start(task)
            texts.append(user.reply("What is your name, zip code, email, user id, order id and reservation id?"))
    n_ids = sum(len(ids_in(t)) for t in texts)
    print(f"{len(texts)} texts ({len(HARD)} hard sentences + {len(texts) - len(HARD)} customer answers), {n_ids} ids")

    rows = []
    for vname, voice in voices.items():
        for channel in ("clean", "telephone"):
            for form in ("spoken", "raw"):
                if form == "raw" and channel == "telephone":
                    continue
                row = Row(vname, channel, form)
                for text in texts:
                    said = to_spoken(text) if form == "spoken" else text
                    t = time.perf_counter()
                    audio = voice.synthesize(said, cache=False)
                    row.synth_s += time.perf_counter() - t
                    if channel == "telephone":
                        audio = telephone(audio)
                    row.audio_s += audio.size / 16000
                    t = time.perf_counter()
                    heard = from_spoken(asr.transcribe(audio))
                    row.asr_s += time.perf_counter() - t
                    items = ids_in(text)
                    for item in items:
                        row.ids += 1
                        if item in heard:
                            row.hits += 1
                        else:
                            row.misses.append(item)
                    if items:
                        row.texts_with_ids += 1
                        row.texts_all_heard += all(item in heard for item in items)
                rows.append(row)
                print(
                    f"{vname:7s} {channel:9s} {form:6s} audio {row.audio_s:6.1f} s | synth RTF "
                    f"{row.synth_s / row.audio_s:.3f} | whisper RTF {row.asr_s / row.audio_s:.3f} | "
                    f"id recall {row.hits}/{row.ids} = {row.hits / max(row.ids, 1):.2f} | messages with every id "
                    f"heard {row.texts_all_heard}/{row.texts_with_ids}",
                    flush=True,
                )
    print("\nmissed ids (first 12 per row):")
    for row in rows:
        print(f"  {row.voice}/{row.channel}/{row.form}: {row.misses[:12]}")
    piper_rtf = np.mean([r.synth_s / r.audio_s for r in rows if r.voice == "piper"])
    espeak_rtf = np.mean([r.synth_s / r.audio_s for r in rows if r.voice == "espeak"])
    print(f"\nsynthesis RTF ratio piper/espeak: {piper_rtf / espeak_rtf:.1f}x")


if __name__ == "__main__":
    main()
