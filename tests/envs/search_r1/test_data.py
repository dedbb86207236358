"""SearchR1-v2 question sets: FlashRAG / Search-R1 file formats (fixtures written here), the offline single- and
two-hop construction on hand-made articles, and the oracle check over the bundled corpus (every gold answer is
retrieved and answered by the oracle policy)."""

from __future__ import annotations

import json

import pytest

from agentgym_turn.answers import normalize_squad
from agentgym_turn.corpus import Document
from agentgym_turn.error import DataNotFound, InvalidArgument
from agentgym_turn.policies import get_scripted_policy, run_episode
from envs.search_r1.data import (
    FLASHRAG_DATASETS,
    load_qa_dataset,
    load_qa_file,
    person_facts,
    single_hop_candidates,
    task_from_row,
    two_hop_candidates,
    validate_questions,
    wiki_search_questions,
)
from envs.search_r1.env import SearchR1Env
from envs.wikiqa import scripted_rates

FLASHRAG_ROWS = [
    {"id": "test_0", "question": "who got the first nobel prize in physics?",
     "golden_answers": ["Wilhelm Conrad Röntgen"], "metadata": {}},
    {"id": "test_1", "question": "when is the next deadpool movie being released?",
     "golden_answers": ["May 18, 2018", "2018"], "metadata": {"qid": 7}},
]  # fmt: skip
PREFIX = "Answer the given question. ... For example, <answer> Beijing </answer>. Question: "
SEARCH_R1_ROWS = [
    {"id": "train_5", "question": "which band sang hotel california?", "golden_answers": ["Eagles"],
     "data_source": "nq", "prompt": [{"role": "user", "content": PREFIX + "which band sang hotel california?\n"}],
     "ability": "fact-reasoning",
     "reward_model": {"style": "rule", "ground_truth": {"target": ["Eagles", "the Eagles"]}},
     "extra_info": {"split": "train", "index": 5}},
    {"data_source": "hotpotqa",
     "prompt": [{"role": "user", "content": PREFIX + "Were Scott and Ed of the same nationality?\n"}],
     "ability": "fact-reasoning", "reward_model": {"style": "rule", "ground_truth": {"target": ["yes"]}},
     "extra_info": {"split": "train", "index": 9}},
]  # fmt: skip


def test_flashrag_jsonl(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in FLASHRAG_ROWS) + "\n\n", encoding="utf-8")
    tasks = load_qa_file(path, source="nq")
    assert tasks[1] == {"id": "test_1", "question": FLASHRAG_ROWS[1]["question"],
                        "answers": ["May 18, 2018", "2018"], "source": "nq", "hops": 1}  # fmt: skip
    json_path = tmp_path / "rows.json"
    json_path.write_text(json.dumps(FLASHRAG_ROWS), encoding="utf-8")
    assert load_qa_file(json_path, source="nq") == tasks


def test_search_r1_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(SEARCH_R1_ROWS), path)
    first, second = load_qa_file(path)
    assert first["answers"] == ["Eagles", "the Eagles"] and first["source"] == "nq" and first["id"] == "train_5"
    assert second["question"] == "Were Scott and Ed of the same nationality?"  # taken from the prompt
    assert second["hops"] == 2 and second["answers"] == ["yes"] and second["id"] == "hotpotqa-1"


def test_file_and_row_errors(tmp_path):
    with pytest.raises(DataNotFound):
        load_qa_file(tmp_path / "missing.jsonl")
    bad = tmp_path / "x.csv"
    bad.write_text("q,a")
    with pytest.raises(InvalidArgument, match="unknown format"):
        load_qa_file(bad)
    with pytest.raises(InvalidArgument, match="no question or no answers"):
        task_from_row({"question": "q", "golden_answers": []})
    with pytest.raises(InvalidArgument, match="not one of"):
        load_qa_dataset("squad")
    with pytest.raises(InvalidArgument, match="publishes splits"):
        load_qa_dataset("popqa", "train")
    assert set(FLASHRAG_DATASETS) == {"nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique"}


def test_env_reads_a_dataset_file(tmp_path, table_retriever):
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in FLASHRAG_ROWS), encoding="utf-8")
    env = SearchR1Env(dataset=str(path), retriever=table_retriever)
    assert [t["id"] for t in env.tasks] == ["test_0", "test_1"]


