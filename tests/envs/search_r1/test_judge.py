"""The LLM-judge path of SearchR1-v2: the D.2 prompts, the score parsers on malformed replies, and the env against
a real OpenAI-compatible HTTP server with scripted replies (protocol, parsing, retries and failure reporting)."""

from __future__ import annotations

import pytest

from agentgym_turn.chat import OpenAIChat
from agentgym_turn.parsing import ParseError
from envs.search_r1 import rewards as R
from envs.search_r1.env import JUDGE_FAILURE_REWARD, JudgeFailure, SearchR1Env
from envs.search_r1.judge import (
    TURN_SCORE_RANGE,
    Judge,
    JudgeTurn,
    outcome_level_prompt,
    parse_outcome_score,
    parse_turn_scores,
    turn_level_prompt,
)
from tests.envs.search_r1.conftest import TABLE3_TASK
from tests.envs.search_r1.test_env import TABLE3


def reply(*scores: float) -> str:
    lines = "\n".join(f"Turn{i}: {s}" for i, s in enumerate(scores, 1))
    return f"<reasoning>Checked each turn.</reasoning>\n<score>\n{lines}\n</score>"


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        (reply(0.0, -0.1, 1.0), 3, [0.0, -0.1, 1.0]),
        ("<score>turn 1 = 0.2\n  TURN2:-1</score>", 2, [0.2, -1.0]),
        ("<score>Turn2: 0.1\nTurn1: 0.4</score>", 2, [0.4, 0.1]),  # order does not matter
        ("<reasoning>x</reasoning><score>Turn1: 9</score><score>Turn1: 0.5</score>", 1, [0.5]),  # the last block
    ],
)
def test_parse_turn_scores(text, n, expected):
    assert parse_turn_scores(text, n) == expected


@pytest.mark.parametrize(
    ("text", "n", "why"),
    [
        ("Turn1: 0.5", 1, "no <score>"),
        ("<score></score>", 1, "Turn1..Turn1"),
        ("<score>Turn1: 0.5</score>", 2, "Turn1..Turn2"),  # too few
        ("<score>Turn1: 0.5\nTurn2: 0.1\nTurn3: 0.1</score>", 2, "Turn1..Turn2"),  # too many
        ("<score>Turn1: 0.5\nTurn1: 0.4</score>", 1, "twice"),
        ("<score>Turn1: 1.5</score>", 1, "out of"),
        ("<score>Turn1: high</score>", 1, "Turn1..Turn1"),
        ("<score>Turn1: 0.5 because</score>", 1, "Turn1..Turn1"),
        ("<score>Turn1: 0.5", 1, "no <score>"),  # unclosed
        ("", 1, "no <score>"),
    ],
)
def test_parse_turn_scores_rejects_malformed(text, n, why):
    out = parse_turn_scores(text, n)
    assert isinstance(out, ParseError) and why in out.message


@pytest.mark.parametrize(("text", "expected"), [("<score>1.0</score>", 1.0), ("<score> 0 </score>", 0.0),
                                                ("<reasoning>r</reasoning><score>\n0.0\n</score>", 0.0)])  # fmt: skip
def test_parse_outcome_score(text, expected):
    assert parse_outcome_score(text) == expected


@pytest.mark.parametrize("text", ["<score>0.5</score>", "<score>1.0 or 0.0</score>", "<score>yes</score>", "1.0"])
def test_parse_outcome_score_rejects(text):
    assert isinstance(parse_outcome_score(text), ParseError)


def test_prompts_keep_the_paper_rules():
    turns = [JudgeTurn(TABLE3[0], "<information>Doc 1(Title: X) y</information>"), JudgeTurn(TABLE3[2])]
    p = turn_level_prompt("who?", turns, ["Charles"], finished=True)
    for needle in ("-1.0", "0.2", "1.0", "+0.1", "-0.2", "+0.3", "-0.1", "5 tokens", "Turn1: X.X", "exactly 2 scores",
                   "TURNS TO EVALUATE: 2", "Turn2 is the final turn", "GROUND TRUTH: Charles", "Turn 2:\n<think>",
                   "<information>Doc 1"):  # fmt: skip
        assert needle in p, needle
    assert "every turn shown is an intermediate turn" in turn_level_prompt("q", turns[:1], ["a"], finished=False)
    o = outcome_level_prompt("who?", turns, ["Charles", "Charles III"])
    assert "1.0 or 0.0" in o and "5 tokens" in o and "GROUND TRUTH: Charles | Charles III" in o


def judge_env(server, table_retriever, **kwargs) -> SearchR1Env:
    model = OpenAIChat(server.spec.split("#")[0], "scripted-judge", retries=0, timeout=5)
    return SearchR1Env(tasks=[TABLE3_TASK], retriever=table_retriever, reward_mode="judge", judge=model, **kwargs)


