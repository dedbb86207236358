"""Experiments as files: one TOML spec per comparison, a runner that plays its grid and survives interruptions, and
the aggregation of every run into curves with a band over seeds and a final table with bootstrap CIs.

    python -m leaderboards.experiments run experiments/wiki_mtgrpo.toml        # play (or resume) the whole grid
    python -m leaderboards.experiments status experiments/wiki_mtgrpo.toml     # done / partial / pending per run
    python -m leaderboards.experiments aggregate experiments/wiki_mtgrpo.toml  # -> leaderboards/experiments/wiki_mtgrpo
    python -m leaderboards.experiments run experiments/wiki_recipe_sweep.toml --only lr1e-5/seed1  # one run

This module is the CLI; the work is in three modules, each documenting its part:

* :mod:`leaderboards.spec`: the TOML spec (every field: ``experiments/README.md``), read and validated against
  :class:`trainers.rl.RLConfig`, and its grid of arms x seeds.
* :mod:`leaderboards.runner`: plays the grid (``run``, ``status``): each run a subprocess ``python -m
  trainers.<trainer> ... --resume``, then its held-out evaluation by :mod:`leaderboards.evaluate`; the committed
  grids (``experiments/runs/``) and how a grid is resumed across sessions.
* :mod:`leaderboards.report`: ``aggregate``, the curves with a band over seeds, ``table.md`` with bootstrap CIs
  (beside the papers' numbers, :mod:`leaderboards.reported`) and ``runs.jsonl``.

They sit in the layer that reports; nothing in ``trainers`` imports them. Their public names are importable from
here too (``from leaderboards.experiments import load_spec, run_grid, aggregate``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from agentgym_turn.error import InvalidArgument
from leaderboards.report import (
    AGGREGATES_DIR,
    COST_COLUMNS,
    aggregate,
    arm_metric,
    costs,
    curves,
    paired_delta,
    paper_name,
    plot_curves,
    render_table,
    reported_for_arms,
    seed_band,
    stage_figures,
    task_values,
)
from leaderboards.runner import (
    DONE,
    RUNS_DIR,
    Launch,
    build_check_seeds,
    build_warm_start,
    call_logged,
    eval_budget,
    eval_commands,
    launch_subprocess,
    play_run,
    precision_warning,
    run_grid,
    run_state,
    select_runs,
    status,
    train_command,
    trained_steps,
    warm_weights,
)
from leaderboards.spec import TRAINERS, Arm, EvalSpec, Run, Spec, WarmStart, load_spec

__all__ = [
    "AGGREGATES_DIR",
    "COST_COLUMNS",
    "DONE",
    "RUNS_DIR",
    "TRAINERS",
    "Arm",
    "EvalSpec",
    "Launch",
    "Run",
    "Spec",
    "WarmStart",
    "aggregate",
    "arm_metric",
    "build_check_seeds",
    "build_warm_start",
    "call_logged",
    "costs",
    "curves",
    "eval_budget",
    "eval_commands",
    "launch_subprocess",
    "load_spec",
    "main",
    "paired_delta",
    "paper_name",
    "play_run",
    "plot_curves",
    "precision_warning",
    "render_table",
    "reported_for_arms",
    "run_grid",
    "run_state",
    "seed_band",
    "select_runs",
    "stage_figures",
    "status",
    "task_values",
    "train_command",
    "trained_steps",
    "warm_weights",
]


def main(argv: Sequence[str] | None = None, *, launch: Launch = launch_subprocess) -> int:
    """``run | status | aggregate SPEC``; ``run`` starts each command through ``launch`` (:data:`Launch`)."""
    parser = argparse.ArgumentParser(prog="python -m leaderboards.experiments", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "status", "aggregate"))
    parser.add_argument("spec", help="experiment spec, e.g. experiments/wiki_mtgrpo.toml")
    parser.add_argument(
        "--runs-dir",
        default=RUNS_DIR,
        help="where runs go: <runs-dir>/<name>/<arm>/seed<k> "
        f"(default {RUNS_DIR}: the committed grids, resumed; a fresh folder reproduces them)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="aggregate: output folder (default: leaderboards/experiments/"
        "<name> for the committed runs, else <runs-dir>/<name>/aggregate)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=(),
        metavar="ARM[/seedK]",
        help="run: play only these arms (every seed), runs or warm starts, e.g. --only lr1e-5/seed1, --only "
        "warm_start (built and evaluated alone), --only warm_start_seed1 (default: the whole grid and the warm "
        "start's check seeds)",
    )
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
        root = Path(args.runs_dir)
        select_runs(spec, root, args.only)
    except InvalidArgument as exc:
        parser.error(str(exc))
    if args.command == "run":
        run_grid(spec, root, args.only, launch=launch)
    elif args.command == "status":
        rows = status(spec, root)
        for name, state, steps in rows:
            print(f"{name:32s} {state:8s} {'' if name.startswith('warm_start') else f'step {steps}'}")
        counts = {s: sum(r[1] == s for r in rows) for s in ("done", "partial", "pending")}
        print(f"{spec.name}: {counts['done']} done, {counts['partial']} partial, {counts['pending']} pending")
    else:
        committed = Path(args.runs_dir) == Path(RUNS_DIR)  # the committed grid's aggregate is the leaderboard's
        out = (
            Path(args.out)
            if args.out
            else (AGGREGATES_DIR if committed else root) / spec.name / ("" if committed else "aggregate")
        )
        table = aggregate(spec, root, out)
        print((out / "table.md").read_text())
        print(f"[experiments] {len(table)} rows; curves and runs.jsonl in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
