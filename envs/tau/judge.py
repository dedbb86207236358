"""TARL's turn-level LLM judge (``003_…`` §3.2 and Appendix C) and its reward combination.

The judge reads the policy, the user's task instruction, the ground-truth tool calls and the whole conversation
with each agent turn labelled ``[Turn i]`` (i = 0 … T-1), thinks inside ``<think></think>``, then answers with one
JSON object ``{"score_0": s_0, ..., "score_{T-1}": s_{T-1}}`` with every ``s_i ∈ {-1, 0, 1}``:
1 = correct turn, 0 = an issue (policy or format) that is not the primary cause of a deviation, -1 = the primary
cause of a deviation from the ground truth (at most one turn).

The env pays the scores raw, one per turn, as late turn rewards (``info["late_reward_components"]``, see
:mod:`agentgym_turn.core`); the scaling below is applied once, by the trainer's TARL strategies
(``trainers.credit``: ``tarl``, ``tarl_ppo_turn``, ``tarl_ppo_traj``). :func:`combine_tarl` computes the same
number for the env's metrics (``env/tarl_score``, ``info["tarl_category"]``).

Combination with the verifier's terminal reward ``R ∈ {0, 1}`` (T turns, ``m`` the −1 turn if any)::

    total = 10 * R + 5 * s_m + 5 * (sum of the other turns' scores) / T   (s_m = -1; no 5 * s_m term if no -1)

§3.2 is ambiguous about the last term: its text scales the other turns "by 1/T so that the maximum contribution
from turn-level rewards is capped at 5 points", but a 1/T scale caps it at 1. The four trajectory categories it
lists (perfect = 15, good = 10-15, good attempt = 0-5, failed = -5 to 0) all need the cap of 5, so the other
turns are scaled by 5/T here (``MINOR_SCALE``; ``combine_tarl(..., minor_scale=1.0)`` gives the literal 1/T).

    >>> combine_tarl(1.0, [1, 1, 1]).total          # perfect trajectory
    15.0
    >>> combine_tarl(0.0, [1, -1, 0, 1]).total      # failed trajectory: -5 + 5 * 2/4
    -2.5
    >>> parse_judge_scores('<think>ok</think>{"score_0": 1, "score_1": -1}', 2)
    [1, -1]

A judge answer with two or more −1 scores breaks the paper's constraint; the earliest −1 is kept (the first major
deviation is the primary cause) and the later ones become 0, which is reported as ``violations``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_turn.chat import ChatModel, make_chat_model
from agentgym_turn.error import ServiceError
from agentgym_turn.parsing import ParseError, parse_json_object

TERMINAL_SCALE = 10.0
MAJOR_SCALE = 5.0
MINOR_SCALE = 5.0
VALID_SCORES = (-1, 0, 1)

JUDGE_SYSTEM_PROMPT = """Role: judge of task execution, turn by turn.

Your job is to evaluate, thoroughly and precisely, a multi-turn conversation between a user and an agent. Read the
whole conversation carefully and find where the agent's decisions make it deviate from the ground-truth function
calls.

### What you are given
- Policy: the strict rules the agent must follow when it calls tools. An action that breaks the policy must be
  stopped at once and the agent told to reconsider and correct its approach.
- Task instruction: the specific instruction given to the user. The user's requests and replies should always be
  consistent with it. The agent never sees this instruction.
- Ground-truth function calls: the definitive standard for judging the agent's tool calls.
  - The agent does not have to follow their exact order.
  - Calling information-gathering functions (such as get_order_details) several times is fine, but every write
    operation of the agent (modifying, exchanging, returning or cancelling orders, booking, updating or cancelling
    reservations, and the like) must match the ground-truth calls exactly.
- Conversation: the full record of the multi-turn conversation. Use it to see which tools were executed and to
  judge how the agent handled their results. Each agent turn (its reasoning and action) is preceded by a label
  [Turn N].

### How to evaluate
A deviation from the ground truth usually comes from one of these:
- the agent did not gather enough, or the right, information, through function calls or by asking the user;
- the agent reasoned wrongly or misunderstood the results of a tool;
- the agent did not follow the policy and so executed a tool wrongly.

