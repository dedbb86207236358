"""The query variations of agentgym_turn.queries: each style's output on hand-made questions and titles."""

from __future__ import annotations

import numpy as np
import pytest

from agentgym_turn import queries as Q
from agentgym_turn.error import InvalidArgument

TITLES = ("Jaws (film)", "Jaws (James Bond)", "Steven Spielberg", "2001: A Space Odyssey (film)", "Space",
          "Atomic number", "Thallium", "Ghana")  # fmt: skip


@pytest.mark.parametrize(
    ("question", "entity"),
    [
        ("Who directed 2001: A Space Odyssey?", "2001 A Space Odyssey"),  # the longest title, not "Space" inside it
        ("What is the atomic number of thallium?", "thallium"),  # the later of two lowercase titles
        ("What nationality is the person who directed Jaws?", "Jaws"),
        ("What is the capital of Ghana?", "Ghana"),
    ],
)
def test_main_entity_is_the_title_the_question_names(question, entity):
    assert Q.main_entity(question, np.random.default_rng(0), TITLES) == entity


def test_without_titles_the_entity_is_the_longest_capitalised_phrase_and_keywords_drop_function_words():
    rng = np.random.default_rng(0)
    assert Q.main_entity("What nationality was Svante Arrhenius?", rng) == "Svante Arrhenius"
    assert Q.keyword_query("What is the occupation of Steven Spielberg?", rng) == "occupation Steven Spielberg"
    assert Q.verbatim(" Who? ", rng) == "Who?"


def test_wrong_entity_is_another_title_near_the_right_one_and_partial_drops_words():
    rng = np.random.default_rng(0)
    drawn = {Q.wrong_entity("Who directed Jaws?", rng, TITLES) for _ in range(20)}
    assert drawn == {"Jaws (film)", "Jaws (James Bond)"}  # namesakes, never the bare right name
    assert Q.wrong_entity("Who directed Jaws Two?", rng) in ("Jaws", "Two")  # no titles: a word dropped
    for _ in range(20):
        words = Q.partial_query("What is the occupation of Steven Spielberg?", rng).split()
        assert 1 <= len(words) < 3 and set(words) <= {"occupation", "Steven", "Spielberg"}


def test_sample_query_draws_every_style_and_checks_its_weights():
    rng = np.random.default_rng(0)
    styles = {Q.sample_query("Who directed Jaws?", rng, TITLES)[0] for _ in range(200)}
    assert styles == set(Q.QUERY_STYLES)
    assert Q.sample_query("Who directed Jaws?", rng, TITLES, {"entity": 1.0}) == ("entity", "Jaws")
    for bad in ({"nope": 1.0}, {"entity": -1.0}, {"entity": 0.0}, {}):
        with pytest.raises(InvalidArgument, match="query style weights"):
            Q.sample_query("Who directed Jaws?", rng, TITLES, bad)