def test_judge_rewards_each_turn(judge_server, table_retriever):
    env = judge_env(judge_server, table_retriever)
    judge_server.script(
        reply(0.0), reply(0.0, -0.1), reply(0.0, -0.1, 1.0), "<reasoning>ok</reasoning><score>1.0</score>"
    )
    env.reset(seed=0)
    steps = [env.step(a) for a in TABLE3]
    assert [s[4]["reward_components"] for s in steps] == [
        {"judge_turn": 0.0},
        {"judge_turn": -0.1},
        {"judge_final": 1.0},
    ]
    assert [s[4]["verifiable_components"] for s in steps][2] == {"outcome": 1.0}  # reported alongside
    assert not any(s[4]["judge_failed"] for s in steps)
    ep = steps[-1][4]["episode_metrics"]
    assert ep["env/judge_outcome"] == 1.0 and ep["env/judge_failures"] == 0.0
    sent = [r["messages"][0]["content"] for r in judge_server.requests]
    assert len(sent) == 4 and "TURNS TO EVALUATE: 1" in sent[0] and "TURNS TO EVALUATE: 3" in sent[2]
    assert "<information>Doc 1(Title:" in sent[1]  # the judge sees the retrieved passages
    assert "Score 1.0 (correct)" in sent[3] and judge_server.requests[0]["model"] == "scripted-judge"


def test_judge_malformed_reply_is_retried(judge_server, table_retriever):
    env = judge_env(judge_server, table_retriever, judge_retries=2, judge_outcome=False)
    judge_server.script("<score>Turn1: great</score>", 503, reply(0.0))
    env.reset(seed=0)
    _, reward, _, _, info = env.step(TABLE3[0])
    assert reward == 0.0 and info["reward_components"] == {"judge_turn": 0.0}
    verdict = info["judge"]
    assert verdict.ok and verdict.attempts == 3 and len(verdict.errors) == 2
    assert "malformed" in verdict.errors[0] and "HTTP 503" in verdict.errors[1]


def test_judge_failure_is_reported_and_pays_the_worst_outcome(judge_server, table_retriever):
    """Issue 12: v0 left a failed judge's component out, which paid 0, above the -1 of a broken format, so a
    policy that broke the judge beat one that answered badly. A failure now pays -1 and is counted."""
    env = judge_env(judge_server, table_retriever, judge_retries=1)
    judge_server.script("no score here", "<score>Turn1: 2.0</score>", default=500)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(TABLE3[0])
    assert info["judge_failed"] is True and info["reward_components"] == {"judge_turn": JUDGE_FAILURE_REWARD}
    assert reward == JUDGE_FAILURE_REWARD == R.OUTCOME_BAD_FORMAT == TURN_SCORE_RANGE[0]
    assert info["judge"].ok is False and info["judge"].attempts == 2 and info["judge"].score is None
    judge_server.script(default=500)
    _, reward, *_, info = env.step(TABLE3[2])
    assert info["judge_failed"] and info["judge_outcome"].ok is False
    assert info["reward_components"] == {"judge_final": -1.0} and reward == -1.0
    assert info["episode_metrics"]["env/judge_failures"] == 3.0 and "env/judge_outcome" not in info["episode_metrics"]


def test_judge_failure_can_raise(judge_server, table_retriever):
    env = judge_env(judge_server, table_retriever, judge_retries=0, on_judge_failure="raise")
    judge_server.script("garbage")
    env.reset(seed=0)
    with pytest.raises(JudgeFailure, match="malformed"):
        env.step(TABLE3[0])


def test_judge_spec_string_builds_an_http_client(judge_server, table_retriever):
    env = SearchR1Env(tasks=[TABLE3_TASK], retriever=table_retriever, reward_mode="judge", judge=judge_server.spec)
    assert isinstance(env._judge, Judge) and isinstance(env._judge.model, OpenAIChat)
    judge_server.script(reply(-0.2))
    env.reset(seed=0)
    assert env.step("bad turn")[4]["reward_components"] == {"judge_turn": -0.2}


@pytest.mark.slow
def test_a_real_local_judge_model_is_scored_or_reported(table_retriever):
    """SmolLM2-135M as the judge (a real model, greedy, short replies): each verdict is a parsed score in [-1, 1]
    or a reported failure that names the malformed reply; the env never crashes or invents a 0."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # SmolLM2 as the judge: 42 s on one thread of an AVX2 host
    try:
        env = SearchR1Env(tasks=[TABLE3_TASK], retriever=table_retriever, reward_mode="judge", judge="smollm2",
                          judge_retries=0, judge_max_tokens=12, judge_outcome=False)  # fmt: skip
        env.reset(seed=0)
        *_, info = env.step(TABLE3[0])
    finally:
        torch.set_num_threads(threads)
    verdict = info["judge"]
    if verdict.ok:
        assert -1.0 <= info["reward_components"]["judge_turn"] <= 1.0 and not info["judge_failed"]
    else:
        assert info["judge_failed"] and info["reward_components"] == {"judge_turn": -1.0} and verdict.errors
        assert "malformed reply" in verdict.errors[0]
