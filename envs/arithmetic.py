"""Generated integer-answer arithmetic problems: the math half of TARL's mixed-task training (``003_…`` §3.1).

TARL mixes medium-difficulty math problems into the retail training set to keep the policy's chain of thought
long and self-correcting. This env generates such problems offline: an expression over ``n_ops`` random integer
operations (``+``, ``-``, ``*``, parentheses) whose value the agent must compute and put in ``\\boxed{...}``::

    >>> import gymnasium as gym, agentgym_turn
    >>> env = gym.make("TurnRL/Arithmetic-v0")
    >>> messages, info = env.reset(seed=0)
    >>> answer = env.unwrapped.task["answer"]
    >>> env.step(f"Step by step ... so the result is \\\\boxed{{{answer}}}.")[1:3]
    (1.0, True)
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from agentgym_turn.core import Message, RewardLevel, TurnEnv, TurnResult, state_digest
from agentgym_turn.error import InvalidArgument, InvalidTask

DIFFICULTY_OPS = {"easy": 2, "medium": 4, "hard": 6}
OPERAND_RANGE = {"easy": (1, 20), "medium": (2, 99), "hard": (2, 999)}
SYSTEM_PROMPT = (
    "Solve the math problem. Reason step by step, check your work, and put the final integer answer inside "
    "\\boxed{}, e.g. \\boxed{42}."
)
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
_INT = re.compile(r"^[+-]?\d+$")


def parse_answer(text: str) -> int | None:
    """The integer in the last ``\\boxed{...}`` (else the last ``<answer>...</answer>``), or ``None``.

    Thousands separators, spaces and a trailing ``.0`` are tolerated: ``\\boxed{1,234}`` and ``\\boxed{1234.0}`` are
    1234.
    """
    found = _BOXED.findall(text)
    if not found:  # every match ends by the last closing tag: no further search, so open tags cost linear time
        end = text.rfind("</answer>")
        found = _ANSWER_TAG.findall(text, 0, end + len("</answer>")) if end >= 0 else []
    if not found:
        return None
    raw = found[-1].replace(",", "").replace(" ", "").replace("$", "").strip()
    if raw.endswith(".0"):
        raw = raw[:-2]
    if not _INT.match(raw) or len(raw) > 40:
        return None
    return int(raw)


def reward_answer(text: str, answer: int) -> float:
    """1.0 when the parsed answer equals ``answer``, else 0.0 (no or malformed answer included)."""
    return 1.0 if parse_answer(text) == answer else 0.0


def generate_problem(rng: np.random.Generator, n_ops: int, low: int, high: int) -> tuple[str, int]:
    """An expression with ``n_ops`` operations over integers in ``[low, high]`` and its value."""
    value = int(rng.integers(low, high + 1))
    expr = str(value)
    for _ in range(n_ops):
        operand = int(rng.integers(low, high + 1))
        op = str(rng.choice(["+", "-", "*"]))
        if op == "*" and abs(value) > 10 * high:  # keep products readable: multiply the operand side instead
            other = int(rng.integers(2, 10))
            expr, value = f"{expr} + {operand} * {other}", value + operand * other
            continue
        inner = f"({expr})" if " " in expr else expr
        if rng.random() < 0.5:
            expr, value = f"{inner} {op} {operand}", _apply(value, op, operand)
        else:
            expr, value = f"{operand} {op} {inner}", _apply(operand, op, value)
    return expr, value


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def oracle_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Answer correctly."""
    return f"The value is \\boxed{{{env.task['answer']}}}."


def wrong_policy(env: TurnEnv, rng: np.random.Generator) -> str:
    """Answer off by one."""
    return f"The value is \\boxed{{{env.task['answer'] + 1}}}."


