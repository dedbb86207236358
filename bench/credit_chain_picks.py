"""TurnRL/CreditChain-v0: does a policy's turn-1 pick depend on the clue? Teacher-forced pick probabilities.

    python bench/credit_chain_picks.py smollm2 experiments/runs/credit_chain/warm_start/policy   # ~100 s a model
    python bench/credit_chain_picks.py --pairs Map <policy folder>                 # one option pair's tasks only
    python bench/credit_chain_picks.py --sampled experiments/runs/credit_chain_map_bf16/*/seed0  # final evaluations

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

``--sampled RUN...`` reads instead what a run's final evaluation sampled (``<run>/final-eval``: its summary and
transcripts, no model; a second a run). It recovers each transcript's task from the evaluation's seed and kwargs (the
evaluator's :func:`~trainers.rollout.distinct_task_seeds` and the env's ``draw_task``), checks the recovery against
every episode (a pick scored right must be the recovered task's answer, a pick scored wrong must not), and reports per
option pair A/B: ``P(A | A right)``, ``P(A | B right)`` and their difference, the **clue gap** (0: the pick ignores the
clue, a constant or a coin; 1: always right), with the sampled success (overall and on the tasks whose answer is each
option: a policy leaning to one option scores high on its tasks and low on the other's) and the picks that named no
option. It also reports the **option echo**: the fraction of the later turns' answers (the distractor requests, "Name an
animal.", and the closing ``Say done.``) that name one of the task's two options, as a whole word anywhere in the turn's
text (in the ``<answer>`` tag or not). The cold starts echo about nothing (at most 0.003 in credit_chain_map_epoch); an
RL run can learn to, since under every strategy here the later turns' tokens take the outcome's advantage, so the option
words there are pushed up or down with the episode's luck. No later answer is paid (the distractor turns pay the same
noise whatever it says), so an echo earns nothing: it is drift in the weights the turns share, not reward.

Given several runs of one grid, it also counts how many of each later run's turn-1 picks equal the first run's, episode
by episode (the evaluations pose the same tasks): 96 of 96 means two arms ended with the same policy as far as the pick
goes, whatever their success.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from agentgym_turn.models import load_causal_lm
from envs.credit_chain import SPLITS, CreditChainEnv, build_tasks, parse_choice
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


def _summary(run: Path) -> tuple[Path, dict]:
    """``run``'s final-evaluation summary file and its last row; ``SystemExit`` naming the folder when it has none."""
    import json

    summaries = sorted((run / "final-eval").glob("CreditChain-*.jsonl"))
    if not summaries:
        raise SystemExit(f"{run} has no final-eval/CreditChain-*.jsonl; pass a finished CreditChain run's folder.")
    return summaries[0], json.loads(summaries[0].read_text().splitlines()[-1])


def _final_eval(run: Path) -> tuple[dict, list[dict], list[dict]]:
    """``run``'s final-evaluation summary, the tasks it posed (recovered from its seed and kwargs) and its transcript
    rows, each with its turn-1 ``pick`` (an option, or None when the first turn named none) added. Raises
    ``SystemExit`` naming the folder when it holds no CreditChain evaluation or a transcript does not match its
    recovered task."""
    import json

    import gymnasium as gym

    import envs  # noqa: F401  (registers the TurnRL ids)
    from trainers.rollout import distinct_task_seeds

    path, summary = _summary(run)
    env = gym.make(summary["env_id"], **summary["env_kwargs"])
    base = env.unwrapped
    tasks = [base.draw_task(s) for s in distinct_task_seeds(env, summary["seed"], summary["episodes"])]
    env.close()
    rows = []
    for line in (run / "final-eval" / "transcripts" / path.name).read_text().splitlines():
        row = json.loads(line)
        task = tasks[row["task"]]
        row["pick"] = parse_choice(row["text"].split("<|im_end|>")[0], task["options"])
        ok = row["metrics"]["env/success"] == 1.0
        if ok != (row["pick"] == task["answer"]):
            raise SystemExit(f"{run}: task {row['task']} trial {row['trial']} scored {ok} but picked {row['pick']!r} "
                             f"on {task['id']} (answer {task['answer']!r}): the tasks were not recovered.")  # fmt: skip
        rows.append(row)
    return summary, tasks, rows


