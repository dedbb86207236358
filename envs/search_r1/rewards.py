"""The turn-level verifiable rewards of ``TurnRL/SearchR1-v2`` as pure functions (``001_…`` §5.2, D.1.2).

Intermediate (search) turn, ``R^I = retrieval + format + search count``:
    * :func:`reward_retrieval`: 0.3 when any accepted answer occurs in the title or text of a passage this turn
      retrieved, as whole words after normalisation (:func:`normalize_words`), else 0. Only the passages count:
      not the ``Doc i(Title: ...)`` labels around them, nor the "No passages found." message.
    * :func:`reward_intermediate_format`: +0.1 when the turn holds only ``<think>``, ``<search>`` (and the env's
      ``<information>``), each exactly once, ``<think>`` first; else -0.2.
    * :func:`reward_search_count`: ``-λs × n_search``, the searches made from turn 1 up to this one (λs = 0.1).

Final (answer) turn, ``R^O``: 1 (format right and exact match), 0.2 (format right, answer wrong), -1 (format
broken), where the format is only ``<think>`` then ``<answer>``, each exactly once (:func:`reward_outcome`).

Worked example (the paper's Table 3 rollout; the first two searches return no gold answer)::

    >>> t1 = "<think> I'll search for it. </think><search> who will take the throne after the queen dies </search>"
    >>> classify_action(t1)
    ('search', ' who will take the throne after the queen dies ')
    >>> throne = Passage("1", "Succession to the British throne", "The heir apparent is ...", 1.0)
    >>> reward_retrieval([throne], ["Charles, Prince of Wales"])
    0.0
    >>> reward_retrieval([throne], ["3"]), reward_retrieval([throne], ["heir"])  # "Doc 1" is a label, not text
    (0.0, 0.3)
    >>> reward_intermediate_format(t1), reward_search_count(1, 0.1)
    (0.1, -0.1)
    >>> reward_outcome("<think> Now I can answer. </think><answer> Charles, Prince of Wales </answer>",
    ...                ["Charles, Prince of Wales"])
    1.0
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentgym_turn.answers import contains_answer, exact_match, normalize_squad
from agentgym_turn.parsing import extract_tag
from agentgym_turn.retrieval import Passage

RETRIEVAL = 0.3
FORMAT_OK = 0.1
FORMAT_BAD = -0.2
SEARCH_LAMBDA = 0.1
OUTCOME_CORRECT = 1.0
OUTCOME_WRONG = 0.2
OUTCOME_BAD_FORMAT = -1.0

#: Anything shaped like an XML tag counts as a tag: ``<name>``, ``</name>``, ``<name attr=...>``.
#: Punctuation (anything but word characters and whitespace) becomes a word boundary before SQuAD normalisation.
_NON_WORD = re.compile(r"[^\w\s]")
_TAG = re.compile(r"<(/?)([A-Za-z][\w.-]*)(?:\s[^<>]*)?>")
#: Search-R1's action rule: the first complete ``<search>...</search>`` or ``<answer>...</answer>`` block.
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.S)
#: The tag sequence of a well-formed search turn (the env appends ``<information>`` after it).
SEARCH_TURN_TAGS: tuple[str, ...] = ("<think>", "</think>", "<search>", "</search>")
#: The tag sequence of a well-formed answer turn.
ANSWER_TURN_TAGS: tuple[str, ...] = ("<think>", "</think>", "<answer>", "</answer>")


def parse_tags(text: str) -> tuple[str, ...]:
    """Every tag of ``text`` in order, normalised to ``<name>`` / ``</name>`` (attributes dropped)."""
    return tuple(f"<{close}{name}>" for close, name in _TAG.findall(text))


def classify_action(text: str) -> tuple[str, str]:
    """Search-R1's action of a turn: ``("search", query)``, ``("answer", answer)`` or ``("invalid", "")``.

    The first complete ``<search>`` or ``<answer>`` block decides (Search-R1 stops generating at either closing tag).
    """
    m = _ACTION.search(text)
    if m is None:
        return "invalid", ""
    return m.group(1), m.group(2)


def is_search_format(text: str) -> bool:
    """Intermediate format: the turn's tags are exactly ``<think></think><search></search>``.

    The env's ``<information>`` block is appended after the turn and is well formed by construction, so "only
    ``<think>``, ``<search>``, ``<information>``, once each, ``<think>`` first" reduces to this check on the agent's
    own text (an ``<information>`` tag the agent writes itself is a second one, hence broken format).
    """
    return parse_tags(text) == SEARCH_TURN_TAGS


def is_answer_format(text: str) -> bool:
    """Outcome format: the turn's tags are exactly ``<think></think><answer></answer>``."""
    return parse_tags(text) == ANSWER_TURN_TAGS


