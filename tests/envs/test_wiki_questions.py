"""The offline question sets derived from the corpus (``lead-v0`` and ``facts-v1``, with the difficulty regime of
the scripted policies), and the TriviaQA loader on a fixture file."""

from __future__ import annotations

import json

import pytest

from agentgym_turn.answers import normalize_basic
from agentgym_turn.corpus import Document, load_wiki_summaries
from agentgym_turn.error import InvalidArgument
from envs.wiki_two_turn.questions import (
    FACTS_SET,
    SPLITS,
    first_sentence,
    load_triviaqa,
    question_from_document,
    split_of,
    wiki_questions,
)
from envs.wikiqa import build_questions, occurs, scripted_rates, subject_name


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Ab cd. Ef gh.", "Ab cd."),
        ("The Elements is a treatise written c. 300 BC by Euclid. It has 13 books.", None),
        ('Fountain was signed "R. Mutt". It is famous.', 'Fountain was signed "R. Mutt".'),
        ("No full stop", "No full stop"),
    ],
)
def test_first_sentence(text, first):
    assert first_sentence(text) == (first or text.split(" It ")[0])


@pytest.mark.parametrize(
    ("doc", "question", "answers"),
    [
        (
            Document("Carmen", "Carmen", "Carmen is an opera in four acts by the French composer Georges Bizet. More."),
            "What is an opera in four acts by the French composer Georges Bizet?",
            ["Carmen"],
        ),
        (
            Document(
                "Ernst Mach",
                "Ernst Mach",
                "Ernst Waldfried Josef Wenzel Mach was an Austrian physicist and "
                "philosopher known for work on shock waves.",
                topic="People",
            ),
            "Who was an Austrian physicist and philosopher known for work on shock waves?",
            ["Ernst Mach", "Ernst Waldfried Josef Wenzel Mach"],
        ),
        (
            Document(
                "Mercury (planet)",
                "Mercury (planet)",
                "Mercury is the smallest planet in the Solar System and the closest to the Sun.",
            ),
            "What is the smallest planet in the Solar System and the closest to the Sun?",
            ["Mercury"],
        ),
    ],
)
def test_question_from_document(doc, question, answers):
    q = question_from_document(doc)
    assert q is not None and q["question"] == question and q["answers"] == answers


@pytest.mark.parametrize(
    "doc",
    [
        Document("Paris", "Paris", "Paris is the capital of France, and Paris is large and old and famous."),  # leak
        Document("X", "X", "In poetry, an epic is a lengthy narrative poem about deeds of heroes and gods."),
        Document("Y", "Y", "Y is a letter."),  # too short
        Document("1999", "1999", "1999 was a common year starting on Friday of the Gregorian calendar."),
    ],
)
def test_quality_filter_rejects(doc):
    assert question_from_document(doc) is None


def test_splits_are_fixed_disjoint_and_sized():
    sizes = {s: len(wiki_questions(s)) for s in SPLITS}
    assert sizes["train"] > 5000 and sizes["validation"] > 500 and sizes["test"] > 500
    ids = [{q["id"] for q in wiki_questions(s)} for s in SPLITS]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert all(split_of(q["doc"]) == "test" for q in wiki_questions("test"))
    assert wiki_questions("test")[:5] == wiki_questions("test")[:5]
    with pytest.raises(InvalidArgument):
        wiki_questions("dev")


def test_every_offline_answer_is_in_its_article_and_retrievable(wiki_retriever):
    qs = wiki_questions("validation")[:200]
    hits = wiki_retriever.batch_search([q["question"] for q in qs], k=1)
    found = sum(bool(h) and h[0].docid == q["doc"] for q, h in zip(qs, hits, strict=True))
    assert found / len(qs) >= 0.9


