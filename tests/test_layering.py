"""One home for each thing: no import circles among the project's modules, and no import that points up a layer.

The layers, bottom to top: ``agentgym_turn`` (the contract and shared building blocks) < ``envs`` < ``trainers`` <
``leaderboards``. A module may import its own layer and the layers below it, never one above. Every ``.py`` file
of the four packages is parsed with :mod:`ast` (nothing is imported, so this runs without torch or Ray), and every
import statement counts wherever it stands: module level, inside a function or method (the lazy imports), under
``if TYPE_CHECKING:``, as well as ``importlib.import_module("a.b")`` with a literal name. ``from a import b`` is an
edge to the module ``a.b`` when there is one, else to ``a``. Not counted: the package ``__init__`` that importing
``a.b`` runs first, and Gymnasium's string entry points (``"envs.sokoban.env:SokobanEnv"``), which load an env
only when it is made.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: bottom to top: a module may import its own layer and the ones before it
LAYERS = ("agentgym_turn", "envs", "trainers", "leaderboards")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the four packages (a package is its ``__init__``)."""
    modules = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(source: str, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """``(dotted name, line)`` of everything ``source`` (the text of ``module``) imports, at any depth: for
    ``from a import b`` both ``a.b`` and ``a`` (the caller keeps the first that is a module)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package the module is in (the module itself for an __init__)
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                yield f"{origin}.{alias.name}|{origin}", node.lineno
        elif (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The project module ``name`` refers to: ``a.b|a`` is ``a.b`` when it is a module, else ``a``; a name below a
    module (``a.b.attr``) is that module; ``None`` outside the project."""
    for candidate in name.split("|"):
        while candidate and candidate not in modules and "." in candidate:
            candidate = candidate.rsplit(".", 1)[0]
        if candidate in modules:
            return candidate
    return None


def import_graph(modules: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """Module -> {imported project module: the line of its first import}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imported_names(path.read_text(), name, path.name == "__init__.py"):
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != name:
                edges.setdefault(resolved, line)
        graph[name] = edges
    return graph


def find_cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(sorted(c)[0], set(c), graph) for c in components]


def _cycle_through(start: str, members: set[str], graph: Mapping[str, Mapping[str, int]]) -> list[str]:
    """A shortest path ``start -> ... -> start`` inside one strongly connected component (breadth first)."""
    parent = {start: start}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:  # back home: walk the parents from v to start
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


def upward_imports(graph: Mapping[str, Mapping[str, int]], modules: Mapping[str, Path], root: Path = ROOT) -> list[str]:
    """``file:line a -> b`` for every import of a module from a higher layer."""
    rank = {package: i for i, package in enumerate(LAYERS)}
    out = []
    for source, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            if rank[target.split(".")[0]] > rank[source.split(".")[0]]:
                out.append(f"{modules[source].relative_to(root)}:{line} {source} -> {target}")
    return out


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], dict[str, dict[str, int]]]:
    modules = project_modules()
    return modules, import_graph(modules)


def test_no_import_cycles_among_project_modules(graph):
    modules, edges = graph
    cycles = find_cycles(edges)
    shown = []
    for cycle in cycles:
        steps = [f"{a} -> {b} ({modules[a].relative_to(ROOT)}:{edges[a][b]})" for a, b in itertools.pairwise(cycle)]
        shown.append("\n    ".join(steps))
    assert not cycles, "import cycles (move the shared piece into a module below both):\n  " + "\n  ".join(shown)


def test_no_module_imports_a_higher_layer(graph):
    modules, edges = graph
    up = upward_imports(edges, modules)
    assert not up, (
        f"imports that point up the layers {' < '.join(LAYERS)} (move the shared piece down, or the importer up):\n  "
        + "\n  ".join(up)
    )


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    """The parser on a hand-made tree: a cycle closed only by a function-level import, an upward import hidden
    under TYPE_CHECKING, a relative import, ``from package import module`` and ``import_module("...")``."""
    files = {
        "agentgym_turn/__init__.py": "",
        "agentgym_turn/core.py": "if TYPE_CHECKING:\n    from leaderboards import report\n",
        "envs/__init__.py": "",
        "envs/game/__init__.py": "from .board import Board\n",
        "envs/game/board.py": "import numpy as np\nfrom agentgym_turn.core import TurnEnv\n",
        "trainers/__init__.py": "",
        "trainers/rl.py": "from trainers import sft\nimport importlib\nimportlib.import_module('envs.game')\n",
        "trainers/sft.py": "def main():\n    from trainers.rl import X\n",
        "leaderboards/__init__.py": "",
        "leaderboards/report.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = project_modules(tmp_path)
    edges = import_graph(modules)
    assert edges["envs.game"] == {"envs.game.board": 1}
    assert edges["envs.game.board"] == {"agentgym_turn.core": 2}  # numpy is not a project module
    assert edges["trainers.rl"] == {"trainers.sft": 1, "envs.game": 3}
    assert find_cycles(edges) == [["trainers.rl", "trainers.sft", "trainers.rl"]]
    assert upward_imports(edges, modules, tmp_path) == [
        "agentgym_turn/core.py:2 agentgym_turn.core -> leaderboards.report"
    ]


def test_the_real_graph_has_the_lazy_edges(graph):
    """Sanity: the project's graph holds edges that only function-level imports make."""
    _, edges = graph
    assert "trainers.ray_rollout" in edges["trainers.rl"]  # inside train()
    assert "trainers.engine_transformers" in edges["trainers.engines"]  # inside make_engine()
    assert "trainers.rl" in edges["leaderboards.spec"]  # inside _config_of()
