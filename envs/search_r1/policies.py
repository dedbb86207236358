"""Scripted policies of ``TurnRL/SearchR1-v2`` (signature: :data:`agentgym_turn.policies.ScriptedPolicy`).

* ``oracle``: searches the task's oracle queries (the hops the offline construction recorded; the question itself
  for published datasets), one per turn, then answers with the first gold answer. It proves every offline
  question solvable within the budget and gives the reward ceiling.
* ``direct``: answers at once without searching, from the question alone (the longest run of capitalised words):
  the no-search floor, mostly paid 0.2 (right format, wrong answer).
* ``verbatim``: one search with the question verbatim, then answers from the first passage: the gold answer when
  that passage holds it (a perfect reader of one search), else its title. The single-search baseline of the
  multi-hop questions (``hops=2|3``).
* ``explore``: a cold start that explores. Its first query is drawn (:func:`agentgym_turn.queries.sample_query`:
  the question verbatim, its main entity, keywords, a paraphrase, or a plausible wrong entity), so some episodes
  find the first article and some do not. Afterwards it searches the next hop's title once the passages seen so
  far name it, falls back to the first hop's title when nothing found names the next hop, and answers when the
  passages hold a gold answer, or at its last turn with a guess (the first passage's title).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from agentgym_turn.core import TurnEnv
from agentgym_turn.queries import sample_query
from envs.search_r1.rewards import contains_words

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


_DOC = re.compile(r"Doc \d+\(Title: (.*?)\) ")


@lru_cache(maxsize=1)
def _corpus_titles() -> tuple[str, ...]:
    from agentgym_turn.corpus import load_wiki_summaries

    return tuple(d.title for d in load_wiki_summaries())


def _search(query: str, why: str) -> str:
    return f"<think> {why} </think>\n<search> {query} </search>"


def _answer(answer: str) -> str:
    return f"<think> The passages give the answer. </think>\n<answer> {answer} </answer>"


def _seen(env: TurnEnv) -> tuple[list[str], list[str]]:
    """``(queries searched, <information> texts)`` of the episode so far."""
    queries, infos = [], []
    for m in env.history:
        found = re.search(r"<search>(.*?)</search>", m["content"], re.S) if m["role"] == "assistant" else None
        if found:
            queries.append(found.group(1).strip())
        elif m["role"] == "user" and m["content"].startswith("<information>"):
            infos.append(m["content"])
    return queries, infos


def verbatim_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Search the question verbatim once; answer the gold if the first passage holds it, else that passage's title."""
    task = env.task
    _, infos = _seen(env)
    if not infos:
        return _search(task["question"], "I search the question.")
    first = infos[-1].removeprefix("<information>").split("\n")[0]
    title = _DOC.match(first)
    if contains_words(first, task["answers"]):
        return _answer(task["answers"][0])
    return _answer(title.group(1) if title else "unknown")


def explore_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """A drawn first query, then the next hop once the passages name it (see the module docstring)."""
    task = env.task
    hops = list(task.get("oracle_queries") or [task["question"]])
    names = [None, *task.get("bridges", [task["bridge"]] if task.get("bridge") else [])]
    queries, infos = _seen(env)
    budget = int(getattr(env, "max_turns", 4))
    if not queries:
        titles = _corpus_titles() if task.get("source") == "wiki-offline" else None
        style, query = sample_query(task["question"], rng, titles)
        return _search(query, f"I search the {style.replace('_', ' ')} first.")
    if infos and contains_words(infos[-1], task["answers"]):
        return _answer(task["answers"][0])
    if env.turn < budget - 1:
        seen = " ".join(infos)
        done = {q.lower() for q in queries}
        for i in range(len(hops) - 1, 0, -1):  # the furthest hop whose title the passages name
            if i < len(names) and names[i] and contains_words(seen, [names[i]]) and hops[i].lower() not in done:
                return _search(hops[i], f"The passages name {names[i]}; I look it up.")
        if hops[0].lower() not in done:
            return _search(hops[0], f"That did not help; I look up {hops[0]}.")
    title = _DOC.search(infos[-1]) if infos else None
    return _answer(title.group(1) if title else "unknown")


SCRIPTED_POLICIES = {
    "oracle": oracle_policy,
    "direct": direct_policy,
    "verbatim": verbatim_policy,
    "explore": explore_policy,
}
