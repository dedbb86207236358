"""Quiet third-party output for TurnRL's command-line programs, unless ``--verbose``.

A training or evaluation run starts vLLM (hundreds of INFO lines a start: config dumps, worker set-up, shutdown),
transformers, torch's C++ warnings and, for Wikipedia search, a JVM whose Lucene logs a warning at every index
open. :func:`quiet_logs` sets each to warnings-and-errors before any of them is imported, through the environment,
so the engine and retrieval worker processes they spawn inherit it; the programs' own lines (``[rl]``,
``[engine]``, progress bars, the result tables) stay. A variable already set in the environment wins.

    quiet_logs(verbose=False)   # at the top of a CLI's main(), before vLLM / transformers / the JVM start
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

#: vLLM's logging configuration when quiet: its loggers at WARNING, less :data:`VLLM_NOTICES` (read by vLLM in
#: every process it starts, through ``VLLM_LOGGING_CONFIG_PATH``)
VLLM_LOGGING_CONFIG = Path(__file__).with_name("vllm_logging.json")

#: How vLLM's WARNING records that note this machine's set-up begin: about the CPU build (no Triton, no tcmalloc,
#: eager mode), a float32 folder loaded as bf16 (one line per tensor, ~130 for SmolLM2), the chat-template warm-up a
#: token-in engine never uses, and the engine process it stops at exit. None asks the user to act; real warnings
#: (a crashed request, a memory shortfall, a bad argument) still print.
VLLM_NOTICES: tuple[str, ...] = (
    "Attempted to load weight",
    "Chat template warmup failed",
    "Using None for EOS token id because tokenizer is not initialized",
    "Found ulimit of",
    "libtcmalloc is not found",
    "libiomp is not found",
    "Triton is not installed",
    "Model Runner V2 requires Triton",
    "Enforce eager set",
    "Inductor compilation was disabled",
    "Reset SSM cache type",
    "This model does not officially support disabling chunked prefill",
    "[shutdown] Process manager: force killing remaining process",
    "[shutdown] force killing sub process",  # every engine.close() on CPU: its worker does not exit on request
    # every weight push to a float32 engine: the rotary cos/sin cache is in no checkpoint, so vLLM's layerwise
    # reload puts its old values back (they never change) and says so
    "RotaryEmbedding: Failed to load weights",
)


class VllmNoticeFilter(logging.Filter):
    """Drops vLLM's set-up notices (:data:`VLLM_NOTICES`) from its WARNING output; lets everything else through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(VLLM_NOTICES)


#: environment variable -> its quiet value (each library reads it when it starts, in every process it spawns)
QUIET_ENV: dict[str, str] = {
    "VLLM_LOGGING_LEVEL": "WARNING",  # vLLM's own loggers (INFO by default)
    "VLLM_LOGGING_CONFIG_PATH": str(VLLM_LOGGING_CONFIG),  # the same, less the set-up notices
    "TRANSFORMERS_VERBOSITY": "error",  # transformers' logger
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10 warnings such as vLLM's NUMA binding notice
    "TURNRL_JAVA_LOG_LEVEL": "SEVERE",  # java.util.logging in the Lucene worker (agentgym_turn.retrieval.lucene)
    # Deprecation notices of libraries about their own internals (vLLM's Triton dispatcher, torch.distributed):
    "PYTHONWARNINGS": "ignore::DeprecationWarning,ignore::FutureWarning",
}


def quiet_logs(verbose: bool = False) -> None:
    """Warnings and errors only from vLLM, transformers, torch's C++ side and the JVM (``verbose``: leave them)."""
    if verbose:
        os.environ.setdefault("TURNRL_JAVA_LOG_LEVEL", "INFO")
        return
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("vllm", "transformers", "httpx", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
