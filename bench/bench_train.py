"""Training throughput of the default model (run: ``python bench/bench_train.py [--quick]``).

One update step as ``trainers/rl.py`` runs it, on WikiTwoTurn episodes played by the scripted policies and
tokenised exactly as in RL (~350-550 tokens each): policy forward+backward+AdamW, optionally with the critic
(value head on a backbone copy, own AdamW) and the frozen reference's forward (MT-PPO's full memory footprint).
Compares the LM head over every position (``full``, the path before issue 11) with the head only
where a log-prob is needed (``masked``), bf16 autocast vs fp32, side by side (interleaved, same threads), each in
a fresh subprocess so peak RSS is its own. Targets: >= 2x the full head (issue 11), policy + reference + critic
within 8 GB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
episodes_n, bf16, pack_tokens = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
full, threads, masked = sys.argv[4] == "1", int(sys.argv[5]), sys.argv[6] == "1"
torch.set_num_threads(threads)
from agentgym_turn.models import load_causal_lm
from trainers import modeling as M
from trainers.credit import CreditConfig, get_strategy
from trainers.engines import stop_token_ids
from trainers.losses import policy_loss, value_loss
from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor
policy, tok = load_causal_lm("smollm2")
eos = tok.convert_tokens_to_ids("<|im_end|>")
eps, _ = collect(EnvPool(["TurnRL/WikiTwoTurn-v0"]), scripted_actor(tok, eos, ["reference", "direct"], [0.7, 0.3]),
                 tok, stop_token_ids(tok), RolloutConfig(256, 2048), num_tasks=episodes_n // 2, group_size=2, seed=0)
reference = M.frozen_copy(policy) if full else None
critic = M.ValueModel.from_policy(policy) if full else None
opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
copt = torch.optim.AdamW(critic.parameters(), lr=1e-5) if full else None
t0 = time.perf_counter()
packs = M.pack_episodes(eps, range(len(eps)), pack_tokens)
with torch.no_grad(), M.autocast(bf16):
    heads = {}
    for p in packs:
        if full:
            M.pack_logprobs(reference, p, positions=p.gather([e.loss_mask for e in eps]) if masked else None)
            heads.update(p.split(critic.pack_values(p)))
values = [M.critic_values(heads[i]) for i in range(len(eps))] if full else None
credit = get_strategy("mt_ppo" if full else "grpo_mr")(eps, values, CreditConfig())
for p in packs:
    mask = p.gather(credit.loss_masks)
    with M.autocast(bf16):
        st = M.pack_logprobs(policy, p, entropy_mask=mask, positions=mask if masked else None)
    old = p.gather([e.logprobs for e in eps])
    loss, _ = policy_loss(st.logprobs, old, p.gather(credit.advantages), mask, seq_ids=p.seq_ids)
    loss.backward()
    if full:
        with M.autocast(bf16):
            head = critic.pack_values(p)
        v = torch.cat([torch.zeros(1), head[:-1]])
        old_v = p.gather([x[:-1] for x in values])
        value_loss(v, old_v, p.gather(credit.returns), p.gather(credit.value_masks)).backward()
opt.step()
if full:
    copt.step()
dt = time.perf_counter() - t0
n = sum(len(e.token_ids) for e in eps)
print(json.dumps({"episodes": len(eps), "tokens": n, "rows": len(packs), "bf16": bf16, "pack_tokens": pack_tokens,
                  "full": full, "masked": masked, "seconds": round(dt, 1), "tok_per_s": round(n / dt, 1),
                  "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}))
"""


def run(episodes: int, bf16: bool, pack_tokens: int, full: bool, threads: int, masked: bool) -> dict:
    argv = [str(episodes), "1" if bf16 else "0", str(pack_tokens), "1" if full else "0", str(threads)]
    argv.append("1" if masked else "0")
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1][:200], "bf16": bf16, "pack_tokens": pack_tokens}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes per configuration instead of 8")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    n = 4 if args.quick else 8
    # before (LM head at every position) and after (only where a log-prob is needed), interleaved
    configs = [
        (bf16, 512, full, m) for bf16, full in [(True, False), (False, False), (True, True)] for m in (False, True)
    ]
    t0 = time.perf_counter()
    rows = [run(n, bf16, pack, full, args.threads, m) for bf16, pack, full, m in configs]
    head = ["what", "head", "bf16", "pack", "rows", "tokens", "tok/s", "x full", "peak GB"]
    print(f"{head[0]:<24}" + "".join(f"{h:>8}" for h in head[1:]))
    for i, (r, (_, _, full, m)) in enumerate(zip(rows, configs, strict=True)):
        what = "policy+critic+reference" if full else "policy only"
        if "error" in r:
            print(f"{what:<24} error: {r['error']}")
            continue
        before = rows[i - 1].get("tok_per_s") if m else r["tok_per_s"]  # the full-head row of the same kind
        ratio = r["tok_per_s"] / before if before else float("nan")
        cells = ["masked" if m else "full", r["bf16"], r["pack_tokens"], r["rows"], r["tokens"]]
        cells += [f"{r['tok_per_s']:.1f}", f"{ratio:.2f}", f"{r['peak_rss_gb']:.2f}"]
        print(f"{what:<24}" + "".join(f"{c!s:>8}" for c in cells))
    print(f"targets: masked >= 2x full; policy + reference + critic <= 8 GB; wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
