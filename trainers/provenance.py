"""What produced a model folder: the command lines, in order, that rebuild it from the bundled model and data.

Every trainer run writes ``<out-dir>/command.json``: the chain of commands that made the folder, its own last. A
run started from another trainer's folder (``--init runs/sft``) copies that folder's chain first, so the chain of
an RL policy holds the SFT command that made its cold start. Paths between the commands are written as
placeholders, ``{work}/0`` for the first command's ``--out-dir``, ``{work}/1`` for the second's, and so on, so a
chain names no machine's folders and replays in any fresh folder (:func:`replay_argv`). ``python`` stands for the
interpreter. A leaderboard row copies the chain of the folder it evaluated and appends its own evaluation
(:mod:`leaderboards.evaluate`); ``python -m leaderboards.reproduce`` replays it.

    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     sft, rl = Path(tmp, "sft"), Path(tmp, "rl")
    ...     _ = record_command(sft, "python -m trainers.sft", ["--env", "E", "--out-dir", str(sft)], inputs=[])
    ...     chain = record_command(rl, "python -m trainers.grpo", ["--init", str(sft), "--out-dir", str(rl)],
    ...                            inputs=[str(sft)])
    >>> [" ".join(c) for c in chain]
    ['python -m trainers.sft --env E --out-dir {work}/0', 'python -m trainers.grpo --init {work}/0 --out-dir {work}/1']
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

#: the file in a trainer's ``--out-dir`` that holds the chain of commands that made it
COMMAND_FILE = "command.json"
#: how a chain names the folder that replays it
WORK = "{work}"

Chain = list[list[str]]
_SLOT = re.compile(r"\{work\}/(\d+)")


def find_chain(path: str | Path) -> tuple[Chain, Path] | None:
    """The chain that made the model folder ``path`` (a run's folder, its ``policy/`` or ``checkpoint-N/policy``)
    and the run folder that holds it; ``None`` when no folder up to two levels above records one."""
    p = Path(path)
    for folder in (p, p.parent, p.parent.parent):
        file = folder / COMMAND_FILE
        if file.is_file():
            return json.loads(file.read_text())["commands"], folder
    return None


def _shift(command: Sequence[str], offset: int) -> list[str]:
    return [_SLOT.sub(lambda m: f"{WORK}/{int(m.group(1)) + offset}", token) for token in command]


def _replace_path(token: str, folder: Path, slot: str) -> str:
    """``token`` with ``folder`` (or a path inside it) written as ``slot`` (a path under ``folder`` keeps its rest)."""
    if not token or token.startswith("-"):
        return token
    try:
        rest = Path(token).resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return token
    return slot if str(rest) == "." else f"{slot}/{rest.as_posix()}"


def chain_for(prog: str, argv: Sequence[str], inputs: Sequence[str | Path], out_dir: str | Path | None) -> Chain:
    """The chain of a command ``prog argv`` that reads the folders ``inputs`` (``--init``, ``--model``) and writes
    ``out_dir``: each input's recorded chain (renumbered, one after the other), then this command with those
    folders and ``out_dir`` as placeholders. An input without a chain stays as written."""
    chain: Chain = []
    slots: list[tuple[Path, str]] = []
    for given in inputs:
        found = find_chain(given)
        if found is None:
            continue
        commands, folder = found
        chain += [_shift(c, len(chain)) for c in commands]
        slots.append((folder, f"{WORK}/{len(chain) - 1}"))
    if out_dir is not None:
        slots.append((Path(out_dir), f"{WORK}/{len(chain)}"))
    own = shlex.split(prog)
    for token in argv:
        for folder, slot in slots:
            replaced = _replace_path(token, folder, slot)
            if replaced != token:
                token = replaced
                break
        own.append(token)
    return [*chain, own]


def record_command(out_dir: str | Path, prog: str, argv: Sequence[str], inputs: Sequence[str | Path]) -> Chain:
    """Write ``<out_dir>/command.json`` for a trainer run (:func:`chain_for`) and return the chain."""
    chain = chain_for(prog, argv, inputs, out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / COMMAND_FILE).write_text(json.dumps({"commands": chain}, indent=1) + "\n")
    return chain


def replay_argv(command: Sequence[str], work: str | Path) -> list[str]:
    """One recorded command as an argv to run: ``python`` -> this interpreter, ``{work}`` -> the folder ``work``."""
    argv = [str(token).replace(WORK, str(work)) for token in command]
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    return argv
