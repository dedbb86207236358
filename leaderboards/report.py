"""The aggregation of an experiment grid (``python -m leaderboards.experiments aggregate SPEC``): curves with a band
over seeds and a final table with bootstrap CIs, from the runs :mod:`leaderboards.runner` played.

It reads the runs' evaluation rows (:mod:`leaderboards.tables`) and, for the table, the papers' numbers
(:mod:`leaderboards.reported`).

**Aggregation** reads every run's ``metrics.jsonl`` and final evaluation: per arm and step, the mean over seeds and
a 95% percentile-bootstrap band over seeds (``curves_eval.png`` for the in-training ``eval/...`` keys,
``curves_train.png`` for the training rollouts' ``reward/...`` and ``env/...``; a grid with stages gets one pair per
stage, each later one ``_stage2``, ``_stage3`` ... beside the ``versus`` arm); per arm, the held-out metrics' mean
over seeds and tasks with a 95% hierarchical bootstrap interval (:func:`hierarchical_ci`: seeds resampled, then
tasks, from the final evaluations' transcripts; with one seed: that run's CI over tasks), the paired changes from
the warm start (each run's own, with ``per_seed`` warm starts) and from the ``versus`` arm with the same bootstrap,
the credit signal's instruments (:data:`CREDIT_COLUMNS`, from ``credit/...`` in ``metrics.jsonl``) and the cost
columns (wall time split into rollout / update / eval, rollout tokens/s, peak memory) when the metrics carry them;
``table.md`` and ``runs.jsonl`` (one row per run: config, seed, git sha, final metrics with CIs, credit, costs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_turn.error import InvalidArgument
from agentgym_turn.metrics import bootstrap_ci, pass_hat_k_per_task
from leaderboards.families import family_for
from leaderboards.reported import reported_rows
from leaderboards.runner import DONE, run_state
from leaderboards.spec import EvalSpec, Spec
from leaderboards.tables import read_rows

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 2000
AGGREGATES_DIR = Path("leaderboards/experiments")  # the committed grids' curves and tables
PAIRED = "paired_delta"  # the table entry of an arm's paired change from the warm start
PER_SEED = "paired_per_seed"  # per run of an arm: (seed, its paired change over the tasks)
VERSUS_PER_SEED = "paired_versus_per_seed"  # per run of an arm: (seed, its paired change from the versus run)
VERSUS = "paired_versus"  # the table entry of an arm's paired change from the spec's ``[eval] versus`` arm
CREDIT = "credit"  # the table entry of an arm's credit-signal instruments (:data:`CREDIT_COLUMNS`)
#: The credit signal beside each arm (:mod:`trainers.instruments`): (header, metrics.jsonl key, which steps: the
#: first step's value or the mean over the run's steps); each the mean over the arm's seeds that logged it.
CREDIT_COLUMNS = (
    ("turn-1 reward varies, step 1", "credit/turn1_reward_varies", "step1"),
    ("turn-1 reward varies, run mean", "credit/turn1_reward_varies", "mean"),
    ("turn-1 distinct actions, step 1", "credit/turn1_distinct_actions", "step1"),
    ("adv differs from GRPO-OR, run mean", "credit/adv_differs_from_grpo_or", "mean"),
)
WARM_PER_SEED = "warm start, per seed"  # the table row of the per-seed warm starts together (``per_seed``)
COST_COLUMNS = (  # (table header, metrics.jsonl key, how steps combine)
    ("wall s", "perf/step_seconds", "sum"),
    ("rollout s", "rollout/seconds", "sum"),
    ("update s", "perf/update_seconds", "sum"),
    ("eval s", "perf/eval_seconds", "sum"),
    ("rollout tok/s", "rollout/tokens_per_s", "mean"),
    ("train tok/s", "perf/train_tokens_per_s", "mean"),
    ("peak mem GiB", "perf/peak_memory_gib", "max"),
)


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


def credit_signal(rows: Sequence[dict]) -> dict[str, float]:
    """A run's credit-signal columns (:data:`CREDIT_COLUMNS`) that its metrics carry: the value logged at step 1,
    or the mean over every step that logged the key."""
    out = {}
    for header, key, how in CREDIT_COLUMNS:
        if how == "step1":
            values = [float(r[key]) for r in rows if key in r and int(r.get("step", -1)) == 1][:1]
        else:
            values = [float(r[key]) for r in rows if key in r]
        if values:
            out[header] = float(np.mean(values))
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


def column_values(run_dir: Path, env_id: str, keys: Sequence[str]) -> dict[str, dict[int, float]] | None:
    """Per leaderboard column of ``env_id``'s family named in ``keys``: the per-task value whose mean over tasks is
    the column (the mean over trials, or pass^k), from the run's final-evaluation transcripts of that env; ``None``
    without them. An episode without the column's metric counts 0, as :func:`leaderboards.families.compute_metrics`
    counts a truncated one (the evaluation refuses a terminated one without it)."""
    from trainers.metrics import read_jsonl

    path = run_dir / "final-eval" / "transcripts" / (env_id.rpartition("/")[2] + ".jsonl")
    if not path.is_file():
        return None
    rows = read_jsonl(path)
    out: dict[str, dict[int, float]] = {}
    for col in family_for(env_id).columns:
        if col.key not in keys:
            continue
        per_task: dict[int, list[float]] = {}
        for row in rows:
            per_task.setdefault(int(row["task"]), []).append(float(row["metrics"].get(col.source, 0.0)))
        if col.kind == "pass_k":
            tasks = sorted(per_task)
            values = pass_hat_k_per_task([int(sum(per_task[t])) for t in tasks], len(per_task[tasks[0]]), col.k)
            out[col.key] = dict(zip(tasks, values, strict=True))
        else:
            out[col.key] = {t: float(np.mean(v)) for t, v in per_task.items()}
    return out


def hierarchical_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of a ``(seeds, tasks)`` array: its mean with a 95% hierarchical percentile bootstrap that
    resamples seeds, then tasks. Every seed was evaluated on the same held-out tasks, so one task draw serves all
    the resampled seeds (a hard task is hard in every seed: drawing tasks apart per seed would shrink the tasks'
    share of the variance by the number of seeds). One seed: a bootstrap over tasks; one task: over seeds.

    Two seeds at 0.5 each (a seed-mean bootstrap: no width) are not a certain 0.5:

    >>> [round(x, 2) for x in hierarchical_ci(np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]))]
    [0.5, 0.24, 1.0]
    """
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    n_s, n_t = values.shape
    boots = np.empty(BOOTSTRAP_SAMPLES)
    for b in range(BOOTSTRAP_SAMPLES):
        rows = values[rng.integers(0, n_s, n_s)]
        boots[b] = rows[:, rng.integers(0, n_t, n_t)].mean()
    alpha = (1.0 - CONFIDENCE) / 2
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return float(values.mean()), float(low), float(high)


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
    estimate, low, high = hierarchical_ci(diffs, seed)
    return {"estimate": estimate, "low": low, "high": high, "seeds": len(diffs)}


