"""The grid runner of ``python -m leaderboards.experiments``: plays a spec's grid (:mod:`leaderboards.spec`) and
survives interruptions; :mod:`leaderboards.report` aggregates what it played.

It drives the trainers as subprocesses (``python -m trainers.<trainer>``, the spec's values rendered as flags by
:func:`trainers.config.render_flags`) and evaluates with :mod:`leaderboards.evaluate`.

**Committed grids.** Runs go to ``experiments/runs/<name>/<arm>/seed<k>`` by default, and their results (metrics,
run records, final evaluations) are committed while weights, checkpoints and logs are not (``.gitignore``): work
here is interrupted every few hours on a fresh machine, so a grid is played across sessions by committing each
finished run. On a fresh clone ``run`` skips the committed runs and rebuilds only the warm start's weights (the
same command; its evaluation goes to ``rebuilt-eval/`` and is compared with the committed one in ``run.json``).
``--runs-dir runs/mine`` plays a grid from scratch instead (to reproduce a committed curve).

**The grid** is played sequentially, warm start first, then seed by seed and arm by arm (so an interrupted grid has
every arm at the same number of seeds); with ``[warm_start] per_seed``, each seed's own warm start is built right
before that seed's first run (:meth:`leaderboards.spec.Spec.start_dir`).

Each run is a subprocess ``python -m trainers.<trainer> ... --out-dir
<run> --resume``: ``--resume`` continues from the run's last checkpoint (a fresh start when there is none), so a
run killed at any point loses at most the step in flight. After training, the final policy is evaluated greedily
on the held-out tasks by ``python -m leaderboards.evaluate`` (its row, with bootstrap CIs over tasks, goes to
``<run>/final-eval/``, every episode's text to ``<run>/final-eval/transcripts/``), then what only
a resume needs is dropped (the checkpoint's optimizer state and vLLM's weight copy; the final policy stays), and
only then ``<run>/DONE.json`` is written; a run with it is skipped. ``<run>/run.json``
records the spec, arm, seed, the exact command and the git sha of every attempt; a run whose command changed since
it started (the spec was edited) stops the runner instead of mixing two configs. Every command goes through one
launcher (:data:`Launch`, the ``launch`` argument of :func:`run_grid` and the functions under it):
:func:`launch_subprocess` by default, so that a run killed or crashed ends its own process, not the runner; the
tests pass one that plays the command in their own process (``tests/leaderboards/conftest.py``), without a new
interpreter's ~25 s of imports per run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentgym_turn.error import InvalidArgument
from leaderboards.evaluate import git_dirty, git_sha
from leaderboards.spec import Run, Spec, _config_of, _run_values
from leaderboards.tables import read_rows
from trainers.config import render_flags

DONE = "DONE.json"
RUNS_DIR = "experiments/runs"  # committed: every run's results (weights and checkpoints are .gitignored)


# ---------------------------------------------------------------------------------------------------- commands
def eval_budget(cfg: Any) -> dict[str, Any]:
    """The generation budgets and engine of a training config, for its final evaluation; where the config sets
    ``bf16`` (a grid pinned to one precision on every host kind), the vLLM engine computes in that precision too
    (``engine_dtype``), as the trainer's own engine does."""
    out = {"max_new_tokens": cfg.max_new_tokens, "max_turns": cfg.max_turns, "max_context": cfg.max_context,
           "engine": cfg.engine}  # fmt: skip
    if cfg.bf16 is not None and cfg.engine == "vllm":
        out["engine_dtype"] = "bfloat16" if cfg.bf16 else "float32"
    if cfg.threads:
        out["threads"] = cfg.threads
    return out


def train_command(spec: Spec, run: Run, warm: Path | None) -> list[str]:
    """``python -m trainers.<trainer> <flags> --out-dir <run> --resume`` for one run."""
    trainer = run.arm.trainer or spec.trainer
    flags = render_flags(_run_values(spec, run, warm))
    return [sys.executable, "-m", f"trainers.{trainer}", *flags, "--out-dir", str(run.out_dir), "--resume"]


