"""What a run records besides its checkpoints: metric loggers (JSONL, TensorBoard, W&B) and episode traces.

**Loggers.** ``--log jsonl,tensorboard,wandb`` on ``trainers.rl`` / ``trainers.sft`` picks them; ``jsonl``
(``RUN/metrics.jsonl``, one row per step) is always on. Each logger has one small interface, :class:`Logger`:
``log(step, row)`` (the same scalars as ``metrics.jsonl``), ``log_table(key, columns, rows, step)`` (the held-out
transcripts) and ``close()``::

    loggers = make_loggers("jsonl,tensorboard", run_dir, config={"lr": 1e-5})
    loggers.log(1, {"rollout/return": 0.8, "losses/policy": 0.02})
    loggers.close()

- ``tensorboard``: event files in ``RUN/tensorboard/`` through ``torch.utils.tensorboard`` (``tensorboard --logdir
  RUN/tensorboard``); tables become text summaries (markdown). Extra: ``pip install "agentgym-turn[tensorboard]"``.
- ``wandb``: a W&B run in ``RUN/wandb/``, offline unless ``WANDB_MODE`` says otherwise (``wandb sync RUN/wandb/
  offline-run-*`` uploads it later); tables are ``wandb.Table`` s. Extra: ``pip install "agentgym-turn[wandb]"``.

**Traces** (what ``python -m leaderboards.view`` shows). Every ``--trace-every`` steps (and at the first and last)
the trainer writes ``--trace-episodes`` of the step's episodes, whole groups first, with the advantage the strategy
gave each policy token, to ``RUN/traces/step_000012.jsonl.gz``; every held-out evaluation writes its episodes
(no advantages: nothing is trained on them) to ``RUN/traces/eval_step_000012.jsonl.gz``. One JSON object a line::

    {"kind": "train", "step": 12, "strategy": "mt_grpo", "env_id": "TurnRL/WikiTwoTurn-v2", "group": 24,
     "task": "Who wrote ...?", "prompt": "<|im_start|>system ...", "return": 1.1, "terminated": true,
     "truncated": false, "metrics": {"env/exact_match": 0.0, ...},
     "turns": [{"tokens": ["<", "tool", ">", ...], "adv": [0.8123, 0.8123, ...], "rewards": {"tool_execution": 0.2},
                "env": "<|im_end|>\\n<|im_start|>user\\n<result>...", "value_target": null}, ...]}

``tokens`` are the policy's tokens of that turn as text (their concatenation is the turn's exact text; a token that
ends inside a multi-byte character is ``""`` and the next one carries the whole character), ``adv`` their
advantages rounded to 4 decimals (``null`` for evaluations), ``env`` the template and env tokens up to the next
policy turn (the env's messages as the policy saw them), ``value_target`` the critic's return at the turn's first
token (critic strategies).
"""

from __future__ import annotations

import difflib
import gzip
import json
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agentgym_turn.error import InvalidArgument, require