def arm_metric(
    per_seed: Sequence[Mapping[str, float]], per_task: Sequence[Mapping[int, float]] | None = None
) -> dict[str, Any]:
    """An arm's held-out metric from its seeds' ``{estimate, low, high}`` rows and, for several seeds, their
    per-task values (``per_task``, one mapping per seed, the same tasks): the mean over seeds and tasks with the
    hierarchical bootstrap of :func:`hierarchical_ci` (``ci: "seeds+tasks"``); a single run keeps its own CI over
    tasks (``"tasks"``). Several seeds without per-task values (no transcripts) get the mean and no interval
    (``"none"``): a bootstrap over two or three seed means alone would claim a precision they do not have."""
    if len(per_seed) == 1:
        m = per_seed[0]
        return {"estimate": m["estimate"], "low": m["low"], "high": m["high"], "seeds": 1, "ci": "tasks"}
    if per_task is None:
        mean = float(np.mean([m["estimate"] for m in per_seed]))
        return {"estimate": mean, "low": None, "high": None, "seeds": len(per_seed), "ci": "none"}
    tasks = sorted(per_task[0])
    if len(per_task) != len(per_seed) or any(sorted(v) != tasks for v in per_task):
        raise InvalidArgument("arm_metric needs one per-task mapping per seed, every seed on the same tasks.")
    estimate, low, high = hierarchical_ci(np.array([[v[t] for t in tasks] for v in per_task]))
    for m, v in zip(per_seed, per_task, strict=True):  # the transcripts must be the rows' episodes
        if not np.isclose(m["estimate"], np.mean(list(v.values())), atol=1e-6):
            raise InvalidArgument(f"arm_metric: a run's row says {m['estimate']} but its transcripts give "
                                  f"{np.mean(list(v.values()))}; re-run that run's final evaluation.")  # fmt: skip
    return {"estimate": estimate, "low": low, "high": high, "seeds": len(per_seed), "ci": "seeds+tasks"}


