"""Rollout throughput per generation engine on the real workload (run: ``python bench/bench_rollout.py [--quick]``).

Group rollouts of ``TurnRL/WikiTwoTurn`` and ``TurnRL/SearchR1`` (their newest registered versions; ``--tasks``
tasks x ``--group`` episodes each, SmolLM2-135M-Instruct, ``--max-new-tokens`` a turn, T = 1, the trainer's rollout
limits) through ``trainers.rollout.collect`` with an engine actor, as ``trainers.rl`` plays them, for every engine
in one run:

* ``hf-generate``: plain ``transformers`` ``model.generate`` on each turn's batch (left padded, sampled, log-probs
  from its scores): the baseline column, every ratio is against it;
* ``transformers-generic``: :class:`~trainers.engine_transformers.TransformersEngine` with ``fast=False``, the HF
  forward with a ``DynamicCache`` (the engine as it was before its fast loop);
* ``transformers``: ``make_engine("transformers")``, the same engine's fast loop (preallocated KV, prefix reuse);
* ``vllm``: :func:`trainers.engines.make_engine` ``("vllm")`` (when installed; start-up reported apart).

Every engine plays the same tasks and seeds. Each (engine, round) runs in its own subprocess, so its peak memory is
its own: the parent samples the summed resident memory (``psutil``) of the child's whole process tree (vLLM's engine
core is a grandchild; the envs' retrieval workers count for every engine alike) every 0.2 s. Rounds alternate the
engine order (A B C D, then D C B A, ...) so slow drifts of the shared machine hit every engine alike; every engine
gets the same ``--threads`` (``torch.set_num_threads``; vLLM: its OpenMP threads bound to that many cores). The
default is 1: on 2 cores shared with other jobs, 2 threads spin-wait whenever one core is taken.

Columns: ``gen tok/s`` = policy tokens generated per wall second of ``collect`` (env steps included);
``prefill tok/s`` = prompt tokens taken in per wall second (the whole prompt of every call, its KV computed or
reused); ``hit`` = fraction of prompt tokens whose KV was reused (vLLM: ``num_cached_tokens`` of its outputs, ``n/a``
if this vLLM does not report it; the fast loop: its counters; ``-`` where the engine has no prefix cache);
``peak GB`` = the highest RSS of the process tree.
Targets (issue 11): the default engine (vLLM) >= 8x ``hf-generate``; the fast loop >= 4x the generic one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ENGINES = ("hf-generate", "transformers-generic", "transformers", "vllm")
WORKLOADS = {"wiki": "WikiTwoTurn", "search": "SearchR1"}  # TurnRL/<name>-v<newest>
RESULT = "BENCH_RESULT "


# ---------------------------------------------------------------------------------------------------- child side
class CountingEngine:
    """Wraps an engine: counts prompt tokens and the seconds spent inside ``generate``."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.prompt_tokens = 0
        self.seconds = 0.0

    def generate(self, prompts: Any, sampling: Any) -> Any:
        self.prompt_tokens += sum(len(p) for p in prompts)
        t0 = time.perf_counter()
        out = self.engine.generate(prompts, sampling)
        self.seconds += time.perf_counter() - t0
        return out

    def update_weights(self, model: Any) -> None:
        self.engine.update_weights(model)


class HFGenerateEngine:
    """``model.generate`` on the batch (left padded); the log-probs of the sampled tokens are recorded step by step
    by a logits processor (``output_scores`` would hold every step's ``[batch, vocab]`` scores until the end)."""

    def __init__(self, model: Any, tokenizer: Any, stop_ids: list[int], bf16: bool) -> None:
        self.model, self.stop_ids, self.bf16 = model, stop_ids, bf16
        self.pad = tokenizer.pad_token_id

    def generate(self, prompts: Any, sampling: Any) -> Any:
        import contextlib

        import torch
        from transformers import LogitsProcessor, LogitsProcessorList

        from trainers.engine_api import Generation

        class Recorder(LogitsProcessor):
            """Custom processors run before HF's temperature and top-p: keeps ``log_softmax(logits / T)`` of the
            current step, and on the next call the log-prob of the token sampled from it."""

            def __init__(self, temperature: float) -> None:
                self.temperature = temperature
                self.prev: Any = None
                self.picked: list[Any] = []

            def take(self, ids: Any) -> None:
                if self.prev is not None:
                    self.picked.append(self.prev.gather(-1, ids[:, -1:]).squeeze(-1))

            def __call__(self, input_ids: Any, scores: Any) -> Any:
                self.take(input_ids)
                self.prev = (scores.float() / self.temperature).log_softmax(-1)
                return scores

        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(list(p))
            mask[i, width - len(p) :] = 1
        greedy = sampling.temperature == 0
        sample = {} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
        recorder = Recorder(sampling.temperature if not greedy else 1.0)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with torch.no_grad(), ctx:
            out = self.model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=sampling.max_new_tokens,
                do_sample=not greedy,
                eos_token_id=self.stop_ids,
                pad_token_id=self.pad,
                logits_processor=LogitsProcessorList([recorder]),
                **sample,
            )
        recorder.take(out)
        new = out[:, width:].tolist()
        lps = torch.stack(recorder.picked, dim=1).tolist()
        gens = []
        for toks, lp in zip(new, lps, strict=True):
            end = next((j + 1 for j, t in enumerate(toks) if t in self.stop_ids), None)
            n = len(toks) if end is None else end
            gens.append(Generation(toks[:n], [float(x) for x in lp[:n]], finished=end is not None))
        return gens

    def update_weights(self, model: Any) -> None:
        self.model = model


