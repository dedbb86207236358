"""Question sets for ``TurnRL/WikiTwoTurn``: derived offline from the bundled corpus, or TriviaQA online.

Two offline sets, chosen by name (:data:`QUESTION_SETS`; ``wiki_questions(split, question_set=...)``):

* ``"facts-v1"`` (:mod:`envs.wikiqa`): templated questions about facts *inside* the leads, whose answers are
  mostly spans of the text (people, places, years, numbers, aliases); 27% are two-hop (bridge) questions.
  WikiTwoTurn allows one search, so a two-hop question needs the bridge from the model's own knowledge (as many
  TriviaQA questions do) or a well-chosen query. Example: *Who directed 2001: A Space Odyssey?* ->
  ``["Stanley Kubrick", "Kubrick"]``; *What nationality was the person who directed Jaws?* -> ``["American"]``.
* ``"lead-v0"`` (the original set, kept for comparison): the article's first sentence minus its subject, the
  answer is the title; searching it verbatim and copying the first hit's title solves it.

Measured difficulty (``python bench/bench_questions.py``, validation split, bundled Lucene BM25, top-1 as the env
searches; EM with MT-GRPO's lowercase normalisation; asserted by ``tests/envs/test_wiki_questions.py``):

=========  =====  ========================  =============================  ==========================
set        n      search + copy 1st title   search + oracle span (answer   no search (most frequent /
                  (EM)                      in the retrieved passage)      per-kind most frequent)
=========  =====  ========================  =============================  ==========================
lead-v0    755    0.942                     0.985                          0.000 / 0.000
facts-v1   671    0.007                     0.705                          0.069 / 0.095
=========  =====  ========================  =============================  ==========================

``lead-v0`` construction (:func:`question_from_document`), deterministic, from each article of
:func:`agentgym_turn.corpus.load_wiki_summaries`:

1. Take the lead's first sentence (a regex splitter that does not break after initials or ``c.``/``St.``-style
   abbreviations).
2. Split it at its first copula (``is``/``was``/``are``/``were``) into a *subject* and a *definition*; the subject
   must name the article: after dropping parentheses, anything after the first comma and a leading article, it
   equals the title (disambiguation suffix removed) or contains every word of it (``Ernst Waldfried Josef Wenzel
   Mach`` names ``Ernst Mach``).
3. Quality filter: the definition has 6–45 words; neither the title nor the subject occurs in it (no leaked
   answer); the title has at most 6 words and at least one letter; the subject ends within the first 100
   characters.
4. The question is ``"Who was <definition>?"`` for the ``People`` topic and ``"What is <definition>?"``
   otherwise (keeping the sentence's own copula). Accepted answers: the title without its disambiguation
   suffix, plus the subject when it differs and has at most 6 words.
5. Split by a hash of the title: 80% ``train``, 10% ``validation``, 10% ``test`` (stable as the corpus grows).

Example: *Carmen* → ``"What is an opera in four acts by the French composer Georges Bizet?"``, answers
``["Carmen"]``. The texts come from Wikipedia (CC BY-SA 4.0; see :data:`agentgym_turn.corpus.WIKI_ATTRIBUTION`).

``"facts-v1-clean"`` (the default since ``TurnRL/WikiTwoTurn-v2``) is ``facts-v1`` with its held-out splits
cleaned by content (:func:`clean_held_out`): no question repeats within a split, a held-out question's text is not a
training (or, for ``test``, a validation) question's, no accepted answer of a held-out question is an accepted answer
of a training question, and none of its articles is an article of a training question (a two-hop training question
through article A teaches A's facts: *What nationality is the person who directed the film Casablanca?* teaches the
answer of *Who directed the film Casablanca?*). Texts and answers are compared after SQuAD normalisation (lowercase,
no punctuation or articles). The training split is ``facts-v1``'s. On the bundled corpus ``facts-v1`` has no
repeated or shared question texts; the answer rule removes 337 of 671 validation and 283 of 509 test questions
(nationalities and occupations are closed classes: every ``American`` held-out question shares its answer with
training questions), the article rule 83 and 53 more: 251 validation and 173 test questions remain.

Online (:func:`load_triviaqa`): TriviaQA ``rc.nocontext`` through HF ``datasets`` as the paper trains on, or local
files in the same format (``data_files=...``, JSON lines or parquet with ``question_id``, ``question`` and
``answer: {"value", "aliases"}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from agentgym_turn.answers import normalize_squad
from agentgym_turn.corpus import Document, load_wiki_summaries
from agentgym_turn.error import DataNotFound, InvalidArgument, require
from envs.wikiqa import SET_NAME, SPLITS, fact_questions, first_sentence, split_of

__all__ = ["CLEAN_SET", "FACTS_SET", "HELD_OUT_SPLITS", "LEAD_SET", "QUESTION_SETS", "SPLITS", "clean_counts",
           "clean_held_out",
           "first_sentence", "load_triviaqa", "question_from_document", "split_of", "triviaqa_task",
           "wiki_questions"]  # fmt: skip

#: Offline question sets by name; ``LEAD_SET`` is the original one, ``FACTS_SET`` the templated fact questions,
#: ``CLEAN_SET`` the same with held-out splits cleaned by content (:func:`clean_held_out`).
LEAD_SET, FACTS_SET, CLEAN_SET = "lead-v0", SET_NAME, f"{SET_NAME}-clean"
QUESTION_SETS = (LEAD_SET, FACTS_SET, CLEAN_SET)
#: The splits evaluations score; :func:`clean_held_out` keeps them apart from ``train`` by content.
HELD_OUT_SPLITS = ("validation", "test")
_COPULA = re.compile(r"\s(is|was|are|were)\s")
_PAREN = re.compile(r"\s*\([^()]*\)")
_ARTICLE = re.compile(r"^(the|a|an)\s+", re.I)
_WORD = re.compile(r"[\w'’-]+")


def _norm(s: str) -> str:
    return " ".join(_WORD.findall(_ARTICLE.sub("", s.strip()).lower()))


def question_from_document(doc: Document) -> dict[str, Any] | None:
    """The question derived from one article, or ``None`` when the quality filter rejects it."""
    title = _PAREN.sub("", doc.title).strip()
    if not re.search(r"[A-Za-z]", title) or len(title.split()) > 6:
        return None
    sentence = first_sentence(doc.text)
    m = _COPULA.search(sentence)
    if m is None or m.start() > 100:
        return None
    subject = _PAREN.sub("", sentence[: m.start()]).split(",")[0].strip()
    definition = _PAREN.sub("", sentence[m.end() :]).strip().rstrip(".").strip()
    nt, ns = _norm(title), _norm(subject)
    if not nt or not (nt == ns or set(nt.split()) <= set(ns.split())):
        return None
    n_words = len(definition.split())
    if not 6 <= n_words <= 45:
        return None
    low_def = definition.lower()
    if title.lower() in low_def or (subject and subject.lower() in low_def):
        return None
    wh = "Who" if doc.topic == "People" else "What"
    answers = [title]
    if ns != nt and subject and len(subject.split()) <= 6:
        answers.append(_ARTICLE.sub("", subject))
    return {
        "id": f"wiki:{doc.docid}",
        "question": f"{wh} {m.group(1)} {definition}?",
        "answers": answers,
        "source": "wiki-offline",
        "doc": doc.docid,
    }


@lru_cache(maxsize=1)
def _wiki_question_splits() -> dict[str, tuple[dict[str, Any], ...]]:
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    for doc in load_wiki_summaries():
        q = question_from_document(doc)
        if q is not None:
            out[split_of(doc.docid)].append(q)
    return {s: tuple(v) for s, v in out.items()}


def _articles(task: Mapping[str, Any]) -> set[str]:
    return set(task.get("docs") or ([task["doc"]] if task.get("doc") else []))


def clean_held_out(
    splits: Mapping[str, Sequence[dict[str, Any]]],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, int]]]:
    """Split tasks with the held-out splits (:data:`HELD_OUT_SPLITS`) kept apart from ``train`` by content.

    Every split loses the questions whose normalised text repeats an earlier one of the split. A held-out question
    is dropped when its normalised text is a training question's or an earlier held-out split's (``"text"``), when
    one of its accepted answers, normalised, is an accepted answer of a training question (``"answer"``), or when one
    of its articles (``docs``/``doc``) is an article of a training question (``"article"``). Normalisation is SQuAD's
    (:func:`~agentgym_turn.answers.normalize_squad`), a superset of the exact-match reward's lowercase-and-strip,
    so a training answer that would score on a held-out question always counts as shared. Training questions are
    kept. Returns the cleaned splits and, per split, how many questions each rule dropped (first rule that applies,
    in the order ``duplicate``, ``text``, ``answer``, ``article``) and how many were ``kept``.

        >>> q = lambda t, a, d: {"question": t, "answers": a, "doc": d}
        >>> out, counts = clean_held_out({
        ...     "train": [q("Who directed Jaws?", ["Steven Spielberg"], "Jaws")],
        ...     "validation": [q("Who directed E.T.?", ["steven spielberg"], "E.T."), q("Who wrote Emma?", ["Jane "
        ...                    "Austen"], "Emma"), q("Who wrote  Emma", ["Austen"], "Emma"), q("When was Jaws made?",
        ...                    ["1975"], "Jaws")]})
        >>> [t["question"] for t in out["validation"]], counts["validation"]
        (['Who wrote Emma?'], {'duplicate': 1, 'text': 0, 'answer': 1, 'article': 1, 'kept': 1})
    """
    out: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, dict[str, int]] = {}
    seen_texts: set[str] = set()  # train's, then each held-out split's in order
    train = splits.get("train", ())
    train_answers = {normalize_squad(a) for t in train for a in t["answers"]} - {""}
    train_articles = set().union(*(_articles(t) for t in train))
    for name in ["train", *(s for s in splits if s != "train")]:
        if name not in splits:
            continue
        held_out = name != "train"
        kept, own = [], set()
        n = dict.fromkeys(("duplicate", "text", "answer", "article"), 0)
        for task in splits[name]:
            text = normalize_squad(task["question"])
            if text in own:
                n["duplicate"] += 1
            elif held_out and text in seen_texts:
                n["text"] += 1
            elif held_out and any(normalize_squad(a) in train_answers for a in task["answers"]):
                n["answer"] += 1
            elif held_out and _articles(task) & train_articles:
                n["article"] += 1
            else:
                kept.append(task)
            own.add(text)
        seen_texts |= own
        out[name], counts[name] = kept, {**n, "kept": len(kept)}
    return out, counts


@lru_cache(maxsize=1)
def _clean_facts() -> tuple[dict[str, tuple[dict[str, Any], ...]], dict[str, dict[str, int]]]:
    splits, counts = clean_held_out({s: fact_questions(s) for s in SPLITS})
    return {s: tuple(v) for s, v in splits.items()}, counts


def clean_counts() -> dict[str, dict[str, int]]:
    """How many ``facts-v1`` questions each rule of :func:`clean_held_out` drops from each split, and how many stay."""
    return {s: dict(c) for s, c in _clean_facts()[1].items()}


def wiki_questions(split: str = "train", *, question_set: str = LEAD_SET) -> list[dict[str, Any]]:
    """The offline questions of ``split`` (``train``, ``validation`` or ``test``) from ``question_set`` (one of
    :data:`QUESTION_SETS`), in corpus order. Tasks are ``{"id", "question", "answers", "source", "doc", ...}``."""
    if split not in SPLITS:
        raise InvalidArgument(f"split={split!r} is not one of {SPLITS}.")
    if question_set == CLEAN_SET:
        return json.loads(json.dumps(_clean_facts()[0][split]))
    if question_set == FACTS_SET:
        return fact_questions(split)
    if question_set != LEAD_SET:
        raise InvalidArgument(f"question_set={question_set!r} is not one of {QUESTION_SETS}.")
    return [dict(q, answers=list(q["answers"])) for q in _wiki_question_splits()[split]]


def triviaqa_task(row: dict[str, Any]) -> dict[str, Any]:
    """Turn one TriviaQA row (``question_id``, ``question``, ``answer: {value, aliases}``) into a task."""
    answer = row.get("answer") or {}
    answers: list[str] = []
    for a in [answer.get("value"), *(answer.get("aliases") or [])]:
        if isinstance(a, str) and a.strip() and a not in answers:
            answers.append(a)
    if not answers:
        raise InvalidArgument(f"TriviaQA row {row.get('question_id')!r} has no answer; use a split with answers.")
    task_id = f"triviaqa:{row['question_id']}"
    return {"id": task_id, "question": row["question"], "answers": answers, "source": "triviaqa"}


def load_triviaqa(split: str = "train", *, data_files: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
    """TriviaQA ``rc.nocontext`` as tasks: from the HF hub (online), or from local ``data_files``.

    The ``test`` split has no public answers and is refused; use ``validation`` for evaluation (as the paper).
    """
    if split not in ("train", "validation"):
        raise InvalidArgument(f"TriviaQA split={split!r}: use 'train' or 'validation' (the test split has no answers).")
    datasets = require("datasets", "data")
    if data_files is not None:
        files = [data_files] if isinstance(data_files, str) else list(data_files)
        kind = "parquet" if all(str(f).endswith(".parquet") for f in files) else "json"
        ds = datasets.load_dataset(kind, data_files=files, split="train")
    else:
        try:
            ds = datasets.load_dataset("mandarjoshi/trivia_qa", "rc.nocontext", split=split)
        except Exception as exc:  # the hub is unreachable offline; say so and how to proceed
            raise DataNotFound(
                f"could not load TriviaQA rc.nocontext/{split} from the Hugging Face hub ({type(exc).__name__}: "
                f"{exc}). Offline, use the bundled questions (dataset='wiki') or pass data_files=... ."
            ) from exc
    return [triviaqa_task(row) for row in ds]
