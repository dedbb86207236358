"""The pure reward functions of SearchR1-v2 (``001_…`` §5.2): format rules, retrieval, search count, outcome."""

from __future__ import annotations

import pytest

from agentgym_turn.retrieval import Passage
from envs.search_r1 import rewards as R

GOLD = ["Charles, Prince of Wales"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think> a </think><search> q </search>", ("search", " q ")),
        ("<think> a </think><answer> x </answer>", ("answer", " x ")),
        ("<answer> x </answer><search> q </search>", ("answer", " x ")),  # the first complete block decides
        ("<search> q <answer> x </answer>", ("answer", " x ")),  # an unclosed <search> is no block
        ("<think> only thinking </think>", ("invalid", "")),
        ("", ("invalid", "")),
        ("<search></search>", ("search", "")),
    ],
)
def test_classify_action(text, expected):
    assert R.classify_action(text) == expected


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("<think> a </think><search> q </search>", True),
        ("\n<think>a</think>\nfree text is fine\n<search>q</search> trailing", True),
        ("<search> q </search>", False),  # no <think>
        ("<search> q </search><think> a </think>", False),  # <think> not first
        ("<think> a </think><think> b </think><search> q </search>", False),  # <think> twice
        ("<think> a </think><search> q </search><information> fake </information>", False),  # a 2nd <information>
        ("<think> a <b>bold</b> </think><search> q </search>", False),  # an extra tag
        ("<think> a </think><search> q </search><search> r </search>", False),
        ("<think> a <search> q </search></think>", False),  # nested: order broken
        ("<think a=1> a </think><search> q </search>", True),  # attributes are dropped, the tag counts
    ],
)
def test_intermediate_format(text, ok):
    assert R.is_search_format(text) is ok
    assert R.reward_intermediate_format(text) == (0.1 if ok else -0.2)


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("<think> done </think><answer> Charles, Prince of Wales </answer>", 1.0),
        ("<think> done </think><answer>charles prince of wales</answer>", 1.0),  # SQuAD normalisation
        ("<think> done </think><answer> Elizabeth </answer>", 0.2),
        ("<think> done </think><answer> Charles </answer>", 0.2),  # exact match, not containment
        ("<answer> Charles, Prince of Wales </answer>", -1.0),  # no <think>
        ("<answer> Charles, Prince of Wales </answer><think> x </think>", -1.0),  # <think> after <answer>
        ("<think> a </think><answer> Charles, Prince of Wales </answer><answer> b </answer>", -1.0),
        ("<think> a </think><search> q </search><answer> Charles, Prince of Wales </answer>", -1.0),  # extra tag
        (None, -1.0),  # the budget was spent without an answer turn
    ],
)
def test_outcome(text, reward):
    assert R.reward_outcome(text, GOLD) == reward


def passage(title: str, text: str) -> Passage:
    return Passage("d", title, text, 1.0)


@pytest.mark.parametrize(
    ("passages", "answers", "reward"),
    [
        ([passage("X", "... CHARLES, PRINCE OF WALES ...")], GOLD, 0.3),  # case and punctuation do not matter
        ([passage("Charles, Prince of Wales", "the heir")], GOLD, 0.3),  # the title is the passage's
        ([passage("X", "Charles, Prince")], GOLD, 0.0),
        ([passage("X", "Charles, Prince of Walesby")], GOLD, 0.0),  # whole words only
        ([passage("X", "anno 1905–1980")], ["1905"], 0.3),  # any punctuation is a word boundary
        ([passage("X", "in 19051")], ["1905"], 0.0),
        ([passage("Jean-Paul Sartre", "x")], ["jean paul sartre"], 0.3),
        ([passage("X", "a"), passage("Y", "the Beatles")], ["Beatles"], 0.3),  # articles dropped, any passage
        ([passage("Prince of", "Wales")], ["Prince of Wales"], 0.0),  # never across title and text
        ([], ["no"], 0.0),
        ([passage("X", "anything")], ["", "  ", "the"], 0.0),  # answers that normalise to nothing never match
    ],
)
def test_retrieval_matches_passage_titles_and_texts_as_words(passages, answers, reward):
    assert R.reward_retrieval(passages, answers) == reward


def test_retrieval_ignores_labels_and_no_results_message():
    """Issue 12's reproduction: v0 searched the whole <information> block, so these earned 0.3."""
    irrelevant = [passage("Pearl", "saltwater pearls"), passage("Bay", "gems"), passage("Coast", "a coastal area")]
    assert R.reward_retrieval(irrelevant, ["3"]) == 0.0  # "Doc 3(Title:" is a label
    assert R.reward_retrieval(irrelevant, ["Title"]) == 0.0
    assert R.reward_retrieval([], ["no"]) == 0.0  # "No passages found." is no passage
    assert R.reward_retrieval([], ["passages found"]) == 0.0


@pytest.mark.parametrize(
    ("n", "lam", "expected"),
    [(0, 0.1, 0.0), (1, 0.1, -0.1), (3, 0.1, -0.3), (2, 0.3, -0.6), (4, 0.0, 0.0), (7, 0.1, -0.7)],
)
def test_search_count(n, lam, expected):
    assert R.reward_search_count(n, lam) == expected


def test_search_count_rejects_negative_counts():
    with pytest.raises(ValueError, match="n_search"):
        R.reward_search_count(-1)
