"""What the machine computes fast: whether a device should compute in bf16, and the dtype a vLLM engine or server
should compute in when nobody chose one.

Every layer needs the answer (``agentgym_turn.serve`` starts judge and user-simulator servers, ``trainers`` picks
its update's precision and its rollout engine's dtype), so it lives here, below them.

**The rule on a CPU** (:func:`cpu_bf16_decision`): bf16 only where the CPU has native bf16 instructions
(``avx512_bf16`` or ``amx_bf16`` among ``/proc/cpuinfo``'s flags) **and** a short timed probe confirms it: one
512x576 by 576x1536 matmul (the shape of SmolLM2-135M's MLP on a 512-token pack) in fp32 and in bf16 on one
thread, best of a few repeats; bf16 must be at least :data:`BF16_MARGIN` times faster, so a tie goes to fp32.
The probe's result is cached per host (CPU model, flags, torch version) in ``<cache>/hardware/`` so each machine
pays it once (~0.5 s). Why not torch's own ``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: it is True wherever
oneDNN *can* run bf16 (AVX-512 BW/VL/DQ), including Intel Xeons without bf16 instructions, which emulate it:
there the matmul above ran at 19.8 GFLOP/s in bf16 against 81.5 in fp32 (issue 47, 2026-11-27), and the README
job took 40 min. On an AVX2-only CPU torch takes a generic bf16 path: an update of 11.1 against 109.0
tokens/s in fp32 (2-core AMD EPYC, 2026-11-27, ``bench/bench_train.py``). ``python bench/bench_precision.py``
prints both precisions and the choice on the host it runs on.

On a CUDA GPU the answer is ``torch.cuda.is_bf16_supported()`` (Ampere and later), no probe.

``TURNRL_BF16=0`` / ``=1`` overrides the CPU rule (for a benchmark, or a host whose probe misjudges).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: ``/proc/cpuinfo`` flags of CPUs that execute bf16 arithmetic natively (AVX512-BF16's dot products; AMX tiles)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
#: How much faster the bf16 probe must be than fp32 for bf16 to be chosen (a tie, within 10%, goes to fp32)
BF16_MARGIN = 1.1
#: The probe's matmul: (m, k) @ (k, n), SmolLM2-135M's up-projection on a 512-token pack
PROBE_SHAPE = (512, 576, 1536)
#: Bump when the probe or the rule changes, so cached verdicts are measured again
PROBE_VERSION = 1


@dataclass(frozen=True)
class ProbeResult:
    """One timed probe: the matmul's best speed in each precision, GFLOP/s on one thread."""

    fp32_gflops: float
    bf16_gflops: float

    @property
    def ratio(self) -> float:
        """bf16 speed over fp32 speed (> 1: bf16 is faster)."""
        return self.bf16_gflops / self.fp32_gflops


@dataclass(frozen=True)
class Bf16Decision:
    """Whether a CPU computes in bf16, with the evidence: its bf16 flags, the probe (``None`` when the flags alone
    decided, as on a CPU without bf16 instructions) and a one-line reason."""

    bf16: bool
    flags: tuple[str, ...]
    probe: ProbeResult | None
    reason: str


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where there is no such file, e.g. macOS)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name; only where ``cpuinfo`` has none, ``platform.processor()`` (it may spawn ``uname -p``)."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def matmul_gflops(shape: tuple[int, int, int], dtype: str, threads: int = 1, repeats: int = 5) -> float:
    """Best-of-``repeats`` speed (GFLOP/s) of ``shape``'s matmul, ``(m, k) @ (k, n)``, in ``dtype`` (``float32`` or
    ``bfloat16``) on ``threads`` torch threads (restored afterwards), after one warm-up call."""
    import torch

    m, k, n = shape
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(m, k, generator=gen).to(getattr(torch, dtype))
        b = torch.randn(k, n, generator=gen).to(getattr(torch, dtype))
        torch.mm(a, b)  # warm-up: oneDNN builds its kernel on the first call
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return 2.0 * m * k * n / max(best, 1e-9) / 1e9


def probe_matmul(repeats: int = 5, shape: tuple[int, int, int] = PROBE_SHAPE) -> ProbeResult:
    """Time ``shape``'s matmul in fp32 and bf16 on one thread (:func:`matmul_gflops`)."""
    return ProbeResult(matmul_gflops(shape, "float32", 1, repeats), matmul_gflops(shape, "bfloat16", 1, repeats))


