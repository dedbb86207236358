"""SearchR1-v2's bridge questions (``hops=2|3``) and clean held-out splits: the construction on hand-made articles,
the split and disjointness rules on small tables, and the full bundled sets (disjoint from train, never solved by
one verbatim search, solved by the oracle)."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_turn
from agentgym_turn.corpus import Document
from agentgym_turn.error import InvalidArgument
from agentgym_turn.policies import get_scripted_policy, run_episode
from envs.search_r1.data import disjoint_splits, normalized_answers, normalized_question
from envs.search_r1.env import SearchR1Env
from envs.search_r1.multihop import chain_candidates, drop_verbatim_hits, split_multihop, validate_chain

gym.register_envs(agentgym_turn)

DOCS = [
    Document("Jaws", "Jaws", "Jaws is a 1975 thriller film directed by Steven Spielberg, about a great white shark."),
    Document("Steven Spielberg", "Steven Spielberg",
             "Steven Spielberg is an American filmmaker. He grew up in Cincinnati and later moved to California.",
             topic="People"),
    Document("Cincinnati", "Cincinnati",
             "Cincinnati is a city in Ohio, on the north bank of the Ohio River. It has a population of 309,317."),
    Document("California", "California",
             "California is a state in the Western United States. Its capital is Sacramento."),
]  # fmt: skip


def test_two_and_three_hop_chains_name_later_articles_only_by_their_role():
    two = {t["question"]: t for t in chain_candidates(DOCS, 2)}
    assert two["What nationality is the person who directed Jaws?"]["answers"] == ["American"]
    q = two["What is the capital of the state mentioned in the Wikipedia article on Steven Spielberg?"]
    assert q["answers"] == ["Sacramento"] and q["oracle_queries"] == ["Steven Spielberg", "California"]
    assert q["decoys"] == ["Cincinnati"]  # another entity the first article names: a wrong lead to follow
    three = {t["question"]: t for t in chain_candidates(DOCS, 3)}
    q = three["Where is the city mentioned in the Wikipedia article on the person who directed Jaws located?"]
    assert q["answers"] == ["Ohio"] and q["hops"] == 3 and q["bridges"] == ["Steven Spielberg", "Cincinnati"]
    assert q["oracle_queries"] == ["Jaws", "Steven Spielberg", "Cincinnati"]
    for t in [*two.values(), *three.values()]:  # no later article's title in the question
        assert not any(b.lower() in t["question"].lower() for b in t["bridges"])
    with pytest.raises(ValueError, match="hops"):
        chain_candidates(DOCS, 4)


@pytest.fixture(scope="module")
def small_bm25(tmp_path_factory):
    from agentgym_turn.retrieval.lucene import corpus_index

    return corpus_index(DOCS, "search-r1-multihop", root=tmp_path_factory.mktemp("idx"))


def test_retrieval_filters(small_bm25):
    tasks = chain_candidates(DOCS, 2) + chain_candidates(DOCS, 3)
    kept = drop_verbatim_hits(tasks, small_bm25, k=1)
    assert kept and len(kept) < len(tasks)
    for t, hits in zip(kept, small_bm25.batch_search([t["question"] for t in kept], k=1), strict=True):
        assert not {p.docid for p in hits} & set(t["docs"][1:])
    good = validate_chain(tasks, small_bm25, k=1)
    assert good and all(t in tasks for t in good)
    broken = dict(good[0], answers=["Martian"])
    assert validate_chain([broken], small_bm25, k=1) == []


def _task(i: int, question: str, answers: list[str], first: str = "A") -> dict:
    return {"id": f"t{i}", "question": question, "answers": answers, "docs": [f"{first}{i}", "B"], "hops": 2}


def test_disjoint_splits_drop_held_out_questions_or_answers_seen_in_train_and_duplicates():
    by_split = {
        "train": [_task(0, "Who built it?", ["Ann Lee"]), _task(1, "Who built it?", ["Ann Lee"])],
        "test": [_task(2, "who built IT", ["Bob"]), _task(3, "Where is it?", ["Paris", "ann lee."]),
                 _task(4, "When was it?", ["1901"]), _task(5, "When was it?", ["1901"])],
    }  # fmt: skip
    out = disjoint_splits(by_split)
    assert [t["id"] for t in out["train"]] == ["t0"]  # deduplicated, kept
    assert [t["id"] for t in out["test"]] == ["t4"]  # t2: question seen; t3: an alias seen; t5: duplicate
    assert normalized_question(by_split["test"][0]) == "who built it"
    assert normalized_answers(by_split["test"][1]) == {"paris", "ann lee"}


def test_split_multihop_keeps_each_answer_in_one_split_and_caps_it():
    tasks = [_task(i, f"Question {i}?", ["Ohio"], first="A" if i < 6 else "Z") for i in range(8)]
    tasks += [_task(10 + i, f"Other {i}?", [f"answer {i}"]) for i in range(60)]
    out = split_multihop(tasks, per_answer=3)
    ohio = [s for s, ts in out.items() for t in ts if t["answers"] == ["Ohio"]]
    assert len(ohio) == 3 and len(set(ohio)) == 1
    assert {len(v) > 0 for v in out.values()} == {True} and sum(map(len, out.values())) == 63


def test_bad_hops_raise():
    with pytest.raises(InvalidArgument, match="hops=4"):
        SearchR1Env(hops=4, tasks=[{"question": "q", "answers": ["a"]}])
    with pytest.raises(InvalidArgument, match="dataset='wiki'"):
        SearchR1Env(hops=2, tasks=[{"question": "q", "answers": ["a"]}])


@pytest.mark.slow  # the first build of the sets validates ~3,000 chains (~70 s here); later runs read the cache
@pytest.mark.parametrize("hops", [2, 3])
def test_full_multihop_sets_are_clean_need_every_hop_and_the_oracle_solves_them(hops):
    splits = {s: gym.make("TurnRL/SearchR1-v2", split=s, hops=hops).unwrapped for s in ("train", "test")}
    train, test = splits["train"].tasks, splits["test"].tasks
    assert len(train) > 200 and len(test) >= 64 and splits["test"].max_turns == hops + 2
    seen_q = {normalized_question(t) for t in train}
    seen_a = set().union(*(normalized_answers(t) for t in train))
    assert not any(normalized_question(t) in seen_q or normalized_answers(t) & seen_a for t in test)
    assert len({normalized_question(t) for t in test}) == len(test)  # no duplicates within the split
    env = splits["test"]
    hits = env.retriever.batch_search([t["question"] for t in test], k=env.top_k)
    assert not any({p.docid for p in h} & set(t["docs"][1:]) for t, h in zip(test, hits, strict=True))
    em = {}
    for name in ("oracle", "verbatim", "explore"):
        policy = get_scripted_policy(env, name)
        logs = [run_episode(env, policy, seed=i, options={"task": t}) for i, t in enumerate(test[:64])]
        em[name] = sum(log.metrics["env/answer_correct"] for log in logs) / len(logs)
        if name == "oracle":
            assert all(log.metrics["env/searches"] == hops for log in logs)
    assert em["oracle"] >= 0.8 and em["verbatim"] <= 0.1 and em["explore"] >= 0.5, em
