"""LLM-as-judge rewards of ``TurnRL/SearchR1-v2`` (``001_…`` §5.3 and the D.2 prompts, reworded).

Two prompts, both asking for step-by-step ``<reasoning>`` first and then a ``<score>`` block:

* the **turn-level** prompt scores every turn of a trajectory: the final turn in [-1, 1] (-1 broken format, 0.2
  right format and wrong answer, 1.0 right format and right answer; an answer over 5 tokens breaks the format) and
  each intermediate turn as format (+0.1 / -0.2) + information quality (+0.3 / 0) + search penalty (-0.1 × searches
  so far); the reply is ``<score>Turn1: X.X\\nTurn2: X.X ...</score>`` with exactly one score per turn;
* the **outcome-level** prompt scores the final answer 1.0 (matches the ground truth) or 0.0.

A judge is any :class:`agentgym_turn.chat.ChatModel`. A reply that cannot be parsed, or a model that fails, is
retried; when every attempt fails the verdict says so (``ok=False`` with the errors), and the caller reports it.
Nothing here turns a failure into a score.

    >>> parse_turn_scores("<reasoning>ok</reasoning><score>Turn1: 0.0\\nTurn2: 1.0</score>", 2)
    [0.0, 1.0]
    >>> parse_outcome_score("<reasoning>matches</reasoning><score> 1.0 </score>")
    1.0
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentgym_turn.chat import ChatModel
from agentgym_turn.error import ServiceError
from agentgym_turn.parsing import ParseError, find_tags

TURN_SCORE_RANGE = (-1.0, 1.0)

TURN_LEVEL_PROMPT = """You judge multi-turn search-augmented reasoning systems. You receive the user's prompt, the \
ground-truth answer and the turns the system produced; judge how well each turn complies with the required format \
and how much it moves toward the ground-truth answer.

TASK
Score every turn: its format, the quality of its content, and what it contributes toward the ground truth.

SCORING RULES
FINAL TURN (the turn that ends the episode), score in [-1.0, 1.0]:
  Format: exactly <think>...</think><answer>...</answer>, nothing but these tags, each once, in this order; the \
text inside <answer> must be at most 5 tokens.
  Correctness: the <answer> holds a correct, complete answer matching the ground truth.
  - format wrong: -1.0
  - format right, answer wrong: 0.2
  - format right, answer right: 1.0
INTERMEDIATE TURNS, score in [-1.0, 1.0]:
  Format: exactly <think>...</think><search>...</search><information>...</information>, nothing but these tags, \
each once, in this order. Right format: +0.1. Wrong format: -0.2.
  Information quality: the <information> holds relevant information that helps toward the ground truth (for \
example the ground truth occurs in the retrieved text inside <information>): +0.3. Irrelevant or unhelpful: +0.0.
  Search penalty: number of searches = how many <search> tags appear over all turns from Turn 1 up to and \
including this turn; penalty = number of searches x (-0.1). Fewer searches are better.
  Intermediate turn score = format + information quality + search penalty.

OUTPUT FORMAT
Answer with these XML tags only:
<reasoning>
Go through the turns one by one: check the format, judge the content, compute each score and explain it.
</reasoning>
<score>
Turn1: X.X
Turn2: X.X
...
</score>

REQUIREMENTS
- Give exactly {n_turns} scores, one per turn.
- Write decimals (for example 0.5, -0.3, 1.0).
- Use only the tags above and no other text.

EVALUATION DATA
{prompt_text}

{turns_text}

{ground_truth_text}

EPISODE STATUS: {status}
TURNS TO EVALUATE: {n_turns}

Your evaluation:"""

OUTCOME_LEVEL_PROMPT = """You judge multi-turn search-augmented reasoning systems. You receive the user's prompt, \
the ground-truth answer and the turns the system produced; decide whether the final answer matches the ground truth.

TASK
Decide whether the response ends with a correct final answer that matches the ground truth.

SCORING RULES
Score 1.0 (correct):
- the text inside <answer></answer> matches the ground truth.
Score 0.0 (incorrect):
- there are no <answer></answer> tags, or
- the text inside <answer></answer> does not match the ground truth, or
- the text inside <answer></answer> is longer than 5 tokens.

OUTPUT FORMAT
- <reasoning> your step-by-step reasoning about whether the answer matches the ground truth </reasoning>
- <score> 1.0 or 0.0 </score>

REQUIREMENTS
- Reasoning first, then the score.
- The score is exactly 1.0 or 0.0.

EVALUATION DATA
{prompt_text}

{turns_text}

{ground_truth_text}