def sampled_picks(run: Path | tuple[dict, list[dict], list[dict]]) -> dict[str, float | int | str]:
    """The clue gap of ``run``'s final evaluation (``run/final-eval``, or what :func:`_final_eval` read from it), per
    option pair and overall, with the success on the tasks whose answer is each option (``<option> tasks: success``)
    and the option echo (the module's docstring). Raises ``SystemExit`` as :func:`_final_eval` does."""
    _, tasks, rows = _final_eval(run) if isinstance(run, Path) else run
    counts: dict[str, dict[str, list[int]]] = {}  # frame -> "A right"/"B right" -> [picked A, valid picks]
    by_answer: dict[str, list[int]] = {}  # answer -> [right, episodes]
    invalid = right = total = later = echoes = 0
    for row in rows:
        task, pick = tasks[row["task"]], row["pick"]
        ok = pick == task["answer"]
        total += 1
        right += ok
        cell = by_answer.setdefault(task["answer"], [0, 0])
        cell[0] += ok
        cell[1] += 1
        for turn in row["text"].split("<|im_start|>assistant\n")[1:]:  # the later turns' answers, turn 1 excluded
            later += 1
            echoes += any(re.search(rf"\b{re.escape(o)}\b", turn.split("<|im_end|>")[0], re.I) for o in task["options"])
        if pick is None:
            invalid += 1
            continue
        a = sorted(task["options"])[0]  # the pair's options in a fixed order, whichever order the task showed
        cell = counts.setdefault(task["frame"], {}).setdefault(f"{a} right" if task["answer"] == a else "other", [0, 0])
        cell[0] += pick == a
        cell[1] += 1
    out: dict[str, float | int | str] = {"episodes": total, "success": right / total, "invalid": invalid}
    for answer in sorted(by_answer):
        out[f"{answer} tasks: success"] = by_answer[answer][0] / by_answer[answer][1]
    gaps = []
    for frame, cells in counts.items():
        if len(cells) < 2:  # every valid pick of the pair came from tasks with the same answer: no gap to read
            continue
        a = next(k for k in cells if k != "other").removesuffix(" right")
        p_a_right = cells[f"{a} right"][0] / cells[f"{a} right"][1]
        p_a_other = cells["other"][0] / cells["other"][1]
        out[f"{frame}: P({a} | {a} right)"] = p_a_right
        out[f"{frame}: P({a} | other right)"] = p_a_other
        out[f"{frame}: clue gap"] = p_a_right - p_a_other
        gaps.append(p_a_right - p_a_other)
    out["clue gap"] = sum(gaps) / len(gaps) if gaps else math.nan  # nan: no pair with valid picks on both sides
    out["later answers"] = later
    out["option echo"] = echoes / later if later else math.nan  # nan: no episode reached turn 2
    return out


def picks_alike(first: Path, other: Path) -> tuple[int, int]:
    """How many of two runs' final-evaluation episodes picked the same turn-1 option (None counting as a pick), of
    how many: (alike, episodes). The two evaluations must pose the same tasks (same env, kwargs, seed and episode
    count), or ``SystemExit`` says which differs."""
    _same_tasks(first, _summary(first)[1], other, _summary(other)[1])  # before recovering: the clearer error
    return _alike(first, _final_eval(first)[2], other, _final_eval(other)[2])


def _same_tasks(first: Path, s1: dict, other: Path, s2: dict) -> None:
    """``SystemExit`` naming the first key (env, kwargs, seed, episode count) where two evaluation summaries differ."""
    for key in ("env_id", "env_kwargs", "seed", "episodes"):
        if s1[key] != s2[key]:
            raise SystemExit(f"{first} and {other} evaluated different tasks ({key} {s1[key]!r} vs {s2[key]!r}); "
                             "compare runs of one grid, whose final evaluations share their tasks.")  # fmt: skip


def _alike(first: Path, rows1: list[dict], other: Path, rows2: list[dict]) -> tuple[int, int]:
    """:func:`picks_alike` on transcript rows already read (with their ``pick``)."""
    picks1 = {(r["task"], r["trial"]): r["pick"] for r in rows1}
    picks2 = {(r["task"], r["trial"]): r["pick"] for r in rows2}
    if picks1.keys() != picks2.keys():
        raise SystemExit(f"{first} and {other} hold different (task, trial) episodes; rerun the shorter evaluation.")
    return sum(picks1[k] == picks2[k] for k in picks1), len(picks1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="saved policy folders, or 'smollm2' for the bundled model; with "
                        "--sampled, finished runs' folders")  # fmt: skip
    parser.add_argument("--horizon", type=int, default=4, help="the horizon the opening names (default 4)")
    parser.add_argument("--pairs", default=None, help="only these option pairs, as the env's kwarg (e.g. Map)")
    parser.add_argument("--sampled", action="store_true", help="read the runs' final evaluations, not the models")
    args = parser.parse_args(argv)
    if args.sampled:
        runs = [Path(path) for path in args.models]
        read = [_final_eval(run) for run in runs]  # each run's evaluation read and its tasks recovered once
        for run, ev in zip(runs, read, strict=True):
            stats = sampled_picks(ev)
            print(f"== {run}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                            for k, v in stats.items()))  # fmt: skip
        for run, ev in zip(runs[1:], read[1:], strict=True):
            _same_tasks(runs[0], read[0][0], run, ev[0])
            alike, n = _alike(runs[0], read[0][2], run, ev[2])
            print(f"== {run}: turn-1 picks alike with {runs[0]}: {alike} of {n}")
        return
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