DOCS = [
    Document("Jaws", "Jaws", "Jaws is a thriller film directed by Steven Spielberg, about a shark.", topic="Arts"),
    Document("Steven Spielberg", "Steven Spielberg", "Steven Spielberg is an American filmmaker.", topic="People"),
    Document(
        "Genetics", "Genetics", "Genetics studies heredity. Gregor Mendel studied peas; Steven Spielberg did not."
    ),
    Document("Gregor Mendel", "Gregor Mendel", "Gregor Mendel was an Austrian biologist and friar.", topic="People"),
    Document("Robert Burns", "Robert Burns", "Robert Burns was a Scottish poet and lyricist.", topic="People"),
    Document("Robert Burns Woodward", "Robert Burns Woodward", "Robert Burns Woodward was a chemist.", topic="People"),
    Document("Ode", "Ode", "An ode is a poem; Robert Burns Woodward is unrelated to Robert Burns Woodward."),
]


def test_person_facts():
    assert person_facts(DOCS[1]) == ("American", "filmmaker")
    assert person_facts(DOCS[3]) == ("Austrian", "biologist")
    assert person_facts(DOCS[0]) is None  # not a People article
    assert person_facts(DOCS[5]) is None  # no nationality


def test_two_hop_construction():
    qs = {q["question"]: q for q in two_hop_candidates(DOCS)}
    assert set(qs) == {
        "What nationality was the person who directed Jaws?",  # a "<verb> by" relation
        "What nationality was the biologist mentioned in the Wikipedia lead of Genetics?",  # unique occupation
        "What nationality was the filmmaker mentioned in the Wikipedia lead of Genetics?",
    }  # "Robert Burns" inside "Robert Burns Woodward" is no mention of Robert Burns
    q = qs["What nationality was the person who directed Jaws?"]
    assert q["answers"] == ["American"] and q["oracle_queries"] == ["Jaws", "Steven Spielberg"] and q["hops"] == 2
    assert q["docs"] == ["Jaws", "Steven Spielberg"] and q["bridge"] == "Steven Spielberg"


def test_two_hop_skips_answers_leaked_by_the_first_article():
    docs = [Document("A", "A", "A is a film directed by the American Steven Spielberg."), DOCS[1]]
    assert two_hop_candidates(docs) == []


@pytest.fixture(scope="module")
def small_bm25(tmp_path_factory):
    from agentgym_turn.retrieval.lucene import corpus_index

    return corpus_index(DOCS, "search-r1-data", root=tmp_path_factory.mktemp("idx"))


def test_validation_drops_unretrievable_questions(small_bm25):
    good = two_hop_candidates(DOCS)
    broken = dict(good[0], answers=["Martian"], id="broken")  # the passages never say "Martian"
    wrong_bridge = dict(good[0], bridge="Nobody", id="bridge")
    kept = validate_questions([*good, broken, wrong_bridge], small_bm25)
    assert [q["id"] for q in kept] == [q["id"] for q in good]


def test_single_hop_uses_the_sibling_construction():
    docs = [Document("Carmen", "Carmen", "Carmen is an opera in four acts by the French composer Georges Bizet.")]
    (q,) = single_hop_candidates(docs)
    assert q["question"] == "What is an opera in four acts by the French composer Georges Bizet?"
    assert q["answers"] == ["Carmen"] and q["oracle_queries"] == [q["question"]] and q["hops"] == 1


@pytest.fixture(scope="module")
def offline_questions(wiki_retriever):
    return {s: wiki_search_questions(wiki_retriever, s) for s in ("train", "validation", "test")}


def test_offline_sets_are_large_disjoint_and_have_two_hop(offline_questions):
    sizes = {s: len(v) for s, v in offline_questions.items()}
    assert sizes["train"] > 5000 and sizes["validation"] > 500 and sizes["test"] > 500
    ids = [q["id"] for v in offline_questions.values() for q in v]
    assert len(ids) == len(set(ids))
    assert sum(q["hops"] == 2 for v in offline_questions.values() for q in v) >= 100


