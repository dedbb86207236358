"""The served-judge module's vLLM server, launched as soon as the session knows that module will run
(``tests/conftest.py``'s collection hook): its start, about a minute of imports on one core of a 2-core host, then
overlaps the tests before it, most of which use one thread. The module's ``server`` fixture waits for it to serve
and stops it."""

from __future__ import annotations

import functools
import importlib.util

#: The server's context. The served-judge module's longest request is a judge's: the rules, τ's policy document, the
#: task, its ground-truth calls and the conversation, ~3.7k prompt tokens for its oracle episodes (SmolLM2's
#: tokenizer), ~2.8k for the README test's, then the answer. A longer one would come back as an HTTP error, which the
#: env reports as a judge failure: keep the margin when the prompts grow.
MAX_MODEL_LEN = 4608
#: 0.5 GiB of KV cache: ~11k fp32 tokens (SmolLM2: 46 kB a token), two requests of MAX_MODEL_LEN at once and the
#: shared judge prompt's prefix kept between them.
KV_CACHE_GIB = 0.5
MODULE = "test_served_judge.py"


@functools.cache
def judge_server():  # -> agentgym_turn.serve.VLLMServer
    """The module's server, launched now if the session did not launch it already (not waited for)."""
    from agentgym_turn.serve import VLLMServer

    return VLLMServer("smollm2", max_model_len=MAX_MODEL_LEN, kv_cache_gib=KV_CACHE_GIB).launch()


def launch_if_needed(items: list) -> None:
    """Launch the server when a collected (and not deselected) test of the module needs it and vLLM is installed."""
    if importlib.util.find_spec("vllm") is None:
        return
    if any(item.path.name == MODULE and "server" in getattr(item, "fixturenames", ()) for item in items):
        judge_server()
