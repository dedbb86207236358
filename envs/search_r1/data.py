"""Question sets for ``TurnRL/SearchR1-v2``: the paper's six QA datasets, and offline questions from the corpus.

**Datasets (online users).** The paper trains and evaluates on NQ, TriviaQA, PopQA, HotpotQA, 2WikiMultiHopQA and
Musique (``001_…`` §6.2) as Search-R1 and FlashRAG publish them:

* FlashRAG (HF ``RUC-NLPIR/FlashRAG_datasets``, configs ``nq``, ``triviaqa``, ``popqa``, ``hotpotqa``,
  ``2wikimultihopqa``, ``musique``): JSON lines with ``id``, ``question``, ``golden_answers`` (a list) and
  ``metadata``. :func:`load_qa_dataset` reads them through HF ``datasets``; :func:`load_qa_file` reads a local copy.
* Search-R1's parquet files (``data_source``, ``prompt`` = ``[{"role": "user", "content": "...Question: q\\n"}]``,
  ``ability``, ``reward_model = {"style": "rule", "ground_truth": {"target": [answers]}}``, ``extra_info``; the
  FlashRAG columns are usually kept alongside): :func:`load_qa_file` reads them (needs ``pyarrow``).

Every loader returns tasks ``{"id", "question", "answers", "source", "hops"}``.

**Offline questions** (:func:`wiki_search_questions`, ``question_set=...``), built deterministically from the
bundled Wikipedia leads (:func:`agentgym_turn.corpus.load_wiki_summaries`, CC BY-SA 4.0, see ``WIKI_ATTRIBUTION``):

Measured difficulty (``python bench/bench_questions.py``, validation split, bundled Lucene BM25 top-3 as the env
searches, SQuAD-normalised EM; asserted by ``tests/envs/search_r1/test_data.py``):

=========  =====  ======  ========================  ============================  ==========================
set        n      2-hop   search + copy 1st title   search + oracle span (answer  no search (most frequent /
                          (EM)                      in a retrieved passage)       per-kind most frequent)
=========  =====  ======  ========================  ============================  ==========================
lead-v0    772    0.025   0.922                     0.987                         0.005 / 0.005
facts-v1   649    0.254   0.009                     0.780                         0.069 / 0.097
=========  =====  ======  ========================  ============================  ==========================

* ``"facts-v1"`` (:mod:`envs.wikiqa`): templated questions about facts inside the leads (answers are spans:
  people, places, years, numbers, aliases), single-hop and two-hop bridge questions (*What is the capital of the
  country mentioned in the Wikipedia lead of Stephen Báthory?* -> ``Vilnius``), validated as below.
* ``"lead-v0"``, the original set (the default until the env switches), built as follows:

* *single-hop*: the MT-GRPO sibling's construction (:func:`envs.wiki_two_turn.questions.question_from_document`):
  the lead's first sentence with its subject removed, ``"What is an opera in four acts by the French composer
  Georges Bizet?"`` -> ``Carmen``. Oracle query: the question itself.
* *two-hop* (bridge, HotpotQA-style), composed through articles that mention each other: article A's lead names
  article B by its exact title, and B is a person whose first sentence gives a nationality (``"Stanley Kubrick
  was an American film director..."``). When A's lead says B ``directed``/``wrote``/``composed``/... A, the
  question asks ``"What nationality was the person who directed 2001: A Space Odyssey?"``; otherwise it names B's
  occupation, ``"What nationality was the composer mentioned in the Wikipedia lead of Carmen?"``, used only when
  that occupation is unique among the people A's lead mentions. The nationality must not occur in A's lead (so the
  second hop is needed). Oracle queries: A's title, then B's title.
* *validation*: a question is kept only when the oracle's queries retrieve it with the env's retriever: each
  query's top-k holds the article that hop needs, the first hop's passages name the bridge B (two-hop), and the
  last hop's passages contain a gold answer (case-insensitive), which is the retrieval reward's test.
* splits: by a hash of the (last-hop) article: 80% train, 10% validation, 10% test.

Validated sets are cached as JSON under ``cache_dir("search_r1")`` keyed by corpus fingerprint and retriever name
(the first build validates ~7,300 candidates: ~30 s with Lucene BM25 here). With the bundled BM25 index and top-3:
7,092 of 7,143 single-hop and 153 of 155 two-hop candidates pass, 7,245 questions in all (5,778 train, 772
validation, 695 test).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym_turn.answers import contains_answer, normalize_squad
from agentgym_turn.corpus import Document, corpus_fingerprint, load_wiki_summaries
from agentgym_turn.error import DataNotFound, InvalidArgument, InvalidTask, require
from agentgym_turn.paths import cache_dir
from agentgym_turn.retrieval import Retriever
from envs.wiki_two_turn.questions import FACTS_SET, LEAD_SET, QUESTION_SETS, SPLITS, question_from_document
from envs.wikiqa import CONSTRUCTION_VERSION as FACTS_VERSION
from envs.wikiqa import build_questions, mentions, person_facts, relation_to, split_of

#: FlashRAG config name -> the splits it publishes (Search-R1 evaluates on ``test`` when there is one, else ``dev``).
FLASHRAG_DATASETS: dict[str, tuple[str, ...]] = {
    "nq": ("train", "dev", "test"),
    "triviaqa": ("train", "dev", "test"),
    "popqa": ("test",),
    "hotpotqa": ("train", "dev"),
    "2wikimultihopqa": ("train", "dev"),
    "musique": ("train", "dev"),
}
MULTI_HOP = frozenset({"hotpotqa", "2wikimultihopqa", "musique"})
FLASHRAG_REPO = "RUC-NLPIR/FlashRAG_datasets"
CONSTRUCTION_VERSION = 1


def _task(qid: str, question: str, answers: Iterable[Any], source: str, hops: int = 1, **extra: Any) -> dict[str, Any]:
    golds = [str(a) for a in answers if str(a).strip()]
    return {"id": qid, "question": question.strip(), "answers": golds, "source": source, "hops": hops, **extra}


def coerce_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """A hand-written task ``{"question", "answers", "id"?, ...}`` (FlashRAG's ``golden_answers`` also accepted),
    checked; raises :class:`InvalidTask` naming the problem. Extra keys (``oracle_queries``, ...) are kept."""
    question = task.get("question")
    golds = task.get("answers", task.get("golden_answers"))
    golds = [golds] if isinstance(golds, str) else golds
    problem = None
    if not isinstance(question, str) or not question.strip():
        problem = f"a non-empty 'question' string; got {question!r}"
    elif not isinstance(golds, Sequence) or not golds or any(not isinstance(g, str) or not g.strip() for g in golds):
        problem = f"'answers', a non-empty list of non-empty strings; got {golds!r}"
    if problem:
        raise InvalidTask(f"a SearchR1 task needs {problem}.")
    out = dict(task)
    out.update(answers=list(golds), id=str(task.get("id") or f"custom:{question[:60]}"))
    out.setdefault("hops", 1)
    return out


# ---------------------------------------------------------------------------------------------- published datasets
def _question_from_prompt(prompt: Any) -> str | None:
    """The question inside a Search-R1 prompt (the text after its last ``Question:``)."""
    if isinstance(prompt, Sequence) and not isinstance(prompt, str) and prompt:
        content = prompt[-1].get("content", "") if isinstance(prompt[-1], dict) else ""
        _, sep, tail = str(content).rpartition("Question:")
        return tail.strip() if sep else None
    return None


def task_from_row(row: dict[str, Any], *, source: str = "", index: int = 0) -> dict[str, Any]:
    """One FlashRAG or Search-R1 row as a task; raises :class:`InvalidArgument` naming what is missing."""
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        question = _question_from_prompt(row.get("prompt"))
    answers: Any = None
    reward_model = row.get("reward_model")
    if isinstance(reward_model, dict):
        answers = (reward_model.get("ground_truth") or {}).get("target")
    if answers is None:
        answers = row.get("golden_answers")
    if isinstance(answers, str):
        answers = [answers]
    if not question or answers is None or not list(answers):
        raise InvalidArgument(
            f"row {index} has no question or no answers (keys {sorted(row)}); expected FlashRAG's "
            "'question' + 'golden_answers' or Search-R1's 'prompt' + 'reward_model.ground_truth.target'."
        )
    src = source or str(row.get("data_source") or "")
    qid = str(row.get("id") or f"{src or 'qa'}-{index}")
    return _task(qid, question, list(answers), src, hops=2 if src in MULTI_HOP else 1)


def load_qa_file(path: str | Path, *, source: str = "") -> list[dict[str, Any]]:
    """Tasks from a local FlashRAG ``.jsonl`` / ``.json`` or Search-R1 ``.parquet`` file."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFound(f"{path} does not exist; pass a FlashRAG .jsonl or Search-R1 .parquet file.")
    if path.suffix == ".parquet":
        pq = require("pyarrow.parquet", "data", "pyarrow")
        rows = pq.read_table(path).to_pylist()
    elif path.suffix in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        raise InvalidArgument(f"{path.name}: unknown format {path.suffix!r}; use .jsonl, .json or .parquet.")
    return [task_from_row(r, source=source, index=i) for i, r in enumerate(rows)]


def load_qa_dataset(name: str, split: str = "test", *, repo: str = FLASHRAG_REPO) -> list[dict[str, Any]]:
    """One of the paper's datasets from the Hugging Face Hub through ``datasets`` (needs network the first time)."""
    if name not in FLASHRAG_DATASETS:
        raise InvalidArgument(f"dataset {name!r} is not one of {sorted(FLASHRAG_DATASETS)}.")
    if split not in FLASHRAG_DATASETS[name]:
        raise InvalidArgument(f"{name} publishes splits {FLASHRAG_DATASETS[name]}, not {split!r}.")
    datasets = require("datasets", "data")
    rows = datasets.load_dataset(repo, name, split=split)
    return [task_from_row(dict(r), source=name, index=i) for i, r in enumerate(rows)]


# ---------------------------------------------------------------------------------------------- offline questions
def two_hop_candidates(docs: Sequence[Document]) -> list[dict[str, Any]]:
    """Unvalidated two-hop questions composed through A -> B mentions (see the module docstring)."""
    by_title = {d.title: d for d in docs}
    facts = {d.title: f for d in docs if (f := person_facts(d)) is not None}
    first_word: dict[str, list[str]] = {}
    for t in facts:
        first_word.setdefault(t.split()[0], []).append(t)
    out = []
    for a in docs:
        mentioned = mentions(a, first_word, before_full_stop=False)  # lead-v0 is frozen
        if not mentioned:
            continue
        occupations = [facts[t][1] for t in mentioned]
        for b in mentioned:
            nationality, occupation = facts[b]
            if contains_answer(a.text, [nationality]) or contains_answer(a.title, [nationality]):
                continue  # answerable from A alone: not a two-hop question
            rel = relation_to(a.text, b)
            if rel is not None:
                question = f"What nationality was the person who {rel} {a.title}?"
            elif occupations.count(occupation) == 1:
                question = f"What nationality was the {occupation} mentioned in the Wikipedia lead of {a.title}?"
            else:
                continue
            out.append(
                _task(
                    f"wiki2:{a.docid}->{by_title[b].docid}",
                    question,
                    [nationality],
                    "wiki-offline",
                    hops=2,
                    docs=[a.docid, by_title[b].docid],
                    bridge=b,
                    oracle_queries=[a.title, b],
                )
            )
    return out


def single_hop_candidates(docs: Sequence[Document]) -> list[dict[str, Any]]:
    """Unvalidated single-hop questions (the sibling MT-GRPO construction), with the oracle's query."""
    out = []
    for d in docs:
        q = question_from_document(d)
        if q is None:
            continue
        out.append(
            _task(f"wiki1:{d.docid}", q["question"], q["answers"], "wiki-offline", docs=[d.docid],
                  oracle_queries=[q["question"]])
        )  # fmt: skip
    return out


def validate_questions(
    candidates: Sequence[dict[str, Any]], retriever: Retriever, *, k: int = 3
) -> list[dict[str, Any]]:
    """Keep the candidates the oracle solves with ``retriever`` (each hop's article in its top-k, the first hop's
    passages naming the bridge, the last hop's passages containing a gold answer)."""
    queries = [q for c in candidates for q in c["oracle_queries"]]
    results = iter(retriever.batch_search(queries, k=k))
    kept = []
    for c in candidates:
        hops = [next(results) for _ in c["oracle_queries"]]
        ok = all(c["docs"][i] in {p.docid for p in hop} for i, hop in enumerate(hops))
        if ok and c["hops"] == 2:
            ok = contains_answer(" ".join(p.render() for p in hops[0]), [c["bridge"]])
        ok = ok and contains_answer(" ".join(p.render() for p in hops[-1]), c["answers"])
        if ok:
            kept.append(c)
    return kept


def normalized_question(task: Mapping[str, Any]) -> str:
    """A task's question as the held-out checks compare it (SQuAD normalisation: case, punctuation, articles)."""
    return normalize_squad(task["question"])


def normalized_answers(task: Mapping[str, Any]) -> set[str]:
    """A task's gold answers (aliases included) as the held-out checks compare them (SQuAD normalisation)."""
    return {a for a in map(normalize_squad, task["answers"]) if a}


def disjoint_splits(by_split: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The splits made clean by content: no two tasks of a split share a normalised question (the first is kept),
    and no held-out (validation, test) task shares its normalised question or any normalised gold answer with a
    train task. Train is kept as it is (deduplicated).

    The held-out tasks dropped are the ones a policy could answer from training alone: ``facts-v1``'s test split
    drops 280 of its 504 questions this way, all for an answer seen in train (``American``, ``London``, ``1968``).
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for split, tasks in by_split.items():
        seen: set[str] = set()
        out[split] = [t for t in tasks if not ((q := normalized_question(t)) in seen or seen.add(q))]
    train = out.get("train", [])
    train_questions = {normalized_question(t) for t in train}
    train_answers = set().union(*(normalized_answers(t) for t in train))
    for split in out:
        if split != "train":
            out[split] = [
                t
                for t in out[split]
                if normalized_question(t) not in train_questions and not normalized_answers(t) & train_answers
            ]
    return out


def wiki_search_questions(
    retriever: Retriever,
    split: str = "train",
    *,
    k: int = 3,
    docs: Sequence[Document] | None = None,
    question_set: str = LEAD_SET,
    disjoint: bool = False,
) -> list[dict[str, Any]]:
    """The validated offline questions (single-hop and two-hop) of ``split`` for ``retriever`` (cached on disk).

    ``question_set`` is one of :data:`QUESTION_SETS`: ``"lead-v0"`` (the original construction above) or
    ``"facts-v1"`` (:mod:`envs.wikiqa`), both validated by the oracle with ``retriever`` and top-``k``.
    ``disjoint=True`` returns the splits cleaned by :func:`disjoint_splits` (SearchR1-v2's held-out sets).
    """
    if split not in SPLITS:
        raise InvalidArgument(f"split={split!r} is not one of {SPLITS}.")
    if question_set not in QUESTION_SETS:
        raise InvalidArgument(f"question_set={question_set!r} is not one of {QUESTION_SETS}.")
    docs = tuple(load_wiki_summaries() if docs is None else docs)
    version = CONSTRUCTION_VERSION if question_set == LEAD_SET else f"{question_set}|{FACTS_VERSION}"
    key = hashlib.sha256(f"{version}|{corpus_fingerprint(docs)}|{retriever.name}|{k}".encode()).hexdigest()[:16]
    path = cache_dir("search_r1") / f"questions-{key}.json"
    if path.is_file():
        by_split = json.loads(path.read_text(encoding="utf-8"))
    else:
        if question_set == FACTS_SET:
            candidates = build_questions(docs)
        else:
            candidates = single_hop_candidates(docs) + two_hop_candidates(docs)
        by_split = {s: [] for s in SPLITS}
        for q in validate_questions(candidates, retriever, k=k):
            by_split[split_of(q["docs"][-1])].append(q)
        _write_json(path, by_split)
    return (disjoint_splits(by_split) if disjoint else by_split)[split]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(f".{id(data)}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def multihop_search_questions(
    retriever: Retriever, split: str = "train", *, hops: int = 2, k: int = 3, docs: Sequence[Document] | None = None
) -> list[dict[str, Any]]:
    """The validated ``hops``-hop bridge questions of ``split`` (:mod:`envs.search_r1.multihop`) for ``retriever``
    and top-``k``, with held-out splits disjoint from train by content (cached on disk; the first build takes
    ~30-60 s here)."""
    from envs.search_r1 import multihop

    if split not in SPLITS:
        raise InvalidArgument(f"split={split!r} is not one of {SPLITS}.")
    if hops not in multihop.HOPS:
        raise InvalidArgument(f"hops={hops!r} must be one of {multihop.HOPS} (None: the single-hop facts set).")
    docs = tuple(load_wiki_summaries() if docs is None else docs)
    version = f"multihop|{multihop.MULTIHOP_VERSION}|{FACTS_VERSION}|{corpus_fingerprint(docs)}|{retriever.name}|{k}"
    path = cache_dir("search_r1") / f"multihop-{hashlib.sha256(version.encode()).hexdigest()[:16]}.json"
    if path.is_file():
        by_hops = json.loads(path.read_text(encoding="utf-8"))
    else:
        built = multihop.build_multihop(docs, retriever, k=k)
        by_hops = {str(h): multihop.split_multihop([t for t in built if t["hops"] == h]) for h in multihop.HOPS}
        _write_json(path, by_hops)
    return disjoint_splits(by_hops[str(hops)])[split]
