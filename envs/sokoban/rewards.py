"""Parsing of one Sokoban turn and its rewards (MT-PPO extended paper, Appendix E), as pure functions.

A turn is ``<think>...</think><answer>A || B || C</answer>`` with up to ``max_actions`` of Up, Down, Left, Right::

    >>> turn = parse_turn("<think>box is right of me</think><answer>Right || right</answer>", max_actions=3)
    >>> turn.actions, turn.well_formed, turn.error
    (['Right', 'Right'], True, None)
    >>> reward_turn(well_formed=True, pushes_onto_target=1, unsolved_after=[True, False], solved=True, ended=True)
    {'format': 0.5, 'box_placement': 1.0, 'step_penalty': -0.1, 'success': 10.0}
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym_turn.parsing import count_tag, extract_tag
from envs.sokoban.board import DIRECTIONS

#: Reward numbers of Appendix E.
SUCCESS_REWARD = 10.0  # every box on a target in the final state (outcome)
BOX_PLACEMENT_REWARD = 1.0  # per box pushed onto a target during the turn
FORMAT_REWARD = 0.5  # per well-formed turn
STEP_PENALTY = -0.1  # per action after which the puzzle is still unsolved

ACTION_SEPARATOR = "||"
_CANONICAL = {name.lower(): name for name in DIRECTIONS}
_OUTSIDE = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.S)


@dataclass(frozen=True)
class ParsedTurn:
    """One turn read from the agent's text.

    Attributes:
        actions: the actions to play, in order: the answer's action names up to the first one that is not an action
            name, at most ``max_actions`` of them.
        well_formed: the turn earns the format reward: exactly one ``<think>`` block followed by exactly one
            ``<answer>`` block, nothing but whitespace around them, and an answer of 1..max_actions valid action
            names separated by ``||``.
        error: why the turn is not well-formed (shown to the agent after ``"Error: "``), or ``None``.
    """

    actions: list[str]
    well_formed: bool
    error: str | None


def parse_turn(text: str, max_actions: int) -> ParsedTurn:
    """Read the actions of one turn from arbitrary text (never raises)."""
    answer = extract_tag(text, "answer")
    if answer is None:
        return ParsedTurn(
            [], False, "no <answer>...</answer> found; reply as <think>...</think><answer>Up || Left</answer>."
        )
    tokens = [t.strip() for t in answer.split(ACTION_SEPARATOR)]
    actions: list[str] = []
    error: str | None = None
    for i, token in enumerate(tokens):
        name = _CANONICAL.get(token.lower())
        if name is None:
            error = (
                f"{token[:40]!r} (action {i + 1}) is not an action; use Up, Down, Left or Right separated by "
                f"'{ACTION_SEPARATOR}'. The actions after it were not played."
            )
            break
        if len(actions) == max_actions:
            error = f"the answer lists {len(tokens)} actions; at most {max_actions} per turn are played."
            break
        actions.append(name)
    if error is None:
        error = _format_error(text)
    return ParsedTurn(actions, error is None, error)


def _format_error(text: str) -> str | None:
    """Why the tags of ``text`` are not exactly ``<think>...</think><answer>...</answer>`` (or ``None``)."""
    if count_tag(text, "think") != (1, 1) or count_tag(text, "answer") != (1, 1):
        return "use exactly one <think>...</think> followed by exactly one <answer>...</answer>."
    if not _OUTSIDE.match(text):
        return "write <think>...</think> first, then <answer>...</answer>, and nothing outside them."
    return None


def reward_turn(
    *, well_formed: bool, pushes_onto_target: int, unsolved_after: list[bool], solved: bool, ended: bool
) -> dict[str, float]:
    """This turn's reward components.

    Args:
        well_formed: the turn's format (``format``: 0.5 or 0).
        pushes_onto_target: pushes during the turn that moved a box from a non-target cell onto a target
            (``box_placement``: +1 each).
        unsolved_after: for each action played this turn, whether the puzzle was still unsolved after it
            (``step_penalty``: -0.1 each ``True``).
        solved: every box is on a target after the turn.
        ended: the episode ends with this turn; only then is ``success`` (the outcome: 10 or 0) paid.
    """
    components = {
        "format": FORMAT_REWARD if well_formed else 0.0,
        "box_placement": BOX_PLACEMENT_REWARD * pushes_onto_target,
        "step_penalty": round(STEP_PENALTY * sum(unsolved_after), 10) + 0.0,  # never -0.0
    }
    if ended:
        components["success"] = SUCCESS_REWARD if solved else 0.0
    return components
