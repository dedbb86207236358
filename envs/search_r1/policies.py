"""Scripted policies of ``TurnRL/SearchR1-v1`` (signature: :data:`agentgym_turn.policies.ScriptedPolicy`).

* ``oracle``: searches the task's oracle queries (the hops the offline construction recorded; the question itself
  for published datasets), one per turn, then answers with the first gold answer. It proves every offline
  question solvable within the budget and gives the reward ceiling.
* ``direct``: answers at once without searching, from the question alone (the longest run of capitalised words):
  the no-search floor, mostly paid 0.2 (right format, wrong answer).
"""

from __future__ import annotations

import re

import numpy as np

from agentgym_turn.core import TurnEnv

_CAPITALISED_RUN = re.compile(r"(?:[A-Z][\w'’-]*)(?:\s+[A-Z][\w'’-]*)*")


def oracle_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Search each oracle query in turn (leaving the last turn for the answer), then answer with the gold."""
    task = env.task
    queries = list(task.get("oracle_queries") or [task["question"]])
    budget = int(getattr(env, "max_turns", 4))
    if env.turn < len(queries) and env.turn < budget - 1:
        return f"<think> I need to look up {queries[env.turn]}. </think>\n<search> {queries[env.turn]} </search>"
    return f"<think> The passages give the answer. </think>\n<answer> {task['answers'][0]} </answer>"


def direct_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Answer without searching: the longest capitalised phrase after the question's first word."""
    question = env.task["question"]
    runs = _CAPITALISED_RUN.findall(question.split(maxsplit=1)[1] if " " in question else question)
    guess = max(runs, key=len) if runs else "unknown"
    return f"<think> I can answer this from memory. </think>\n<answer> {guess} </answer>"


SCRIPTED_POLICIES = {"oracle": oracle_policy, "direct": direct_policy}