class ArithmeticEnv(TurnEnv):
    """Integer arithmetic problems with a verifiable answer (TARL §3.1 mixed-task training).

    ## Description
    Each task is a generated expression such as ``(37 - 12) * 4 + 9``; the agent computes its integer value.

    ## Observation
    ``reset``: a system message with the answer format and the problem as a user message. ``step``: ``[]`` when
    the episode ends, else a user message saying the answer was wrong (only with ``max_attempts > 1``).

    ## Action
    Free text with the final answer in ``\\boxed{...}`` (or ``<answer>...</answer>``); the last one counts.

    ## Rewards
    ``answer`` (outcome): 1.0 for the right integer, 0.0 otherwise (no answer, malformed or wrong).

    ## Episode End
    ``terminated`` after a correct answer or after ``max_attempts`` answers (default 1, single turn).

    ## Arguments
    ``gym.make("TurnRL/Arithmetic-v0", difficulty="medium", max_attempts=1)``; ``difficulty`` is ``easy`` (2 ops,
    operands 1-20), ``medium`` (4 ops, 2-99) or ``hard`` (6 ops, 2-999).

    ## Version History
    * v0: initial version. TARL mixes DeepScaleR problems; this env generates problems offline instead (no
      download, unlimited, exactly verifiable), so its difficulty is only an approximation of "medium".
    * Every id, no version bump: the episode metrics moved from ``info["episode"]`` to ``info["episode_metrics"]``
      (:data:`agentgym_turn.core.EPISODE_METRICS_KEY`), so Gymnasium's ``RecordEpisodeStatistics`` can add its
      own ``info["episode"]``; rewards, tasks and the metrics themselves are unchanged.
    """

    reward_levels: ClassVar[dict[str, RewardLevel]] = {"answer": "outcome"}
    scripted_policies: ClassVar[dict[str, Any]] = {"oracle": oracle_policy, "wrong": wrong_policy}

    def __init__(
        self,
        difficulty: str = "medium",
        *,
        max_attempts: int = 1,
        render_mode: str | None = None,
        max_action_chars: int = 1 << 16,
    ) -> None:
        super().__init__(render_mode=render_mode, max_action_chars=max_action_chars)
        if difficulty not in DIFFICULTY_OPS:
            raise InvalidArgument(f"difficulty={difficulty!r}; use one of {sorted(DIFFICULTY_OPS)}.")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidArgument(f"max_attempts={max_attempts!r} must be a positive int.")
        self.difficulty = difficulty
        self.max_attempts = max_attempts
        self._correct = 0.0

    def _sample_task(self) -> dict[str, Any]:
        low, high = OPERAND_RANGE[self.difficulty]
        expr, value = generate_problem(self.np_random, DIFFICULTY_OPS[self.difficulty], low, high)
        return {"id": expr, "question": f"Compute the value of {expr}.", "answer": value}

    def _validate_task(self, task: Any) -> dict[str, Any]:
        if not isinstance(task.get("question"), str) or not isinstance(task.get("answer"), int):
            raise InvalidTask(
                "an arithmetic task needs 'question' (str) and 'answer' (int), e.g. "
                "{'question': 'Compute 2 + 2.', 'answer': 4}; got " + repr(dict(task))[:200]
            )
        return {"id": task.get("id", task["question"]), **dict(task)}

    def _begin(self, task: dict[str, Any]) -> list[Message]:
        self._correct = 0.0
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["question"]}]

    def _state_key(self) -> str | None:
        """Anchor-state key: the problem and the turn index (the wrong attempts so far are not part of it)."""
        return None if self._task is None else f"t{self.turn}:" + state_digest(self._task["question"])

    def _turn(self, text: str) -> TurnResult:
        assert self._task is not None
        reward = reward_answer(text[: self.max_action_chars], self._task["answer"])
        self._correct = reward
        if reward == 1.0 or self.turn >= self.max_attempts:
            return TurnResult([], {"answer": reward}, True, {"parsed_answer": parse_answer(text)})
        got = parse_answer(text)
        feedback = "No \\boxed{} integer answer was found." if got is None else f"{got} is not correct."
        return TurnResult(
            [{"role": "user", "content": f"{feedback} Try again."}], {"answer": reward}, False, {"parsed_answer": got}
        )

    def _episode_metrics(self) -> dict[str, float]:
        return {"env/success": self._correct}
