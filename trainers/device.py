"""Where training runs: ``--device auto|cpu|cuda[:N]`` for ``trainers.sft``, ``trainers.rl`` (and its ``grpo`` /
``mtppo`` CLIs) and ``leaderboards.evaluate``.

``auto`` is the first CUDA GPU where torch sees one, else the CPU. The policy, critic and reference live on that
device and every tensor of the update is created there (packs, masks, log-probs, values; ``trainers.modeling``
passes ``device=`` to every factory call, which ``tests/trainers/test_device.py`` checks with a trap). On CUDA the
update and the transformers engine compute in bf16 (``--dtype bfloat16``: bf16 weights with fp32 master weights
and Adam states; ``--dtype float32``: bf16 autocast on CUDA), attention is PyTorch's SDPA, and ``--threads`` (a
CPU knob) is ignored. Untested on a GPU: this project has had none, so every CUDA branch (this module's, vLLM's
colocation and sleep mode in ``trainers.engines``) has only run as far as the CPU can check it (README, "What ran
where").

**Precision** (:func:`resolve_precision`): ``--dtype auto`` and an unset ``--bf16``, the trainers' defaults, compute
in bf16 where the device computes bf16 fast (:func:`native_bf16`: a bf16 GPU; a CPU with native bf16 instructions,
``avx512_bf16`` or ``amx_bf16``, that a short timed probe confirms, cached per host) and in fp32 elsewhere. Where a CPU
emulates bf16 (AVX2 only, or AVX-512 without bf16 instructions) its bf16 matmuls run several times slower than fp32:
an update of 11.1 against 109.0 tokens/s on an AVX2-only AMD EPYC, a matmul of 19.8 against 81.5 GFLOP/s on an
AVX-512 Xeon without ``avx512_bf16`` (``bench/bench_precision.py`` prints both on the host it runs on).

**Memory plan** of one GPU (estimates from the formulas below, not measurements: this project has had no GPU).
Per parameter of a fully fine-tuned model under ``--dtype bfloat16``: 2 B bf16 weights + 4 B fp32 master + 8 B
Adam (two fp32 moments) + 4 B fp32 gradient of the master (each bf16 gradient is folded into it and freed as
backward produces it) = 18 B. The critic (``mt_ppo``, ``turn_ppo``, ...) is a second backbone with the same 18 B
per parameter; the reference (``--kl-coef > 0``) is a bf16 copy, 2 B (with LoRA none: the base model with the
adapter disabled). vLLM colocated (``--engine vllm --device cuda``) holds its own bf16 copy (2 B) plus the KV cache
that ``--vllm-gpu-memory`` (vLLM's ``gpu_memory_utilization``, a fraction of the whole GPU's memory for vLLM's
weights, activations and KV cache) leaves; during the update it sleeps (level 1: weights to CPU memory, KV cache
freed), so the update's activations can use that memory. KV cache per token (bf16, 2 x layers x KV heads x head
size x 2 B): Qwen2.5-0.5B 12 KiB, 1.5B 28 KiB, 7B 56 KiB.

================  ==========  ===============  ============  =============  ===============================
policy            parameters  full FT (18 B)   + critic      + reference    fits an 80 GB GPU with vLLM at
================  ==========  ===============  ============  =============  ===============================
Qwen2.5-0.5B      0.49 B      8.9 GB           + 8.9 GB      + 1.0 GB       0.3 (24 GB: 1 GB weights,
                                                                            ~1.9 M KV tokens); GRPO 0.5
Qwen2.5-1.5B      1.54 B      28 GB            + 28 GB       + 3.1 GB       PPO: 0.2 (16 GB, ~0.45 M KV
                                                                            tokens); GRPO: 0.4
Qwen2.5-7B        7.6 B       137 GB: no       no            no             LoRA r=16 all-linear: 15 GB base
                                                                            + ~0.8 GB adapter and its Adam,
                                                                            reference free; vLLM 0.4 (32 GB:
                                                                            15 GB weights, ~0.3 M KV tokens)
================  ==========  ===============  ============  =============  ===============================

Activations come on top: with gradient flow through a pack of ``--share-pack-tokens`` tokens they scale with
tokens x layers x hidden size (a 2048-token pack of a 1.5B model is a few GB); lower ``--share-pack-tokens`` /
``--pack-tokens`` when the update runs out of memory, or lower ``--vllm-gpu-memory`` when vLLM does at start-up.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from agentgym_turn.error import InvalidArgument
from agentgym_turn.hardware import native_bf16

DEVICE_HELP = (
    "where the policy, critic, reference and every batch live: auto (the first CUDA GPU torch sees, else cpu), cpu, "
    "cuda or cuda:N; on CUDA the update runs in bf16 with SDPA attention and --threads is ignored"
)
_SPEC = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device_spec(spec: str) -> str:
    """``spec`` when it is ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (no torch import); else a clear error."""
    if not isinstance(spec, str) or not _SPEC.fullmatch(spec):
        raise InvalidArgument(f"--device {spec!r} is not a device; use auto, cpu, cuda or cuda:N (e.g. cuda:0).")
    return spec


def resolve_device(spec: str) -> Any:
    """The ``torch.device`` that ``--device spec`` names, checked against what this torch build can use.

    ``resolve_device("auto")`` is ``device("cuda", 0)`` where torch sees a GPU, else ``device("cpu")``.
    """
    import torch

    check_device_spec(spec)
    if spec == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise InvalidArgument(
                f"--device {spec}: torch {torch.__version__} ({build}) sees no CUDA GPU. On a machine with an NVIDIA "
                "GPU, `bash scripts/setup.sh` installs the CUDA build of torch and vLLM; here use --device cpu."
            )
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise InvalidArgument(
                f"--device {spec}: torch sees {torch.cuda.device_count()} CUDA GPU(s), indices 0 to "
                f"{torch.cuda.device_count() - 1}; pick one of them (or set CUDA_VISIBLE_DEVICES)."
            )
        device = torch.device("cuda", index)
    return device


def place_model(model: Any, device: Any) -> Any:
    """Move ``model`` to ``device`` (in place; returned for chaining); on CUDA attention runs through SDPA."""
    if getattr(device, "type", str(device)) == "cuda" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("sdpa")
    return model.to(device)


def model_device(model: Any) -> Any:
    """The device of ``model``'s first parameter (where its inputs must be)."""
    return next(model.parameters()).device


