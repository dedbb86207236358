"""TurnRL/CreditChain-v0: does a policy's turn-1 pick depend on the clue? Teacher-forced pick probabilities.

    python bench/credit_chain_picks.py smollm2 experiments/runs/credit_chain/warm_start/policy   # ~100 s a model
    python bench/credit_chain_picks.py --pairs Map <policy folder>                 # one option pair's tasks only

For every task of both splits (144 training, 48 held-out) the script scores the two well-formed first turns,
``<choice>A</choice>`` and ``<choice>B</choice>``, under the model (teacher-forced, fp32, after the env's own
opening at ``--horizon``, rendered and tokenised as the trainer's rollouts do) and reports, per split: the mean
probability of the right option given one of the two (``P(right)``), the fraction of tasks where the right one is
the likelier (``greedy right``), the mean ``P(right)`` per option pair, and the mean probability mass the two
well-formed picks hold (1: the model answers turn 1 in the asked format). A sampled evaluation reads the same thing
with noise; this reads it exactly.

Reading: ``P(right)`` 0.50 on every pair with ``greedy right`` 0.50 means the pick ignores the clue (a constant per
pair, or a coin); a policy that learned the mapping (rainy words -> umbrella) has ``P(right)`` well above 0.5 on the
training words, and on the held-out words as far as the mapping carries over. ``smollm2`` is the bundled
SmolLM2-135M-Instruct as downloaded; any other argument is a saved policy folder. ~100 s a model on a 2-core EPYC
with ``avx512_bf16`` (2026-11-28); run it alone, not beside a training job.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from agentgym_turn.models import load_causal_lm
from envs.credit_chain import SPLITS, CreditChainEnv, build_tasks
from trainers.rollout import encode, render


def pick_logprob(model, prompt_ids: list[int], continuation: list[int]) -> float:
    """Summed log-probability of ``continuation`` after ``prompt_ids`` (teacher-forced, one forward pass)."""
    import torch

    x = torch.tensor([prompt_ids + continuation])
    with torch.no_grad():
        logp = model(x).logits[0, len(prompt_ids) - 1 : -1].float().log_softmax(-1)
    return float(sum(logp[i, t] for i, t in enumerate(continuation)))


def score_model(spec: str, horizon: int, pairs: str | None = None) -> dict[str, dict[str, float]]:
    """Per split: ``p_right``, ``greedy_right``, ``mass`` and ``p_right/<frame>`` over every task of the split (of
    the option pairs ``pairs`` names, as the env's kwarg; all four by default)."""
    if spec != "smollm2" and not Path(spec).is_dir():
        raise SystemExit(f"model {spec!r} is not a folder; pass a saved policy folder or 'smollm2'.")
    model, tok = load_causal_lm(spec, dtype="float32")
    model.eval()
    env = CreditChainEnv(horizon=horizon)
    out: dict[str, dict[str, float]] = {}
    for split in SPLITS:
        rows: list[tuple[str, float, float]] = []
        for task in build_tasks(split, pairs):
            a, b = task["options"]
            messages, _ = env.reset(seed=0, options={"task": task})
            prompt = encode(tok, render(tok, messages, generation_prompt=True))
            la, lb = (pick_logprob(model, prompt, encode(tok, f"<choice>{o}</choice>")) for o in (a, b))
            p_a = 1.0 / (1.0 + math.exp(lb - la))
            rows.append((task["frame"], p_a if task["answer"] == a else 1.0 - p_a, math.exp(la) + math.exp(lb)))
        n = len(rows)
        stats = {
            "p_right": sum(r[1] for r in rows) / n,
            "greedy_right": sum(r[1] > 0.5 for r in rows) / n,
            "mass": sum(r[2] for r in rows) / n,
        }
        for frame in dict.fromkeys(r[0] for r in rows):
            mine = [r[1] for r in rows if r[0] == frame]
            stats[f"p_right/{frame}"] = sum(mine) / len(mine)
        out[split] = stats
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="saved policy folders, or 'smollm2' for the bundled model")
    parser.add_argument("--horizon", type=int, default=4, help="the horizon the opening names (default 4)")
    parser.add_argument("--pairs", default=None, help="only these option pairs, as the env's kwarg (e.g. Map)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    for path in args.models:
        start = time.perf_counter()
        stats = score_model(path, args.horizon, args.pairs)
        print(f"== {path} ({time.perf_counter() - start:.0f} s)")
        frames = [k for k in stats["train"] if k.startswith("p_right/")]
        print(f"{'split':6} {'P(right)':>8} {'greedy right':>12} {'mass':>6}  " + "  ".join(f[8:] for f in frames))
        for split, s in stats.items():
            per = "  ".join(f"{s[f]:{len(f) - 8}.3f}" for f in frames)
            print(f"{split:6} {s['p_right']:8.3f} {s['greedy_right']:12.3f} {s['mass']:6.3f}  {per}")


if __name__ == "__main__":
    main()