def eval_commands(spec: Spec, policy: Path, out: Path, budget: Mapping[str, Any]) -> list[list[str]]:
    """One ``python -m leaderboards.evaluate`` per env id: greedy (or ``[eval]``'s temperature and trials), the
    held-out tasks, ``budget`` (see
    :func:`eval_budget`) as flags; every episode's text goes to ``out/transcripts/<env>.jsonl`` (committed with the
    results: what the final policy does, readable without its weights)."""
    cmds = []
    for env_id in spec.env:
        transcripts = out / "transcripts" / (env_id.rpartition("/")[2] + ".jsonl")
        cmd = [sys.executable, "-m", "leaderboards.evaluate", "--env", env_id, "--model", str(policy),
               "--episodes", str(spec.eval.tasks), "--seed", str(spec.eval.seed),
               "--temperature", "0" if not spec.eval.temperature else str(spec.eval.temperature),
               "--results-dir", str(out), "--no-tables", "--transcripts", str(transcripts)]  # fmt: skip
        if spec.eval.trials > 1:
            cmd += ["--trials", str(spec.eval.trials)]
        cmd += render_flags(budget)
        for key, value in spec.eval.env_kwargs.items():
            cmd += ["--env-kwarg", f"{key}={json.dumps(value)}"]
        cmds.append(cmd)
    return cmds


# ---------------------------------------------------------------------------------------------------- state
def trained_steps(run_dir: Path) -> int:
    """Steps of the run's latest checkpoint (0 without one)."""
    from trainers.checkpoint import latest_name

    ckpt = latest_name(run_dir)
    return 0 if ckpt is None else int(ckpt.name.rsplit("-", 1)[1])


def run_state(run_dir: Path) -> str:
    """``"done"`` (``DONE.json``), ``"partial"`` (started: ``run.json`` or a checkpoint) or ``"pending"``."""
    if (run_dir / DONE).is_file():
        return "done"
    return "partial" if (run_dir / "run.json").is_file() or (run_dir / "latest").is_file() else "pending"


def _write_json(path: Path, data: Any) -> None:
    from trainers.checkpoint import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _start_record(run_dir: Path, record: dict[str, Any], command: list[str]) -> None:
    """Record this attempt in ``run.json``; refuse when the recorded command differs (the spec changed)."""
    path = run_dir / "run.json"
    shown = command[1:]  # the interpreter path is machine-specific
    if path.is_file():
        old = json.loads(path.read_text())
        if old["command"] != shown:
            raise InvalidArgument(
                f"{run_dir} was started with a different command (the spec changed since):\n  was {old['command']}\n"
                f"  now {shown}\nRestore the spec, or delete {run_dir} to start this run over."
            )
        record = old
    else:
        record = {**record, "command": shown, "attempts": []}
    attempt = {"git_sha": git_sha(), "started": _now(), "from_step": trained_steps(run_dir), "host": host()}
    dirty = [f for f in git_dirty() if f.endswith(".py")]
    if dirty:  # the code that ran is git_sha plus these uncommitted changes (results and docs left out)
        attempt["uncommitted_code"] = dirty
    record["attempts"].append(attempt)
    _write_json(path, record)


def host() -> dict[str, Any]:
    """The CPU an attempt ran on: its model name and the cores this process may use, so that runs compared with one
    another say whether they shared a machine (the speed of a step depends on it; sampled rollouts at one seed can
    differ between runs even on one machine: vLLM's engine core, in its own process, batches requests by timing),
    and whether it computes bf16 natively (``agentgym_turn.hardware.native_bf16``, recorded as ``bf16_kernels``:
    without it ``--dtype auto`` trains in fp32, and an explicit bf16 run is 4-20x slower)."""
    from agentgym_turn.hardware import cpu_model, native_bf16

    name = cpu_model()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"cpu": name, "cores": cores, "bf16_kernels": native_bf16("cpu")}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


#: How the runner starts one command, ``[python, "-m", module, *args]``: ``launch(cmd, log)`` runs it with its
#: stdout and stderr appended to the file ``log`` and returns its exit status (0: success).
Launch = Callable[[list[str], Path], int]


def launch_subprocess(cmd: list[str], log: Path) -> int:
    """The default :data:`Launch`: ``cmd`` as a child process (this process's working directory; the repository on
    ``PYTHONPATH``), its output appended to ``log``; returns its exit status. A run that crashes or is killed ends
    only the child: the runner gets the status (negative: the signal) and stops with the log's tail. A runner that
    is killed takes the child along (SIGTERM on the runner's death: the trainer then stops its vLLM engine too)."""
    from agentgym_turn.serve import die_with_parent

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)}
    with open(log, "a") as f:
        return subprocess.run(list(cmd), stdout=f, stderr=subprocess.STDOUT, env=env, check=False,
                              preexec_fn=die_with_parent).returncode  # fmt: skip


