"""Training metrics: namespaced per-step summaries of a batch of episodes, the JSONL log, and the reward plot.

Keys (documented once here; every row also has ``step``):

- ``reward/<component>``: mean per-episode sum of that reward component (every component the env declares).
- ``env/<name>``: mean of the env's episode metrics, e.g. ``env/return``, ``env/turns``, ``env/tool_called``
  (the tool-use rate), ``env/exact_match``; ``rollout/format_rate``: share of episodes that ended inside the
  task (terminated) with every policy turn closed by a stop token.
- ``rollout/...``: ``turns``, ``truncated``, ``policy_tokens``, ``sequence_tokens``, ``tokens_per_s``, ``seconds``.
- ``losses/...``: ``policy``, ``value``, ``kl``, ``entropy``, ``clip_fraction``, ``approx_kl``, ``sft``.
- ``perf/...``: ``train_tokens_per_s``, ``step_seconds``.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trainers.episode import Episode


def episode_summary(episodes: Sequence[Episode], stop_ids: Sequence[int]) -> dict[str, float]:
    """Mean reward components, env metrics, turns and format rate of a batch."""
    out: dict[str, float] = {}
    if not episodes:
        return out
    comps: dict[str, list[float]] = defaultdict(list)
    env: dict[str, list[float]] = defaultdict(list)
    stops = set(int(s) for s in stop_ids)
    closed = []
    for ep in episodes:
        for name in ep.reward_levels:
            comps[name].append(sum(tr.get(name, 0.0) for tr in ep.turn_rewards))
        for key, value in ep.metrics.items():
            if isinstance(value, int | float):
                env[key if "/" in key else f"env/{key}"].append(float(value))
        ends = [
            int(ep.token_ids[ep.last_token_of_turn(k)]) in stops
            for k in range(ep.num_turns)
            if np.any(ep.turn_index == k)
        ]
        closed.append(float(ep.terminated and all(ends)))
    for name, values in comps.items():
        out[f"reward/{name}"] = float(np.mean(values))
    for key, values in env.items():
        out[key] = float(np.mean(values))
    out["rollout/turns"] = float(np.mean([ep.num_turns for ep in episodes]))
    out["rollout/truncated"] = float(np.mean([ep.truncated for ep in episodes]))
    out["rollout/format_rate"] = float(np.mean(closed))
    out["rollout/return"] = float(np.mean([ep.total_reward for ep in episodes]))
    out["rollout/policy_tokens"] = float(sum(int(ep.loss_mask.sum()) for ep in episodes))
    out["rollout/sequence_tokens"] = float(sum(len(ep.token_ids) for ep in episodes))
    return out


def append_jsonl(path: Path, row: dict) -> None:
    """Append one row and flush it to disk (a killed run keeps every finished step)."""
    with open(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Every row of a metrics file."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_rewards(rows: Sequence[dict], path: Path, title: str) -> None:
    """One panel per reward component (mean per episode vs step), like Figure 2 of 000; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({k for r in rows for k in r if k.startswith("reward/")})
    if not keys:
        return
    cols = min(3, len(keys))
    nrows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3)
        ax.set_title(key.removeprefix("reward/"))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def peak_memory_gib() -> float:
    """Peak resident memory (GiB) of this process plus its live child processes (vLLM's engine core runs in one):
    the sum of each process's high-water mark ``VmHWM`` (an upper bound of the peak of the sum). Where ``/proc``
    is missing: this process's ``ru_maxrss``."""
    import resource

    proc = Path("/proc")
    if not (proc / "self" / "status").is_file():
        scale = 2**30 if sys.platform == "darwin" else 2**20  # ru_maxrss: bytes on macOS, KiB elsewhere
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale

    def hwm_kib(pid: str) -> int:
        try:
            status = (proc / pid / "status").read_text()
        except OSError:  # the process ended in between
            return 0
        return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)

    def children(pid: str) -> list[str]:
        out = []
        for task in (proc / pid / "task").glob("*"):
            try:
                out += (task / "children").read_text().split()
            except OSError:
                continue
        return out

    total, todo, seen = 0, [str(os.getpid())], set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            total += hwm_kib(pid)
            todo += children(pid)
    return total / 2**20
