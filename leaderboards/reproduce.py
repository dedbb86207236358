"""Re-run a committed number from what its row recorded, and say whether the new value falls inside the row's CI.

    python -m leaderboards.reproduce leaderboards/results/WikiTwoTurn-v1.jsonl:4     # a leaderboard row (its line)
    python -m leaderboards.reproduce leaderboards/results/WikiTwoTurn-v1.jsonl --model smollm2+sft   # its last row
    python -m leaderboards.reproduce experiments/wiki_mtgrpo.toml --run mt_grpo/seed0   # one run of a grid
    python -m leaderboards.reproduce experiments/wiki_mtgrpo.toml --run warm_start      # a grid's warm start
    python -m leaderboards.reproduce experiments/wiki_recipe_sweep.toml --run warm_start_seed1  # a check seed
    ... --dry-run                                        # print the commands, run nothing

**A leaderboard row** holds ``commands``: the training that made the evaluated folder (``python -m trainers.sft``,
``trainers.grpo`` ...) and the evaluation, with ``{work}/k`` for the folders between them
(:mod:`trainers.provenance`). They are replayed in order in a fresh ``--work-dir`` (the evaluation's row goes to
``<work-dir>/results``, never to the committed results), at the code of this checkout. A row written before rows
recorded commands is replayed when its model needs no training (a scripted policy, the bundled ``smollm2``): its
evaluation command is rebuilt from the row's fields (:func:`rebuilt_command`); a trained model's such row cannot be.

**An experiment run** is replayed by the grid's own runner (:mod:`leaderboards.runner`) into
``<work-dir>/<name>/...``: the warm start (``python -m trainers.sft`` with the spec's arguments), then the run's
training and its final evaluation, the commands its ``run.json`` records. Its committed row is the run's
``final-eval``.

Every command is started by a launcher (:data:`leaderboards.runner.Launch`, the ``launch`` argument of
:func:`main`): a subprocess by default, as the grid's runner does; the tests play them in their own process.

**The verdict**: for every metric of the row, the reproduced estimate against the committed estimate and its 95%
CI over tasks; the row reproduces when every metric (or ``--metric``'s) lies inside its CI. The report goes to
stdout and ``<work-dir>/reproduce.json``; the exit status is 0 when it reproduces, 1 when not (2: bad arguments).
A greedy evaluation of the same weights gives the same value; a retrained model differs by the run-to-run spread
of its training, which is what the check measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentgym_turn.error import InvalidArgument
from leaderboards.evaluate import git_sha
from leaderboards.runner import Launch, call_logged, launch_subprocess
from leaderboards.tables import ResultRow, read_rows
from trainers.provenance import WORK, replay_argv

DEFAULT_WORK = Path("runs") / "reproduce"


@dataclass(frozen=True)
class Check:
    """One metric: the committed estimate and CI, the reproduced estimate, and whether it lies inside."""

    metric: str
    committed: float
    low: float
    high: float
    reproduced: float

    @property
    def inside(self) -> bool:
        return self.low - 1e-9 <= self.reproduced <= self.high + 1e-9


def compare(committed: ResultRow, reproduced: ResultRow, metrics: Sequence[str] | None = None) -> list[Check]:
    """Every metric of ``committed`` (or only ``metrics``) against the same metric of ``reproduced``."""
    keys = list(metrics) if metrics else list(committed.metrics)
    missing = [k for k in keys if k not in committed.metrics or k not in reproduced.metrics]
    if missing:
        raise InvalidArgument(
            f"metric(s) {missing} are not in both rows (committed: {sorted(committed.metrics)}, reproduced: "
            f"{sorted(reproduced.metrics)}); pass one of the committed row's metrics to --metric."
        )
    out = []
    for key in keys:
        m = committed.metrics[key]
        out.append(Check(key, float(m["estimate"]), float(m["low"]), float(m["high"]),
                         float(reproduced.metrics[key]["estimate"])))  # fmt: skip
    return out


def parse_row_ref(ref: str, model: str | None) -> tuple[Path, int]:
    """``FILE:LINE`` (1-based) or ``FILE`` with ``model`` (its last row with that model) -> (file, line)."""
    head, _, tail = ref.rpartition(":")
    path, line = (head, tail) if tail.isdigit() else (ref, "")
    file = Path(path)
    if not file.is_file():
        raise InvalidArgument(f"{path!r} is not a results file; pass e.g. leaderboards/results/WikiTwoTurn-v1.jsonl:4.")
    lines = file.read_text(encoding="utf-8").splitlines()
    if line:
        n = int(line)
        if not 1 <= n <= len(lines) or not lines[n - 1].strip():
            raise InvalidArgument(
                f"{file} has no row at line {n} (it has {len(lines)} lines); pick one of 1..{len(lines)}."
            )
        return file, n
    if model is None:
        raise InvalidArgument(f"name the row: {file}:LINE, or {file} with --model NAME (its last row of that model).")
    hits = [i + 1 for i, ln in enumerate(lines) if ln.strip() and json.loads(ln)["model"] == model]
    if not hits:
        models = sorted({json.loads(ln)["model"] for ln in lines if ln.strip()})
        raise InvalidArgument(f"--model {model!r} has no row in {file}; its models: {models}.")
    return file, hits[-1]


def load_row(file: Path, line: int) -> ResultRow:
    return ResultRow(**json.loads(file.read_text(encoding="utf-8").splitlines()[line - 1]))


def rebuilt_command(row: ResultRow) -> list[str] | None:
    """The evaluation command of a row written before rows recorded theirs, rebuilt from the row's own fields
    (env, kwargs, model, engine, tasks, trials, seed, temperature and budgets) the way :mod:`leaderboards.evaluate`
    records its own (:func:`~leaderboards.evaluate.eval_command`), when its model needs no training: a scripted
    policy or the bundled ``smollm2``. ``None`` for a trained model (its training was not recorded)."""
    from leaderboards.evaluate import EvalConfig, eval_command
    from trainers.config import config_argv

    scripted = row.model.startswith("scripted:")
    if not (scripted or row.model == "smollm2"):
        return None
    model = {} if scripted else {  # a scripted row records 0 for the model's sampling and budgets
        "temperature": row.temperature, "max_new_tokens": row.max_new_tokens, "max_turns": row.max_turns,
        "engine": row.engine}  # fmt: skip
    kwargs = [f"{k}={json.dumps(v)}" for k, v in sorted(row.env_kwargs.items())]
    cfg = EvalConfig(env=row.env_id, model=row.model, episodes=row.episodes, trials=row.trials, seed=row.seed,
                     env_kwarg=kwargs, **model)  # fmt: skip
    (command,) = eval_command(cfg, config_argv(cfg))
    return command


def _shown(cmd: Sequence[str]) -> str:
    """A command as a user would type it (``python``, not this interpreter's path)."""
    return " ".join(["python", *cmd[1:]] if cmd[0] == sys.executable else cmd)


def reproduce_row(
    row: ResultRow, work: Path, *, dry_run: bool = False, launch: Launch = launch_subprocess
) -> ResultRow | None:
    """Replay ``row.commands`` (or, for an older row of a scripted or bundled model, :func:`rebuilt_command`) in
    ``work``, each through ``launch``; the evaluation's row goes to ``work/results``. Returns the new row."""
    commands = row.commands or ([rebuilt] if (rebuilt := rebuilt_command(row)) else [])
    if not commands:
        raise InvalidArgument(
            f"the row of {row.model} on {row.env_id} (git {row.git_sha[:7]}, {row.date}) records no command: it was "
            "written before rows recorded theirs. Re-run its training and evaluation once (python -m trainers.sft "
            "... then python -m leaderboards.evaluate --model FOLDER --label NAME) and commit that row instead."
        )
    if not row.commands:
        print(f"[reproduce] {row.model} on {row.env_id}: the row predates recorded commands; its evaluation command "
              "is rebuilt from the row's fields", flush=True)  # fmt: skip
    *training, evaluation = commands
    results = work / "results"
    final = [*replay_argv(evaluation, work), "--results-dir", str(results), "--no-tables"]
    commands = [replay_argv(c, work) for c in training] + [final]
    if dry_run:
        for c in commands:
            print(_shown(c))
        return None
    if any(WORK in token for c in commands for token in c) and work.exists() and any(work.iterdir()):
        raise InvalidArgument(f"--work-dir {work} is not empty; give a new folder so no earlier run is reused.")
    for c in commands:
        print("+ " + _shown(c), flush=True)
        call_logged(c, work / "log.txt", launch)
    rows = read_rows(results) if results.is_dir() else []
    return rows[-1] if rows else None


def reproduce_run(
    spec_path: str,
    name: str,
    work: Path,
    *,
    committed_root: Path | None = None,
    dry_run: bool = False,
    launch: Launch = launch_subprocess,
) -> tuple[ResultRow, ResultRow | None]:
    """Replay one run of an experiment grid (``ARM/seedK`` or ``warm_start``) in ``work``, each command through
    ``launch``; returns its committed final-eval row and the reproduced one."""
    from leaderboards import runner as X
    from leaderboards.spec import load_spec

    spec = load_spec(spec_path)
    committed_root = Path(X.RUNS_DIR) if committed_root is None else committed_root
    checks = {out.name: (seed, out) for seed, out in spec.check_dirs(work)}
    run, check_seed = None, None
    if name == "warm_start":
        committed_dir, new_dir = spec.warm_dir(committed_root), spec.warm_dir(work)
    elif name in checks:
        check_seed, new_dir = checks[name]
        committed_dir = committed_root / spec.name / name
    else:
        runs = {f"{r.arm.name}/seed{r.seed}": r for r in spec.runs(work)}
        if name not in runs:
            raise InvalidArgument(
                f"--run {name!r} is not a run of {spec.name}; its runs: warm_start, {', '.join([*checks, *runs])}."
            )
        run = runs[name]
        committed_dir, new_dir = committed_root / spec.name / name, run.out_dir
    committed = [r for r in read_rows(committed_dir / "final-eval") if r.env_id == spec.env[0]] if (
        committed_dir / "final-eval").is_dir() else []  # fmt: skip
    if not committed:
        raise InvalidArgument(f"{committed_dir} holds no committed final evaluation; play the grid first.")
    if dry_run:
        print(f"python -m leaderboards.experiments (its runner): {spec.name} warm start -> {spec.warm_dir(work)}")
        if run is not None:
            print(" ".join(["python", *X.train_command(spec, run, spec.warm_dir(work))[1:]]))
        return committed[-1], None
    if new_dir.exists() and (new_dir / X.DONE).is_file():
        raise InvalidArgument(f"{new_dir} already holds a finished run; give a new --work-dir.")
    if check_seed is not None:
        X.build_warm_start(spec, work, out=new_dir, seed=check_seed, launch=launch)
    else:
        warm = X.build_warm_start(spec, work, launch=launch)
        if run is not None:
            X.play_run(spec, run, warm, launch=launch)
    rows = [r for r in read_rows(new_dir / "final-eval") if r.env_id == spec.env[0]]
    return committed[-1], rows[-1] if rows else None


def report(label: str, committed: ResultRow, checks: Sequence[Check], seconds: float) -> dict[str, Any]:
    """Print the verdict table and return it as a record."""
    ok = all(c.inside for c in checks)
    print(f"\n{label}: {committed.model} on {committed.env_id}, committed at git {committed.git_sha[:7]} "
          f"({committed.date}); reproduced at git {git_sha()[:7]} in {seconds:.0f} s")  # fmt: skip
    print(f"{'metric':24s} {'committed [95% CI]':28s} {'reproduced':>10s}  inside")
    for c in checks:
        ci = f"{c.committed:.4f} [{c.low:.4f}, {c.high:.4f}]"
        print(f"{c.metric:24s} {ci:28s} {c.reproduced:10.4f}  {'yes' if c.inside else 'NO'}")
    outside = [c.metric for c in checks if not c.inside]
    print("REPRODUCED: every metric inside the committed CI" if ok else f"NOT REPRODUCED: outside the CI: {outside}")
    return {"target": label, "reproduced": ok, "committed_git_sha": committed.git_sha, "git_sha": git_sha(),
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "seconds": round(seconds, 1),
            "checks": [{"metric": c.metric, "committed": c.committed, "low": c.low, "high": c.high,
                        "reproduced": c.reproduced, "inside": c.inside} for c in checks]}  # fmt: skip


def main(argv: Sequence[str] | None = None, *, launch: Launch = launch_subprocess) -> int:
    """``ROW`` or ``SPEC --run NAME``: replay (each command through ``launch``, a subprocess by default), compare,
    print; exit 0 when it reproduces."""
    parser = argparse.ArgumentParser(prog="python -m leaderboards.reproduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="RESULTS.jsonl:LINE, RESULTS.jsonl with --model, or an experiment spec .toml")
    parser.add_argument("--model", help="with a results file: its last row of this model (e.g. smollm2+sft)")
    parser.add_argument("--run", help="with a spec: ARM/seedK, warm_start or warm_start_seedK (a check seed)")
    parser.add_argument("--metric", action="append", help="decide on this metric only (repeatable; default: all)")
    parser.add_argument("--work-dir", help=f"fresh folder for the replay (default {DEFAULT_WORK}/<target>-<time>)")
    parser.add_argument(
        "--runs-dir", help="with a spec: where its committed runs are (default: the experiments' committed grids)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and run nothing")
    args = parser.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    t0 = time.perf_counter()
    try:
        if args.target.endswith(".toml"):
            if not args.run:
                raise InvalidArgument(
                    f"{args.target} is a spec: name the run with --run ARM/seedK or --run warm_start."
                )
            label = f"{args.target} {args.run}"
            work = Path(
                args.work_dir or DEFAULT_WORK / f"{Path(args.target).stem}-{args.run.replace('/', '-')}-{stamp}"
            )
            root = Path(args.runs_dir) if args.runs_dir else None
            committed, new = reproduce_run(
                args.target, args.run, work, committed_root=root, dry_run=args.dry_run, launch=launch
            )
        else:
            file, line = parse_row_ref(args.target, args.model)
            label = f"{file}:{line}"
            committed = load_row(file, line)
            work = Path(args.work_dir or DEFAULT_WORK / f"{file.stem}-{line}-{stamp}")
            new = reproduce_row(committed, work, dry_run=args.dry_run, launch=launch)
        if args.dry_run:
            return 0
        if new is None:
            raise RuntimeError(f"the replay in {work} wrote no result row.")
        checks = compare(committed, new, args.metric)
    except InvalidArgument as exc:
        parser.error(str(exc))
    record = report(label, committed, checks, time.perf_counter() - t0)
    record["reproduced_row"] = json.loads(new.to_json())
    (work / "reproduce.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0 if record["reproduced"] else 1


if __name__ == "__main__":
    sys.exit(main())
