"""Shared fixtures: one Lucene index of the bundled corpus per test session (one JVM per process); the suite ends
with pytest's own status however the native libraries' teardown goes (``tests.clean_exit``)."""

from __future__ import annotations

import pytest

from tests.clean_exit import pytest_sessionfinish, pytest_unconfigure  # noqa: F401  (hooks: pytest reads them here)


@pytest.fixture(scope="session")
def wiki_retriever():
    """The shared BM25 index of the offline Wikipedia corpus (built into the cache on first use)."""
    from agentgym_turn.retrieval.lucene import wiki_bm25

    return wiki_bm25()