def set_threads(device: Any, threads: int) -> None:
    """``torch.set_num_threads(threads)`` for a CPU run (``threads`` 0 = torch's default); on CUDA the CPU knob is
    ignored, with a note when it was given."""
    import torch

    if not threads:
        return
    if getattr(device, "type", str(device)) == "cpu":
        torch.set_num_threads(threads)
    else:
        print(f"[device] --threads {threads} ignored on {device} (a CPU knob)", flush=True)


#: ``--dtype`` of the trainers: ``auto`` resolves per device with :func:`resolve_precision`
DTYPE_CHOICES = ("auto", "bfloat16", "float32")
DTYPE_HELP = (
    "weights of the update: bfloat16 weights with fp32 master weights and optimizer state (no per-forward casts; "
    "autocast off), float32 (under --bf16 autocast), or auto: bfloat16 where the device computes it fast (a CUDA GPU "
    "that supports it; a CPU with avx512_bf16 or amx_bf16 instructions that a timed probe confirms), else float32"
)
BF16_HELP = (
    "bf16 for generation (the transformers engine's autocast, vLLM's dtype; --no-bf16: float32) and, with --dtype "
    "float32, autocast in the update (default: on where the device computes bf16 natively, as --dtype auto decides)"
)


def resolve_precision(dtype: str, bf16: bool | None, device: Any) -> tuple[str, bool]:
    """``(dtype, bf16)`` with ``--dtype auto`` and an unset ``--bf16`` resolved for ``device``: bf16 where it computes
    bf16 natively (:func:`native_bf16`), else fp32 with no autocast. An explicit bf16 choice is kept, with a warning
    on a device that emulates bf16, naming the flags for the fast path.

    >>> resolve_precision("float32", False, "cpu")
    ('float32', False)
    """
    if dtype not in DTYPE_CHOICES:
        raise InvalidArgument(f"--dtype {dtype!r} is not one of {', '.join(DTYPE_CHOICES)}.")
    native = native_bf16(device)
    resolved = ("bfloat16" if native else "float32") if dtype == "auto" else dtype
    autocast = native if bf16 is None else bf16
    if not native and (resolved == "bfloat16" or autocast):
        asked = " ".join(f for f, on in ((f"--dtype {resolved}", resolved == "bfloat16"), ("--bf16", autocast)) if on)
        print(
            f"[device] warning: {device} has no native bf16 (no avx512_bf16 or amx_bf16, or a probe found bf16 no "
            f"faster than fp32), so {asked} computes emulated bf16 (an update measured 4-10x slower than in fp32 on "
            "such CPUs); pass --dtype "
            "float32 --no-bf16 (or leave both unset) for the fast path.",
            file=sys.stderr,
            flush=True,
        )
    return resolved, autocast


def peak_device_memory_gib(device: Any) -> float | None:
    """Peak memory torch allocated on a CUDA ``device`` since start-up (GiB); ``None`` on the CPU (whose peak is
    ``trainers.metrics.peak_memory_gib``, the process's resident set)."""
    import torch

    if getattr(device, "type", str(device)) != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30