def test_triviaqa_loader_on_a_fixture(tmp_path):
    pytest.importorskip("datasets")
    rows = [
        {
            "question_id": "tc_1",
            "question": "Which Lloyd Webber musical features 'Memory'?",
            "answer": {"value": "Cats", "aliases": ["Cats", "CATS (musical)"], "normalized_value": "cats"},
        },
        {
            "question_id": "tc_2",
            "question": "Who painted the Mona Lisa?",
            "answer": {"value": "Leonardo da Vinci", "aliases": ["Leonardo", "Da Vinci"], "normalized_value": "x"},
        },
    ]
    path = tmp_path / "triviaqa.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    tasks = load_triviaqa("train", data_files=str(path))
    assert tasks[0] == {
        "id": "triviaqa:tc_1",
        "question": rows[0]["question"],
        "answers": ["Cats", "CATS (musical)"],
        "source": "triviaqa",
    }
    assert tasks[1]["answers"] == ["Leonardo da Vinci", "Leonardo", "Da Vinci"]
    with pytest.raises(InvalidArgument, match=r"test split"):
        load_triviaqa("test", data_files=str(path))


# ------------------------------------------------------------------------------------- facts-v1 (envs.wikiqa)
FACT_DOCS = [
    Document("Jaws", "Jaws", "Jaws is a 1975 thriller film directed by Steven Spielberg, about a shark.", topic="Arts"),
    Document("Steven Spielberg", "Steven Spielberg", "Steven Spielberg is an American filmmaker and producer.",
             topic="People"),
    Document("Ghana", "Ghana", "Ghana is a country in West Africa. Its capital and largest city is Accra."),
    Document("Accra", "Accra", "Accra is the capital city of Ghana. It was founded in 1650 by the Ga people."),
    Document("Argon", "Argon", "Argon is a chemical element with symbol Ar and atomic number 18."),
    Document("Giant panda", "Giant panda",
             "The giant panda, also known as the panda bear, is a bear species. It is in the family Ursidae."),
]  # fmt: skip


def test_fact_questions_on_hand_made_leads():
    got = {q["question"]: (q["answers"], q["docs"]) for q in build_questions(FACT_DOCS)}
    assert got["Who directed Jaws?"] == (["Steven Spielberg", "Spielberg"], ["Jaws"])
    assert got["In which year was Jaws released?"] == (["1975"], ["Jaws"])
    assert got["What nationality is Steven Spielberg?"] == (["American"], ["Steven Spielberg"])
    assert got["What is the occupation of Steven Spielberg?"] == (["filmmaker", "producer"], ["Steven Spielberg"])
    assert got["What is the capital of Ghana?"] == (["Accra"], ["Ghana"])
    assert got["In which year was Accra founded?"] == (["1650"], ["Accra"])
    assert got["What is the atomic number of Argon?"] == (["18"], ["Argon"])
    assert got["By what other name is the giant panda known?"] == (["panda bear"], ["Giant panda"])
    assert got["To which family does the giant panda belong?"] == (["Ursidae"], ["Giant panda"])
    # two-hop bridges: through a "<verb> by" relation and through "Its capital is"
    assert got["What nationality is the person who directed Jaws?"] == (["American"], ["Jaws", "Steven Spielberg"])
    assert got["In which year was the capital of Ghana founded?"] == (["1650"], ["Ghana", "Accra"])
    # "Of which country ... is Accra the capital?" -> "Ghana" would be answered by Ghana's own lead: not two-hop
    assert all(not q.startswith("Of which country or region is the capital") for q in got)


def test_fact_filters():
    leak = Document("Ghana", "Ghana", "Ghana, also called Ghana, is a country. Its capital is Accra.")
    assert [q["question"] for q in build_questions([leak])] == ["What is the capital of Ghana?"]  # alias leaks
    a = Document("A", "Alpha film", "Alpha film is a film directed by the American Steven Spielberg.")
    assert not [q for q in build_questions([a, FACT_DOCS[1]]) if q["hops"] == 2]  # A's lead gives the answer
    same = [Document(f"X{i}", f"Tango {i}", f"Tango {i} is a dance.") for i in range(2)]
    assert subject_name("Casablanca (film)") == "the film Casablanca"
    assert subject_name("Georgia (country)") == "the country Georgia"
    assert subject_name("Cambridge (Massachusetts)") == "Cambridge, Massachusetts"
    assert build_questions(same) == []