def call_logged(cmd: Sequence[str], log: Path, launch: Launch = launch_subprocess) -> None:
    """Run ``cmd`` through ``launch`` (a subprocess by default), appending a header line and its output to ``log``;
    a failure raises with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd[1:])}  # {_now()}\n")
    rc = launch(list(cmd), log)
    if rc != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(cmd[1:4])} ... exited with {rc}; its log {log} ends with:\n{tail}")


# ---------------------------------------------------------------------------------------------------- run
def build_check_seeds(spec: Spec, root: Path, only: Sequence[str] = (), *, launch: Launch = launch_subprocess) -> None:
    """Build and evaluate the warm start's command at each of its ``check_seeds`` not yet done (results only:
    nothing starts from them, so a committed one is never rebuilt); with ``only``, just the warm starts it names
    (``warm_start_seed<k>``, per-seed ones included). Without ``only`` a per-seed warm start (``per_seed``) is left
    to :func:`run_grid`, which builds it right before the first run of its seed."""
    checks = spec.warm_start.check_seeds if spec.warm_start is not None else ()
    for seed, out in spec.check_dirs(root):
        if (only and out.name not in only) or (not only and seed not in checks):
            continue
        if not (out / DONE).is_file():
            build_warm_start(spec, root, out=out, seed=seed, launch=launch)


def build_warm_start(
    spec: Spec,
    root: Path,
    *,
    out: Path | None = None,
    seed: int | None = None,
    launch: Launch = launch_subprocess,
) -> Path | None:
    """Build the shared warm start once (its ``DONE.json`` marks it built; a done one without its weights, as
    committed, has them rebuilt); returns its folder. ``out`` and ``seed``: the same command at another seed into
    another folder (a check seed, or a per-seed warm start); ``launch``: see :data:`Launch`."""
    if spec.warm_start is None:
        return None
    out = spec.warm_dir(root) if out is None else out
    done = (out / DONE).is_file()
    if done and warm_weights(out) is not None:
        return out
    args = {"env": list(spec.env), **spec.warm_start.args, "out_dir": str(out)}
    if seed is not None:
        args["seed"] = seed
    cmd = [sys.executable, "-m", spec.warm_start.module, *render_flags(args)]
    what = (
        "rebuilding the warm start's weights (its results are committed, its weights are not)"
        if done
        else ("building the warm start" + ("" if seed is None else f" at seed {seed}"))
    )
    print(f"[experiments] {spec.name}: {what} in {out}", flush=True)
    _start_record(out, {"spec": spec.path, "arm": "warm_start", "seed": args.get("seed", 0)}, cmd)
    log, rebuilt_log, kept = out / "metrics.jsonl", out / "rebuilt-metrics.jsonl", out / ".committed-metrics.jsonl"
    if done and log.is_file():  # the trainer rewrites its log: the committed one waits aside, even through a crash
        log.replace(kept)
        rebuilt_log.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        call_logged(cmd, out / "log.txt", launch)
    finally:
        if kept.is_file():
            if log.is_file():
                log.replace(rebuilt_log)
            kept.replace(log)
    policy = warm_weights(out)
    if policy is None:
        raise RuntimeError(f"{' '.join(cmd[1:3])} exited 0 but wrote no policy weights under {out}.")
    budget = eval_budget(_config_of(spec, spec.runs(root)[0], None))  # the arms' budgets
    # A rebuild is evaluated beside the committed evaluation (never over it) and the two are compared: the arms
    # that are still to run start from the rebuilt weights.
    evaluated = out / ("rebuilt-eval" if done else "final-eval")
    for old in evaluated.glob("*.jsonl") if evaluated.exists() else ():
        old.unlink()
    for c in eval_commands(spec, policy, evaluated, budget):
        call_logged(c, out / "log.txt", launch)
    if done:
        report = compare_evaluations(out / "final-eval", evaluated)
        print(f"[experiments] {spec.name}: rebuilt warm start vs committed: {report}", flush=True)
        record = json.loads((out / "run.json").read_text())
        record["attempts"][-1]["rebuilt_vs_committed"] = report
        if log.is_file() and rebuilt_log.is_file():
            record["attempts"][-1]["rebuilt_training_log"] = compare_training_logs(log, rebuilt_log)
        _write_json(out / "run.json", record)
        return out
    _write_json(out / DONE, {"git_sha": git_sha(), "finished": _now(), "seconds": time.perf_counter() - t0})
    return out


def warm_weights(folder: Path) -> Path | None:
    """The HF folder holding a warm start's weights (``policy/`` or the folder itself), ``None`` when the weights
    are absent (a committed grid carries results, not weights)."""
    for candidate in (folder / "policy", folder):
        if (candidate / "config.json").is_file() and any(candidate.glob("*.safetensors")):
            return candidate
    return None


def compare_training_logs(committed: Path, rebuilt: Path) -> dict[str, Any]:
    """How a rebuilt warm start's training log compares with the committed one, timings (``perf/``) aside:
    ``{"rows": n, "rows_differing": k}`` (a deterministic rebuild differs in none)."""
    from trainers.metrics import read_jsonl

    def rows(path: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in read_jsonl(path)]

    old, new = rows(committed), rows(rebuilt)
    differing = sum(a != b for a, b in zip(old, new, strict=False)) + abs(len(old) - len(new))
    return {"rows": len(new), "rows_differing": differing}


def compare_evaluations(committed: Path, rebuilt: Path) -> dict[str, Any]:
    """Per env and metric, the committed and the rebuilt estimate (a deterministic rebuild gives equal values)."""
    old = {r.env_id: r.metrics for r in read_rows(committed)} if committed.is_dir() else {}
    out: dict[str, Any] = {}
    for row in read_rows(rebuilt):
        for key, m in row.metrics.items():
            before = old.get(row.env_id, {}).get(key)
            out[f"{row.env_id}/{key}"] = {
                "committed": None if before is None else round(float(before["estimate"]), 4),
                "rebuilt": round(float(m["estimate"]), 4),
            }
    return out


def play_run(spec: Spec, run: Run, warm: Path | None, *, launch: Launch = launch_subprocess) -> None:
    """Train (or resume) one run, evaluate its final policy, mark it done; ``launch``: see :data:`Launch`."""
    from trainers.checkpoint import drop_training_state, policy_folder

    cfg = _config_of(spec, run, warm)
    cmd = train_command(spec, run, warm)
    _start_record(run.out_dir, {"spec": spec.path, "name": spec.name, "arm": run.arm.name,
                                "strategy": run.arm.strategy, "seed": run.seed}, cmd)  # fmt: skip
    t0 = time.perf_counter()
    done_steps = trained_steps(run.out_dir)
    if done_steps < cfg.steps:
        print(f"[experiments] {spec.name}/{run.arm.name}/seed{run.seed}: "
              f"{'resuming at step ' + str(done_steps) if done_steps else 'starting'} ({cfg.steps} steps)",
              flush=True)  # fmt: skip
        call_logged(cmd, run.out_dir / "log.txt", launch)
    if trained_steps(run.out_dir) != cfg.steps:
        raise RuntimeError(f"{run.out_dir}: the trainer exited 0 but its checkpoint is not at step {cfg.steps}.")
    evaluated = run.out_dir / "final-eval"
    if evaluated.exists():  # a killed evaluation may have written a row: start the evaluation over
        for old in evaluated.glob("*.jsonl"):
            old.unlink()
    for c in eval_commands(spec, Path(policy_folder(str(run.out_dir))), evaluated, eval_budget(cfg)):
        call_logged(c, run.out_dir / "log.txt", launch)
    drop_training_state(run.out_dir)  # a done run is never resumed: ~1.3 GB a run of optimizer state and vLLM copy
    _write_json(run.out_dir / DONE, {"git_sha": git_sha(), "finished": _now(), "seconds": time.perf_counter() - t0,
                                     "steps": cfg.steps})  # fmt: skip


def select_runs(spec: Spec, root: Path, only: Sequence[str] = ()) -> list[Run]:
    """The grid's runs in play order, or those named by ``only`` (``ARM`` for every seed of an arm, ``ARM/seedK``
    for one run; the warm start, ``warm_start``, or one of its check seeds, ``warm_start_seed<k>``, is accepted and
    selects no run: :func:`run_grid` builds and evaluates it alone); an unknown name raises, listing the grid's."""
    runs = spec.runs(root)
    if not only:
        return runs
    names = {r.arm.name for r in runs} | {f"{r.arm.name}/seed{r.seed}" for r in runs}
    checks = {out.name for _seed, out in spec.check_dirs(root)} | ({"warm_start"} if spec.warm_start else set())
    unknown = [o for o in only if o not in names | checks]
    if unknown:
        raise InvalidArgument(f"--only {unknown}: not in {spec.path}'s grid; use an arm or ARM/seedK of "
                              f"{sorted(names | checks)}.")  # fmt: skip
    return [r for r in runs if r.arm.name in only or f"{r.arm.name}/seed{r.seed}" in only]