def cpu_bf16_decision(flags: Iterable[str], probe: Callable[[], ProbeResult]) -> Bf16Decision:
    """Whether a CPU with ``flags`` computes in bf16: only with a native bf16 instruction (:data:`BF16_CPU_FLAGS`)
    and then only if ``probe()`` finds bf16 at least :data:`BF16_MARGIN` times faster than fp32. ``probe`` is not
    called when the flags already say no.

    >>> cpu_bf16_decision({"avx2"}, probe=lambda: 1 / 0).reason
    'no native bf16 instructions (avx512_bf16, amx_bf16): fp32'
    >>> cpu_bf16_decision({"avx512_bf16"}, probe=lambda: ProbeResult(80.0, 84.0)).bf16  # a tie goes to fp32
    False
    """
    native = tuple(f for f in BF16_CPU_FLAGS if f in set(flags))
    if not native:
        return Bf16Decision(False, native, None, f"no native bf16 instructions ({', '.join(BF16_CPU_FLAGS)}): fp32")
    result = probe()
    fast = result.ratio >= BF16_MARGIN
    verdict = "bf16" if fast else f"fp32 (bf16 not {BF16_MARGIN}x faster)"
    return Bf16Decision(
        fast,
        native,
        result,
        f"{', '.join(native)}; probe {result.bf16_gflops:.1f} GFLOP/s bf16 vs {result.fp32_gflops:.1f} fp32 "
        f"({result.ratio:.2f}x): {verdict}",
    )


def _host_key(model: str, flags: frozenset[str]) -> str:
    import torch

    ident = json.dumps([PROBE_VERSION, model, sorted(flags), torch.__version__, PROBE_SHAPE])
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def cached_cpu_decision(
    cache: Path | None = None,
    flags: frozenset[str] | None = None,
    probe: Callable[[], ProbeResult] = probe_matmul,
) -> Bf16Decision:
    """:func:`cpu_bf16_decision` for this CPU (or for ``flags``), the verdict read from (or written to) a per-host
    file in ``cache`` (default ``<TurnRL cache>/hardware``). A cache that cannot be read or written costs a probe,
    never an error."""
    flags = cpu_flags() if flags is None else frozenset(flags)
    if cache is None:
        from agentgym_turn.paths import cache_dir

        cache = cache_dir("hardware", create=False)
    model = cpu_model()
    path = Path(cache) / f"bf16-probe-{_host_key(model, flags)}.json"
    try:
        saved = json.loads(path.read_text())
        probe = saved["probe"]
        return Bf16Decision(
            saved["bf16"], tuple(saved["flags"]), ProbeResult(**probe) if probe else None, saved["reason"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    decision = cpu_bf16_decision(flags, probe)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**asdict(decision), "cpu": model}, indent=1))
        tmp.replace(path)
    except OSError:
        pass
    return decision


@functools.lru_cache(maxsize=1)
def _cpu_bf16() -> bool:
    override = os.environ.get("TURNRL_BF16", "").strip()
    if override in ("0", "1"):
        return override == "1"
    if override:
        from agentgym_turn.error import InvalidArgument

        raise InvalidArgument(f"TURNRL_BF16={override!r}: use 1 (bf16 on the CPU), 0 (fp32) or leave it unset.")
    return cached_cpu_decision().bf16


def native_bf16(device: Any) -> bool:
    """Whether ``device`` should compute in bf16: a CUDA GPU that supports bf16, or a CPU with native bf16
    instructions that the probe confirms (:func:`cpu_bf16_decision`, cached per host); ``TURNRL_BF16=0|1``
    overrides the CPU's answer."""
    import torch

    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if kind == "cpu":
        return _cpu_bf16()
    return False


def native_dtype() -> str:
    """The dtype for a vLLM engine or server that was given none: ``bfloat16`` where its device (the first CUDA GPU
    torch sees, else the CPU) computes bf16 fast (:func:`native_bf16`), else ``float32``."""
    import torch

    return "bfloat16" if native_bf16("cuda" if torch.cuda.is_available() else "cpu") else "float32"


#: vLLM's CPU threading variables: which CPUs its OpenMP threads run on, and how many it keeps for its scheduler.
VLLM_CPU_THREAD_VARS = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")


def vllm_cpu_threads(environ: Mapping[str, str] | None = None, cpus: Iterable[int] | None = None) -> dict[str, str]:
    """The vLLM CPU threading variables for an engine that has the machine to itself while it generates: its
    OpenMP threads on every CPU this process may use (``cpus``, default ``os.sched_getaffinity(0)``), none kept back.

    vLLM's own default (``auto``) binds one thread per physical core and keeps one core for its scheduler process:
    on a 2-core host that leaves generation one core. TurnRL's trainer and evaluator wait while the engine
    generates, so the core kept back idles; with both, decoding ran 1.08-1.30x and a 4k-token prefill 1.94x faster on a
    2-core EPYC with AVX2 only, in fp32, with the same tokens (``bench/bench_vllm_threads.py``). Empty when
    ``environ`` (default ``os.environ``) sets either variable: a user's (or a caller's, e.g. several engines sharing
    the cores) choice stands.

        >>> vllm_cpu_threads({}, cpus=[3, 0, 1])
        {'VLLM_CPU_OMP_THREADS_BIND': '0,1,3', 'VLLM_CPU_NUM_OF_RESERVED_CPU': '0'}
        >>> vllm_cpu_threads({"VLLM_CPU_OMP_THREADS_BIND": "auto"}, cpus=[0, 1])
        {}
    """
    environ = os.environ if environ is None else environ
    if any(environ.get(name) for name in VLLM_CPU_THREAD_VARS):
        return {}
    allowed = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, allowed)), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