LOGGERS: dict[str, tuple[str, str]] = {
    "jsonl": ("json", "core"),
    "tensorboard": ("torch.utils.tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}
"""Logger name -> (module it needs, the pyproject extra that installs it)."""

TRACE_DECIMALS = 4
"""Advantages in traces are rounded to this many decimals."""

TRACE_DIR = "traces"


# ---------------------------------------------------------------------------------------------------- loggers
class Logger(Protocol):
    """Where a run's per-step scalars (and held-out transcript tables) go."""

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        """Record the scalars of ``row`` (non-numbers are skipped by the scalar loggers) at ``step``."""

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        """Record a table (e.g. held-out transcripts: one row per episode) under ``key`` at ``step``."""

    def close(self) -> None:
        """Flush and release files and processes."""


def parse_log_spec(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``"tensorboard,wandb"`` -> ``("jsonl", "tensorboard", "wandb")``: the names, ``jsonl`` always first;
    an unknown name raises with the choices (and the closest one)."""
    items = spec.split(",") if isinstance(spec, str) else [s for part in spec for s in part.split(",")]
    names = ["jsonl"]
    for raw in items:
        name = raw.strip().lower()
        if not name or name in names:
            continue
        if name not in LOGGERS:
            close = difflib.get_close_matches(name, list(LOGGERS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidArgument(
                f"--log {spec!r}: unknown logger {name!r}.{hint} Use a comma-separated list of {', '.join(LOGGERS)} "
                "(jsonl is always on), e.g. --log jsonl,tensorboard."
            )
        names.append(name)
    return tuple(names)


def check_log_spec(spec: str | Sequence[str]) -> tuple[str, ...]:
    """:func:`parse_log_spec`, and each logger's package importable (else the ``pip install`` that provides it),
    so a run fails before it trains, not at its first log."""
    import importlib.util

    from agentgym_turn.error import DependencyNotInstalled

    names = parse_log_spec(spec)
    for name in names:
        module, extra = LOGGERS[name]
        top = module.split(".")[0]
        needed = "tensorboard" if name == "tensorboard" else top
        if importlib.util.find_spec(top) is None or importlib.util.find_spec(needed) is None:
            raise DependencyNotInstalled(
                f"--log {name} needs the {needed!r} package, which is not installed; install it with "
                f'`pip install "agentgym-turn[{extra}]"` (or run `bash scripts/setup.sh`), or drop {name} from --log.'
            )
    return names


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric entries of a metrics row (``step`` excluded; bools as 0/1)."""
    return {
        k: float(v) for k, v in row.items() if k != "step" and isinstance(v, int | float | np.integer | np.floating)
    }


@dataclass
class JsonlLogger:
    """``metrics.jsonl``: one row per call, ``{"step": step, **row}`` (sorted keys, fsync'd: a killed run keeps
    every finished step). Tables are not written here (traces hold the episodes)."""

    path: Path

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        """Append ``row`` at ``step``."""
        from trainers.metrics import append_jsonl

        append_jsonl(self.path, {**row, "step": step})

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        """Nothing: the held-out episodes are in ``RUN/traces/``."""

    def close(self) -> None:
        """Nothing to release."""


@dataclass
class TensorBoardLogger:
    """TensorBoard event files in ``log_dir`` (``torch.utils.tensorboard``): each scalar under its metric key;
    tables as a markdown text summary (at most ``table_rows`` rows, each cell at most ``cell_chars``)."""

    log_dir: Path
    table_rows: int = 16
    cell_chars: int = 2000
    _writer: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        tb = require("torch.utils.tensorboard", "tensorboard", "tensorboard")
        self._writer = tb.SummaryWriter(log_dir=str(self.log_dir))

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        """One scalar per numeric key of ``row``, flushed."""
        for key, value in scalars(row).items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        """A markdown table (cells escaped for it) as a text summary."""

        def cell(value: Any) -> str:
            text = str(value)[: self.cell_chars]
            return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")

        lines = ["| " + " | ".join(map(cell, columns)) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows[: self.table_rows]]
        self._writer.add_text(key, "\n".join(lines), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()


@dataclass
class WandbLogger:
    """A W&B run in ``run_dir/wandb/``: offline unless ``WANDB_MODE`` is set (``online``, ``disabled``, ...). A
    resumed training run continues the same W&B run (its id is kept in ``run_dir/wandb/run-id``)."""

    run_dir: Path
    config: Mapping[str, Any] | None = None
    name: str | None = None
    project: str = "turnrl"
    _run: Any = field(default=None, init=False, repr=False)
    _wandb: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._wandb = require("wandb", "wandb")
        folder = self.run_dir / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        id_file = folder / "run-id"
        run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        self._run = self._wandb.init(
            dir=str(self.run_dir),
            project=os.environ.get("WANDB_PROJECT", self.project),
            name=self.name or self.run_dir.name,
            id=run_id,
            resume="allow",
            config=dict(self.config or {}),
            mode=os.environ.get("WANDB_MODE", "offline"),
        )

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        """The numeric entries of ``row`` at ``step``."""
        self._run.log(scalars(row), step=step)

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        """A ``wandb.Table`` under ``key`` at ``step``."""
        self._run.log({key: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

    def close(self) -> None:
        """Finish the run (offline: its files are complete in ``run_dir/wandb/``)."""
        self._run.finish()


@dataclass
class Loggers:
    """Several loggers behind the one interface (what :func:`make_loggers` returns)."""

    loggers: list[Any]

    @property
    def names(self) -> list[str]:
        """Class names of the loggers, in order."""
        return [type(lg).__name__ for lg in self.loggers]

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        """Every logger's :meth:`Logger.log`."""
        for lg in self.loggers:
            lg.log(step, row)

    def log_table(self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int) -> None:
        """Every logger's :meth:`Logger.log_table`."""
        for lg in self.loggers:
            lg.log_table(key, columns, rows, step)

    def close(self) -> None:
        """Close every logger (each is closed even if one fails; the first error is raised after)."""
        errors = []
        for lg in self.loggers:
            try:
                lg.close()
            except Exception as exc:  # close the rest, then raise
                errors.append(exc)
        if errors:
            raise errors[0]


def make_loggers(
    spec: str | Sequence[str], run_dir: str | Path, *, config: Mapping[str, Any] | None = None, name: str | None = None
) -> Loggers:
    """The loggers ``spec`` names (``"jsonl,tensorboard,wandb"``; jsonl always) writing into ``run_dir``:
    ``metrics.jsonl``, ``tensorboard/`` and ``wandb/``. ``config`` is the run's config (W&B records it)."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    out: list[Any] = []
    for logger in parse_log_spec(spec):
        if logger == "jsonl":
            out.append(JsonlLogger(run / "metrics.jsonl"))
        elif logger == "tensorboard":
            out.append(TensorBoardLogger(run / "tensorboard"))
        else:
            out.append(WandbLogger(run, config=config, name=name))
    return Loggers(out)


# ----------------------------------------------------------------------------------------------------- traces
def token_texts(tokenizer: Any, ids: Sequence[int], context: int = 8) -> list[str]:
    """The text each of ``ids`` adds to the decoded sequence; their concatenation is ``decode(ids)``. A token that
    ends inside a multi-byte character adds ``""`` and the token completing it the whole character. Each piece is
    decoded with at most ``context`` tokens before it (linear in ``len(ids)``); a tokenizer whose pieces then do not
    add up to the whole (e.g. one that strips a leading space) gets the exact prefix-by-prefix decode instead."""
    from trainers.rollout import decode

    ids = list(ids)
    out: list[str] = []
    start = 0  # first token whose text is not out yet
    for i in range(len(ids)):
        lo = max(0, start - context)
        before, now = decode(tokenizer, ids[lo:start]), decode(tokenizer, ids[lo : i + 1])
        if (now.endswith("\ufffd") and i + 1 < len(ids)) or not now.startswith(before):
            out.append("")  # inside a character: its last byte's token carries it
            continue
        out.append(now[len(before) :])
        start = i + 1
    whole = decode(tokenizer, ids)
    if "".join(out) == whole:
        return out
    out, prev = [], ""
    for i in range(len(ids)):
        cur = decode(tokenizer, ids[: i + 1])
        if (cur.endswith("\ufffd") and i + 1 < len(ids)) or not cur.startswith(prev):
            out.append("")
            continue
        out.append(cur[len(prev) :])
        prev = cur
    if prev != whole:  # the last token left a partial character: its text carries the rest
        out[-1] += whole[len(prev) :]
    return out


_CHATML_USER = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S)


def task_label(prompt: str, limit: int = 300) -> str:
    """A short name of the task a prompt poses: its last user message (ChatML), else the prompt's last
    ``limit`` characters."""
    found = _CHATML_USER.findall(prompt)
    text = (found[-1] if found else prompt[-limit:]).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def episode_record(
    ep: Any,
    tokenizer: Any,
    *,
    step: int,
    strategy: str,
    kind: str = "train",
    advantages: np.ndarray | None = None,
    returns: np.ndarray | None = None,
) -> dict[str, Any]:
    """One trace line (module docstring) for episode ``ep``: its prompt, and per policy turn its tokens' text,
    their ``advantages`` (rounded), the turn's reward components and the env tokens that follow it."""
    from trainers.rollout import decode

    ids = ep.token_ids.tolist()
    policy = np.flatnonzero(ep.loss_mask)
    first = int(policy[0]) if len(policy) else len(ids)
    prompt = decode(tokenizer, ids[:first])
    turns = []
    for k in range(ep.num_turns):
        where = np.flatnonzero(ep.turn_index == k)
        later = np.flatnonzero(ep.turn_index > k)
        start = int(where[0]) if len(where) else first
        end = int(where[-1]) + 1 if len(where) else start
        env_end = int(later[0]) if len(later) else len(ids)
        adv = None
        if advantages is not None:
            adv = [round(float(a), TRACE_DECIMALS) for a in np.asarray(advantages)[where]]
        target = None
        if returns is not None and len(where):
            target = round(float(returns[start]), TRACE_DECIMALS)
        turns.append({
            "tokens": token_texts(tokenizer, [ids[i] for i in where]),
            "adv": adv,
            "rewards": {c: round(float(v), 6) for c, v in ep.turn_rewards[k].items()},
            "env": decode(tokenizer, ids[end:env_end]),
            "value_target": target,
        })  # fmt: skip
    return {
        "kind": kind,
        "step": int(step),
        "strategy": strategy,
        "env_id": ep.env_id,
        "group": int(ep.group),
        "task": task_label(prompt),
        "prompt": prompt,
        "return": round(float(ep.total_reward), 6),
        "terminated": bool(ep.terminated),
        "truncated": bool(ep.truncated),
        "metrics": {k: float(v) for k, v in ep.metrics.items() if isinstance(v, int | float)},
        "turns": turns,
    }


def sample_episodes(episodes: Sequence[Any], k: int) -> list[int]:
    """Indices of at most ``k`` episodes, whole groups first (in group order), so a trace shows episodes next to
    the ones their advantages were compared with."""
    order = sorted(range(len(episodes)), key=lambda i: (episodes[i].group, i))
    return order[: max(k, 0)]


def write_trace(path: str | Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """Write trace lines to ``path`` (gzip JSONL), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
    os.replace(tmp, path)
    return path


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """The records of one trace file."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def trace_due(step: int, every: int, last: int) -> bool:
    """Whether step ``step`` (1-based) writes a trace: the first, every ``every``-th and the last (never with
    ``every`` 0)."""
    return every > 0 and (step == 1 or step % every == 0 or step == last)


@dataclass
class RunRecorder:
    """Everything a training run records per step besides checkpoints: the loggers (``--log``), the training
    traces (``--trace-every`` / ``--trace-episodes``) and the held-out episodes (traces and a transcript table).

    Example (the RL loop)::

        recorder = RunRecorder.open(run, "jsonl,tensorboard", config=to_dict(cfg), tokenizer=tok,
                                    strategy="mt_grpo", trace_every=5, trace_episodes=8, last_step=cfg.steps)
        recorder.log(row)                                  # metrics.jsonl + the other loggers
        recorder.record_step(12, episodes, credit)         # traces/step_000012.jsonl.gz when due
        recorder.record_eval(12, {"TurnRL/WikiTwoTurn-v2": held_out_episodes})
        recorder.close()
    """

    run_dir: Path
    loggers: Loggers
    tokenizer: Any
    strategy: str
    trace_every: int = 0
    trace_episodes: int = 8
    last_step: int = 0
    table_rows: int = 64

    @classmethod
    def open(
        cls,
        run_dir: str | Path,
        log: str | Sequence[str],
        *,
        config: Mapping[str, Any] | None,
        tokenizer: Any,
        strategy: str,
        trace_every: int = 0,
        trace_episodes: int = 8,
        last_step: int = 0,
    ) -> RunRecorder:
        """Make the loggers of ``log`` in ``run_dir`` and a recorder around them."""
        run = Path(run_dir)
        loggers = make_loggers(log, run, config=config)
        return cls(run, loggers, tokenizer, strategy, trace_every, trace_episodes, last_step)

    def log(self, row: Mapping[str, Any]) -> None:
        """One metrics row (its ``step`` key is the step) to every logger."""
        self.loggers.log(int(row["step"]), row)

    def record_step(self, step: int, episodes: Sequence[Any], credit: Any) -> Path | None:
        """When ``step`` is due (:func:`trace_due`), write ``traces/step_NNNNNN.jsonl.gz``: at most
        ``trace_episodes`` episodes with their per-token advantages from ``credit`` (a ``CreditOutput``)."""
        if not trace_due(step, self.trace_every, self.last_step):
            return None
        records = []
        for i in sample_episodes(episodes, self.trace_episodes):
            returns = None if credit.returns is None else credit.returns[i]
            records.append(episode_record(episodes[i], self.tokenizer, step=step, strategy=self.strategy,
                                          advantages=credit.advantages[i], returns=returns))  # fmt: skip
        return write_trace(self.run_dir / TRACE_DIR / f"step_{step:06d}.jsonl.gz", records)

    def record_eval(self, step: int, episodes_by_env: Mapping[str, Sequence[Any]]) -> Path | None:
        """Write the held-out episodes of the evaluation at ``step`` to ``traces/eval_step_NNNNNN.jsonl.gz`` and
        log them as the table ``eval/transcripts`` (at most ``table_rows`` rows)."""
        records = [
            episode_record(ep, self.tokenizer, step=step, strategy=self.strategy, kind="eval")
            for eps in episodes_by_env.values()
            for ep in eps
        ]
        if not records:
            return None
        path = write_trace(self.run_dir / TRACE_DIR / f"eval_step_{step:06d}.jsonl.gz", records)
        columns = ["step", "env_id", "task", "return", "turn_rewards", "transcript"]
        rows = []
        for r in records[: self.table_rows]:
            text = "".join("".join(t["tokens"]) + t["env"] for t in r["turns"])
            rewards = json.dumps([t["rewards"] for t in r["turns"]])
            rows.append([step, r["env_id"], r["task"], r["return"], rewards, text])
        self.loggers.log_table("eval/transcripts", columns, rows, step)
        return path

    def close(self) -> None:
        """Close the loggers."""
        self.loggers.close()