def precision_warning(spec: Spec, root: Path, runs: Sequence[Run], native: bool) -> str | None:
    """What a host without native bf16 (``native`` False: an AVX2-only CPU, or AVX-512 without ``avx512_bf16``)
    should know before it plays ``runs``: which of them ask for bf16 (``dtype = "bfloat16"`` or ``bf16 = true``,
    emulated there, 4-20x slower than fp32) and whether the warm start, rebuilt with ``bf16`` unset, will train in
    fp32 (its cold start can then differ from a committed one trained in bf16).
    ``None`` when there is nothing to say."""
    if native:
        return None
    warm = spec.warm_dir(root) if spec.warm_start is not None else None
    slow = []
    for run in runs:
        if run_state(run.out_dir) != "done":
            cfg = _config_of(spec, run, warm)
            if cfg.dtype == "bfloat16" or cfg.bf16:
                slow.append(f"{run.arm.name}/seed{run.seed}")
    ws = spec.warm_start
    rebuilt_fp32 = ws is not None and ws.args.get("bf16") is None and warm_weights(spec.warm_dir(root)) is None
    if not slow and not rebuilt_fp32:
        return None
    parts = []
    if slow:
        shown = ", ".join(slow[:4]) + (f" and {len(slow) - 4} more" if len(slow) > 4 else "")
        parts.append(
            f"{len(slow)} run(s) of {spec.name} ask for bf16 ({shown}): here bf16 is emulated, an update 4-20x "
            "slower than fp32"
        )
    if rebuilt_fp32:
        parts.append(
            "the warm start leaves bf16 unset, so its rebuild trains in fp32 here and its cold start can differ from "
            "one trained in bf16"
        )
    return (
        "[experiments] warning: this host has no native bf16 (agentgym_turn.hardware); " + "; ".join(parts) + ". To "
        "match runs made in bf16 (the committed grids' runs) use a CPU with avx512_bf16 or amx_bf16, or a bf16 GPU; to "
        'train fast here, set dtype = "auto" and drop bf16 in a copy of the spec (its numbers are then its own).'
    )


