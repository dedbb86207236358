"""Episode viewer: one self-contained HTML page of what runs' agents did and where the credit went.

    python -m leaderboards.view runs/grpo_or runs/mt_grpo --out view.html
    python -m leaderboards.view experiments/runs/wiki_mtgrpo/grpo_or experiments/runs/wiki_mtgrpo/mt_grpo --out v.html

Each RUN_DIR is a run folder (one holding ``metrics.jsonl``) or a folder of them (every run folder below it is
taken). From each run the page takes:

- ``metrics.jsonl``: the curves at the top (inline SVG, one line per run);
- ``traces/step_NNNNNN.jsonl.gz`` (``trainers.rl --trace-every``, :mod:`trainers.loggers`): training episodes with
  the advantage the run's strategy gave each policy token;
- ``traces/eval_step_NNNNNN.jsonl.gz``: the held-out episodes of each in-training evaluation (no advantages);
- ``final-eval/transcripts/*.jsonl`` (``leaderboards.experiments``' final evaluation): each held-out episode's text and
  per-turn rewards. These hold neither token ids nor the group an advantage is computed in (one greedy episode per
  task), so no per-token advantage can be recovered for them: the page says so and shows their text uncoloured.
  Their task is recovered from the evaluation's seed (``final-eval/<env>.jsonl``) by replaying the task draw of
  ``leaderboards.evaluate`` (``--no-task-text`` skips that).

The page (no server, no network, works from ``file://``): the curves; filters by kind (training / held-out /
final evaluation), step, strategy, run, task and return; episodes grouped by task with one column per run, so the
same task under GRPO-OR and MT-GRPO stands side by side; each turn with its reward components, every policy token
coloured by its advantage on a diverging scale (blue > 0, red < 0; the value on hover), and the env's messages.
Filters live in the URL hash (``view.html#strategy=mt_grpo&kind=train&step=12``) and can be linked to. All text
is data: agent text is inserted as text nodes, never as markup; the embedded JSON escapes ``<``, ``>`` and ``&``.

Size: at most ``--max-steps`` steps per run and kind (evenly spaced, first and last kept), ``--episodes-per-step``
training and ``--eval-episodes`` held-out episodes per run and step, env messages cut at ``--max-env-chars``.
"""

from __future__ import annotations

import argparse
import glob
import html
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_turn.error import InvalidArgument
from trainers.metrics import read_jsonl

CURVE_KEYS = (
    "rollout/return",
    "env/tool_called",
    "env/exact_match",
    "eval/env/exact_match",
    "eval/env/tool_called",
    "eval/rollout/return",
    "losses/policy",
    "losses/sft",
)
"""Curves drawn when present (``--curves`` picks others); every ``credit/...`` key a run logged follows them
(:func:`credit_keys`)."""


