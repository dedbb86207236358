"""Guess the number: a multi-turn task with a turn-level and an outcome reward, written to be copied.

## Description
The env thinks of a whole number from 1 to 100; the agent guesses, and each guess gets a hint ("higher" / "lower").
## Observation and Action
``reset``: a system prompt and the question; ``step``: the hint. The action is any text; ``<guess>N</guess>`` counts.
## Rewards
``progress`` (turn): 0.1 for a guess inside the range the hints so far leave open. ``solved`` (outcome): 1.0 when
the number is found within the budget, else 0.0 on the last turn.
## Episode End
``terminated`` when the number is found or after ``max_turns`` guesses (default 7: enough for a binary search).
## Arguments
``gym.make("MyPkg/GuessNumber-v0", split="train", max_turns=7)``; ``split="test"``: the held-out numbers (multiples
of 5; training uses the others).
## Version History
* v0: initial version.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from agentgym_turn.core import TurnEnv, TurnResult, state_digest
from agentgym_turn.error import InvalidArgument

SPLITS = {"train": [n for n in range(1, 101) if n % 5], "test": list(range(5, 101, 5))}
PROMPT = "I think of a whole number from 1 to 100. Guess it as <guess>N</guess>; I say higher or lower. {n} guesses."
_GUESS = re.compile(r"<guess>\s*(-?\d{1,6})\s*</guess>")  # bounded digits: a huge number cannot crash int()


def parse_guess(text: str) -> int | None:
    """The number in the last ``<guess>N</guess>``, or ``None``: ``parse_guess("<guess> 42 </guess>") == 42``."""
    found = _GUESS.findall(text)
    return int(found[-1]) if found else None


def binary_search(env: GuessNumberEnv, rng: Any) -> str:
    """The reference policy (the cold start imitates it): guess the middle of the open range."""
    return f"Between {env.low} and {env.high}, so <guess>{(env.low + env.high) // 2}</guess>"


class GuessNumberEnv(TurnEnv):
    """Guess a number from 1 to 100 with higher/lower hints; see the module docstring."""

    reward_levels: ClassVar[dict[str, Any]] = {"progress": "turn", "solved": "outcome"}
    scripted_policies: ClassVar[dict[str, Any]] = {"reference": binary_search}
    held_out: ClassVar[dict[str, Any]] = {"split": "test"}  # what evaluations make: numbers training never poses

    def __init__(self, split: str = "train", max_turns: int = 7, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if split not in SPLITS or not isinstance(max_turns, int) or max_turns < 1:
            raise InvalidArgument(f"split={split!r}, max_turns={max_turns!r}: use {sorted(SPLITS)} and an int >= 1.")
        self.split, self.max_turns, self.low, self.high, self.solved = split, max_turns, 1, 100, False

    def _sample_task(self) -> dict[str, Any]:
        secret = int(self.np_random.choice(SPLITS[self.split]))
        return {"id": f"{self.split}-{secret}", "secret": secret}

    def _begin(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        self.low, self.high, self.solved = 1, 100, False
        return [{"role": "system", "content": PROMPT.format(n=self.max_turns)}, {"role": "user", "content": "Go."}]

    def _state_key(self) -> str | None:  # optional: GiGPO groups turns that start from the same state
        return None if self._task is None else state_digest(self._task["secret"], self.low, self.high)

    def _turn(self, text: str) -> TurnResult:
        guess, secret = parse_guess(text[: self.max_action_chars]), self.task["secret"]
        rewards = {"progress": 0.1 if guess is not None and self.low <= guess <= self.high else 0.0}
        hint, self.solved = "Error: write your guess as <guess>N</guess>.", guess == secret
        if guess is not None and guess < secret:
            self.low, hint = max(self.low, guess + 1), "Higher."
        elif guess is not None and guess > secret:
            self.high, hint = min(self.high, guess - 1), "Lower."
        if self.solved or self.turn >= self.max_turns:
            return TurnResult([], {**rewards, "solved": float(self.solved)}, True)
        return TurnResult([{"role": "user", "content": hint}], rewards, False)

    def _episode_metrics(self) -> dict[str, float]:
        return {"env/solved": float(self.solved), "env/guesses": float(self.turn)}
