"""The worked examples in the foundation's module docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "agentgym_turn.core",
    "agentgym_turn.parsing",
    "agentgym_turn.answers",
    "agentgym_turn.tools",
    "agentgym_turn.error",
    "agentgym_turn.checker",
    "agentgym_turn.corpus",
    "agentgym_turn.retrieval.lucene",
    "envs.wiki_two_turn.rewards",
    "envs.wiki_two_turn.env",
    "envs.credit_chain",
    "trainers.credit",
    "trainers.engine_api",
    "trainers.provenance",
    "trainers.config",
]


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
