"""Experiments as files: one TOML spec per comparison, a runner that plays its grid and survives interruptions, and
the aggregation of every run into curves with a band over seeds and a final table with bootstrap CIs.

    python -m leaderboards.experiments run experiments/wiki_mtgrpo.toml        # play (or resume) the whole grid
    python -m leaderboards.experiments status experiments/wiki_mtgrpo.toml     # done / partial / pending per run
    python -m leaderboards.experiments aggregate experiments/wiki_mtgrpo.toml  # -> leaderboards/experiments/wiki_mtgrpo
    python -m leaderboards.experiments run experiments/wiki_recipe_sweep.toml --only lr1e-5/seed1  # one run

It sits in the layer that reports: it drives the trainers as subprocesses (``python -m trainers.<trainer>``),
validates specs against :class:`trainers.rl.RLConfig`, evaluates with :mod:`leaderboards.evaluate` and reads its
rows (:mod:`leaderboards.tables`) and the papers' numbers (:mod:`leaderboards.reported`); nothing in ``trainers``
imports it.

**Committed grids.** Runs go to ``experiments/runs/<name>/<arm>/seed<k>`` by default, and their results (metrics,
run records, final evaluations) are committed while weights, checkpoints and logs are not (``.gitignore``): work
here is interrupted every few hours on a fresh machine, so a grid is played across sessions by committing each
finished run. On a fresh clone ``run`` skips the committed runs and rebuilds only the warm start's weights (the
same command; its evaluation goes to ``rebuilt-eval/`` and is compared with the committed one in ``run.json``).
``--runs-dir runs/mine`` plays a grid from scratch instead (to reproduce a committed curve).

**The spec** (``experiments/README.md`` documents every field)::

    name = "wiki_mtgrpo"                  # runs go to <runs-dir>/wiki_mtgrpo/<arm>/seed<k>
    trainer = "grpo"                      # python -m trainers.grpo (or "mtppo")
    env = ["TurnRL/WikiTwoTurn-v1"]
    seeds = [0, 1, 2]
    [warm_start]                          # built once (python -m trainers.sft), every arm starts from it (--init)
    args = { episodes = 64, policy = "scripted:reference=0.3,scripted:direct=0.7" }
    [budget]                              # RLConfig fields, the same for every arm
    steps = 40
    tasks_per_step = 4
    [eval]                                # held-out greedy evaluation (trainers.evaluation)
    tasks = 64
    every = 10                            # also inside training, as eval/... in metrics.jsonl
    paired = "env/exact_match"            # table: each arm's change from the warm start on the same tasks
    [arms.grpo_or]
    strategy = "grpo_or"                  # + any RLConfig field that differs for this arm

**The grid** is played sequentially, warm start first, then seed by seed and arm by arm (so an interrupted grid has
every arm at the same number of seeds). Each run is a subprocess ``python -m trainers.<trainer> ... --out-dir
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

**Aggregation** reads every run's ``metrics.jsonl`` and final evaluation: per arm and step, the mean over seeds and
a 95% percentile-bootstrap band over seeds (``curves_eval.png`` for the in-training ``eval/...`` keys,
``curves_train.png`` for the training rollouts' ``reward/...`` and ``env/...``; a grid with stages gets one pair per
stage, each later one ``_stage2``, ``_stage3`` ... beside the ``versus`` arm); per arm, the held-out metrics'
mean over seeds with a 95% bootstrap CI over seeds (with one seed: that run's CI over tasks), and the cost columns
(wall time split into rollout / update / eval, rollout tokens/s, peak memory) when the metrics carry them;
``table.md`` and ``runs.jsonl`` (one row per run: config, seed, git sha, final metrics with CIs, costs).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_turn.error import InvalidArgument
from agentgym_turn.metrics import bootstrap_ci
from leaderboards.evaluate import git_dirty, git_sha
from leaderboards.families import family_for
from leaderboards.reported import reported_rows
from leaderboards.tables import read_rows

TRAINERS = ("grpo", "mtppo", "rl")
RUN_FIELDS_SET_BY_RUNNER = ("env", "strategy", "seed", "out_dir", "resume", "init")
EVAL_FIELDS = {"every": "eval_every", "tasks": "eval_tasks", "seed": "eval_seed"}
CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000
DONE = "DONE.json"
RUNS_DIR = "experiments/runs"  # committed: every run's results (weights and checkpoints are .gitignored)
AGGREGATES_DIR = Path("leaderboards/experiments")  # the committed grids' curves and tables
PAIRED = "paired_delta"  # the table entry of an arm's paired change from the warm start
PER_SEED = "paired_per_seed"  # per run of an arm: (seed, its paired change over the tasks)
VERSUS_PER_SEED = "paired_versus_per_seed"  # per run of an arm: (seed, its paired change from the versus run)
VERSUS = "paired_versus"  # the table entry of an arm's paired change from the spec's ``[eval] versus`` arm
COST_COLUMNS = (  # (table header, metrics.jsonl key, how steps combine)
    ("wall s", "perf/step_seconds", "sum"),
    ("rollout s", "rollout/seconds", "sum"),
    ("update s", "perf/update_seconds", "sum"),
    ("eval s", "perf/eval_seconds", "sum"),
    ("rollout tok/s", "rollout/tokens_per_s", "mean"),
    ("train tok/s", "perf/train_tokens_per_s", "mean"),
    ("peak mem GiB", "perf/peak_memory_gib", "max"),
)


# ---------------------------------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Arm:
    """One strategy of a comparison: its name (the run folder), strategy and RLConfig overrides; ``trainer``
    (default: the spec's) when the arm needs the other trainer's defaults (a critic-free strategy in a PPO
    comparison); ``stage``: arms of stage 2 are played after every seed of the stage-1 arms (extra strategies
    compared on the same warm start and budget without delaying the paper's comparison); ``seeds``: the arm plays
    only these of the spec's seeds (a sweep or ablation arm at one seed beside a recipe at three; ``None``: all)."""

    name: str
    strategy: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    trainer: str | None = None
    stage: int = 1
    seeds: tuple[int, ...] | None = None


@dataclass(frozen=True)
class WarmStart:
    """The shared starting checkpoint: ``python -m <module> --env ... --out-dir <runs>/<name>/warm_start <args>``.
    ``check_seeds``: the same command at these other seeds, built and evaluated into ``warm_start_seed<k>`` after
    it (nothing starts from them): the table shows how much the cold start depends on its seed."""

    module: str = "trainers.sft"
    args: Mapping[str, Any] = field(default_factory=dict)
    check_seeds: tuple[int, ...] = ()


@dataclass(frozen=True)
class EvalSpec:
    """Held-out greedy evaluation: ``tasks`` tasks drawn by ``seed`` with ``env_kwargs`` over the family's held-out
    kwargs; ``every`` N steps inside training (0 = only the final evaluation); ``paired``: an episode metric
    (``env/exact_match``) whose change from the warm start the table gives per arm, paired on the same tasks
    (:func:`paired_delta`, from the final evaluations' transcripts); ``versus``: an arm (the recipe) that every
    other arm is also compared with on the same ``paired`` metric, seeds and tasks (an ablation's effect: one
    ingredient off against the recipe; a strategy against the recipe's)."""

    tasks: int = 64
    seed: int = 12_345
    every: int = 0
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    paired: str | None = None
    versus: str | None = None


@dataclass(frozen=True)
class Spec:
    """One comparison (see the module docstring and ``experiments/README.md``)."""

    name: str
    trainer: str
    env: tuple[str, ...]
    seeds: tuple[int, ...]
    arms: tuple[Arm, ...]
    budget: Mapping[str, Any] = field(default_factory=dict)
    warm_start: WarmStart | None = None
    eval: EvalSpec = field(default_factory=EvalSpec)
    title: str = ""
    paper: str = ""
    curves: tuple[str, ...] = ()
    path: str = ""

    def runs(self, root: Path) -> list[Run]:
        """The grid in play order: stage by stage (see :class:`Arm`), then seed by seed, arm by arm."""
        stages = sorted({arm.stage for arm in self.arms})
        return [Run(arm, seed, root / self.name / arm.name / f"seed{seed}")
                for stage in stages for seed in self.seeds for arm in self.arms
                if arm.stage == stage and (arm.seeds is None or seed in arm.seeds)]  # fmt: skip

    def warm_dir(self, root: Path) -> Path:
        return root / self.name / "warm_start"

    def check_dirs(self, root: Path) -> list[tuple[int, Path]]:
        """``(seed, folder)`` of the warm start's check seeds (see :class:`WarmStart`)."""
        seeds = self.warm_start.check_seeds if self.warm_start is not None else ()
        return [(k, root / self.name / f"warm_start_seed{k}") for k in seeds]


@dataclass(frozen=True)
class Run:
    """One cell of the grid."""

    arm: Arm
    seed: int
    out_dir: Path


def _rl_fields() -> dict[str, dataclasses.Field]:
    from trainers.rl import RLConfig

    return {f.name: f for f in dataclasses.fields(RLConfig)}


def _check_fields(where: str, keys: Sequence[str], known: Mapping[str, Any], reserved: Sequence[str] = ()) -> None:
    for key in keys:
        if key in reserved:
            raise InvalidArgument(f"{where}: {key!r} is set by the runner (from the spec's env/seeds/arms); remove it.")
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidArgument(f"{where}: {key!r} is not a field of {known.get('__name__', 'the config')}.{hint}")


def _read_spec(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The spec's TOML, with ``extends = "other.toml"`` (a path beside it) resolved: the other spec's keys first,
    then this one's; the tables ``budget``, ``eval`` and ``arms`` merge key by key (an arm or budget value given
    here wins), every other key (``warm_start`` included) is replaced whole. One comparison run again from another
    warm start thus repeats only what differs, and its budget cannot drift from the original's."""
    if not path.is_file():
        raise InvalidArgument(f"experiment spec {str(path)!r} does not exist; see experiments/*.toml.")
    if path.resolve() in chain:
        raise InvalidArgument(f"{path}: extends itself through {[str(p) for p in chain]}; remove the cycle.")
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgument(f"{path}: not valid TOML ({exc}).") from None
    if "extends" not in data:
        return data
    base = _read_spec(path.parent / str(data.pop("extends")), (*chain, path.resolve()))
    for key, value in data.items():
        merge = key in ("budget", "eval", "arms") and isinstance(value, dict) and isinstance(base.get(key), dict)
        base[key] = {**base[key], **value} if merge else value
    return base


def load_spec(path: str | Path) -> Spec:
    """Read and validate a TOML spec; errors name the file, the key and the fix."""
    from trainers.credit import get_strategy

    path = Path(path)
    data = _read_spec(path)
    where = str(path)
    known = {"name", "title", "paper", "trainer", "env", "seeds", "warm_start", "budget", "eval", "arms", "curves"}
    _check_fields(where, list(data), {k: None for k in known} | {"__name__": "a spec"})
    for key in ("name", "trainer", "env", "seeds", "arms"):
        if key not in data:
            raise InvalidArgument(f"{where}: the spec needs {key!r} (see experiments/README.md).")
    if data["trainer"] not in TRAINERS:
        raise InvalidArgument(f"{where}: trainer={data['trainer']!r} must be one of {TRAINERS} (python -m trainers.X).")
    env = [data["env"]] if isinstance(data["env"], str) else list(data["env"])
    seeds = list(data["seeds"])
    if not seeds or not all(isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds):
        raise InvalidArgument(f"{where}: seeds={seeds!r} must be a non-empty list of distinct ints, e.g. [0, 1, 2].")
    rl = _rl_fields()
    rl_known = {**rl, "__name__": "RLConfig (python -m trainers.rl --help)"}
    budget = dict(data.get("budget", {}))
    _check_fields(f"{where} [budget]", list(budget), rl_known, RUN_FIELDS_SET_BY_RUNNER)
    arms = []
    for name, table in dict(data["arms"]).items():
        table = dict(table)
        if "strategy" not in table:
            raise InvalidArgument(f"{where} [arms.{name}]: needs strategy = '...' (a name of trainers.credit).")
        get_strategy(table["strategy"])
        strategy = table.pop("strategy")
        trainer, stage = table.pop("trainer", None), table.pop("stage", 1)
        if trainer is not None and trainer not in TRAINERS:
            raise InvalidArgument(f"{where} [arms.{name}]: trainer={trainer!r} must be one of {TRAINERS}.")
        if not isinstance(stage, int) or isinstance(stage, bool) or stage < 1:
            raise InvalidArgument(f"{where} [arms.{name}]: stage={stage!r} must be an int >= 1 (1 = played first).")
        arm_seeds = table.pop("seeds", None)
        if arm_seeds is not None and (not arm_seeds or not set(arm_seeds) <= set(seeds)):
            raise InvalidArgument(f"{where} [arms.{name}]: seeds={arm_seeds!r} must be a non-empty subset of the "
                                  f"spec's seeds {seeds!r}.")  # fmt: skip
        _check_fields(f"{where} [arms.{name}]", list(table), rl_known, RUN_FIELDS_SET_BY_RUNNER)
        arms.append(Arm(name, strategy, table, trainer, stage, None if arm_seeds is None else tuple(arm_seeds)))
    if not arms:
        raise InvalidArgument(f"{where}: [arms] is empty; add at least one [arms.NAME] with a strategy.")
    warm = None
    if "warm_start" in data:
        table = dict(data["warm_start"])
        _check_fields(f"{where} [warm_start]", list(table),
                      {"module": None, "args": None, "check_seeds": None, "__name__": "warm_start"})  # fmt: skip
        args = dict(table.get("args", {}))
        check = list(table.get("check_seeds", ()))
        if not all(isinstance(k, int) for k in check) or len(set(check)) != len(check) or args.get("seed", 0) in check:
            raise InvalidArgument(f"{where} [warm_start]: check_seeds={check!r} must be distinct ints other than the "
                                  f"warm start's own seed {args.get('seed', 0)}, e.g. [1, 2].")  # fmt: skip
        warm = WarmStart(table.get("module", "trainers.sft"), args, tuple(check))
    ev = dict(data.get("eval", {}))
    eval_keys = ("tasks", "seed", "every", "env_kwargs", "paired", "versus")
    _check_fields(f"{where} [eval]", list(ev), {k: None for k in eval_keys})
    eval_spec = EvalSpec(**ev)
    if eval_spec.versus is not None:
        names = [arm.name for arm in arms]
        if eval_spec.versus not in names:
            raise InvalidArgument(f"{where} [eval]: versus={eval_spec.versus!r} names no arm; the arms: {names}.")
        if not eval_spec.paired:
            raise InvalidArgument(f"{where} [eval]: versus={eval_spec.versus!r} compares arms on the paired metric; "
                                  "set paired = 'env/...' (an episode metric) too.")  # fmt: skip
    if eval_spec.tasks < 1 or eval_spec.every < 0:
        raise InvalidArgument(f"{where} [eval]: tasks={eval_spec.tasks} must be >= 1 and every={eval_spec.every} >= 0.")
    if eval_spec.every and "eval_every" not in rl:
        raise InvalidArgument(
            f"{where} [eval]: every={eval_spec.every} needs RLConfig.eval_every (the in-training evaluation hook of "
            "trainers.rl); set every = 0 to evaluate the final policy only."
        )
    spec = Spec(name=str(data["name"]), trainer=data["trainer"], env=tuple(env), seeds=tuple(seeds), arms=tuple(arms),
                budget=budget, warm_start=warm, eval=eval_spec, title=data.get("title", ""),
                paper=data.get("paper", ""), curves=tuple(data.get("curves", ())), path=str(path))  # fmt: skip
    for run in spec.runs(Path("runs")):  # every arm's config must construct (bad values fail now, not at seed 2)
        _config_of(spec, run, None)
    return spec


# ---------------------------------------------------------------------------------------------------- commands
def flags(values: Mapping[str, Any]) -> list[str]:
    """``{"tasks_per_step": 4, "tree": True, "env": ["a", "b"]}`` -> ``--tasks-per-step 4 --tree --env a b``."""
    out: list[str] = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list | tuple):
            out += [flag, *(str(v) for v in value)]
        elif value is None:
            out += [flag, "none"]
        else:
            out += [flag, str(value)]
    return out


def _run_values(spec: Spec, run: Run, warm: Path | None) -> dict[str, Any]:
    values: dict[str, Any] = {"env": list(spec.env), "strategy": run.arm.strategy, "seed": run.seed}
    if warm is not None:
        values["init"] = str(warm)
    values.update(spec.budget)
    if spec.eval.every:
        values.update(eval_every=spec.eval.every, eval_tasks=spec.eval.tasks, eval_seed=spec.eval.seed)
        if spec.eval.env_kwargs:
            values["eval_env_kwarg"] = [f"{k}={json.dumps(v)}" for k, v in spec.eval.env_kwargs.items()]
    values.update(run.arm.overrides)
    return values


def _config_of(spec: Spec, run: Run, warm: Path | None) -> Any:
    """The RLConfig a run trains with, under its trainer's CLI defaults (constructing it validates the values)."""
    import importlib

    from trainers.rl import RLConfig

    defaults = getattr(importlib.import_module(f"trainers.{run.arm.trainer or spec.trainer}"), "DEFAULTS", {})
    try:
        return RLConfig(**{**defaults, **_run_values(spec, run, warm), "out_dir": str(run.out_dir)})
    except (InvalidArgument, TypeError) as exc:
        raise InvalidArgument(f"{spec.path} [arms.{run.arm.name}]: {exc}") from None


def eval_budget(cfg: Any) -> dict[str, Any]:
    """The generation budgets and engine of a training config, for its final evaluation."""
    out = {"max_new_tokens": cfg.max_new_tokens, "max_turns": cfg.max_turns, "max_context": cfg.max_context,
           "engine": cfg.engine}  # fmt: skip
    if cfg.threads:
        out["threads"] = cfg.threads
    return out


def train_command(spec: Spec, run: Run, warm: Path | None) -> list[str]:
    """``python -m trainers.<trainer> <flags> --out-dir <run> --resume`` for one run."""
    values = _run_values(spec, run, warm)
    trainer = run.arm.trainer or spec.trainer
    return [sys.executable, "-m", f"trainers.{trainer}", *flags(values), "--out-dir", str(run.out_dir), "--resume"]


def eval_commands(spec: Spec, policy: Path, out: Path, budget: Mapping[str, Any]) -> list[list[str]]:
    """One ``python -m leaderboards.evaluate`` per env id: greedy, the held-out tasks, ``budget`` (see
    :func:`eval_budget`) as flags; every episode's text goes to ``out/transcripts/<env>.jsonl`` (committed with the
    results: what the final policy does, readable without its weights)."""
    cmds = []
    for env_id in spec.env:
        transcripts = out / "transcripts" / (env_id.rpartition("/")[2] + ".jsonl")
        cmd = [sys.executable, "-m", "leaderboards.evaluate", "--env", env_id, "--model", str(policy),
               "--episodes", str(spec.eval.tasks), "--seed", str(spec.eval.seed), "--temperature", "0",
               "--results-dir", str(out), "--no-tables", "--transcripts", str(transcripts)]  # fmt: skip
        for key, value in budget.items():
            cmd += ["--" + key.replace("_", "-"), str(value)]
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
    only the child: the runner gets the status (negative: the signal) and stops with the log's tail."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)}
    with open(log, "a") as f:
        return subprocess.run(list(cmd), stdout=f, stderr=subprocess.STDOUT, env=env, check=False).returncode


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
    nothing starts from them, so a committed one is never rebuilt); with ``only``, just those it names
    (``warm_start_seed<k>``)."""
    for seed, out in spec.check_dirs(root):
        if only and out.name not in only:
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
    """Build the shared warm start once (its ``DONE.json`` marks it built); returns its folder. ``out`` and
    ``seed``: the same command at another seed into another folder (a check seed); ``launch``: see :data:`Launch`."""
    if spec.warm_start is None:
        return None
    out = spec.warm_dir(root) if out is None else out
    done = (out / DONE).is_file()
    if done and warm_weights(out) is not None:
        return out
    args = {"env": list(spec.env), **spec.warm_start.args, "out_dir": str(out)}
    if seed is not None:
        args["seed"] = seed
    cmd = [sys.executable, "-m", spec.warm_start.module, *flags(args)]
    what = (
        "rebuilding the warm start's weights (its results are committed, its weights are not)"
        if done
        else ("building the warm start" + ("" if seed is None else f" at check seed {seed}"))
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
    for one run; a warm start's check seed, ``warm_start_seed<k>``, is accepted and selects no run); an unknown
    name raises, listing the grid's."""
    runs = spec.runs(root)
    if not only:
        return runs
    names = {r.arm.name for r in runs} | {f"{r.arm.name}/seed{r.seed}" for r in runs}
    checks = {out.name for _seed, out in spec.check_dirs(root)}
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
        play_run(spec, run, warm, launch=launch)
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


