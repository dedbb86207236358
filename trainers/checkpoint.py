"""Checkpoints that survive ``SIGKILL``: every write goes to a temporary folder that is renamed into place, and the
``latest`` pointer is replaced atomically last, so a killed run resumes from the last complete step.

Layout of a run directory::

    run/checkpoint-000012/policy/        plain HF folder: ``--init run/checkpoint-000012`` and vLLM load it (full
                                         fine-tuning; with LoRA only under ``--save-merged``: the adapter merged)
    run/checkpoint-000012/adapter/       LoRA runs: the adapter alone (peft ``save_pretrained``: adapter_config.json
                                         + adapter_model.safetensors), what a resume and vLLM's LoRARequest load
    run/checkpoint-000012/state.pt       step, optimizer states, critic, RNG states
    run/latest                           "checkpoint-000012"
    run/engine-weights/                  the policy as vLLM loads it (``--engine vllm``), rewritten on every start
    run/metrics.jsonl                    one JSON object per finished step (cut back to the checkpoint on resume)
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from agentgym_turn.error import DataNotFound

LATEST = "latest"
POLICY = "policy"
ADAPTER = "adapter"
ENGINE_WEIGHTS = "engine-weights"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save_checkpoint(
    run_dir: Path,
    step: int,
    write_policy: Callable[[str], None] | None,
    state: dict[str, Any],
    keep: int = 1,
    *,
    write_adapter: Callable[[str], None] | None = None,
) -> Path:
    """Save checkpoint ``step``: ``write_policy(folder)`` writes the HF policy folder (``None``: none, e.g. a LoRA
    run without ``--save-merged``), ``write_adapter(folder)`` the LoRA adapter folder; ``state`` goes to state.pt.
    Older checkpoints beyond the newest ``keep`` are removed after the pointer moved."""
    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"checkpoint-{step:06d}"
    final = run_dir / name
    tmp = run_dir / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if write_policy is not None:
        write_policy(str(tmp / POLICY))
    if write_adapter is not None:
        write_adapter(str(tmp / ADAPTER))
    with open(tmp / "state.pt", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    _fsync_dir(run_dir)
    atomic_write_text(run_dir / LATEST, name)
    done = sorted(p for p in run_dir.glob("checkpoint-*") if p.is_dir())
    for old in done[: max(0, len(done) - keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_name(run_dir: Path) -> Path | None:
    """The folder ``latest`` points to (whether or not it still holds its training state), or ``None``."""
    pointer = run_dir / LATEST
    return run_dir / pointer.read_text().strip() if pointer.is_file() else None


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``latest`` points to, or ``None`` when the run has none; one without ``state.pt`` (a finished
    experiment run drops it, :func:`drop_training_state`) cannot be resumed and raises."""
    path = latest_name(run_dir)
    if path is not None and not (path / "state.pt").is_file():
        raise DataNotFound(
            f"{run_dir / LATEST} names {path.name}, which has no state.pt (the run was finished and its training state "
            f"dropped, or the save was cut); delete {run_dir / LATEST} to start over."
        )
    return path


def drop_training_state(run_dir: Path) -> int:
    """Remove from a finished run what only continuing its training needs: each checkpoint's ``state.pt``
    (optimizer moments, critic, RNG states: ~1 GB for SmolLM2-135M) and ``engine-weights/`` (vLLM's copy of the
    policy). The policy folders, metrics and traces stay; ``--init RUN`` still loads the final policy. Returns the
    bytes freed."""
    freed = 0
    for state in run_dir.glob("checkpoint-*/state.pt"):
        freed += state.stat().st_size
        state.unlink()
    engine = run_dir / ENGINE_WEIGHTS
    if engine.is_dir():
        freed += sum(f.stat().st_size for f in engine.rglob("*") if f.is_file())
        shutil.rmtree(engine)
    return freed


def load_state(checkpoint: Path) -> dict[str, Any]:
    """The ``state.pt`` of a checkpoint."""
    return torch.load(checkpoint / "state.pt", map_location="cpu", weights_only=False)


def policy_folder(path: str) -> str:
    """``--init`` accepts an HF folder, a checkpoint (its ``policy/``) or a run directory (its latest checkpoint's);
    any other spec passes through. A LoRA checkpoint saved without ``--save-merged`` has no ``policy/``: an error
    says so."""
    p = Path(path)
    named = latest_name(p)
    if named is not None and not named.is_dir():
        raise DataNotFound(f"{p / LATEST} names {named.name}, which is not there; pass a checkpoint folder of {p}.")
    p = named or p
    if (p / POLICY / "config.json").is_file():
        return str(p / POLICY)
    if (p / ADAPTER / "adapter_config.json").is_file():
        raise DataNotFound(
            f"{p} holds a LoRA adapter ({ADAPTER}/) but no merged policy folder; train with --save-merged to write "
            f"{POLICY}/ too, or load the adapter on its base model with peft.PeftModel.from_pretrained(base, "
            f"'{p / ADAPTER}')."
        )
    return path


def adapter_folder(checkpoint: Path) -> Path | None:
    """The LoRA adapter folder of ``checkpoint`` (``None`` when it has none: a full fine-tuning run)."""
    folder = checkpoint / ADAPTER
    return folder if (folder / "adapter_config.json").is_file() else None


def truncate_metrics(path: Path, last_step: int) -> None:
    """Drop metric lines of steps after ``last_step`` (the step in flight when the run died)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill
        if int(row.get("step", 0)) <= last_step:
            keep.append(line)
    atomic_write_text(path, "".join(k + "\n" for k in keep))
