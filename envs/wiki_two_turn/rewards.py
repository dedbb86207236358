"""The MT-GRPO rewards of ``TurnRL/WikiTwoTurn`` (every version) as pure functions (``000_…`` §3.2).

Turn level (the first turn only):
    * :func:`reward_tool_execution`: 0.2 when the turn holds a ``<tool>...</tool>`` call and the env's answer to it
      does not begin with ``"Error:"`` (the env answers a call that is not one valid JSON object with an error).
    * :func:`reward_search_answer`: 0.5 when any accepted answer occurs (case-insensitive) in the ``<result>``.

Outcome level (the final turn, over the whole trajectory where the paper's code averages over turns):
    * :func:`reward_answer_presence`: 0.5 when any accepted answer occurs in the final ``<answer>``.
    * :func:`reward_exact_match`: 1.0 when the final ``<answer>`` equals an accepted answer after lowercasing and
      stripping.
    * :func:`reward_xml_format`: 0.2 × the mean over assistant turns of 0.4·(field presence) + 0.2·(spacing) +
      0.2·(starts with ``<reasoning>``) + 0.2·(ends with ``</tool>`` or ``</answer>``).
    * :func:`reward_xml_tag_usage`: 0.2 × the mean over assistant turns of the share of used tags that appear
      exactly once opened and once closed.

Worked example (the paper's Table 4 rollout: a first turn with only reasoning, then a garbled answer turn)::

    >>> t1 = "<reasoning> I need to identify the pianist. </reasoning>"
    >>> t2 = "<answer><tool>< reasoning> It is Oscar Peterson. </reasoning><answer>Oscar Peterson<answer>"
    >>> reward_xml_tag_usage([t1, t2])          # t1: 1/1 tags right; t2: 0/3 -> mean 0.5 -> x 0.2
    0.1
"""

from __future__ import annotations

from collections.abc import Sequence

from agentgym_turn.answers import contains_answer, exact_match, normalize_basic
from agentgym_turn.parsing import count_tag, extract_tag

TOOL_EXECUTION = 0.2
SEARCH_ANSWER = 0.5
ANSWER_PRESENCE = 0.5
EXACT_MATCH = 1.0
XML_SCALE = 0.2
#: (weight, criterion) of the XML format reward, as the paper weights them.
FORMAT_WEIGHTS = {"fields": 0.4, "spacing": 0.2, "start": 0.2, "end": 0.2}
#: The schema of one assistant turn: ``<reasoning>`` then one of ``<tool>`` / ``<answer>``.
FIELD_GROUPS: tuple[tuple[str, ...], ...] = (("reasoning",), ("tool", "answer"))
TAGS: tuple[str, ...] = ("reasoning", "tool", "answer")


def reward_tool_execution(called_tool: bool, response: str | None) -> float:
    """0.2 if the turn made a ``<tool>`` call whose response does not begin with ``"Error:"``, else 0."""
    if not called_tool or response is None:
        return 0.0
    return 0.0 if response.lstrip().startswith("Error:") else TOOL_EXECUTION


def reward_search_answer(result_text: str | None, answers: Sequence[str]) -> float:
    """0.5 if any accepted answer occurs in the search result (case-insensitive), else 0."""
    return SEARCH_ANSWER if contains_answer(result_text, answers) else 0.0


def final_answer(text: str) -> str | None:
    """The content of the first ``<answer>...</answer>`` pair of a turn, or ``None``."""
    return extract_tag(text, "answer")


def reward_answer_presence(final_text: str, answers: Sequence[str]) -> float:
    """0.5 if any accepted answer occurs inside the final turn's ``<answer>``, else 0."""
    return ANSWER_PRESENCE if contains_answer(final_answer(final_text), answers) else 0.0


def reward_exact_match(final_text: str, answers: Sequence[str]) -> float:
    """1.0 if the final ``<answer>`` equals an accepted answer after lowercasing and stripping, else 0."""
    return EXACT_MATCH if exact_match(final_answer(final_text), answers, normalize=normalize_basic) else 0.0


def format_score(text: str) -> float:
    """The XML format score of one assistant turn, in [0, 1] (before the 0.2 scale)."""
    stripped = text.strip()
    present = {tag: extract_tag(text, tag) for tag in TAGS}
    groups_present = sum(any(present[t] is not None for t in group) for group in FIELD_GROUPS)
    score = FORMAT_WEIGHTS["fields"] * groups_present / len(FIELD_GROUPS)
    filled = [v for v in present.values() if v is not None]
    if filled and all(v == v.strip() for v in filled):
        score += FORMAT_WEIGHTS["spacing"]
    if stripped.startswith("<reasoning>"):
        score += FORMAT_WEIGHTS["start"]
    if stripped.endswith(("</tool>", "</answer>")):
        score += FORMAT_WEIGHTS["end"]
    return score


def reward_xml_format(turns: Sequence[str]) -> float:
    """0.2 × the mean :func:`format_score` over the assistant turns (0 when there are none)."""
    if not turns:
        return 0.0
    return round(XML_SCALE * sum(format_score(t) for t in turns) / len(turns), 12)


def tag_usage_score(text: str) -> float:
    """Share of the schema tags used in a turn that appear exactly once opened and once closed (0 if none used)."""
    used = [tag for tag in TAGS if any(count_tag(text, tag))]
    if not used:
        return 0.0
    return sum(count_tag(text, tag) == (1, 1) for tag in used) / len(used)


def reward_xml_tag_usage(turns: Sequence[str]) -> float:
    """0.2 × the mean :func:`tag_usage_score` over the assistant turns (0 when there are none)."""
    if not turns:
        return 0.0
    return round(XML_SCALE * sum(tag_usage_score(t) for t in turns) / len(turns), 12)