Pay the closest attention to write operations (modifying, exchanging, returning or cancelling orders, and every
other call that changes the database). They must match the ground truth exactly; they are the critical points and
the most frequent source of errors. A write operation can go wrong in three ways:
- it is called with arguments that differ from the ground truth;
- a write operation is called that should never have been called;
- a write operation listed in the ground truth is never called.
If any of these happens, read the conversation carefully and find the turn where the agent deviates.

For each turn (labelled [Turn N]) decide whether the agent's reasoning and action in that turn is the primary cause
of a deviation from the ground-truth function calls, and give it one of three scores:
- 1 if the turn is correct;
- -1 if the turn is the primary reason for a deviation. At most one turn of the conversation may get -1, and only
  if a deviation is found;
- 0 if the turn has an issue (for example it does not follow the policy or the function-call format).

### Response format
First do your evaluation inside a <think></think> block.
After the thinking block, output a single JSON object and nothing else: no text, comment or explanation outside the
JSON. It must contain the score of every turn, from score_0 up to score_n (n = the index of the last turn):
{
  "score_0": <score of turn 0>,
  "score_1": <score of turn 1>,
  ...
  "score_n": <score of turn n>
}"""


@dataclass
class TarlReward:
    """TARL's combined reward for one trajectory.

    Attributes:
        total: ``10 R + 5 s_m + 5 sum(others) / T``.
        terminal: ``10 R``.
        major: ``-5`` when a turn scored −1, else ``0``.
        minor: ``5 * sum of the other turns' scores / T``.
        per_turn: each turn's share of the turn-level part (``-5`` for the −1 turn, ``5 s_i / T`` otherwise), so that
            ``terminal + sum(per_turn) == total``: what ``tarl_ppo_turn`` puts on turn i's last token.
        category: ``perfect`` (15), ``good`` (10-15), ``good_attempt`` (0-5, R = 0 and no −1) or ``failed`` (< 0).
    """

    total: float
    terminal: float
    major: float
    minor: float
    per_turn: list[float]
    category: str


@dataclass
class JudgeVerdict:
    """A parsed judge answer: the per-turn scores, the raw text, and how the answer broke the protocol (if it did)."""

    scores: list[int]
    raw: str
    violations: list[str] = field(default_factory=list)


def combine_tarl(terminal: float, scores: Sequence[int], *, minor_scale: float = MINOR_SCALE) -> TarlReward:
    """Combine the verifier's ``R ∈ {0, 1}`` and the judge's per-turn scores as TARL §3.2 does."""
    if terminal not in (0.0, 1.0):
        raise ValueError(f"the terminal reward must be 0 or 1, got {terminal!r}.")
    if any(s not in VALID_SCORES for s in scores) or sum(s == -1 for s in scores) > 1:
        raise ValueError(f"turn scores must be in {{-1, 0, 1}} with at most one -1, got {list(scores)}.")
    n = len(scores)
    per_turn = [MAJOR_SCALE * s if s == -1 else minor_scale * s / n for s in scores]
    major = sum(p for s, p in zip(scores, per_turn, strict=True) if s == -1)
    minor = sum(p for s, p in zip(scores, per_turn, strict=True) if s != -1)
    total = TERMINAL_SCALE * terminal + major + minor
    if terminal == 1.0:
        category = "perfect" if n and all(s == 1 for s in scores) else "good"
    else:
        category = "failed" if major < 0 else "good_attempt"
    return TarlReward(total, TERMINAL_SCALE * terminal, major, minor, per_turn, category)


_THINK = re.compile(r"<think>.*?</think>", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_SCORE_KEY = re.compile(r"^score_(\d+)$")


def _score_value(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and float(value) in VALID_SCORES:
        return int(value)
    if isinstance(value, str) and value.strip() in ("-1", "0", "1", "+1"):
        return int(value.strip())
    return None


def parse_judge_scores(text: str, n_turns: int) -> list[int] | ParseError:
    """The per-turn scores ``[s_0, ..., s_{n-1}]`` from the judge's answer, or a :class:`ParseError` saying why not.

    Tolerated: a ``<think>`` block (and an unclosed one before the JSON), code fences, ``//`` comments, scores as
    strings, extra keys. Required: one JSON object after the thinking with every ``score_i`` for ``i < n_turns``,
    each -1, 0 or 1. More than one -1 is *not* rejected here (see :func:`enforce_single_major`).
    """
    body = _THINK.sub("", text)
    if "</think>" in body:
        body = body.rsplit("</think>", 1)[1]
    body = _LINE_COMMENT.sub("", body)
    start = body.rfind('"score_0"')
    if start == -1:
        start = body.rfind("'score_0'")
    if start == -1:
        return ParseError("no JSON object with a 'score_0' key after the thinking block.")
    brace = body.rfind("{", 0, start)
    if brace == -1:
        return ParseError("the scores are not inside a JSON object.")
    obj = parse_json_object(body[brace:])
    if isinstance(obj, ParseError):
        return obj
    scores: dict[int, int] = {}
    for key, value in obj.items():
        m = _SCORE_KEY.match(str(key))
        if m is None:
            continue
        score = _score_value(value)
        if score is None:
            return ParseError(f"{key} = {value!r} is not one of -1, 0, 1.")
        scores[int(m.group(1))] = score
    missing = [i for i in range(n_turns) if i not in scores]
    if missing:
        return ParseError(f"the answer lacks scores for turns {missing} (expected score_0 ... score_{n_turns - 1}).")
    return [scores[i] for i in range(n_turns)]


def enforce_single_major(scores: Sequence[int]) -> tuple[list[int], list[str]]:
    """Keep the earliest −1, turn later −1s into 0; return the scores and a note per change."""
    out, notes, seen = list(scores), [], False
    for i, s in enumerate(out):
        if s == -1:
            if seen:
                out[i] = 0
                notes.append(f"score_{i} = -1 after an earlier -1 was set to 0")
            seen = True
    return out, notes


@dataclass
class JudgeTurn:
    """One agent turn as the judge sees it: the agent's text and the environment's feedback to it."""

    agent: str
    feedback: list[str]


def format_conversation(first_user_message: str, turns: Sequence[JudgeTurn]) -> str:
    """The conversation with ``[Turn i]`` labels on the agent's turns."""
    lines = [f"user: {first_user_message}"]
    for i, turn in enumerate(turns):
        lines.append(f"[Turn {i}]\nagent: {turn.agent}")
        lines += turn.feedback
    return "\n\n".join(lines)