def aggregate(spec: Spec, root: Path, out: Path) -> dict[str, Any]:
    """Write ``curves_eval.png``, ``curves_train.png`` (one pair per stage, :func:`stage_figures`), ``table.md``
    and ``runs.jsonl`` to ``out``; returns the table as ``{arm: {column: value}}``."""
    from trainers.metrics import read_jsonl

    out.mkdir(parents=True, exist_ok=True)
    metrics: dict[tuple[str, int], list[dict]] = {}
    records = []
    groups: list[tuple[str, list[tuple[int, Path]]]] = []
    ws = spec.warm_start
    if ws is not None:
        groups.append(("warm start", [(ws.seed, spec.warm_dir(root))]))
        groups += [(f"warm start, seed {k}", [(k, out)]) for k, out in spec.check_dirs(root)]
        if ws.per_seed and len(spec.seeds) > 1:  # the RL seeds' warm starts together: the arms' baseline
            groups.append((WARM_PER_SEED, [(k, spec.warm_dir(root, k)) for k in spec.seeds]))
    for arm in spec.arms:
        groups.append((arm.name, [(r.seed, r.out_dir) for r in spec.runs(root) if r.arm.name == arm.name]))
    table: dict[str, dict[str, Any]] = {}
    bases: dict[Path, dict[int, float] | None] = {}  # warm start folder -> the paired metric per task

    def base_of(seed: int) -> dict[int, float] | None:
        """The paired metric per task of the warm start RL seed ``seed`` started from (None: not done/no text)."""
        folder = spec.warm_dir(root, seed if ws is not None and ws.per_seed else None)
        if folder not in bases:
            done = run_state(folder) == "done" and spec.eval.paired
            bases[folder] = task_values(folder, spec.eval.paired) if done else None
        return bases[folder]

    seed_tasks: dict[str, dict[int, dict[int, float]]] = {}  # arm -> seed -> the paired metric per task
    for arm, cells in groups:
        is_warm = arm.startswith("warm start")  # the warm starts: no costs, credit, curves or Δ
        paired = bool(spec.eval.paired) and not is_warm and ws is not None
        finals: dict[str, list[dict]] = {}
        per_task: dict[str, list[dict[int, float] | None]] = {}  # column -> per run: its value per task
        cost_rows: list[dict[str, float]] = []
        credit_rows: list[dict[str, float]] = []
        arm_records: list[dict[str, Any]] = []
        arm_tasks: dict[int, dict[int, float] | None] = {}  # seed -> the paired metric per task, per finished run
        arm_bases: dict[int, dict[int, float] | None] = {}  # seed -> its warm start's, per finished run
        for seed, run_dir in cells:
            if run_state(run_dir) != "done":
                continue
            rows = read_jsonl(run_dir / "metrics.jsonl")
            if not is_warm:
                metrics[(arm, seed)] = rows
            final, texts = {}, {}
            for row in _final_rows(run_dir):
                env_name = row.env_id.rsplit("/", 1)[-1]
                values = column_values(run_dir, row.env_id, list(row.metrics)) or {}
                for key, m in row.metrics.items():
                    name = key if len(spec.env) == 1 else f"{env_name}/{key}"
                    final[name], texts[name] = m, values.get(key)
            for key, m in final.items():
                finals.setdefault(key, []).append(m)
                per_task.setdefault(key, []).append(texts[key])
            cost = {} if is_warm else costs(rows)
            cost_rows.append(cost)
            credit = {} if is_warm else credit_signal(rows)
            credit_rows.append(credit)
            if paired:
                arm_tasks[seed] = task_values(run_dir, spec.eval.paired)
                arm_bases[seed] = base_of(seed)
            record = json.loads((run_dir / "run.json").read_text())
            config_path = run_dir / "config.json"
            arm_records.append({
                "spec": spec.name, "arm": arm, "strategy": record.get("strategy", "sft"), "seed": seed,
                "git_sha": json.loads((run_dir / DONE).read_text())["git_sha"],
                "attempts": record["attempts"], "command": record["command"],
                "config": json.loads(config_path.read_text()) if config_path.is_file() else {},
                "final_eval": final, "costs": cost, **({} if is_warm else {CREDIT: credit}),
            })  # fmt: skip
        if arm != WARM_PER_SEED:  # its runs are the warm start rows' runs, recorded there
            records += arm_records
        if not cost_rows:
            continue
        entry: dict[str, Any] = {}
        for key, values in finals.items():
            texts = per_task.get(key, [])
            whole = len(texts) == len(values) and None not in texts
            entry[key] = arm_metric(values, texts if whole else None)  # type: ignore[arg-type]
        for header, _key, _how in COST_COLUMNS:
            values = [c[header] for c in cost_rows if header in c]
            if values:
                entry[header] = float(np.mean(values))
        if not is_warm:
            entry[CREDIT] = {h: float(np.mean([c[h] for c in credit_rows if h in c]))
                             for h, _k, _how in CREDIT_COLUMNS if any(h in c for c in credit_rows)}  # fmt: skip
        entry["runs"] = len(cost_rows)
        if paired and None not in arm_tasks.values() and None not in arm_bases.values():
            seed_tasks[arm] = {seed: tasks for seed, tasks in arm_tasks.items() if tasks is not None}
            seeds = list(seed_tasks[arm])
            entry[PAIRED] = paired_delta([seed_tasks[arm][k] for k in seeds], [arm_bases[k] for k in seeds])
            for rec in arm_records:
                rec["paired_delta"] = paired_delta([seed_tasks[arm][rec["seed"]]], arm_bases[rec["seed"]])
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