@pytest.fixture(scope="module")
def facts():
    return {s: wiki_questions(s, question_set=FACTS_SET) for s in SPLITS}


def test_facts_set_is_split_by_gold_article_and_answerable(facts):
    docs = {d.docid: d for d in load_wiki_summaries()}
    assert sum(len(v) for v in facts.values()) > 5000
    for split, qs in facts.items():
        assert all(split_of(q["doc"]) == split and q["doc"] == q["docs"][-1] for q in qs)
        for q in qs:
            assert q["answers"] and not any(occurs(q["question"], a) for a in q["answers"]), q
            assert any(occurs(docs[q["doc"]].text, a) for a in q["answers"]), q  # the gold article answers it
    ids = [q["id"] for v in facts.values() for q in v]
    assert len(ids) == len(set(ids))
    with pytest.raises(InvalidArgument, match="question_set"):
        wiki_questions("test", question_set="lead-v9")


def test_facts_set_difficulty_as_published(facts, wiki_retriever):
    """The rates published in envs.wiki_two_turn.questions' docstring (bench/bench_questions.py), top-1 search."""
    r = scripted_rates(facts["validation"], wiki_retriever, k=1, normalize=normalize_basic, prior=facts["train"])
    assert r["title_em"] < 0.1  # lead-v0: 0.942
    assert 0.4 <= r["search_answer"] <= 0.8
    assert r["no_search_em"] < 0.15 and r["no_search_kind_em"] < 0.15
    published = {"n": 671, "title_em": 0.007, "search_answer": 0.705, "no_search_em": 0.069, "no_search_kind_em": 0.095}
    assert r == pytest.approx(published, abs=0.0015)
    assert sum(q["hops"] == 2 for q in facts["validation"]) / r["n"] == pytest.approx(0.274, abs=0.001)


def test_clean_set_keeps_held_out_apart_from_train_by_text_answer_and_article():
    """Over the full splits: no repeated question within a split, no shared text across splits, and no held-out
    question shares a (SQuAD-normalised) accepted answer or an article with a training question."""
    from agentgym_turn.answers import normalize_squad as norm
    from envs.wiki_two_turn.questions import CLEAN_SET, clean_counts

    sets = {s: wiki_questions(s, question_set=CLEAN_SET) for s in SPLITS}
    texts = {s: [norm(q["question"]) for q in v] for s, v in sets.items()}
    for s in SPLITS:
        assert len(texts[s]) == len(set(texts[s])), s
    assert not set(texts["train"]) & set(texts["validation"])
    assert not set(texts["train"]) & set(texts["test"]) and not set(texts["validation"]) & set(texts["test"])
    train_answers = {norm(a) for q in sets["train"] for a in q["answers"]}
    train_docs = {d for q in sets["train"] for d in q["docs"]}
    for s in ("validation", "test"):
        assert not any(norm(a) in train_answers for q in sets[s] for a in q["answers"]), s
        assert not any(set(q["docs"]) & train_docs for q in sets[s]), s
    assert sets["train"] == wiki_questions("train", question_set=FACTS_SET)  # train is facts-v1's
    assert clean_counts() == {  # published in envs.wiki_two_turn.questions and the env's Version History
        "train": {"duplicate": 0, "text": 0, "answer": 0, "article": 0, "kept": 4421},
        "validation": {"duplicate": 0, "text": 0, "answer": 337, "article": 83, "kept": 251},
        "test": {"duplicate": 0, "text": 0, "answer": 283, "article": 53, "kept": 173},
    }
    assert {s: len(v) for s, v in sets.items()} == {"train": 4421, "validation": 251, "test": 173}


def test_clean_held_out_rules_on_hand_made_splits():
    import doctest

    from envs.wiki_two_turn import questions

    result = doctest.testmod(questions)
    assert result.attempted >= 3 and result.failed == 0
