"""What the machine computes fast: whether a device has bf16 matmul kernels, and the dtype a vLLM engine or server
should compute in when nobody chose one.

Every layer needs the answer (``agentgym_turn.serve`` starts judge and user-simulator servers, ``trainers`` picks
its update's precision and its rollout engine's dtype), so it lives here, below them. On an AVX2-only CPU torch's
bf16 matmuls take a generic path: measured there (2-core AMD EPYC, 2026-11-27) an update of 11.1 against 109.0
tokens/s in fp32 (``bench/bench_train.py``) and vLLM generating 6.7 against 21.6 tokens/s
(``bench/bench_rollout.py --fp32``).
"""

from __future__ import annotations

from typing import Any


def native_bf16(device: Any) -> bool:
    """Whether ``device`` has fast bf16 matmul kernels: a CUDA GPU that supports bf16, or a CPU where oneDNN has
    them (AVX-512 or AMX; ``torch.ops.mkldnn._is_mkldnn_bf16_supported``). On an AVX2-only CPU torch falls back to
    a generic bf16 path: an update measured 10-20x slower than in fp32 there (``bench/bench_train.py``)."""
    import torch

    kind = getattr(device, "type", str(device))
    if kind == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if kind == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def native_dtype() -> str:
    """The dtype for a vLLM engine or server that was given none: ``bfloat16`` where its device (the first CUDA GPU
    torch sees, else the CPU) has bf16 kernels (:func:`native_bf16`), else ``float32``."""
    import torch

    return "bfloat16" if native_bf16("cuda" if torch.cuda.is_available() else "cpu") else "float32"
