"""Experiment specs: one TOML file per comparison, read and validated into a :class:`Spec`, whose grid (arms x seeds,
stage by stage) :meth:`Spec.runs` lays out.

Part of ``python -m leaderboards.experiments`` (:mod:`leaderboards.experiments`, the CLI): this module reads the
spec, :mod:`leaderboards.runner` plays its grid and :mod:`leaderboards.report` aggregates the runs. A spec is
validated against :class:`trainers.rl.RLConfig` when it is loaded: every run's config is constructed under its
trainer's CLI defaults (:func:`_config_of`), so a bad value fails before the first run, not at seed 2.

**The spec** (``experiments/README.md`` documents every field)::

    name = "wiki_mtgrpo"                  # runs go to <runs-dir>/wiki_mtgrpo/<arm>/seed<k>
    trainer = "grpo"                      # python -m trainers.grpo (or "mtppo")
    env = ["TurnRL/WikiTwoTurn-v2"]
    seeds = [0, 1, 2]
    [warm_start]                          # built once (python -m trainers.sft), every arm starts from it (--init)
    args = { episodes = 64, policy = "scripted:reference=0.3,scripted:direct=0.7" }
    per_seed = false                      # true: RL seed k starts from the warm start built at seed k
    [budget]                              # RLConfig fields, the same for every arm
    steps = 40
    tasks_per_step = 4
    [eval]                                # held-out greedy evaluation (trainers.evaluation)
    tasks = 64
    every = 10                            # also inside training, as eval/... in metrics.jsonl
    paired = "env/exact_match"            # table: each arm's change from the warm start on the same tasks
    [arms.grpo_or]
    strategy = "grpo_or"                  # + any RLConfig field that differs for this arm
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_turn.error import InvalidArgument

TRAINERS = ("grpo", "mtppo", "rl")
RUN_FIELDS_SET_BY_RUNNER = ("env", "strategy", "seed", "out_dir", "resume", "init")
EVAL_FIELDS = {"every": "eval_every", "tasks": "eval_tasks", "seed": "eval_seed"}


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
    """The starting checkpoint: ``python -m <module> --env ... --out-dir <runs>/<name>/warm_start <args>``.
    ``check_seeds``: the same command at these other seeds, built and evaluated into ``warm_start_seed<k>`` after
    it (nothing starts from them): the table shows how much the cold start depends on its seed. ``per_seed``: RL
    seed k of every arm starts from the same command built at seed k (``warm_start_seed<k>``; the warm start's own
    seed, ``args.seed``, default 0, stays ``warm_start``), so a seed's spread includes its cold start's."""

    module: str = "trainers.sft"
    args: Mapping[str, Any] = field(default_factory=dict)
    check_seeds: tuple[int, ...] = ()
    per_seed: bool = False

    @property
    def seed(self) -> int:
        """The seed of the warm start in ``warm_start/`` (``args.seed``, default 0)."""
        return int(self.args.get("seed", 0))


@dataclass(frozen=True)
class EvalSpec:
    """Held-out evaluation: ``tasks`` tasks drawn by ``seed`` with ``env_kwargs`` over the family's held-out
    kwargs, greedy by default; ``temperature`` > 0 with ``trials`` episodes a task makes the final evaluations sampled
    (every table value is then a task's mean over its trials: a policy's probability of a right answer, where greedy
    decoding reads only which side of 0.5 it lies; the in-training evaluations stay greedy); ``every`` N steps inside
    training (0 = only the final evaluation); ``paired``: an episode metric
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
    temperature: float = 0.0
    trials: int = 1


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

    def warm_dir(self, root: Path, seed: int | None = None) -> Path:
        """The folder of the warm start built at ``seed`` (``None`` or the warm start's own seed: ``warm_start``;
        another: ``warm_start_seed<k>``)."""
        own = self.warm_start.seed if self.warm_start is not None else 0
        return root / self.name / ("warm_start" if seed is None or seed == own else f"warm_start_seed{seed}")

    def check_dirs(self, root: Path) -> list[tuple[int, Path]]:
        """``(seed, folder)`` of the warm starts beside ``warm_start/``, by seed: its check seeds and, with
        ``per_seed``, the other RL seeds' starting points (see :class:`WarmStart`)."""
        if self.warm_start is None:
            return []
        seeds = set(self.warm_start.check_seeds) | (set(self.seeds) if self.warm_start.per_seed else set())
        return [(k, self.warm_dir(root, k)) for k in sorted(seeds - {self.warm_start.seed})]

    def start_dir(self, run: Run, root: Path) -> Path | None:
        """The warm start ``run`` starts from (``--init``): its seed's with ``per_seed``, else ``warm_start/``;
        ``None`` without a warm start."""
        if self.warm_start is None:
            return None
        return self.warm_dir(root, run.seed if self.warm_start.per_seed else None)