# ---------------------------------------------------------------------------------------------------- aggregate
def seed_band(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean over seeds and its 95% percentile-bootstrap interval (one value: no width)."""
    ci = bootstrap_ci(values, confidence=CONFIDENCE, n_boot=BOOTSTRAP_SAMPLES, seed=seed)
    return ci.estimate, ci.low, ci.high


def curves(runs: Mapping[tuple[str, int], list[dict]], key: str) -> dict[str, list[tuple[int, float, float, float]]]:
    """Per arm: ``(step, mean, low, high)`` over the seeds that logged ``key`` at that step."""
    by_arm: dict[str, dict[int, list[float]]] = {}
    for (arm, _seed), rows in runs.items():
        for row in rows:
            if key in row:
                by_arm.setdefault(arm, {}).setdefault(int(row["step"]), []).append(float(row[key]))
    return {arm: [(s, *seed_band(v)) for s, v in sorted(steps.items())] for arm, steps in by_arm.items()}


def costs(rows: Sequence[dict]) -> dict[str, float]:
    """A run's cost columns (:data:`COST_COLUMNS`) that its metrics carry."""
    out = {}
    for header, key, how in COST_COLUMNS:
        values = [float(r[key]) for r in rows if key in r]
        if values:
            out[header] = float({"sum": np.sum, "mean": np.mean, "max": np.max}[how](values))
    return out


def plot_curves(runs: Mapping[tuple[str, int], list[dict]], keys: Sequence[str], path: Path, title: str) -> bool:
    """One panel per key, one line per arm with its band over seeds; ``False`` (nothing written) without data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(k, curves(runs, k)) for k in keys]
    panels = [(k, c) for k, c in panels if c]
    if not panels:
        return False
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, (key, per_arm) in zip(axes.flat, panels, strict=False):
        for arm, pts in sorted(per_arm.items()):
            steps, mean, low, high = (np.array(x, dtype=float) for x in zip(*pts, strict=True))
            ax.plot(steps, mean, marker="o", ms=2.5, label=arm)
            ax.fill_between(steps, low, high, alpha=0.2)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _final_rows(run_dir: Path) -> list[Any]:
    return read_rows(run_dir / "final-eval") if (run_dir / "final-eval").is_dir() else []


def task_values(run_dir: Path, key: str) -> dict[int, float] | None:
    """Per held-out task, the mean of episode metric ``key`` over its trials in the run's final-evaluation
    transcripts (one env), or None without transcripts."""
    from trainers.metrics import read_jsonl

    files = sorted((run_dir / "final-eval" / "transcripts").glob("*.jsonl"))
    if len(files) != 1:
        return None
    per_task: dict[int, list[float]] = {}
    for row in read_jsonl(files[0]):
        if key not in row["metrics"]:
            raise InvalidArgument(f"{files[0]}: episode metric {key!r} missing; it has {sorted(row['metrics'])}.")
        per_task.setdefault(int(row["task"]), []).append(float(row["metrics"][key]))
    return {t: float(np.mean(v)) for t, v in per_task.items()}


def paired_delta(
    arm: Sequence[Mapping[int, float]],
    base: Mapping[int, float] | Sequence[Mapping[int, float]],
    seed: int = 0,
) -> dict[str, float]:
    """The arm's mean change from ``base`` on the same tasks, ``mean_s mean_t (arm[s][t] - base[t])``, with a 95%
    hierarchical percentile bootstrap (seeds resampled, then tasks): the paired comparison a CI per arm cannot make
    (two arms' CIs over tasks overlap even when one beats the other on most tasks). ``base`` is one run (the warm
    start) or one per run of ``arm`` (another arm's run of the same seed: ``base[s]``).

    ``paired_delta([{0: 1, 1: 1}], {0: 0, 1: 1})`` -> estimate 0.5 (task 0 gained, task 1 unchanged).
    """
    bases = [base] * len(arm) if isinstance(base, Mapping) else list(base)
    if len(bases) != len(arm):
        raise InvalidArgument(
            f"paired_delta: {len(arm)} runs against {len(bases)} base runs; give one base or one per run."
        )
    tasks = sorted(bases[0]) if bases else []
    if not arm or any(sorted(a) != tasks or sorted(b) != tasks for a, b in zip(arm, bases, strict=True)):
        raise InvalidArgument("paired_delta needs every run evaluated on the same tasks as its base.")
    diffs = np.array([[a[t] - b[t] for t in tasks] for a, b in zip(arm, bases, strict=True)])  # (seeds, tasks)
    rng = np.random.default_rng(seed)
    n_s, n_t = diffs.shape
    boots = np.empty(BOOTSTRAP_SAMPLES)
    for b in range(BOOTSTRAP_SAMPLES):
        rows = diffs[rng.integers(0, n_s, n_s)]
        boots[b] = rows[:, rng.integers(0, n_t, n_t)].mean()
    alpha = (1.0 - CONFIDENCE) / 2
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return {"estimate": float(diffs.mean()), "low": float(low), "high": float(high), "seeds": n_s}


def arm_metric(per_seed: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """An arm's held-out metric from its seeds' ``{estimate, low, high}``: mean over seeds with a bootstrap CI over
    seeds, or the single run's own CI over tasks."""
    if len(per_seed) == 1:
        m = per_seed[0]
        return {"estimate": m["estimate"], "low": m["low"], "high": m["high"], "seeds": 1, "ci": "tasks"}
    mean, low, high = seed_band([m["estimate"] for m in per_seed])
    return {"estimate": mean, "low": low, "high": high, "seeds": len(per_seed), "ci": "seeds"}


def aggregate(spec: Spec, root: Path, out: Path) -> dict[str, Any]:
    """Write ``curves_eval.png``, ``curves_train.png`` (one pair per stage, :func:`stage_figures`), ``table.md``
    and ``runs.jsonl`` to ``out``; returns the table as ``{arm: {column: value}}``."""
    from trainers.metrics import read_jsonl

    out.mkdir(parents=True, exist_ok=True)
    metrics: dict[tuple[str, int], list[dict]] = {}
    records = []
    groups: list[tuple[str, list[tuple[int, Path]]]] = []
    if spec.warm_start is not None:
        groups.append(("warm start", [(int(spec.warm_start.args.get("seed", 0)), spec.warm_dir(root))]))
        groups += [(f"warm start, seed {k}", [(k, out)]) for k, out in spec.check_dirs(root)]
    for arm in spec.arms:
        groups.append((arm.name, [(r.seed, r.out_dir) for r in spec.runs(root) if r.arm.name == arm.name]))
    table: dict[str, dict[str, Any]] = {}
    warm_done = spec.warm_start is not None and run_state(spec.warm_dir(root)) == "done"
    base = task_values(spec.warm_dir(root), spec.eval.paired) if spec.eval.paired and warm_done else None
    seed_tasks: dict[str, dict[int, dict[int, float]]] = {}  # arm -> seed -> the paired metric per task
    for arm, cells in groups:
        is_warm = arm.startswith("warm start")  # the warm start and its check seeds: no costs, curves or Δ
        paired = bool(spec.eval.paired) and not is_warm and base is not None
        finals: dict[str, list[dict]] = {}
        cost_rows: list[dict[str, float]] = []
        arm_records: list[dict[str, Any]] = []
        arm_tasks: dict[int, dict[int, float] | None] = {}  # seed -> the paired metric per task, per finished run
        for seed, run_dir in cells:
            if run_state(run_dir) != "done":
                continue
            rows = read_jsonl(run_dir / "metrics.jsonl")
            if not is_warm:
                metrics[(arm, seed)] = rows
            final = {}
            for row in _final_rows(run_dir):
                env_name = row.env_id.rsplit("/", 1)[-1]
                for key, m in row.metrics.items():
                    final[key if len(spec.env) == 1 else f"{env_name}/{key}"] = m
            for key, m in final.items():
                finals.setdefault(key, []).append(m)
            cost = {} if is_warm else costs(rows)
            cost_rows.append(cost)
            if paired:
                arm_tasks[seed] = task_values(run_dir, spec.eval.paired)
            record = json.loads((run_dir / "run.json").read_text())
            config_path = run_dir / "config.json"
            arm_records.append({
                "spec": spec.name, "arm": arm, "strategy": record.get("strategy", "sft"), "seed": seed,
                "git_sha": json.loads((run_dir / DONE).read_text())["git_sha"],
                "attempts": record["attempts"], "command": record["command"],
                "config": json.loads(config_path.read_text()) if config_path.is_file() else {},
                "final_eval": final, "costs": cost,
            })  # fmt: skip
        records += arm_records
        if not cost_rows:
            continue
        entry: dict[str, Any] = {key: arm_metric(values) for key, values in finals.items()}
        for header, _key, _how in COST_COLUMNS:
            values = [c[header] for c in cost_rows if header in c]
            if values:
                entry[header] = float(np.mean(values))
        entry["runs"] = len(cost_rows)
        if paired and None not in arm_tasks.values():
            seed_tasks[arm] = {seed: tasks for seed, tasks in arm_tasks.items() if tasks is not None}
            entry[PAIRED] = paired_delta(list(seed_tasks[arm].values()), base)
            for rec in arm_records:
                rec["paired_delta"] = paired_delta([seed_tasks[arm][rec["seed"]]], base)
            entry[PER_SEED] = [(rec["seed"], rec["paired_delta"]) for rec in arm_records]
        table[arm] = entry
    versus = seed_tasks.get(spec.eval.versus or "", {})  # the versus arm's finished runs: seed -> per task
    for arm, by_seed in seed_tasks.items():  # each other arm against it, on the seeds both finished
        common = sorted(set(by_seed) & set(versus))
        if arm != spec.eval.versus and common:
            table[arm][VERSUS] = paired_delta([by_seed[s] for s in common], [versus[s] for s in common])
            for rec in records:
                if rec["arm"] == arm and rec["seed"] in common:
                    rec[VERSUS] = {spec.eval.versus: paired_delta([by_seed[rec["seed"]]], versus[rec["seed"]])}
                    table[arm].setdefault(VERSUS_PER_SEED, []).append((rec["seed"], rec[VERSUS][spec.eval.versus]))
    with open(out / "runs.jsonl", "w") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    (out / "table.md").write_text(render_table(spec, table))
    eval_keys = list(spec.curves) or sorted({k for rows in metrics.values() for r in rows for k in r
                                             if k.startswith(("eval/env/", "eval/reward/"))})  # fmt: skip
    train_keys = sorted({k for rows in metrics.values() for r in rows for k in r if k.startswith("reward/")}) + [
        k for k in ("env/tool_called", "env/exact_match", "env/success", "rollout/return")
        if any(k in r for rows in metrics.values() for r in rows)
    ]  # fmt: skip
    for suffix, label, runs in stage_figures(spec, metrics):
        title = (spec.title or spec.name) + label
        plot_curves(
            runs, eval_keys, out / f"curves_eval{suffix}.png", f"{title}: held-out, greedy (mean, 95% CI over seeds)"
        )
        plot_curves(
            runs, train_keys, out / f"curves_train{suffix}.png", f"{title}: training rollouts (mean, 95% CI over seeds)"
        )
    return table


def stage_figures(
    spec: Spec, runs: Mapping[tuple[str, int], list[dict]]
) -> list[tuple[str, str, dict[tuple[str, int], list[dict]]]]:
    """``(file suffix, title suffix, runs)`` per figure: one for the whole grid when its arms share one stage;
    otherwise one per stage that has runs (the first stage unsuffixed, later ones ``_stage2`` ...), each later stage
    beside the ``versus`` arm it is compared with, so a grid of twenty arms stays readable."""
    stage_of = {arm.name: arm.stage for arm in spec.arms}
    stages = sorted(set(stage_of.values()))
    if len(stages) < 2:
        return [("", "", dict(runs))]
    figures = []
    for stage in stages:
        names = {a for a, s in stage_of.items() if s == stage}
        suffix = ""
        if stage != stages[0]:
            if not any(arm in names for arm, _seed in runs):
                continue  # nothing of this stage has run yet: no figure of the versus arm alone
            names |= {spec.eval.versus} if spec.eval.versus else set()
            suffix = f"_stage{stage}"
        figures.append((suffix, f" (stage {stage})", {k: v for k, v in runs.items() if k[0] in names}))
    return figures


def render_table(spec: Spec, table: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown: one row per arm, the held-out metrics as ``mean [low, high]``, then the cost columns."""
    metric_keys = sorted({k for entry in table.values() for k, v in entry.items() if isinstance(v, dict)}
                         - {PAIRED, VERSUS})  # fmt: skip
    paired = [PAIRED] if any(PAIRED in e for e in table.values()) else []
    cost_keys = [h for h, _k, _how in COST_COLUMNS if any(h in e for e in table.values())]
    head = ["arm", "runs", *metric_keys, *[f"Δ {spec.eval.paired} vs warm start (paired)" for _ in paired], *cost_keys]
    lines = [
        f"### {spec.title or spec.name}",
        "",
        f"Held-out greedy evaluation ({spec.eval.tasks} tasks, seed {spec.eval.seed}) of the final policy: mean over "
        "seeds [95% bootstrap CI over seeds; with one run, over tasks]. "
        + (
            "Δ: the mean change from the warm start on the same tasks [95% bootstrap over seeds and tasks]. "
            if paired
            else ""
        )
        + "Costs: mean per run.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for arm, entry in table.items():
        cells = [arm, str(entry["runs"])]
        for key in [*metric_keys, *paired]:
            m = entry.get(key)
            sign = "+" if key == PAIRED else ""
            cells.append("" if m is None else _delta_cell(m, sign))
        for key in cost_keys:
            cells.append(f"{entry[key]:.1f}" if key in entry else "")
        lines.append("| " + " | ".join(cells) + " |")
    for arm, row in reported_for_arms(spec, list(table)):
        cells = [f"{arm}: {row.model}", f"**reported** ({row.source})"]
        cells += [_reported_cell(row.values.get(key)) for key in metric_keys]
        lines.append("| " + " | ".join(cells + [""] * (len(paired) + len(cost_keys))) + " |")
    versus = [(arm, e[VERSUS]) for arm, e in table.items() if VERSUS in e]
    if versus:
        lines += [
            "",
            f"Against {spec.eval.versus}: each arm's Δ {spec.eval.paired} from the {spec.eval.versus} run of the same "
            "seed, paired over the same tasks [95% bootstrap over seeds and tasks] (seeds: those both arms finished).",
            "",
            f"| arm | seeds | Δ vs {spec.eval.versus} (paired) |",
            "|---|---|---|",
        ]
        for arm, m in versus:
            lines.append(f"| {arm} | {m['seeds']} | {_delta_cell(m)} |")
    seeded = [(arm, e) for arm, e in table.items() if len(e.get(PER_SEED, ())) > 1]
    if seeded:
        intro = f"Per run (arms with several seeds): Δ {spec.eval.paired} from the warm start"
        head, rule = "| arm | seed | Δ (paired) |", "|---|---|---|"
        if spec.eval.versus:
            intro += f" and from the {spec.eval.versus} run of the same seed"
            head, rule = head + f" Δ vs {spec.eval.versus} (paired) |", rule + "---|"
        lines += ["", intro + ", paired over the same tasks [95% bootstrap over tasks].", "", head, rule]
        for arm, entry in seeded:
            versus_by_seed = dict(entry.get(VERSUS_PER_SEED, ()))
            for seed, m in entry[PER_SEED]:
                cells = [arm, str(seed), _delta_cell(m)]
                if spec.eval.versus:
                    v = versus_by_seed.get(seed)
                    cells.append(_delta_cell(v) if v else "")
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _delta_cell(m: Mapping[str, float], sign: str = "+") -> str:
    """An estimate with its interval, ``+0.125 [+0.031, +0.219]`` (``sign=""``: ``0.531 [0.406, 0.656]``)."""
    return f"{m['estimate']:{sign}.3f} [{m['low']:{sign}.3f}, {m['high']:{sign}.3f}]"


#: How the papers name a strategy in their tables, where it is not the id in capitals with hyphens.
PAPER_NAMES = {"gigpo": "GiGPO", "turn_ppo": "Turn-PPO"}


def paper_name(strategy: str) -> str:
    """``mt_grpo`` -> ``MT-GRPO``: the strategy as the papers' result tables name it."""
    return PAPER_NAMES.get(strategy, strategy.upper().replace("_", "-"))


def reported_for_arms(spec: Spec, arms: Sequence[str]) -> list[tuple[str, Any]]:
    """The papers' reported rows (``leaderboards.reported``) of the spec's env whose model was trained with an
    arm's strategy (``... + MT-GRPO``), or, for ``"warm start"``, trained with nothing (the papers' starting
    models), as ``(arm, row)``, for the table beside ours. A single-env spec only. Each row is given once, to the
    first such arm (a papers' arm comes before a stage-2 variant of the same strategy, e.g. MT-GRPO with discounted
    turn returns, which the paper did not run)."""
    if len(spec.env) != 1:
        return []
    by_name = {arm.name: arm for arm in spec.arms}
    rows = reported_rows(family_for(spec.env[0]).name, spec.env[0])
    out, shown = [], set()  # shown: strategies whose reported rows an earlier arm already carries
    for name in arms:
        if name == "warm start":
            out += [(name, row) for row in rows if " + " not in row.model and row.group is None]
        elif name in by_name and by_name[name].strategy not in shown:
            shown.add(by_name[name].strategy)
            label = " + " + paper_name(by_name[name].strategy)
            out += [(name, row) for row in rows if row.model.endswith(label) and row.group is None]
    return out


def _reported_cell(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


# ---------------------------------------------------------------------------------------------------- CLI
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
        help="run: play only these arms (every seed), runs or warm-start check seeds, e.g. --only lr1e-5/seed1 "
        "(default: the whole grid and the warm start's check seeds)",
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
