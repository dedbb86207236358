"""Rollout throughput of the default model per engine (run: ``python bench/bench_rollout.py [--quick]``).

Generates from WikiTwoTurn opening prompts (~300 tokens) with SmolLM2-135M-Instruct: generated tokens/s per
engine and batch size, fp32 vs bf16 autocast side by side (ratios are what to compare: the machine is shared),
and the process's peak memory. Each configuration runs in a fresh subprocess so its peak RSS is its own.
Targets (issue 3): >= 550 tok/s at batch >= 32 on the default CPU configuration. ``vllm`` is measured only when
the package is importable (``pip install "agentgym-turn[vllm]"``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
import torch
engine_name, batch, new_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bf16, threads = sys.argv[4] == "1", int(sys.argv[5])
torch.set_num_threads(threads)
import gymnasium as gym, agentgym_turn
from agentgym_turn.models import load_causal_lm, smollm2_dir
from trainers.engines import SamplingConfig, make_engine, stop_token_ids
from trainers.rollout import encode, render
model, tok = load_causal_lm("smollm2")
env = gym.make("TurnRL/WikiTwoTurn-v0")
prompts = []
for i in range(batch):
    msgs, _ = env.reset(seed=i)
    prompts.append(encode(tok, render(tok, msgs, generation_prompt=True)))
engine = make_engine(engine_name, model=model, tokenizer=tok, model_dir=str(smollm2_dir()), autocast_bf16=bf16,
                     batch_size=batch)
sampling = SamplingConfig(max_new_tokens=new_tokens, temperature=1.0, seed=0)
engine.generate(prompts[:2], SamplingConfig(max_new_tokens=4, seed=0))  # warm-up
t0 = time.perf_counter()
gens = engine.generate(prompts, sampling)
dt = time.perf_counter() - t0
n = sum(len(g.token_ids) for g in gens)
print(json.dumps({"engine": engine_name, "batch": batch, "bf16": bf16, "threads": threads, "tokens": n,
                  "seconds": round(dt, 2), "tok_per_s": round(n / dt, 1), "prompt_tokens": sum(map(len, prompts)),
                  "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}))
"""


def run(engine: str, batch: int, new_tokens: int, bf16: bool, threads: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, engine, str(batch), str(new_tokens), "1" if bf16 else "0", str(threads)],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        return {"engine": engine, "batch": batch, "bf16": bf16, "error": out.stderr.strip().splitlines()[-1][:200]}
    # vLLM logs its shutdown to stdout after the child's result: take the result line itself
    return json.loads(next(line for line in reversed(out.stdout.splitlines()) if line.startswith('{"engine"')))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="batch 8 and 32, 32 new tokens")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    new_tokens = 32 if args.quick else 64
    configs = [("transformers", 8, False), ("transformers", 8, True), ("transformers", 32, True)]
    if not args.quick:
        configs.append(("transformers", 64, True))
    try:
        import importlib.util

        if importlib.util.find_spec("vllm") is not None:
            configs += [("vllm", 8, True), ("vllm", 32, True)]
        else:
            print("vllm: not installed (pip install 'agentgym-turn[vllm]'); skipped")
    except ImportError:
        pass
    t0 = time.perf_counter()
    rows = [run(e, b, new_tokens, bf16, args.threads) for e, b, bf16 in configs]
    base = next((r["tok_per_s"] for r in rows if "tok_per_s" in r), None)
    print(f"{'engine':<13}{'batch':>6}{'bf16':>6}{'tok/s':>9}{'x base':>8}{'peak GB':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['engine']:<13}{r['batch']:>6}{r['bf16']!s:>6}  error: {r['error']}")
            continue
        print(f"{r['engine']:<13}{r['batch']:>6}{r['bf16']!s:>6}{r['tok_per_s']:>9.1f}"
              f"{r['tok_per_s'] / base:>8.2f}{r['peak_rss_gb']:>9.2f}")  # fmt: skip
    print(
        f"target: >= 550 tok/s at batch >= 32; wall {time.perf_counter() - t0:.0f} s; "
        f"bench peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20:.2f} GB"
    )


if __name__ == "__main__":
    main()