def _vllm_cached_tokens(engine: Any) -> list[int | None]:
    """Count ``num_cached_tokens`` of every vLLM output (bench instrumentation around ``engine.llm.generate``);
    ``None`` once an output does not report it."""
    cached: list[int | None] = [0]
    llm = engine.llm
    original = llm.generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        outs = original(*args, **kwargs)
        counts = [getattr(o, "num_cached_tokens", None) for o in outs]
        cached[0] = None if cached[0] is None or None in counts else cached[0] + sum(counts)
        return outs

    llm.generate = generate
    return cached


def child(args: argparse.Namespace) -> None:
    """Load the model and one engine, play every workload once, print one result line per workload."""
    import torch

    torch.set_num_threads(args.threads)
    from gymnasium.envs.registration import find_highest_version

    import agentgym_turn  # noqa: F401  (registers the envs)
    from agentgym_turn.models import load_causal_lm, smollm2_dir
    from trainers.engine_api import SamplingConfig
    from trainers.engine_transformers import TransformersEngine
    from trainers.engines import make_engine, stop_token_ids
    from trainers.rollout import EnvPool, RolloutConfig, collect, engine_actor

    model, tok = load_causal_lm("smollm2")
    stops = stop_token_ids(tok)
    t0 = time.perf_counter()
    cached = None
    if args.child == "hf-generate":
        engine: Any = HFGenerateEngine(model, tok, stops, args.bf16)
    elif args.child.startswith("transformers"):
        engine = make_engine("transformers", model=model, tokenizer=tok, autocast_bf16=args.bf16)
        engine.fast = args.child == "transformers"
    else:
        engine = make_engine("vllm", model=model, tokenizer=tok, model_dir=str(smollm2_dir()), max_model_len=2048,
                             dtype="bfloat16" if args.bf16 else "float32")  # fmt: skip
        cached = _vllm_cached_tokens(engine)
    engine.generate([[1, 2, 3, 4]], SamplingConfig(max_new_tokens=4, seed=0))  # warm-up
    startup = time.perf_counter() - t0
    cfg = RolloutConfig(args.max_new_tokens, args.max_context, args.max_turns, temperature=1.0, top_p=1.0)
    for name in args.workloads.split(","):
        env_id = f"TurnRL/{WORKLOADS[name]}-v{find_highest_version('TurnRL', WORKLOADS[name])}"
        pool = EnvPool([env_id])
        pool.get(env_id, args.tasks * args.group)  # make the envs (and start their backends) untimed
        counting = CountingEngine(engine)
        if isinstance(engine, TransformersEngine):
            engine.stats = type(engine.stats)()
        if cached is not None:
            cached[0] = 0 if cached[0] is not None else None
        actor = engine_actor(counting, cfg, seed=args.seed)
        t1 = time.perf_counter()
        episodes, stats = collect(
            pool, actor, tok, stops, cfg, num_tasks=args.tasks, group_size=args.group, seed=args.seed
        )
        wall = time.perf_counter() - t1
        hit: float | str | None = None
        if cached is not None:
            hit = "n/a" if cached[0] is None else cached[0] / max(counting.prompt_tokens, 1)
        elif isinstance(engine, TransformersEngine) and engine.fast:
            hit = engine.stats.prefix_hit_rate
        row = {
            "engine": args.child,
            "workload": name,
            "env_id": env_id,
            "round": args.round,
            "episodes": len(episodes),
            "wall": wall,
            "engine_seconds": counting.seconds,
            "gen_tokens": stats.policy_tokens,
            "prompt_tokens": counting.prompt_tokens,
            "hit": hit,
            "startup": startup,
        }
        if isinstance(engine, TransformersEngine) and engine.fast:  # where the fast loop's time went
            row["prefill_s"], row["decode_s"] = engine.stats.prefill_seconds, engine.stats.decode_seconds
            row["prefilled_tokens"] = engine.stats.prefilled_tokens
        print(RESULT + json.dumps(row), flush=True)
        pool.close()


# ---------------------------------------------------------------------------------------------------- parent side
def _tree_rss(pid: int) -> int:
    """Resident bytes of process ``pid`` and all its descendants (0 once it has exited)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_info().rss
    return total


def run_child(engine: str, rnd: int, args: argparse.Namespace) -> list[dict]:
    """Run one engine's subprocess for every workload; its result rows with the peak RSS of its process tree."""
    cmd = [sys.executable, __file__, "--child", engine, "--round", str(rnd), "--workloads", ",".join(args.workloads)]
    for name in ("tasks", "group", "max_new_tokens", "max_context", "max_turns", "threads", "seed"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if not args.bf16:
        cmd.append("--fp32")
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=f"0-{args.threads - 1}" if args.threads > 1 else "0")
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.2)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    watcher.join()
    rows = [json.loads(line[len(RESULT) :]) for line in out.splitlines() if line.startswith(RESULT)]
    for row in rows:
        row["peak_gb"] = peak[0] / 2**30
    if proc.returncode or len(rows) < len(args.workloads):
        tail = (err.strip().splitlines() or ["no output"])[-1][:160]
        rows.append({"engine": engine, "round": rnd, "error": f"exit {proc.returncode}: {tail}"})
    return rows


