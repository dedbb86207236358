"""Offline multi-hop (bridge) questions for ``TurnRL/SearchR1-v2`` with ``hops=2`` or ``hops=3``.

HotpotQA's bridge questions, built from the bundled Wikipedia leads (CC BY-SA 4.0): article A's lead names article
B by its exact title, and the question asks for a fact of B's lead while naming B only through its role in A, so the
first search must find A (named in the question), and only A's passage says which entity B is. Three hops chain
the roles, A -> B -> C::

    2 hops: What is the capital of the country where the film Casablanca is located?   (no: see below)
            In which year was the person who directed Jaws born?              A = Jaws, B = Steven Spielberg
    3 hops: What nationality was the person who wrote the novel mentioned in the Wikipedia article on X?

Construction (deterministic, rules only):

1. **Facts** of every lead, by :func:`envs.wikiqa.document_facts` (the extraction of the ``facts-v1`` single-hop
   questions), restricted to the kinds that read well about an entity named by its role
   (:data:`envs.wikiqa.BRIDGE_KINDS`); every fact of the last article, at most 4 questions per first article.
2. **Roles**: how a question names B through A (:func:`roles`): ``the person who <verb> A`` (A's lead says
   "<verb> by B"), ``the capital of A``, ``the country where A is located`` (the only country A mentions), or
   ``the <type of B> mentioned in the Wikipedia article on A`` (no other entity A mentions has B's type). For three
   hops, B's role is put in place of B's name in C's role.
3. **Filters**: an answer must occur in the last article's lead and in none of the earlier articles' leads nor in
   the question; questions with the same text and different answers are dropped; and the question searched
   verbatim must not retrieve any article after the first at top-k (:func:`drop_verbatim_hits`), so one search
   with the question does not reach the answer's article.
4. **Validation** by the oracle's searches (:func:`validate_chain`): each hop's title retrieves its article at
   top-k, those passages name the next hop's title, and the last hop's passages hold a gold answer as whole words
   (the env's retrieval reward test).
5. **Splits** by a hash of the normalised first answer, 60% train, 20% validation, 20% test
   (:func:`answer_split`), at most :data:`PER_ANSWER` questions per answer in a split (:func:`split_multihop`);
   then the held-out splits are made disjoint from train by content, aliases included
   (:func:`envs.search_r1.data.disjoint_splits`).

Task records are the ``facts-v1`` ones (``id``, ``question``, ``answers``, ``hops``, ``kind``, ``docs``,
``oracle_queries`` = the titles of the articles, ``bridge`` = the title of the second article) plus ``bridges``
(the titles of every article after the first) and ``decoys`` (other titles the first article names: wrong
entities for the exploring scripted policies).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agentgym_turn.answers import normalize_squad
from agentgym_turn.corpus import Document
from agentgym_turn.retrieval import Retriever
from envs.search_r1.rewards import contains_words
from envs.wikiqa import (
    BRIDGE_KINDS,
    Fact,
    bridge_roles,
    document_facts,
    mentions,
    occurs,
    person_facts,
    subject_name,
)
from envs.wikiqa import _head_noun as head_noun
from envs.wikiqa import first_sentence as lead_sentence

MULTIHOP_VERSION = 1
HOPS = (2, 3)
#: Fact kinds asked about the last article.
MULTIHOP_KINDS = BRIDGE_KINDS
#: At most this many questions share one answer within a split (a few hub articles, countries and seas, are the
#: last hop of hundreds of chains: uncapped, "North Atlantic Ocean" answered 7% of the two-hop questions).
PER_ANSWER = 4
#: Multi-hop splits are drawn by a hash of the normalised answer (percent train, validation; test is the rest), so
#: no answer is shared between splits; larger held-out shares than facts-v1's, as the answers are fewer.
SPLIT_PERCENT = (60, 20)
_PAREN = re.compile(r"\s*\([^()]*\)")


def entity_type(doc: Document) -> str | None:
    """What kind of thing an article is about: a person's occupation, else the head noun of its first sentence."""
    pf = person_facts(doc)
    return pf[1] if pf is not None else head_noun(lead_sentence(doc.text))


def _question(fact: Fact, role: str) -> str:
    q = fact.template.replace("{s}", role)
    return q[0].upper() + q[1:]