Your evaluation:"""

_TURN_LINE = re.compile(r"^\s*Turn\s*(\d+)\s*[:=]\s*([-+]?\d+(?:\.\d+)?)\s*$", re.I | re.M)
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True)
class JudgeTurn:
    """One assistant turn as the judge sees it: the agent's text and the env's reply to it (``""`` if none)."""

    action: str
    feedback: str = ""


@dataclass
class JudgeVerdict:
    """The result of one judge call (after retries).

    Attributes:
        ok: a score was parsed; when ``False`` the score fields are ``None`` and ``errors`` says why.
        scores: the turn-level scores, one per turn (turn-level prompt).
        score: the score of interest (the last turn's turn-level score, or the outcome score).
        reasoning: the judge's ``<reasoning>`` text of the accepted reply.
        attempts: how many requests were made.
        errors: one message per failed attempt.
        seconds: wall time of the call.
    """

    ok: bool
    scores: list[float] | None = None
    score: float | None = None
    reasoning: str = ""
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _score_block(reply: str) -> str | ParseError:
    blocks = find_tags(reply, "score")
    if not blocks:
        return ParseError("the reply has no <score>...</score> block.")
    return blocks[-1]


def parse_turn_scores(reply: str, n_turns: int) -> list[float] | ParseError:
    """Scores ``Turn1..TurnN`` from the last ``<score>`` block; exactly one per turn, each in [-1, 1]."""
    block = _score_block(reply)
    if isinstance(block, ParseError):
        return block
    found: dict[int, float] = {}
    for m in _TURN_LINE.finditer(block):
        idx = int(m.group(1))
        if idx in found:
            return ParseError(f"Turn{idx} is scored twice.")
        found[idx] = float(m.group(2))
    if sorted(found) != list(range(1, n_turns + 1)):
        return ParseError(f"expected scores for Turn1..Turn{n_turns}, got turns {sorted(found)}.")
    lo, hi = TURN_SCORE_RANGE
    bad = {i: s for i, s in found.items() if not lo <= s <= hi}
    if bad:
        return ParseError(f"scores out of [{lo}, {hi}]: {bad}.")
    return [found[i] for i in range(1, n_turns + 1)]


def parse_outcome_score(reply: str) -> float | ParseError:
    """The outcome score from the last ``<score>`` block: exactly 1.0 or 0.0 (``1``/``0`` accepted)."""
    block = _score_block(reply)
    if isinstance(block, ParseError):
        return block
    m = _NUMBER.match(block)
    if m is None or float(m.group(1)) not in (0.0, 1.0):
        return ParseError(f"the outcome score must be exactly 1.0 or 0.0, got {block.strip()[:40]!r}.")
    return float(m.group(1))


def format_turns(turns: Sequence[JudgeTurn]) -> str:
    """The trajectory as the judge reads it: ``Turn k:`` then the agent's text and the env's reply."""
    parts = []
    for i, t in enumerate(turns, 1):
        body = t.action if not t.feedback else f"{t.action}\n{t.feedback.strip()}"
        parts.append(f"Turn {i}:\n{body}")
    return "\n\n".join(parts)


def turn_level_prompt(question: str, turns: Sequence[JudgeTurn], answers: Sequence[str], *, finished: bool) -> str:
    """The turn-level judge prompt; ``finished=False`` tells the judge every turn shown is intermediate."""
    n = len(turns)
    status = (
        f"finished; Turn{n} is the final turn."
        if finished
        else "in progress; every turn shown is an intermediate turn (no final turn yet)."
    )
    return TURN_LEVEL_PROMPT.format(
        n_turns=n,
        prompt_text=f"USER PROMPT: {question}",
        turns_text=format_turns(turns),
        ground_truth_text="GROUND TRUTH: " + " | ".join(answers),
        status=status,
    )


def outcome_level_prompt(question: str, turns: Sequence[JudgeTurn], answers: Sequence[str]) -> str:
    """The outcome-level judge prompt over the whole trajectory."""
    return OUTCOME_LEVEL_PROMPT.format(
        prompt_text=f"USER PROMPT: {question}",
        turns_text=format_turns(turns),
        ground_truth_text="GROUND TRUTH: " + " | ".join(answers),
    )


class Judge:
    """Asks a chat model for turn-level and outcome-level scores, retrying failed or malformed replies.

    Args:
        model: the judge (any :class:`ChatModel`; build one with :func:`agentgym_turn.chat.make_chat_model`).
        retries: further attempts after a failed one (a :class:`ServiceError` or an unparsable reply).
        max_tokens: the reply budget (the judge reasons before scoring).
    """

    def __init__(self, model: ChatModel, *, retries: int = 2, max_tokens: int = 1024) -> None:
        if retries < 0:
            raise ValueError(f"retries={retries} must be >= 0.")
        self.model = model
        self.retries = retries
        self.max_tokens = max_tokens

    def _ask(self, prompt: str, parse) -> JudgeVerdict:  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        verdict = JudgeVerdict(ok=False)
        for attempt in range(self.retries + 1):
            verdict.attempts = attempt + 1
            try:
                reply = self.model.complete([{"role": "user", "content": prompt}], max_tokens=self.max_tokens)
            except ServiceError as exc:
                verdict.errors.append(f"attempt {attempt + 1}: {exc}")
                continue
            parsed = parse(reply)
            if isinstance(parsed, ParseError):
                verdict.errors.append(f"attempt {attempt + 1}: malformed reply ({parsed.message}) {reply[:200]!r}")
                continue
            verdict.ok = True
            if isinstance(parsed, list):
                verdict.scores, verdict.score = parsed, parsed[-1]
            else:
                verdict.score = parsed
            reasoning = find_tags(reply, "reasoning")
            verdict.reasoning = reasoning[0].strip() if reasoning else ""
            break
        verdict.seconds = time.perf_counter() - start
        return verdict

    def score_turns(
        self, question: str, turns: Sequence[JudgeTurn], answers: Sequence[str], *, finished: bool
    ) -> JudgeVerdict:
        """Turn-level scores of ``turns``; ``verdict.score`` is the last turn's."""
        prompt = turn_level_prompt(question, turns, answers, finished=finished)
        return self._ask(prompt, lambda reply: parse_turn_scores(reply, len(turns)))

    def score_outcome(self, question: str, turns: Sequence[JudgeTurn], answers: Sequence[str]) -> JudgeVerdict:
        """The outcome-level score (1.0 or 0.0) of a finished trajectory."""
        return self._ask(outcome_level_prompt(question, turns, answers), parse_outcome_score)