def summarize(rows: list[dict], engines: list[str], workloads: list[str]) -> None:
    """Print one line per (workload, engine): sums over rounds, ratios against hf-generate and the generic loop."""
    head = (f"{'workload':<9}{'engine':<22}{'eps':>5}{'wall s':>8}{'gen tok':>8}{'gen tok/s':>10}"
            f"{'prefill tok/s':>14}{'hit':>6}{'peak GB':>8}{'x HF gen':>9}{'x generic':>10}")  # fmt: skip
    print(head)
    for w in workloads:
        rates: dict[str, float] = {}
        lines = []
        for e in engines:
            mine = [r for r in rows if r.get("engine") == e and r.get("workload") == w and "error" not in r]
            if not mine:
                errors = [r["error"] for r in rows if r.get("engine") == e and "error" in r]
                lines.append((e, f"{w:<9}{e:<22}  no result: {errors[0] if errors else 'not run'}"))
                continue
            wall = sum(r["wall"] for r in mine)
            gen = sum(r["gen_tokens"] for r in mine)
            rates[e] = gen / wall
            hits = [r["hit"] for r in mine if r["hit"] is not None]
            hit = f"{sum(hits) / len(hits):.2f}" if hits and "n/a" not in hits else ("n/a" if hits else "-")
            text = (f"{w:<9}{e:<22}{sum(r['episodes'] for r in mine):>5}{wall:>8.1f}{gen:>8}{gen / wall:>10.1f}"
                    f"{sum(r['prompt_tokens'] for r in mine) / wall:>14.1f}{hit:>6}"
                    f"{max(r['peak_gb'] for r in mine):>8.2f}")  # fmt: skip
            lines.append((e, text))
        for e, text in lines:
            if e in rates:
                base, generic = rates.get("hf-generate"), rates.get("transformers-generic")
                text += f"{rates[e] / base:>9.2f}" if base else f"{'-':>9}"
                text += f"{rates[e] / generic:>10.2f}" if generic else f"{'-':>10}"
            print(text)
    starts = {r["engine"]: r["startup"] for r in rows if "startup" in r}
    print("start-up s (model load + engine, untimed above): " + ", ".join(f"{e} {s:.1f}" for e, s in starts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 tasks x 4 episodes, 32 new tokens, 2 turns, one round")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {ENGINES}")
    parser.add_argument("--workloads", default="wiki,search", help=f"comma-separated subset of {list(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; each runs every engine, order alternating")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-context", type=int, default=1024)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch / OpenMP threads, the same for every engine")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fp32",
        dest="bf16",
        action="store_false",
        help="fp32: no bf16 autocast for the torch engines, vLLM in float32",
    )
    parser.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.tasks, args.group, args.max_new_tokens, args.max_turns, args.rounds = 2, 4, 32, 2, 1
    engines = [e for e in args.engines.split(",") if e]
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = [e for e in engines if e not in ENGINES] + [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown engine/workload {unknown}; engines: {ENGINES}, workloads: {list(WORKLOADS)}")
    import importlib.util

    if "vllm" in engines and importlib.util.find_spec("vllm") is None:
        print("vllm: not installed (pip install 'agentgym-turn[vllm]'); skipped")
        engines.remove("vllm")
    print(f"{args.tasks} tasks x {args.group} episodes per workload, max {args.max_new_tokens} new tokens a turn, "
          f"max {args.max_turns} turns, T=1, {args.threads} threads per engine, bf16={args.bf16}, "
          f"{args.rounds} round(s)", flush=True)  # fmt: skip
    t0 = time.perf_counter()
    rows: list[dict] = []
    for rnd in range(args.rounds):
        for engine in engines if rnd % 2 == 0 else engines[::-1]:
            got = run_child(engine, rnd, args)
            for r in got:
                if "error" in r:
                    print(f"  round {rnd} {engine}: {r['error']}", flush=True)
                else:
                    split = (f" (prefill {r['prefilled_tokens']} tokens {r['prefill_s']:.1f} s, decode "
                             f"{r['decode_s']:.1f} s)" if "prefill_s" in r else "")  # fmt: skip
                    print(f"  round {rnd} {engine} {r['workload']}: {r['gen_tokens']} tokens in {r['wall']:.1f} s"
                          f"{split}", flush=True)  # fmt: skip
            rows += got
    summarize(rows, engines, args.workloads)
    print(f"targets: vllm >= 8x hf-generate; transformers >= 4x transformers-generic; "
          f"bench wall {time.perf_counter() - t0:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
