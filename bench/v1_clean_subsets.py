"""The committed v1 evaluations, rescored on the held-out tasks of theirs that are clean (issue 49, item 2).

    python bench/v1_clean_subsets.py            # ~40 s (2-core EPYC, avx512_bf16, beside a training run)

The v1 grids (``wiki_recipe_sweep``, ``searchr1_recipe``, ``sokoban_recipe``) evaluated on held-out sets that
overlap training by content. Their final evaluations are committed task by task, and which task each line scored is
recoverable: those evaluations posed ``trainers.rollout.task_seeds(seed, episodes)`` (they predate
``distinct_task_seeds``), so ``draw_task`` on the same env and kwargs gives each task back (the script checks this
against the transcripts where it can: WikiTwoTurn-v1's cold start searched every question verbatim). Each task is
then marked clean or not:

* WikiTwoTurn-v1 and SearchR1-v1: clean when its question (with the same gold answers) is in the v2 held-out set,
  which keeps only held-out questions sharing no answer and no article (WikiTwoTurn) or no question and no gold
  answer (SearchR1) with training;
* Sokoban-v1: clean when its room's layout (``task_key``: walls, targets and boxes up to rotation and reflection)
  is not among the layouts of the cold start's own demonstrations (the rooms of ``task_seeds(seed, episodes)`` that
  ``trainers.sft`` played); RL runs also trained on rooms of their own, which this criterion does not remove.

A repeated task counts once (its first line). For every committed run with a final evaluation the script prints the
paired metric on all tasks, on the clean ones [95% bootstrap over tasks] and on the rest, and for an RL run (each
started from its grid's seed-0 cold start) its paired change from that cold start on the clean tasks. This rescores
what was committed; it does not retrain or re-run anything, so the clean subsets are smaller than a full clean
evaluation would be.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from agentgym_turn.metrics import bootstrap_ci

RUNS = Path(__file__).resolve().parent.parent / "experiments" / "runs"


@dataclass(frozen=True)
class Grid:
    """A v1 grid: its folder, env id, the metric its spec pairs, and the v2 id whose held-out set is clean (``None``:
    clean by room layout, Sokoban)."""

    name: str
    env_id: str
    metric: str
    clean_id: str | None


GRIDS = (
    Grid("wiki_recipe_sweep", "TurnRL/WikiTwoTurn-v1", "env/exact_match", "TurnRL/WikiTwoTurn-v2"),
    Grid("searchr1_recipe", "TurnRL/SearchR1-v1", "env/answer_correct", "TurnRL/SearchR1-v2"),
    Grid("sokoban_recipe", "TurnRL/Sokoban-v1", "env/success", None),
)


def final_evals(grid: Grid) -> list[Path]:
    """Every committed final evaluation of the grid (warm starts first, then arms and seeds), as run folders."""
    found = sorted(p.parents[2] for p in (RUNS / grid.name).glob("**/final-eval/transcripts/*.jsonl"))
    return sorted(found, key=lambda p: (not p.name.startswith("warm_start"), str(p)))


def header(run: Path) -> dict:
    """The final evaluation's header line (seed, episodes, env kwargs)."""
    (path,) = (run / "final-eval").glob("*.jsonl")
    with path.open() as f:
        return json.loads(f.readline())


def transcripts(run: Path) -> dict[int, dict]:
    """``{task index: transcript}`` from the run's final evaluation (trial 0)."""
    (path,) = (run / "final-eval" / "transcripts").glob("*.jsonl")
    rows = [json.loads(line) for line in path.open()]
    return {r["task"]: r for r in rows if r.get("trial", 0) == 0}


def replays(env: Any, seed: int, text: str) -> bool:
    """Whether the task that ``seed`` poses is the one this transcript played: the env's reply to the transcript's
    first turn (a search result, the room after the moves) appears in the transcript word for word."""
    env.reset(seed=seed)
    first = text.split("<|im_end|>")[0]
    messages = env.step(first)[0]
    replies = [m["content"] for m in messages if m.get("role") != "assistant"]
    return bool(replies) and all(r in text for r in replies)


@cache
def make_env(env_id: str, kwargs_json: str) -> Any:
    """One unwrapped env per id and kwargs (JSON), shared by every run that evaluated on it."""
    import gymnasium as gym

    import agentgym_turn

    gym.register_envs(agentgym_turn)
    return gym.make(env_id, **json.loads(kwargs_json)).unwrapped


