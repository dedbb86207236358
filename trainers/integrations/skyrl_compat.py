"""Python 3.11 support for SkyRL's trainer package (``skyrl`` 0.3): its TypedDicts made acceptable to pydantic.

skyrl 0.3.0 installs on Python 3.11 but does not import there: ``skyrl.tinker.types`` (imported by
``skyrl.backends``, hence by SkyRL's trainer, its advantage-estimator registry and its generator) declares
``MultiModalKwargs`` with ``typing.TypedDict`` and uses it in a pydantic model field, and pydantic refuses
``typing.TypedDict`` before Python 3.12 (``PydanticUserError``: "Please use `typing_extensions.TypedDict` instead
of `typing.TypedDict` on Python < 3.12"). It is the only skyrl module whose TypedDict reaches pydantic; the other
TypedDicts in skyrl are plain annotations.

:func:`install` (which :mod:`trainers.integrations.skyrl_credit` calls before it imports skyrl) puts a finder on
``sys.meta_path`` that answers only for the modules in :data:`PATCHED_MODULES`. It locates the installed source the
normal way and compiles it with one change: every ``from typing import ..., TypedDict`` takes ``TypedDict`` from
``typing_extensions`` instead, which is the class pydantic asks for (on 3.12+ the two are the same class, and
:func:`install` does nothing there). The module keeps its file name and line numbers (tracebacks point at the
installed file); the changed code lives only in the importing process and is never written to disk (no ``.pyc``),
so the installed package, other processes and every other module are untouched.

Less contained alternatives it avoids: assigning ``typing.TypedDict`` globally (every module imported meanwhile
would change), relaxing pydantic's check (every model in the process), editing or vendoring skyrl's file (a changed
install or third-party code in the repo), a ``sitecustomize``/``.pth`` hook (every Python process of the env).
It covers the processes that import skyrl through this integration; SkyRL's own Ray workers do not, so multi-process
training on GPUs keeps the Python 3.12 env SkyRL documents.

Worked example (the rewrite, on a source snippet)::

    >>> import ast
    >>> tree = typeddict_from_typing_extensions(ast.parse("from typing import Any, TypedDict"))
    >>> ast.unparse(tree)
    'from typing import Any\\nfrom typing_extensions import TypedDict'
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

#: the skyrl modules whose ``typing.TypedDict`` reaches a pydantic model (skyrl 0.3.0)
PATCHED_MODULES: tuple[str, ...] = ("skyrl.tinker.types",)


def needed() -> bool:
    """Whether this Python needs the rewrite: pydantic accepts ``typing.TypedDict`` from Python 3.12 on."""
    return sys.version_info < (3, 12)


class _TypedDictImports(ast.NodeTransformer):
    """Splits ``TypedDict`` out of every ``from typing import ...`` into ``from typing_extensions import ...``."""

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | list[ast.AST]:
        if node.module != "typing" or node.level:
            return node
        moved = [a for a in node.names if a.name == "TypedDict"]
        if not moved:
            return node
        kept = [a for a in node.names if a.name != "TypedDict"]
        new = ast.copy_location(ast.ImportFrom(module="typing_extensions", names=moved, level=0), node)
        return [ast.copy_location(ast.ImportFrom(module="typing", names=kept, level=0), node), new] if kept else new


def typeddict_from_typing_extensions(tree: ast.Module) -> ast.Module:
    """``tree`` with ``TypedDict`` imported from ``typing_extensions`` wherever it came from ``typing``."""
    return ast.fix_missing_locations(_TypedDictImports().visit(tree))


class _RewritingLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its installed source with :func:`typeddict_from_typing_extensions` applied.

    ``get_code`` compiles from source every time and never reads or writes the bytecode cache, so the installed
    package's ``__pycache__`` keeps the unchanged code.
    """

    def get_code(self, fullname: str) -> object:
        path = self.get_filename(fullname)
        tree = ast.parse(self.get_data(path), filename=path)
        return compile(typeddict_from_typing_extensions(tree), path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    """Answers for :data:`PATCHED_MODULES` only, with the installed source and :class:`_RewritingLoader`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PATCHED_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # not installed (the import fails as usual) or not from source: left alone
        spec.loader = _RewritingLoader(fullname, spec.origin)
        return spec


def install() -> bool:
    """Let skyrl 0.3 import on Python < 3.12 (see the module docstring); idempotent; a no-op on 3.12+.

    Returns whether the finder is in place. Call it before the first ``import skyrl...``: a patched module that is
    already imported stays as it was.
    """
    if not needed():
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return True