def judge_messages(
    policy: str, task_instruction: str, gold_actions: Sequence[dict[str, Any]], conversation: str
) -> list[dict[str, str]]:
    """The judge's chat: the Appendix C role and rules as system prompt, the four inputs as the user message."""
    gold = json.dumps([{"name": a["name"], "arguments": a["arguments"]} for a in gold_actions], indent=1)
    user = (
        f"## Policy\n{policy}\n\n## Task instruction\n{task_instruction}\n\n"
        f"## Ground-truth function calls\n{gold}\n\n## Conversation\n{conversation}"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


class TurnJudge:
    """The TARL judge behind the shared chat-model client.

    ``judge(...)`` asks the model, parses the answer, retries ``retries`` times on a malformed answer, and raises
    :class:`~agentgym_turn.error.ServiceError` (with the last parse problem) when no valid answer came back.
    """

    def __init__(self, model: ChatModel | str, *, retries: int = 2, max_tokens: int = 2048) -> None:
        self.model = make_chat_model(model)
        self.retries = retries
        self.max_tokens = max_tokens

    def judge(
        self,
        policy: str,
        task_instruction: str,
        gold_actions: Sequence[dict[str, Any]],
        first_user_message: str,
        turns: Sequence[JudgeTurn],
        *,
        seed: int | None = None,
    ) -> JudgeVerdict:
        """Score every turn of a finished conversation."""
        messages = judge_messages(
            policy, task_instruction, gold_actions, format_conversation(first_user_message, turns)
        )
        problem = ""
        for attempt in range(self.retries + 1):
            raw = self.model.complete(
                messages, max_tokens=self.max_tokens, temperature=0.0 if attempt == 0 else 0.7, seed=seed
            )
            parsed = parse_judge_scores(raw, len(turns))
            if isinstance(parsed, ParseError):
                problem = parsed.message
                continue
            scores, notes = enforce_single_major(parsed)
            return JudgeVerdict(scores, raw, notes)
        raise ServiceError(
            f"the TARL judge {self.model.name} gave no valid answer in {self.retries + 1} attempt(s): {problem}"
        )