def run_grid(spec: Spec, root: Path, only: Sequence[str] = (), *, launch: Launch = launch_subprocess) -> None:
    """Play the warm start and every run not yet done (or those named by ``only``), sequentially, each command
    through ``launch`` (:data:`Launch`; default: a subprocess); first, on a host without native bf16, a warning
    for what will run slowly or differently there (:func:`precision_warning`)."""
    from agentgym_turn.hardware import native_bf16
    from trainers.device import resolve_device

    selected = select_runs(spec, root, only)
    warning = precision_warning(spec, root, selected, native_bf16(resolve_device("auto")))
    if warning:
        print(warning, file=sys.stderr, flush=True)
    warm = build_warm_start(spec, root, launch=launch)
    build_check_seeds(spec, root, only, launch=launch)
    for run in selected:
        if run_state(run.out_dir) == "done":
            print(f"[experiments] {spec.name}/{run.arm.name}/seed{run.seed}: done, skipped", flush=True)
            continue
        start = spec.start_dir(run, root)
        if start is not None and start != warm:  # per_seed: this seed's own warm start, built (or its weights
            build_warm_start(spec, root, out=start, seed=run.seed, launch=launch)  # rebuilt) once, when first needed
        play_run(spec, run, start, launch=launch)
    print(f"[experiments] {spec.name}: all {len(selected)} runs done; "
          f"aggregate with: python -m leaderboards.experiments aggregate {spec.path}", flush=True)  # fmt: skip


def status(spec: Spec, root: Path) -> list[tuple[str, str, int]]:
    """``(name, state, trained steps)`` of the warm start and every run, in play order."""
    rows = []
    if spec.warm_start is not None:
        rows.append(("warm_start", run_state(spec.warm_dir(root)), 0))
        rows += [(out.name, run_state(out), 0) for _seed, out in spec.check_dirs(root)]
    for run in spec.runs(root):
        steps = trained_steps(run.out_dir) if run.out_dir.is_dir() else 0
        if (run.out_dir / DONE).is_file():  # a committed run has no checkpoint: its DONE.json tells the steps
            done = json.loads((run.out_dir / DONE).read_text())
            if "steps" in done:
                steps = done["steps"]
            elif (run.out_dir / "metrics.jsonl").is_file():  # runs finished before DONE.json recorded the steps
                from trainers.metrics import read_jsonl

                steps = max((int(r.get("step", 0)) for r in read_jsonl(run.out_dir / "metrics.jsonl")), default=steps)
        rows.append((f"{run.arm.name}/seed{run.seed}", run_state(run.out_dir), steps))
    return rows
