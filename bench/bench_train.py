"""Update throughput of the default model (run: ``python bench/bench_train.py [--quick] [--rounds N]``).

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
  is computed once per pack (``modeling.pack_shared``, 2048 computed tokens a pack) in every pass.

Episodes come in groups of ``--group`` (a task's episodes share system prompt and question; different tasks share
the system prompt), as an RL step's do.

Reported: update tokens/s by wall clock and by process CPU time (the machine is shared: CPU time is the steadier
of the two), the optimizer step's share, peak RSS, and each variant's median ratio to ``head`` and ``full-head``.
Target (issue 11): >= 2x, policy + reference + critic within 8 GB.
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
torch.set_num_threads(threads)
from agentgym_turn.models import load_causal_lm
from trainers import modeling as M
from trainers.credit import CreditConfig, get_strategy
from trainers.engines import stop_token_ids
from trainers.losses import aggregate_denominator, policy_loss, value_loss
from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor
policy, tok = load_causal_lm("smollm2")
eos = tok.convert_tokens_to_ids("<|im_end|>")
eps, _ = collect(EnvPool(["TurnRL/WikiTwoTurn-v1"]), scripted_actor(tok, eos, ["reference", "direct"], [0.7, 0.3]),
                 tok, stop_token_ids(tok), RolloutConfig(256, 2048), num_tasks=episodes_n // group, group_size=group,
                 seed=0)
half, masked, share = variant in ("bf16", "prefix"), variant != "full-head", variant == "prefix"
fused = variant in ("fused", "bf16", "prefix")
reference = M.frozen_copy(policy).to(torch.bfloat16 if half else torch.float32) if full else None
critic = M.ValueModel.from_policy(policy) if full else None
master = M.MasterWeights(policy) if half else None
cmaster = M.MasterWeights(critic) if half and full else None
params = master.params if half else list(policy.parameters())
cparams = (cmaster.params if half else list(critic.parameters())) if full else []
opt = torch.optim.AdamW(params, lr=1e-6, fused=fused or None)
copt = torch.optim.AdamW(cparams, lr=1e-5, fused=fused or None) if full else None
ac = not half
t0, c0 = time.perf_counter(), time.process_time()
packs = M.pack_shared(eps, range(len(eps)), 2048) if share else M.pack_episodes(eps, range(len(eps)), 512)
computed = sum(p.num_tokens - (len(p.members) - 1) * (p.shared or 0) for p in packs)
in_loss = [e.loss_mask.astype(np.float32) for e in eps]
with torch.no_grad(), M.autocast(ac):
    heads = {}
    for p in packs:
        if full:
            M.pack_logprobs(reference, p, positions=p.gather(in_loss) if masked else None)
            heads.update(p.split(critic.pack_values(p)))
values = [M.critic_values(heads[i]) for i in range(len(eps))] if full else None
credit = get_strategy("mt_ppo" if full else "grpo_mr")(eps, values, CreditConfig())
den = aggregate_denominator(credit.loss_masks, "seq_mean_token_mean")
vden = aggregate_denominator(credit.value_masks, "token_mean") if full else None
for p in packs:
    mask = p.gather(credit.loss_masks)
    with M.autocast(ac):
        st = M.pack_logprobs(policy, p, entropy_mask=mask, positions=mask if masked else None)
    loss, _ = policy_loss(st.logprobs, st.logprobs.detach(), p.gather(credit.advantages), mask, seq_ids=p.seq_ids,
                          denominator=den)
    loss.backward()
    if full:
        with M.autocast(ac):
            head = critic.pack_values(p)
        v = torch.cat([torch.zeros(1), head[:-1]])
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
n = sum(len(e.token_ids) for e in eps)
print(json.dumps({"variant": variant, "full": full, "tokens": n, "computed": computed, "seconds": round(dt, 1),
                  "tok_per_s": round(n / dt, 1), "tok_per_cpu_s": round(n / cpu, 1), "opt_s": round(opt_s, 2),
                  "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}))
"""

VARIANTS = ("full-head", "head", "fused", "bf16", "prefix")


def run(episodes: int, threads: int, variant: str, full: bool, group: int) -> dict:
    argv = [str(episodes), str(threads), variant, "1" if full else "0", str(group)]
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
    args = parser.parse_args()
    n = 4 if args.quick else 8
    modes = [False] if args.no_full else [False, True]
    t0 = time.perf_counter()
    results: dict[tuple[str, bool], list[dict]] = {}
    head = ["what", "variant", "round", "tokens", "computed", "tok/s", "tok/cpu-s", "opt s", "peak GB"]
    print(f"{head[0]:<24}" + "".join(f"{h:>10}" for h in head[1:]), flush=True)
    for r in range(args.rounds):
        for full in modes:
            for variant in args.variants:
                row = run(n, args.threads, variant, full, args.group)
                what = "policy+critic+reference" if full else "policy only"
                if "error" in row:
                    print(f"{what:<24}{variant:>10} error: {row['error']}", flush=True)
                    continue
                results.setdefault((variant, full), []).append(row)
                cells = [variant, r + 1, row["tokens"], row["computed"], row["tok_per_s"], row["tok_per_cpu_s"],
                         row["opt_s"], row["peak_rss_gb"]]  # fmt: skip
                print(f"{what:<24}" + "".join(f"{c!s:>10}" for c in cells), flush=True)
    print("\nmedians over rounds; ratios to 'head' (HEAD's update) and 'full-head' (before issue 11):")
    print(f"{'what':<24}{'variant':>10}{'tok/s':>10}{'tok/cpu-s':>10}{'x head':>10}{'x full':>10}{'cpu x head':>12}"
          f"{'cpu x full':>12}")  # fmt: skip
    for full in modes:
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
    print(f"targets: >= 2x; policy + reference + critic <= 8 GB; wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