def chain_candidates(docs: Sequence[Document], hops: int, *, per_source: int = 4) -> list[dict[str, Any]]:
    """Unvalidated ``hops``-hop bridge questions (steps 1-3 of the module docstring, without the retrieval
    filters): every fact of the last article per chain, at most ``per_source`` questions per first article."""
    if hops not in HOPS:
        raise ValueError(f"hops={hops!r} must be one of {HOPS}.")
    by_title = {d.title: d for d in docs if len(d.title) >= 4}
    facts = {t: [f for f in document_facts(d) if f.kind in MULTIHOP_KINDS] for t, d in by_title.items()}
    types = {t: entity_type(d) for t, d in by_title.items()}
    first_word: dict[str, list[str]] = defaultdict(list)
    for t in by_title:
        first_word[t.split()[0]].append(t)
    named = {d.title: mentions(d, first_word) for d in docs}

    def paths(doc: Document, name: str, left: int, seen: tuple[str, ...]) -> Iterator[tuple[list[str], str]]:
        for b, role in bridge_roles(doc, name, named[doc.title], types, where="article on"):
            if b in seen:
                continue
            if left == 1:
                yield [b], role
            else:
                for rest, deeper in paths(by_title[b], role, left - 1, (*seen, b)):
                    yield [b, *rest], deeper

    out: list[dict[str, Any]] = []
    for a in docs:
        if a.title not in by_title:
            continue
        made = 0
        for chain, role in paths(a, subject_name(a.title, a.text), hops - 1, (a.title,)):
            chain_docs = [a, *(by_title[t] for t in chain)]
            last = chain_docs[-1]
            earlier = " ".join(f"{d.title} {d.text}" for d in chain_docs[:-1])
            for i, f in enumerate(facts[last.title]):
                question = _question(f, role)
                golds = [g for g in f.answers if not occurs(question, g) and not occurs(earlier, g)]
                if not golds or not any(occurs(last.text, g) for g in golds):
                    continue
                out.append({
                    "id": f"multihop{hops}:" + "->".join(d.docid for d in chain_docs) + f":{i}",
                    "question": question, "answers": golds, "source": "wiki-offline", "hops": hops, "kind": f.kind,
                    "doc": last.docid, "docs": [d.docid for d in chain_docs],
                    "oracle_queries": [_PAREN.sub("", d.title) for d in chain_docs], "bridge": chain[0],
                    "bridges": list(chain), "decoys": [t for t in named[a.title] if t not in chain][:4],
                })  # fmt: skip
                made += 1
            if made >= per_source:
                break
    by_text: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for t in out:
        by_text[t["question"].lower()].add(tuple(sorted(a.lower() for a in t["answers"])))
    return [t for t in out if len(by_text[t["question"].lower()]) == 1]


def drop_verbatim_hits(tasks: Sequence[dict[str, Any]], retriever: Retriever, *, k: int) -> list[dict[str, Any]]:
    """The tasks whose question, searched verbatim (top-``k``), retrieves none of the articles after the first."""
    hits = retriever.batch_search([t["question"] for t in tasks], k=k)
    return [t for t, found in zip(tasks, hits, strict=True) if not {p.docid for p in found} & set(t["docs"][1:])]


def validate_chain(tasks: Sequence[dict[str, Any]], retriever: Retriever, *, k: int) -> list[dict[str, Any]]:
    """The tasks the oracle's searches solve with ``retriever``: each hop's query retrieves its article at top-``k``,
    those passages name the next hop's title, and the last hop's passages hold a gold answer as whole words."""
    results = iter(retriever.batch_search([q for t in tasks for q in t["oracle_queries"]], k=k))
    kept = []
    for t in tasks:
        hops = [next(results) for _ in t["oracle_queries"]]
        ok = all(t["docs"][i] in {p.docid for p in hop} for i, hop in enumerate(hops))
        for hop, nxt in zip(hops[:-1], t["bridges"], strict=True):
            ok = ok and any(occurs(f"{p.title} {p.text}", nxt) for p in hop)
        ok = ok and any(contains_words(field, t["answers"]) for p in hops[-1] for field in (p.title, p.text))
        if ok:
            kept.append(t)
    return kept


def build_multihop(docs: Sequence[Document], retriever: Retriever, *, k: int) -> list[dict[str, Any]]:
    """Every validated 2- and 3-hop question of ``docs`` for ``retriever`` at top-``k`` (no splits yet)."""
    out: list[dict[str, Any]] = []
    for hops in HOPS:
        out += validate_chain(drop_verbatim_hits(chain_candidates(docs, hops), retriever, k=k), retriever, k=k)
    return out


def _bucket(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100


def answer_split(task: Mapping[str, Any]) -> str:
    """The split of a multi-hop task, by a hash of its normalised first answer (:data:`SPLIT_PERCENT`)."""
    bucket = _bucket(normalize_squad(task["answers"][0]))
    train, validation = SPLIT_PERCENT
    return "train" if bucket < train else "validation" if bucket < train + validation else "test"


def split_multihop(tasks: Sequence[dict[str, Any]], *, per_answer: int = PER_ANSWER) -> dict[str, list[dict[str, Any]]]:
    """``{split: tasks}`` by :func:`answer_split`, keeping at most ``per_answer`` tasks per normalised first answer
    (a deterministic spread: distinct first articles first, in the order of a hash of the id)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: hashlib.sha256(t["id"].encode()).hexdigest()):
        groups[normalize_squad(t["answers"][0])].append(t)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "validation": [], "test": []}
    for group in groups.values():
        seen: set[str] = set()
        fresh = [t for t in group if not (t["docs"][0] in seen or seen.add(t["docs"][0]))]
        kept = (fresh + [t for t in group if t not in fresh])[:per_answer]
        out[answer_split(group[0])] += kept
    for split in out.values():
        split.sort(key=lambda t: t["id"])
    return out