def eval_phrase(ev: EvalSpec) -> str:
    """How a spec's final evaluations were played, for a table's caption.

    >>> eval_phrase(EvalSpec(tasks=12))
    'Held-out greedy evaluation (12 tasks, seed 12345)'
    >>> eval_phrase(EvalSpec(tasks=12, temperature=1.0, trials=8))[:70]
    'Held-out sampled evaluation (12 tasks x 8 trials at temperature 1, see'
    """
    if ev.trials > 1:
        return (
            f"Held-out sampled evaluation ({ev.tasks} tasks x {ev.trials} trials at temperature {ev.temperature:g}, "
            f"seed {ev.seed}; a task's value is the mean of its trials)"
        )
    return f"Held-out greedy evaluation ({ev.tasks} tasks, seed {ev.seed})"


def render_table(spec: Spec, table: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown: one row per arm, the held-out metrics as ``mean [low, high]``, then the cost columns."""
    metric_keys = sorted({k for entry in table.values() for k, v in entry.items() if isinstance(v, dict)}
                         - {PAIRED, VERSUS, CREDIT})  # fmt: skip
    paired = [PAIRED] if any(PAIRED in e for e in table.values()) else []
    cost_keys = [h for h, _k, _how in COST_COLUMNS if any(h in e for e in table.values())]
    head = ["arm", "runs", *metric_keys, *[f"Δ {spec.eval.paired} vs warm start (paired)" for _ in paired], *cost_keys]
    lines = [
        f"### {spec.title or spec.name}",
        "",
        eval_phrase(spec.eval) + " of the final policy: mean over "
        "seeds and tasks [95% hierarchical bootstrap: seeds resampled, then tasks; with one run, over tasks]. "
        + (
            "Δ: the mean change from the warm start "
            + ("each seed started from " if spec.warm_start is not None and spec.warm_start.per_seed else "")
            + "on the same tasks [95% hierarchical bootstrap over seeds and tasks]. "
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
    credit = [(arm, e[CREDIT]) for arm, e in table.items() if CREDIT in e]
    if credit:
        lines += [
            "",
            "Credit signal (trainers.instruments; mean over the arm's seeds; -: not logged, runs made before the "
            "instruments): the fraction of sampled groups whose turn-1 reward varies (at step 1 and over the run), "
            "the distinct turn-1 actions per episode in a group at step 1 (1/G: all alike), and the fraction of "
            "policy tokens whose advantage differs from GRPO-OR's (over the run).",
            "",
            "| arm | " + " | ".join(h for h, _k, _how in CREDIT_COLUMNS) + " |",
            "|---|" + "---|" * len(CREDIT_COLUMNS),
        ]
        for arm, c in credit:
            cells = [f"{c[h]:.3f}" if h in c else "-" for h, _k, _how in CREDIT_COLUMNS]
            lines.append("| " + " | ".join([arm, *cells]) + " |")
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
        own = spec.warm_start is not None and spec.warm_start.per_seed
        intro = f"Per run (arms with several seeds): Δ {spec.eval.paired} from {'its own' if own else 'the'} warm start"
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
    """An estimate with its interval, ``+0.125 [+0.031, +0.219]`` (``sign=""``: ``0.531 [0.406, 0.656]``); without
    one (several seeds, no transcripts): ``0.531 [no CI]``."""
    if m["low"] is None or m["high"] is None:
        return f"{m['estimate']:{sign}.3f} [no CI]"
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
