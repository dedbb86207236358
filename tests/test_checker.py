"""check_turn_env catches each broken promise of the turn contract and names it; a sound env passes."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import gymnasium as gym
import pytest

from agentgym_turn import TurnEnv, TurnResult, check_turn_env
from agentgym_turn.checker import HOSTILE_ACTIONS
from agentgym_turn.core import state_digest
from agentgym_turn.error import TurnContractError

_COUNTER = itertools.count()


class Sound(TurnEnv):
    """Two turns: a ``tidy`` turn reward for short turns, a ``task`` outcome for saying the task's word."""

    reward_levels: ClassVar[dict[str, Any]] = {"tidy": "turn", "task": "outcome"}
    held_out: ClassVar[dict[str, Any] | None] = {"split": "test"}

    def __init__(self, split: str = "train", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.split, self.state = split, {"said": []}

    def _sample_task(self) -> dict[str, Any]:
        words = ["apple", "pear", "plum"] if self.split == "train" else ["fig", "kiwi"]
        return {"id": "w", "word": str(self.np_random.choice(words))}

    def _begin(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        self.state = {"said": []}
        return [{"role": "user", "content": "Say the word."}]

    def _state_key(self) -> str | None:
        return None if self._task is None else state_digest(self._task["word"], self.state["said"])

    def _turn(self, text: str) -> TurnResult:
        self.state["said"].append(text[:20])
        tidy = {"tidy": 0.1 if len(text) < 50 else 0.0}
        if self.turn >= 2 or self._task["word"] in text:
            return TurnResult([], {**tidy, "task": float(self._task["word"] in text)}, True)
        return TurnResult([{"role": "user", "content": "Again."}], tidy, False)


def _register(cls: type, **kwargs: Any) -> gym.Env:
    env_id = f"TurnRLTest/{cls.__name__}{next(_COUNTER)}-v0"
    gym.register(env_id, entry_point=cls)
    return gym.make(env_id, **kwargs)


def test_a_sound_env_passes_registered_or_not():
    check_turn_env(Sound())
    check_turn_env(_register(Sound))


class BadLevel(Sound):
    reward_levels: ClassVar[dict[str, Any]] = {"tidy": "turn", "task": "final"}


class Unseeded(Sound):
    def _sample_task(self) -> dict[str, Any]:
        return {"id": "w", "word": ["apple", "pear"][next(_COUNTER) % 2]}


class SharedState(Sound):
    shared_attributes: ClassVar[tuple[str, ...]] = ("state",)


class EditsHistory(Sound):
    def _turn(self, text: str) -> TurnResult:
        self.history.append({"role": "user", "content": "(note)"})
        return super()._turn(text)


class Endless(Sound):
    def _turn(self, text: str) -> TurnResult:
        return TurnResult([{"role": "user", "content": "Again."}], {"tidy": 0.0}, False)


class TalksAtTheEnd(Sound):
    def _turn(self, text: str) -> TurnResult:
        result = super()._turn(text)
        return (
            TurnResult([{"role": "user", "content": "Bye."}], result.components, True) if result.terminated else result
        )


class Silent(Sound):
    def _turn(self, text: str) -> TurnResult:
        result = super()._turn(text)
        return result if result.terminated else TurnResult([], result.components, False)


class BadMetrics(Sound):
    def _episode_metrics(self) -> dict[str, float]:
        return {"env/solved": float("nan")}


class EarlyLate(Sound):
    def _turn(self, text: str) -> TurnResult:
        result = super()._turn(text)
        result.late_components = [{"tidy": 1.0}] * self.turn
        return result


class EncodesText(Sound):
    def _turn(self, text: str) -> TurnResult:
        text.encode("utf-8")  # a lone surrogate cannot be encoded
        return super()._turn(text)


class NoHeldOut(Sound):
    held_out: ClassVar[dict[str, Any] | None] = None


class IgnoresSplit(Sound):
    def __init__(self, split: str = "train", **kwargs: Any) -> None:
        super().__init__("train", **kwargs)


class Listed(Sound):
    """A dataset env: its tasks are a finite list (``task_list``), drawn by seed or posed in epochs."""

    WORDS = ("apple", "pear", "plum")

    def task_list(self) -> list[dict[str, Any]]:
        return [{"id": w, "word": w} for w in self.WORDS]

    def _sample_task(self) -> dict[str, Any]:
        return dict(self.task_list()[int(self.np_random.integers(len(self.WORDS)))])


class ListsTwice(Listed):
    WORDS = ("apple", "pear", "apple")


class RedrawsListed(Listed):
    def _validate_task(self, task: Any) -> dict[str, Any]:
        return self._sample_task()  # ignores the task it was given


def test_a_listed_task_set_passes():
    check_turn_env(Listed(), held_out=False)


@pytest.mark.parametrize(
    ("env", "promise", "fix"),
    [
        (BadLevel(), "declared reward components", '"turn"'),
        (Unseeded(), "seeded reset", "self.np_random"),
        (SharedState(), "fork independence", "shared_attributes"),
        (EditsHistory(), "history", "leave history and turn to TurnEnv.step"),
        (Endless(), "the turn budget is part of the task", "terminated=True"),
        (TalksAtTheEnd(), "the final step returns []", "TurnResult([]"),
        (Silent(), "a step returns the messages of the next turn", "answer every turn"),
        (BadMetrics(), "episode metrics at the end", "finite numbers"),
        (EarlyLate(), "step never raises", "does not end the episode"),
        (EncodesText(), "step never raises on the agent's text", "'lone surrogates'"),
        (_register(NoHeldOut), "held-out tasks", "held_out = {"),
        (_register(IgnoresSplit), "held-out tasks", "posed the training task"),
        (ListsTwice(), "task list", "list each task once"),
        (RedrawsListed(), "task list", "pose a given task as it is"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(getattr(v, "unwrapped", v)).__name__,
)
def test_each_broken_promise_is_named_with_its_fix(env, promise, fix):
    with pytest.raises(TurnContractError) as caught:
        check_turn_env(env, episodes=1)
    message = str(caught.value)
    assert f"breaks the turn contract ({promise}" in message and fix in message and "Fix:" in message


def test_a_non_turn_env_and_skipped_parts():
    with pytest.raises(TurnContractError, match="is not a TurnEnv"):
        check_turn_env(gym.make("CartPole-v1"))
    check_turn_env(EncodesText(), hostile=False)  # only the hostile corpus breaks it
    check_turn_env(_register(NoHeldOut), held_out=False)


def test_the_hostile_corpus_covers_what_the_contract_names():
    names = {name for name, _ in HOSTILE_ACTIONS}
    for needed in ("empty string", "whitespace", "unclosed tag", "nested tags", "NUL bytes", "lone surrogates",
                   "invalid UTF-8 bytes", "JSON fragment", "1 MB of text"):  # fmt: skip
        assert needed in names
    assert any(isinstance(a, bytes) for _, a in HOSTILE_ACTIONS)
    assert max(len(a) for _, a in HOSTILE_ACTIONS) >= 1 << 20