def test_oracle_solves_every_two_hop_and_sampled_single_hop_question(offline_questions, wiki_retriever):
    every = [q for v in offline_questions.values() for q in v]
    two_hop = [q for q in every if q["hops"] == 2]
    single = [q for q in every if q["hops"] == 1][::50]
    env = SearchR1Env(tasks=two_hop + single, retriever=wiki_retriever)
    oracle = get_scripted_policy(env, "oracle")
    for q in two_hop + single:
        log = run_episode(env, oracle, seed=0, options={"task": q})
        m = log.metrics
        assert m["env/answer_correct"] == m["env/format_correct"] == m["env/retrieval_correct"] == 1.0, q
        assert m["env/searches"] == q["hops"] and log.rewards[-1] == 1.0
        assert log.infos[-2]["reward_components"]["retrieval"] == 0.3  # the last hop retrieves the gold answer


#: One row per paper dataset, in FlashRAG's published layout (values written for this test).
DATASET_ROWS = {
    "nq": {"id": "test_3", "question": "who sings does he love me with reba?",
           "golden_answers": ["Linda Davis"], "metadata": {}},
    "triviaqa": {"id": "test_9", "question": "Which Lloyd Webber musical premiered in the US on 10th December 1993?",
                 "golden_answers": ["Sunset Boulevard", "Sunset Blvd"], "metadata": {}},
    "popqa": {"id": "test_1", "question": "What is George Rankin's occupation?",
              "golden_answers": ["politician", "political leader"], "metadata": {"prop": "occupation"}},
    "hotpotqa": {"id": "dev_0", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
                 "golden_answers": ["yes"], "metadata": {"type": "comparison", "level": "hard"}},
    "2wikimultihopqa": {"id": "dev_7", "question": "Who was born first, Ed Wood or Scott Derrickson?",
                        "golden_answers": ["Ed Wood"], "metadata": {"type": "comparison"}},
    "musique": {"id": "dev_2", "question": "When was the creator of Pearl born?",
                "golden_answers": ["1947"], "metadata": {"answerable": True}},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(DATASET_ROWS))
def test_each_paper_dataset_fixture(tmp_path, name):
    assert name in FLASHRAG_DATASETS
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(DATASET_ROWS[name]) + "\n", encoding="utf-8")
    (task,) = load_qa_file(path, source=name)
    row = DATASET_ROWS[name]
    assert task["question"] == row["question"] and task["answers"] == row["golden_answers"]
    assert task["source"] == name and task["hops"] == (2 if name in {"hotpotqa", "2wikimultihopqa", "musique"} else 1)


@pytest.fixture(scope="module")
def facts_questions(wiki_retriever):
    return {s: wiki_search_questions(wiki_retriever, s, question_set="facts-v1") for s in ("train", "validation")}


def test_facts_set_difficulty_as_published(facts_questions, wiki_retriever):
    """The rates published in envs.search_r1.data's docstring (bench/bench_questions.py), top-3 as the env."""
    val, train = facts_questions["validation"], facts_questions["train"]
    r = scripted_rates(val, wiki_retriever, k=3, normalize=normalize_squad, prior=train)
    assert r["title_em"] < 0.1  # lead-v0: 0.922
    assert 0.4 <= r["search_answer"] <= 0.8
    assert r["no_search_em"] < 0.15 and r["no_search_kind_em"] < 0.15
    published = {"n": 649, "title_em": 0.009, "search_answer": 0.780, "no_search_em": 0.069, "no_search_kind_em": 0.097}
    assert r == pytest.approx(published, abs=0.0015)
    assert sum(q["hops"] == 2 for q in val) / len(val) >= 0.15  # lead-v0: 0.025
    with pytest.raises(InvalidArgument, match="question_set"):
        wiki_search_questions(wiki_retriever, "test", question_set="nope")


def test_oracle_solves_sampled_facts_questions(facts_questions, wiki_retriever):
    val = facts_questions["validation"]
    sample = [q for q in val if q["hops"] == 2][::20] + [q for q in val if q["hops"] == 1][::40]
    env = SearchR1Env(tasks=sample, retriever=wiki_retriever)
    oracle = get_scripted_policy(env, "oracle")
    for q in sample:
        m = run_episode(env, oracle, seed=0, options={"task": q}).metrics
        assert m["env/answer_correct"] == m["env/retrieval_correct"] == 1.0 and m["env/searches"] == q["hops"], q