def credit_keys(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The credit signal's instruments (``credit/...``, :mod:`trainers.instruments`) that ``rows`` carry, turn by
    turn in turn order (``turn2`` before ``turn10``, pooled later turns last), then the advantage comparisons.

    >>> row = {"step": 1, "credit/turn10_groups": 1, "credit/turn2_reward_varies": 0.5}
    >>> credit_keys([row, {"credit/adv_differs_from_grpo_or": 1.0}])
    ['credit/turn2_reward_varies', 'credit/turn10_groups', 'credit/adv_differs_from_grpo_or']
    """
    import re

    def order(key: str) -> tuple[int, int, str]:
        turn = re.match(r"credit/turn(\d+)_", key)
        if turn:
            return (0, int(turn.group(1)), key)
        return (1 if key.startswith("credit/turn_later_") else 2, 0, key)

    return sorted({k for row in rows for k in row if k.startswith("credit/")}, key=order)


PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#1f78b4",
           "#b15928")  # fmt: skip

TRACES = "traces"

KINDS = {"train": "training", "eval": "held-out", "final": "final held-out"}

NO_ADVANTAGE_NOTE = (
    "Per-token advantages were not recorded for the final-evaluation transcripts (final-eval/transcripts/): they "
    "hold each episode's text and per-turn rewards, not its token ids, and the held-out evaluation plays one greedy "
    "episode per task, so there is no group to compute a group-relative advantage in. Those episodes are shown "
    "uncoloured; training runs record advantages in traces/ (trainers.rl --trace-every)."
)


@dataclass
class ViewConfig:
    """What goes on the page (one field per CLI flag)."""

    runs: list[str]
    out: str = "view.html"
    title: str | None = None
    steps: list[int] | None = None
    max_steps: int = 6
    episodes_per_step: int = 8
    eval_episodes: int = 16
    max_env_chars: int = 1500
    max_prompt_chars: int = 3000
    curves: list[str] | None = None
    task_text: bool = True

    def __post_init__(self) -> None:
        if not self.runs:
            raise InvalidArgument("leaderboards.view needs at least one RUN_DIR, e.g. runs/rl.")
        for name in ("max_steps", "episodes_per_step", "eval_episodes", "max_env_chars", "max_prompt_chars"):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"--{name.replace('_', '-')}={getattr(self, name)} must be >= 1.")


@dataclass
class Run:
    """One run folder as the page shows it."""

    path: Path
    label: str
    strategy: str
    env: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------- reading
def find_runs(paths: Sequence[str | Path]) -> list[Path]:
    """Run folders: each path that holds ``metrics.jsonl``, else every folder below it that does (sorted)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise InvalidArgument(f"RUN_DIR {str(raw)!r} is not a folder; give a run folder (with metrics.jsonl).")
        found = [path] if (path / "metrics.jsonl").is_file() else sorted(p.parent for p in path.rglob("metrics.jsonl"))
        if not found:
            raise InvalidArgument(
                f"RUN_DIR {str(raw)!r} holds no metrics.jsonl (nor does any folder below it); give the --out-dir of "
                "a trainers.rl / trainers.sft run or an experiments/runs/<spec> folder."
            )
        out += [p for p in found if p not in out]
    return out


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Short unique names: each path relative to the folder all share (a lone run: its folder name)."""
    if len(paths) == 1:
        return [paths[0].resolve().name]
    resolved = [p.resolve() for p in paths]
    common = Path(os.path.commonpath(resolved))
    return [str(p.relative_to(common)) for p in resolved]


def pick_steps(steps: Sequence[int], most: int, wanted: Sequence[int] | None) -> list[int]:
    """``wanted`` steps that exist, else at most ``most`` of ``steps`` evenly spaced, the first and last kept."""
    steps = sorted(set(steps))
    if wanted is not None:
        return [s for s in steps if s in set(wanted)]
    if len(steps) <= most:
        return steps
    picks = {steps[round(i * (len(steps) - 1) / (most - 1))] for i in range(most)} if most > 1 else {steps[-1]}
    return sorted(picks)


def cut(text: str, limit: int) -> str:
    """``text`` with at most ``limit`` characters kept, saying how many were cut."""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters cut]"


def split_chatml_turns(text: str, turns: int) -> list[tuple[str, str]] | None:
    """A transcript's text (from the first policy token on, ChatML) as ``(policy text, env text)`` per turn; None
    when it does not split into ``turns`` turns."""
    parts = text.split("<|im_start|>assistant\n")
    out = []
    for i, part in enumerate(parts):
        end = part.find("<|im_end|>")
        policy, env = (part, "") if end < 0 else (part[: end + len("<|im_end|>")], part[end + len("<|im_end|>") :])
        out.append((policy, env + ("<|im_start|>assistant\n" if i + 1 < len(parts) else "")))
    return out if len(out) == turns else None


def recover_tasks(env_id: str, env_kwargs: dict[str, Any], seed: int, count: int) -> list[str]:
    """The opening user message of the ``count`` tasks ``leaderboards.evaluate --seed seed`` poses (its task draw,
    replayed on a fresh env)."""
    import gymnasium as gym

    import agentgym_turn  # noqa: F401  (registers the ids)
    from trainers.loggers import task_label
    from trainers.rollout import distinct_task_seeds

    env = gym.make(env_id, **env_kwargs)
    out = []
    try:
        for task_seed in distinct_task_seeds(env, seed, count):
            messages, _ = env.reset(seed=task_seed)
            users = [m["content"] for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]
            out.append(task_label(f"<|im_start|>user\n{users[-1]}<|im_end|>" if users else ""))
    finally:
        env.close()
    return out


def trace_episode(rec: dict[str, Any], cfg: ViewConfig) -> dict[str, Any]:
    """A trace line (``trainers.loggers``) as the page's episode record."""
    turns = [{"tokens": t["tokens"], "adv": t["adv"], "text": None, "rewards": t["rewards"],
              "env": cut(t["env"], cfg.max_env_chars)} for t in rec["turns"]]  # fmt: skip
    return {"kind": rec["kind"], "step": rec["step"], "task": rec["task"], "group": rec["group"],
            "ret": rec["return"], "truncated": rec["truncated"], "metrics": rec["metrics"],
            "prompt": cut(rec["prompt"][-cfg.max_prompt_chars :], cfg.max_prompt_chars), "turns": turns}  # fmt: skip


def final_eval_episodes(run: Path, cfg: ViewConfig, last_step: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The first ``cfg.eval_episodes`` episodes of each ``final-eval/transcripts/<env>.jsonl``, and notes."""
    from agentgym_turn.error import DataNotFound, DependencyNotInstalled

    episodes, notes = [], []
    for path in sorted((run / "final-eval" / "transcripts").glob("*.jsonl")):
        lines = read_jsonl(path)[: cfg.eval_episodes]
        row_file = path.parent.parent / path.name
        row = read_jsonl(row_file)[-1] if row_file.is_file() else {}
        tasks: list[str] = []
        if cfg.task_text and row.get("env_id") and lines:
            try:
                tasks = recover_tasks(row["env_id"], row.get("env_kwargs", {}), int(row["seed"]),
                                      max(int(x["task"]) for x in lines) + 1)  # fmt: skip
            except (DependencyNotInstalled, DataNotFound) as exc:
                notes.append(f"{path.name}: the tasks' text could not be recovered ({exc}); shown by index.")
        for x in lines:
            task = int(x["task"])
            rewards = x["turn_rewards"]
            split = split_chatml_turns(x["text"], len(rewards))
            if split is None:  # not ChatML or a different turn count: the whole text as one block
                merged: dict[str, float] = {}
                for r in rewards:
                    for k, v in r.items():
                        merged[k] = merged.get(k, 0.0) + v
                turns = [{"tokens": None, "adv": None, "text": x["text"], "rewards": merged, "env": ""}]
            else:
                turns = [{"tokens": None, "adv": None, "text": p, "rewards": r, "env": cut(e, cfg.max_env_chars)}
                         for (p, e), r in zip(split, rewards, strict=True)]  # fmt: skip
            label = tasks[task] if task < len(tasks) else f"held-out task #{task}"
            episodes.append({"kind": "final", "step": last_step, "task": label, "group": task,
                             "ret": round(sum(sum(r.values()) for r in rewards), 6), "truncated": False,
                             "metrics": x.get("metrics", {}), "prompt": None, "turns": turns})  # fmt: skip
    return episodes, notes


def load_run(path: Path, label: str, cfg: ViewConfig) -> Run:
    """Curves, traces and final-evaluation transcripts of one run folder."""
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    strategy = config.get("strategy") or ("sft" if "policy" in config else "?")
    env = ", ".join(config.get("env", [])) if isinstance(config.get("env"), list) else str(config.get("env", ""))
    run = Run(path, label, strategy, env, rows=read_jsonl(path / "metrics.jsonl"))
    from trainers.loggers import read_trace

    for pattern, cap in (("step_*.jsonl.gz", cfg.episodes_per_step), ("eval_step_*.jsonl.gz", cfg.eval_episodes)):
        files = {int(re.findall(r"(\d+)\.jsonl\.gz$", f)[0]): Path(f) for f in glob.glob(str(path / TRACES / pattern))}
        for step in pick_steps(list(files), cfg.max_steps, cfg.steps):
            run.episodes += [trace_episode(rec, cfg) for rec in read_trace(files[step])[:cap]]
    last = max((int(r.get("step", 0)) for r in run.rows), default=0)
    final, notes = final_eval_episodes(path, cfg, last)
    run.episodes += final
    run.notes += notes
    return run


# ---------------------------------------------------------------------------------------------------- curves
def svg_curve(key: str, runs: Sequence[Run], width: int = 300, height: int = 160) -> str | None:
    """One inline SVG chart of ``key`` against step, a polyline per run (None when no run has the key)."""
    series = []
    for i, run in enumerate(runs):
        pts = [(float(r["step"]), float(r[key])) for r in run.rows if isinstance(r.get(key), int | float)]
        pts = [p for p in pts if math.isfinite(p[1])]
        if pts:
            series.append((i, pts))
    if not series:
        return None
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    first, last = x0, x1  # the axis labels
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    left, right, top, bottom = 52, 8, 22, 24

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def sy(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * (height - top - bottom)

    out = [f'<svg class="curve" data-key="{html.escape(key)}" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(key)} against step">',
           f'<text x="{left}" y="14" class="ct">{html.escape(key)}</text>',
           f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" class="ax"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" class="ax"/>',
           f'<text x="{left - 4}" y="{top + 4}" class="yl">{y1:.3g}</text>',
           f'<text x="{left - 4}" y="{height - bottom}" class="yl">{y0:.3g}</text>',
           f'<text x="{left}" y="{height - 8}" class="xl">{first:g}</text>',
           f'<text x="{width - right}" y="{height - 8}" class="xl" text-anchor="end">step {last:g}</text>']  # fmt: skip
    for i, pts in series:
        color = PALETTE[i % len(PALETTE)]
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="{color}">'
                       f"<title>{html.escape(runs[i].label)} step {x:g}: {y:.4g}</title></circle>")  # fmt: skip
    out.append("</svg>")
    return "".join(out)


# ------------------------------------------------------------------------------------------------------ page
def page_data(runs: Sequence[Run]) -> dict[str, Any]:
    """The JSON the page's script renders: runs, task labels and prompts (each once), episodes."""
    tasks: dict[str, int] = {}
    prompts: dict[str, int] = {}
    episodes = []
    for i, run in enumerate(runs):
        for ep in run.episodes:
            t = tasks.setdefault(ep["task"], len(tasks))
            p = None if ep["prompt"] is None else prompts.setdefault(ep["prompt"], len(prompts))
            episodes.append({**{k: v for k, v in ep.items() if k not in ("task", "prompt")}, "run": i, "task": t,
                             "prompt": p})  # fmt: skip
    shown = [{"label": r.label, "strategy": r.strategy, "env": r.env, "color": PALETTE[i % len(PALETTE)]}
             for i, r in enumerate(runs)]  # fmt: skip
    return {
        "runs": shown,
        "kinds": KINDS,
        "tasks": list(tasks),
        "prompts": list(prompts),
        "episodes": episodes,
    }


def script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, ``<!--`` or ``&`` can end or change it)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header,#controls,#curves,#notes,#episodes{padding:8px 18px}
h1{font-size:20px;margin:10px 0 2px} .meta{color:#555;margin:0}
#notes p{background:#fff6d5;border:1px solid #e8d48a;padding:6px 10px;margin:6px 0;border-radius:4px}
#legend span.run{margin-right:14px;white-space:nowrap} .dot{display:inline-block;width:10px;height:10px;
border-radius:5px;margin-right:4px;vertical-align:middle}
#curves svg{background:#fff;border:1px solid #ddd;margin:4px 6px 4px 0;border-radius:4px}
.ct{font-size:12px;font-weight:600} .ax{stroke:#999} .yl{font-size:10px;text-anchor:end;fill:#555}
.xl{font-size:10px;fill:#555}
#controls{position:sticky;top:0;background:#f0f0f3;border-bottom:1px solid #ccc;z-index:2}
#controls label{margin-right:12px;white-space:nowrap} #controls select{max-width:260px}
#controls input{width:70px} #count{font-weight:600}
.scale{display:inline-block;margin-left:10px} .scale span{padding:0 6px;border-radius:3px}
.block{margin:14px 0;border-top:2px solid #ccc;padding-top:6px}
.block h2{font-size:14px;margin:2px 0 6px;font-weight:600} .block h2 .k{color:#666;font-weight:400}
.cols{display:grid;gap:10px;overflow-x:auto} .col{min-width:0}
.colhead{font-weight:600;font-size:13px;border-bottom:3px solid #999;margin-bottom:6px;padding-bottom:2px}
.episode{background:#fff;border:1px solid #ddd;border-left:5px solid #999;border-radius:4px;padding:6px 8px;
margin-bottom:8px}
.ehead{font-size:12px;color:#333;margin-bottom:4px} .ehead b{font-size:13px}
.turn{border-top:1px dashed #ddd;padding:4px 0} .tlabel{font-size:11px;color:#666;margin-right:6px}
.chip{display:inline-block;font-size:11px;background:#eef;border-radius:3px;padding:0 4px;margin:0 3px 2px 0}
.chip.neg{background:#fde2e2} .chip.pos{background:#dff3e3}
.policy{white-space:pre-wrap;word-break:break-word;font:12.5px/1.5 ui-monospace,Menlo,Consolas,monospace;
margin:3px 0} .tok{border-radius:2px} .tok.zero{background:#f3f3f3} .plain{background:none}
pre.env{white-space:pre-wrap;word-break:break-word;background:#f6f6f9;color:#444;margin:3px 0;padding:4px 6px;
font:11.5px/1.4 ui-monospace,Menlo,Consolas,monospace;max-height:160px;overflow:auto;border-radius:3px}
details summary{cursor:pointer;font-size:11px;color:#666} details pre{max-height:220px}
.empty{color:#777;font-style:italic}
"""

SCRIPT = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const root = document.getElementById("episodes");
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  let scale = 0;
  for (const ep of data.episodes) {
    for (const t of ep.turns) for (const a of t.adv || []) scale = Math.max(scale, Math.abs(a));
  }
  scale = scale || 1;
  function color(a) {
    const alpha = (0.12 + 0.78 * Math.min(1, Math.abs(a) / scale)).toFixed(3);
    return a > 0 ? "rgba(33, 102, 172, " + alpha + ")" : "rgba(178, 24, 43, " + alpha + ")";
  }
  const fmt = (x) => (x > 0 ? "+" : "") + Number(x).toFixed(4);
  // ---- filters -----------------------------------------------------------------------------------------------
  function fill(select, values, labels) {
    select.appendChild(new Option("all", "all"));
    values.forEach((v, i) => select.appendChild(new Option(labels ? labels[i] : String(v), String(v))));
  }
  const kinds = [...new Set(data.episodes.map((e) => e.kind))];
  fill($("f-kind"), kinds, kinds.map((k) => data.kinds[k] || k));
  fill($("f-step"), [...new Set(data.episodes.map((e) => e.step))].sort((a, b) => a - b));
  fill($("f-strategy"), [...new Set(data.runs.map((r) => r.strategy))]);
  fill($("f-run"), data.runs.map((r, i) => i), data.runs.map((r) => r.label));
  const usedTasks = [...new Set(data.episodes.map((e) => e.task))].sort((a, b) => a - b);
  const short = (text) => (text.length > 70 ? text.slice(0, 69) + "…" : text);
  fill($("f-task"), usedTasks, usedTasks.map((t) => short(data.tasks[t])));
  const fields = {kind: "f-kind", step: "f-step", strategy: "f-strategy", run: "f-run", task: "f-task",
                  minret: "f-minret", maxret: "f-maxret"};
  function readHash() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    for (const [key, id] of Object.entries(fields)) {
      const node = $(id), value = params.get(key);
      const known = value !== null && [...(node.options || [])].some((o) => o.value === value);
      if (node.tagName === "SELECT") node.value = known ? value : "all";
      else node.value = value !== null ? value : "";
    }
  }
  function writeHash() {
    const params = new URLSearchParams();
    for (const [key, id] of Object.entries(fields)) {
      const v = $(id).value;
      if (v !== "" && v !== "all") params.set(key, v);
    }
    const hash = params.toString();
    if (hash !== location.hash.replace(/^#/, "")) {
      history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
    }
  }
  function selected() {
    const f = (id) => $(id).value;
    const minret = f("f-minret") === "" ? -Infinity : Number(f("f-minret"));
    const maxret = f("f-maxret") === "" ? Infinity : Number(f("f-maxret"));
    return data.episodes.filter((e) =>
      (f("f-kind") === "all" || e.kind === f("f-kind")) &&
      (f("f-step") === "all" || String(e.step) === f("f-step")) &&
      (f("f-strategy") === "all" || data.runs[e.run].strategy === f("f-strategy")) &&
      (f("f-run") === "all" || String(e.run) === f("f-run")) &&
      (f("f-task") === "all" || String(e.task) === f("f-task")) &&
      e.ret >= minret && e.ret <= maxret);
  }
  // ---- episodes -----------------------------------------------------------------------------------------------
  function chips(parent, rewards) {
    for (const [name, v] of Object.entries(rewards)) {
      const value = fmt(v).replace(/0+$/, "").replace(/\.$/, "");
      parent.appendChild(el("span", "chip " + (v > 0 ? "pos" : v < 0 ? "neg" : ""), name + " " + value));
    }
  }
  function episodeCard(ep) {
    const run = data.runs[ep.run];
    const card = el("div", "episode");
    card.style.borderLeftColor = run.color;
    card.dataset.run = String(ep.run);
    card.dataset.strategy = run.strategy;
    card.dataset.kind = ep.kind;
    card.dataset.step = String(ep.step);
    card.dataset.task = String(ep.task);
    card.dataset.ret = String(ep.ret);
    const head = el("div", "ehead");
    head.appendChild(el("b", null, run.label));
    head.appendChild(document.createTextNode(" · " + run.strategy + " · return " + Number(ep.ret).toFixed(3) +
      (ep.kind === "train" ? " · group " + ep.group : "") + (ep.truncated ? " · truncated" : "")));
    const headline = /^(env\/)?(exact_match|tool_called|success)$/;
    const shown = Object.entries(ep.metrics || {}).filter(([k]) => headline.test(k));
    const named = shown.map(([k, v]) => k.replace(/^env\//, "") + " " + Number(v).toFixed(2));
    if (named.length) head.appendChild(document.createTextNode(" · " + named.join(", ")));
    card.appendChild(head);
    if (ep.prompt !== null && ep.prompt !== undefined) {
      const d = el("details");
      d.appendChild(el("summary", null, "prompt"));
      d.appendChild(el("pre", "env", data.prompts[ep.prompt]));
      card.appendChild(d);
    }
    ep.turns.forEach((t, k) => {
      const turn = el("div", "turn");
      turn.appendChild(el("span", "tlabel", "turn " + (k + 1)));
      chips(turn, t.rewards);
      const pol = el("div", "policy");
      if (t.tokens) {
        t.tokens.forEach((text, j) => {
          const span = el("span", "tok", text);
          if (t.adv) {
            const a = t.adv[j];
            span.dataset.adv = String(a);
            span.title = "advantage " + fmt(a);
            if (a === 0) span.classList.add("zero");
            else { span.classList.add(a > 0 ? "pos" : "neg"); span.style.backgroundColor = color(a); }
          } else span.classList.add("na");
          pol.appendChild(span);
        });
      } else {
        const span = el("span", "tok plain na", t.text);
        span.title = "no per-token advantages recorded";
        pol.appendChild(span);
      }
      turn.appendChild(pol);
      if (t.env) turn.appendChild(el("pre", "env", t.env));
      card.appendChild(turn);
    });
    return card;
  }
  function render() {
    const eps = selected();
    root.textContent = "";
    $("count").textContent = eps.length + " of " + data.episodes.length + " episodes";
    const order = {train: 0, eval: 1, final: 2};
    const blocks = new Map();
    for (const ep of eps) {
      const key = ep.kind + "|" + (ep.kind === "final" ? "" : ep.step) + "|" + ep.task;  // final: every run's last
      if (!blocks.has(key)) blocks.set(key, []);
      blocks.get(key).push(ep);
    }
    const keys = [...blocks.keys()].sort((a, b) => {
      const [ka, sa, ta] = a.split("|"), [kb, sb, tb] = b.split("|");
      return (order[ka] - order[kb]) || (sa - sb) || (ta - tb);
    });
    if (!keys.length) root.appendChild(el("p", "empty", "No episode matches these filters."));
    for (const key of keys) {
      const [kind, step, task] = key.split("|");
      const block = el("section", "block");
      const h = el("h2");
      h.appendChild(el("span", "k", (data.kinds[kind] || kind) + (step === "" ? "" : " · step " + step) + " · "));
      h.appendChild(document.createTextNode(data.tasks[Number(task)]));
      block.appendChild(h);
      const members = blocks.get(key);
      const runsIn = [...new Set(members.map((e) => e.run))].sort((a, b) => a - b);
      const cols = el("div", "cols");  // one column per run: the same task side by side
      cols.style.gridTemplateColumns = "repeat(" + runsIn.length + ", minmax(300px, 1fr))";
      for (const r of runsIn) {
        const col = el("div", "col");
        col.dataset.run = String(r);
        const head = el("div", "colhead", data.runs[r].label + " · " + data.runs[r].strategy);
        head.style.borderBottomColor = data.runs[r].color;
        col.appendChild(head);
        for (const ep of members.filter((e) => e.run === r).sort((a, b) => a.group - b.group)) {
          col.appendChild(episodeCard(ep));
        }
        cols.appendChild(col);
      }
      block.appendChild(cols);
      root.appendChild(block);
    }
  }
  readHash();
  render();
  for (const id of Object.values(fields)) $(id).addEventListener("change", () => { writeHash(); render(); });
  window.addEventListener("hashchange", () => { readHash(); render(); });
  document.body.dataset.rendered = "1";
})();
"""


def render_page(runs: Sequence[Run], cfg: ViewConfig) -> str:
    """The whole HTML page (inline CSS, data and script; nothing fetched)."""
    envs = sorted({r.env for r in runs if r.env})
    title = cfg.title or f"TurnRL episodes: {', '.join(sorted({r.strategy for r in runs}))} on {', '.join(envs)}"
    keys = cfg.curves or [k for k in CURVE_KEYS if any(k in row for r in runs for row in r.rows)] + credit_keys(
        [row for r in runs for row in r.rows]
    )
    charts = [c for c in (svg_curve(k, runs) for k in keys) if c]
    legend = "".join(
        f'<span class="run"><span class="dot" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{html.escape(r.label)} ({html.escape(r.strategy)})</span>"
        for i, r in enumerate(runs)
    )
    notes = [n for r in runs for n in r.notes]
    if any(ep["kind"] == "final" for r in runs for ep in r.episodes):
        notes.insert(0, NO_ADVANTAGE_NOTE)
    pos, neg = "rgba(33, 102, 172, 0.9)", "rgba(178, 24, 43, 0.9)"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{CSS}</style></head>
<body>
<header><h1>{html.escape(title)}</h1>
<p class="meta">{len(runs)} run(s) on {html.escape(", ".join(envs) or "?")}; made by python -m leaderboards.view</p>
<div id="legend">{legend}</div></header>
<div id="notes">{"".join(f"<p>{html.escape(n)}</p>" for n in notes)}</div>
<section id="curves">{"".join(charts)}</section>
<div id="controls">
<label>kind <select id="f-kind"></select></label>
<label>step <select id="f-step"></select></label>
<label>strategy <select id="f-strategy"></select></label>
<label>run <select id="f-run"></select></label>
<label>task <select id="f-task"></select></label>
<label>return ≥ <input id="f-minret" type="number" step="any"></label>
<label>≤ <input id="f-maxret" type="number" step="any"></label>
<span id="count"></span>
<span class="scale">advantage: <span style="background:{neg}">&lt; 0</span> <span class="tok zero">0</span>
<span style="background:{pos};color:#fff">&gt; 0</span> (hover a token for its value)</span>
</div>
<main id="episodes"></main>
<script type="application/json" id="data">{script_json(page_data(runs))}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def build(cfg: ViewConfig) -> Path:
    """Read the runs of ``cfg`` and write the page to ``cfg.out``; returns its path."""
    paths = find_runs(cfg.runs)
    runs = [load_run(p, label, cfg) for p, label in zip(paths, run_labels(paths), strict=True)]
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(runs, cfg), encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> Path:
    """The CLI: ``python -m leaderboards.view RUN_DIR [RUN_DIR ...] [--out view.html]``."""
    parser = argparse.ArgumentParser(prog="python -m leaderboards.view", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders, or folders of run folders")
    parser.add_argument("--out", default="view.html", help="the HTML file to write")
    parser.add_argument("--title", default=None, help="page title (default: the strategies shown)")
    parser.add_argument("--steps", type=int, nargs="+", default=None, help="only these steps (default: --max-steps)")
    parser.add_argument("--max-steps", type=int, default=6, help="steps per run and kind, evenly spaced")
    parser.add_argument("--episodes-per-step", type=int, default=8, help="training episodes per run and step")
    parser.add_argument("--eval-episodes", type=int, default=16, help="held-out episodes per run and evaluation")
    parser.add_argument("--max-env-chars", type=int, default=1500, help="env text kept per turn")
    parser.add_argument("--max-prompt-chars", type=int, default=3000, help="prompt text kept (its end)")
    parser.add_argument("--curves", nargs="+", default=None, help=f"metric keys to draw (default: {CURVE_KEYS})")
    parser.add_argument("--task-text", action=argparse.BooleanOptionalAction, default=True,
                        help="recover final-eval tasks' text by replaying the evaluation's task draw")  # fmt: skip
    ns = parser.parse_args(argv)
    try:
        cfg = ViewConfig(**vars(ns))
        out = build(cfg)
    except InvalidArgument as exc:
        parser.error(str(exc))
        raise  # unreachable
    print(f"[view] wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
