"""Shared fixtures: one Lucene index of the bundled corpus per test session (one JVM per process); the suite ends
with pytest's own status however the native libraries' teardown goes (``tests.clean_exit``)."""

from __future__ import annotations

import pytest

from tests.clean_exit import pytest_sessionfinish, pytest_unconfigure  # noqa: F401  (hooks: pytest reads them here)
from tests.prelaunch import launch_if_needed


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: only a module that will run gets its server
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Launch the vLLM server of the tests that will use one (``tests/prelaunch.py``), without waiting for it."""
    launch_if_needed(items)


@pytest.fixture(scope="session")
def wiki_retriever():
    """The shared BM25 index of the offline Wikipedia corpus (built into the cache on first use)."""
    from agentgym_turn.retrieval.lucene import wiki_bm25

    return wiki_bm25()
