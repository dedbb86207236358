"""fp32 against bf16 on this host, and the precision ``--dtype auto`` picks here (run: ``python bench/bench_precision.py
[--threads N] [--no-model]``).

Prints one table: the CPU's model and bf16 flags; matmul speed (GFLOP/s) in each precision at the probe's shape
(``agentgym_turn.hardware.PROBE_SHAPE``) and at SmolLM2-135M's attention and LM-head shapes, on one thread and on
``--threads``; then SmolLM2-135M's forward+backward on one 512-token sequence (tokens/s; the update's inner loop) with
fp32 weights and with bf16 weights; then the decision of :func:`agentgym_turn.hardware.cpu_bf16_decision` measured
afresh (not read from the cache) and the cached verdict that the trainers, vLLM engines and judge servers use.
Speeds are best-of-N wall times on a machine that may be shared: compare the two columns of one run, never numbers
across host kinds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = {
    "probe (MLP up, 512 tokens)": (512, 576, 1536),
    "attention q/o (512 tokens)": (512, 576, 576),
    "LM head (64 tokens)": (64, 576, 49152),
}


def model_tokens_per_s(dtype, threads: int, tokens: int = 512, repeats: int = 3) -> float:
    import torch

    from agentgym_turn.models import load_causal_lm

    torch.set_num_threads(threads)
    model, _ = load_causal_lm("smollm2", dtype=dtype)
    model.train()
    ids = torch.randint(0, 49152, (1, tokens), generator=torch.Generator().manual_seed(0))
    best = float("inf")
    for i in range(repeats + 1):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        if i:  # the first pass is a warm-up
            best = min(best, time.perf_counter() - start)
    return tokens / best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads for the multi-threaded columns")
    parser.add_argument("--no-model", action="store_true", help="skip SmolLM2's forward+backward (matmuls only)")
    args = parser.parse_args(argv)

    import torch

    from agentgym_turn import hardware as H

    flags = H.cpu_flags()
    print(
        f"cpu: {H.cpu_model()}; bf16 flags: {', '.join(f for f in H.BF16_CPU_FLAGS if f in flags) or 'none'}; "
        f"avx512f: {'avx512f' in flags}; torch {torch.__version__}; "
        f"mkldnn bf16 supported (torch's own flag): {torch.ops.mkldnn._is_mkldnn_bf16_supported()}"
    )
    print(f"{'workload':<34}{'threads':>8}{'fp32':>10}{'bf16':>10}{'bf16/fp32':>11}")
    rows = [(name, shape, t) for name, shape in SHAPES.items() for t in sorted({1, args.threads})]
    for name, shape, threads in rows:
        f32 = H.matmul_gflops(shape, "float32", threads, repeats=7)
        b16 = H.matmul_gflops(shape, "bfloat16", threads, repeats=7)
        print(f"{name + ' GFLOP/s':<34}{threads:>8}{f32:>10.1f}{b16:>10.1f}{b16 / f32:>10.2f}x")
    if not args.no_model:
        f32 = model_tokens_per_s("float32", args.threads)
        b16 = model_tokens_per_s("bfloat16", args.threads)
        print(f"{'SmolLM2 fwd+bwd tokens/s':<34}{args.threads:>8}{f32:>10.1f}{b16:>10.1f}{b16 / f32:>10.2f}x")
    fresh = H.cpu_bf16_decision(flags, H.probe_matmul)
    print(f"decision (probe run now): {'bfloat16' if fresh.bf16 else 'float32'}: {fresh.reason}")
    cached = H.cached_cpu_decision()
    print(f"decision (cached, what --dtype auto uses): {'bfloat16' if cached.bf16 else 'float32'}: {cached.reason}")
    print(f"--dtype auto here: {H.native_dtype()}")


if __name__ == "__main__":
    main()