@cache
def posed(env_id: str, kwargs_json: str, seed: int, n: int) -> tuple[tuple[int, ...], tuple[dict, ...]]:
    """The task seeds and tasks an evaluation of ``env_id`` with these kwargs posed at ``seed`` (``task_seeds``,
    the v1 draw)."""
    from trainers.rollout import task_seeds

    seeds = tuple(task_seeds(seed, n))
    env = make_env(env_id, kwargs_json)
    return seeds, tuple(env.draw_task(s) for s in seeds)


def question_clean(clean_id: str) -> Callable[[dict], bool]:
    """Clean when the question, with the same gold answers, is in ``clean_id``'s held-out set."""
    import gymnasium as gym

    from agentgym_turn.registration import held_out_kwargs

    clean = gym.make(clean_id, **held_out_kwargs(clean_id)).unwrapped
    keep = {(t["question"], tuple(sorted(t["answers"]))) for t in clean.tasks}
    return lambda task: (task["question"], tuple(sorted(task["answers"]))) in keep


@cache
def demo_layouts(cold_start: Path) -> frozenset[str]:
    """The room layouts of a Sokoban-v1 cold start's own SFT demonstrations (from its ``config.json``)."""
    config = json.loads((cold_start / "config.json").read_text())
    _, demos = posed("TurnRL/Sokoban-v1", "{}", int(config["seed"]), int(config["episodes"]))
    env = make_env("TurnRL/Sokoban-v1", "{}")
    return frozenset(env.task_key(t) for t in demos)


def rescore(grid: Grid) -> list[str]:
    """One markdown row per committed run of ``grid``: how many of its transcripts replay on the reconstructed tasks
    (:func:`replays`; all of them, or the reconstruction is wrong), then the metric on all, clean and other tasks."""
    rows, cold_start = [], None
    is_clean_question = question_clean(grid.clean_id) if grid.clean_id else None
    for run in final_evals(grid):
        head = header(run)
        key = (grid.env_id, json.dumps(head["env_kwargs"], sort_keys=True))
        seeds, tasks = posed(*key, int(head["seed"]), int(head["episodes"]))
        env = make_env(*key)
        if is_clean_question is None:  # by layout; every RL run of this v1 grid started from the seed-0 cold start
            seen = demo_layouts(run if run.name.startswith("warm_start") else RUNS / grid.name / "warm_start")
            clean_flag = [env.task_key(t) not in seen for t in tasks]
        else:
            clean_flag = [is_clean_question(t) for t in tasks]
        played = transcripts(run)
        scores = {i: float(r["metrics"][grid.metric]) for i, r in played.items()}
        checked = sum(replays(env, seeds[i], played[i]["text"]) for i in played)
        first: dict[str, int] = {}
        for i, t in enumerate(tasks):
            first.setdefault(env.task_key(t), i)
        keep = sorted(first.values())
        clean_ids = [i for i in keep if clean_flag[i]]
        clean = bootstrap_ci([scores[i] for i in clean_ids])
        rest = [scores[i] for i in keep if not clean_flag[i]]
        rest_mean = float(np.mean(rest)) if rest else float("nan")
        all_mean = float(np.mean([scores[i] for i in keep]))
        name = str(run.relative_to(RUNS / grid.name))
        if name == "warm_start":
            cold_start = (seeds, scores)
        paired = ""
        if not name.startswith("warm_start") and cold_start and cold_start[0] == seeds:  # the RL runs' cold start
            delta = bootstrap_ci([scores[i] - cold_start[1][i] for i in clean_ids])
            paired = f"{delta.estimate:+.3f} [{delta.low:+.3f}, {delta.high:+.3f}]"
        rows.append(
            f"| {grid.name} | {name} | {checked}/{len(played)} | {len(keep)} | {all_mean:.3f} | {len(clean_ids)} | "
            f"{clean.estimate:.3f} [{clean.low:.3f}, {clean.high:.3f}] | {len(rest)} | {rest_mean:.3f} | {paired} |"
        )
    return rows


def main() -> None:
    print(
        "| grid | run | tasks replayed | distinct tasks | metric, all | clean | on clean [95% CI] | overlapping | "
        "on overlapping | Δ on clean vs the seed-0 cold start (paired) [95% CI] |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for grid in GRIDS:
        for row in rescore(grid):
            print(row, flush=True)


if __name__ == "__main__":
    main()