@dataclass(frozen=True)
class Run:
    """One cell of the grid."""

    arm: Arm
    seed: int
    out_dir: Path


def _rl_fields() -> dict[str, dataclasses.Field]:
    """RLConfig's flags by flat name (its nested CreditConfig's too: ``gamma``, ``group_std_eps``, ...)."""
    from trainers.config import options
    from trainers.rl import RLConfig

    return {o.name: o.field for o in options(RLConfig)}


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
                      {"module": None, "args": None, "check_seeds": None, "per_seed": None,
                       "__name__": "warm_start"})  # fmt: skip
        args = dict(table.get("args", {}))
        check = list(table.get("check_seeds", ()))
        if not all(isinstance(k, int) for k in check) or len(set(check)) != len(check) or args.get("seed", 0) in check:
            raise InvalidArgument(f"{where} [warm_start]: check_seeds={check!r} must be distinct ints other than the "
                                  f"warm start's own seed {args.get('seed', 0)}, e.g. [1, 2].")  # fmt: skip
        per_seed = table.get("per_seed", False)
        if not isinstance(per_seed, bool):
            raise InvalidArgument(f"{where} [warm_start]: per_seed={per_seed!r} must be true (RL seed k starts "
                                  "from the warm start built at seed k) or false (all from one).")  # fmt: skip
        warm = WarmStart(table.get("module", "trainers.sft"), args, tuple(check), per_seed)
    ev = dict(data.get("eval", {}))
    eval_keys = ("tasks", "seed", "every", "env_kwargs", "paired", "versus", "temperature", "trials")
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
    if (
        isinstance(eval_spec.trials, bool)
        or not isinstance(eval_spec.trials, int)
        or eval_spec.trials < 1
        or isinstance(eval_spec.temperature, bool)
        or not isinstance(eval_spec.temperature, int | float)
        or not 0 <= eval_spec.temperature <= 2
    ):
        raise InvalidArgument(f"{where} [eval]: trials={eval_spec.trials!r} must be an int >= 1 and "
                              f"temperature={eval_spec.temperature!r} a number in [0, 2].")  # fmt: skip
    if eval_spec.trials > 1 and eval_spec.temperature == 0:
        raise InvalidArgument(f"{where} [eval]: trials={eval_spec.trials} greedy episodes of a task are one episode "
                              "repeated; sample them (temperature = 1.0) or set trials = 1.")  # fmt: skip
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


# ---------------------------------------------------------------------------------------------------- a run's config
def _run_values(spec: Spec, run: Run, warm: Path | None) -> dict[str, Any]:
    """A run's trainer values by flat RLConfig name (the runner renders them as flags): env, strategy, seed, warm
    start, the spec's budget and in-training evaluation, then the arm's overrides."""
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

    from trainers.config import from_flat
    from trainers.rl import RLConfig

    defaults = getattr(importlib.import_module(f"trainers.{run.arm.trainer or spec.trainer}"), "DEFAULTS", {})
    if warm is None and spec.warm_start is not None:  # checked before the warm start exists: the run will start
        warm = run.out_dir.parent.parent / "warm_start"  # from one (--init), so no cold start is folded in
    try:
        return from_flat(RLConfig, {**defaults, **_run_values(spec, run, warm), "out_dir": str(run.out_dir)})
    except (InvalidArgument, TypeError) as exc:
        raise InvalidArgument(f"{spec.path} [arms.{run.arm.name}]: {exc}") from None