def normalize_words(text: str) -> str:
    """SQuAD normalisation (as exact match uses) with every punctuation mark read as a word boundary.

    ``"Jean-Paul Sartre (1905–1980)"`` -> ``"jean paul sartre 1905 1980"``; an answer then matches text only as
    whole words: ``"1905"`` is in it, ``"190"`` is not.
    """
    return normalize_squad(_NON_WORD.sub(" ", text))


def contains_words(text: str, answers: Sequence[str]) -> bool:
    """True when any accepted answer occurs in ``text`` as whole words after :func:`normalize_words` (an answer
    that normalises to nothing never matches)."""
    padded = f" {normalize_words(text)} "
    return any(g and f" {g} " in padded for g in map(normalize_words, answers))


def reward_retrieval(passages: Sequence[Passage], answers: Sequence[str]) -> float:
    """0.3 if any accepted answer occurs, as whole words (:func:`contains_words`), in the title or the text of one
    of this turn's retrieved passages, else 0. The ``Doc i(Title: ...)`` labels of the ``<information>`` block and
    the message shown when nothing is found are not passages and never match."""
    found = any(contains_words(field, answers) for p in passages for field in (p.title, p.text))
    return RETRIEVAL if found else 0.0


def reward_retrieval_substring(information: str, answers: Sequence[str]) -> float:
    """v0's retrieval reward (``retrieval_match="substring"``): 0.3 if any accepted answer occurs case-insensitively
    as a substring anywhere in the rendered ``<information>`` block, its ``Doc i(Title: ...)`` labels and the
    no-result message included (so answer ``3`` matches "Doc 3(Title:"), else 0."""
    return RETRIEVAL if contains_answer(information, answers) else 0.0


def reward_intermediate_format(text: str) -> float:
    """+0.1 for a well-formed search turn (:func:`is_search_format`), else -0.2."""
    return FORMAT_OK if is_search_format(text) else FORMAT_BAD


def reward_search_count(n_search: int, search_lambda: float = SEARCH_LAMBDA) -> float:
    """``-λs × n_search``: ``n_search`` counts the searches from the first turn up to and including this one."""
    if n_search < 0:
        raise ValueError(f"n_search={n_search} must be >= 0.")
    return 0.0 if n_search == 0 or search_lambda == 0 else round(-search_lambda * n_search, 12)


def final_answer(text: str) -> str | None:
    """The content of the first ``<answer>...</answer>`` block of a turn, or ``None``."""
    return extract_tag(text, "answer")


def answer_correct(text: str, answers: Sequence[str]) -> bool:
    """Exact match (SQuAD normalisation, as Search-R1) of the turn's ``<answer>`` against any accepted answer."""
    return exact_match(final_answer(text), answers, normalize=normalize_squad)


def reward_outcome(text: str | None, answers: Sequence[str]) -> float:
    """``R^O``: 1 (format right, exact match), 0.2 (format right, wrong answer), -1 (format broken).

    ``text=None`` means the turn budget was spent without an answer turn, which is scored as a broken format.
    """
    if text is None or not is_answer_format(text):
        return OUTCOME_BAD_FORMAT
    return OUTCOME_CORRECT if answer_correct(text, answers) else OUTCOME_WRONG
