"""TARL's judge: the answer parser on malformed text, the reward combination table, and the client path against a
local OpenAI-compatible HTTP server (protocol, parsing, retries; not model quality)."""

from __future__ import annotations

import re

import pytest

from agentgym_turn.chat import OpenAIChat
from agentgym_turn.error import ServiceError
from agentgym_turn.parsing import ParseError
from agentgym_turn.policies import run_episode
from envs.tau.env import TauEnv, oracle_policy
from envs.tau.judge import (
    JUDGE_SYSTEM_PROMPT,
    JudgeTurn,
    TurnJudge,
    combine_tarl,
    enforce_single_major,
    parse_judge_scores,
)

from .conftest import FakeOpenAI


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        ('{"score_0": 1, "score_1": 0}', 2, [1, 0]),
        ('<think>turn 1 picks the wrong item {"score_0": 9}</think>\n{"score_0": 1, "score_1": -1}', 2, [1, -1]),
        ('<think>...</think>```json\n{"score_0": 1, "score_1": 1}\n```', 2, [1, 1]),
        ('{\n  "score_0": 1, // fine\n  "score_1": "-1" // wrong item\n}', 2, [1, -1]),
        ("{'score_0': 1.0, 'score_1': 0, 'note': 'x'}", 2, [1, 0]),
        ('prefix {"a": {"b": 1}} then {"score_0": 0}', 1, [0]),
        ('I think </think>{"score_0": 1}', 1, [1]),
        ('{"score_0": 1, "score_1": 1, "score_2": 1}', 2, [1, 1]),  # extra turns are ignored
        ('{"score_0": 1}', 2, "lacks scores for turns [1]"),
        ('{"score_0": 2}', 1, "is not one of -1, 0, 1"),
        ('{"score_0": true}', 1, "is not one of -1, 0, 1"),
        ('{"score_0": 1', 1, "invalid JSON"),
        ("<think>never finished", 1, "no JSON object"),
        ("", 1, "no JSON object"),
        ('"score_0": 1', 1, "not inside a JSON object"),
    ],
)
def test_parse_judge_scores(text: str, n: int, expected: list[int] | str) -> None:
    got = parse_judge_scores(text, n)
    if isinstance(expected, str):
        assert isinstance(got, ParseError) and expected in got.message
    else:
        assert got == expected


def test_enforce_single_major_keeps_the_earliest() -> None:
    assert enforce_single_major([1, -1, 0, -1]) == ([1, -1, 0, 0], ["score_3 = -1 after an earlier -1 was set to 0"])
    assert enforce_single_major([1, 0]) == ([1, 0], [])


@pytest.mark.parametrize(
    ("terminal", "scores", "total", "category"),
    [
        (1.0, [1, 1, 1, 1], 15.0, "perfect"),
        (1.0, [1, 0, 1, 0], 12.5, "good"),
        (1.0, [0, 0], 10.0, "good"),
        (0.0, [1, 1, 0, 1], 3.75, "good_attempt"),
        (0.0, [1, -1, 1, 1], -5.0 + 3.75, "failed"),
        (0.0, [-1], -5.0, "failed"),
        (1.0, [1, -1], 10.0 - 5.0 + 2.5, "good"),
    ],
)
def test_combine_tarl_table(terminal: float, scores: list[int], total: float, category: str) -> None:
    r = combine_tarl(terminal, scores)
    assert r.total == pytest.approx(total) and r.category == category
    assert r.terminal + sum(r.per_turn) == pytest.approx(r.total)
    assert r.major == (-5.0 if -1 in scores else 0.0)


def test_combine_tarl_literal_scale_and_bad_input() -> None:
    assert combine_tarl(1.0, [1, 1]).total == 15.0
    assert combine_tarl(1.0, [1, 1], minor_scale=1.0).total == 11.0
    with pytest.raises(ValueError, match="at most one -1"):
        combine_tarl(0.0, [-1, -1])
    with pytest.raises(ValueError, match="0 or 1"):
        combine_tarl(0.5, [1])


def all_ones(body: dict) -> str:
    n = len(re.findall(r"\[Turn \d+\]", body["messages"][-1]["content"]))
    return "<think>all good</think>\n{" + ", ".join(f'"score_{i}": 1' for i in range(n)) + "}"


def fast_client(server: FakeOpenAI) -> OpenAIChat:
    return OpenAIChat(server.url, "judge-model", timeout=5.0, retries=1, backoff=0.01)


def test_turn_judge_over_http_retries_a_malformed_answer(fake_openai: FakeOpenAI) -> None:
    fake_openai.replies = ["<think>hmm</think> I cannot decide.", 503, '{"score_0": 1, "score_1": -1}']
    judge = TurnJudge(fast_client(fake_openai), retries=1)
    turns = [JudgeTurn("<tool_call>...</tool_call>", ["tool: ok"]), JudgeTurn("Done.", ["user: ###STOP###"])]
    verdict = judge.judge("POLICY", "INSTRUCTION", [{"name": "a", "arguments": {}}], "hello", turns)
    assert verdict.scores == [1, -1] and verdict.violations == []
    assert len(fake_openai.requests) == 3  # malformed answer -> judge retry; 503 -> client retry
    system, user = fake_openai.requests[0]["messages"]
    assert system["content"] == JUDGE_SYSTEM_PROMPT and system["role"] == "system"
    for part in ("POLICY", "INSTRUCTION", '"name": "a"', "[Turn 0]", "[Turn 1]", "user: ###STOP###"):
        assert part in user["content"]


def test_turn_judge_raises_service_error_when_no_valid_answer(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = '{"score_0": 7}'
    judge = TurnJudge(fast_client(fake_openai), retries=2)
    with pytest.raises(ServiceError, match="is not one of -1, 0, 1"):
        judge.judge("P", "I", [], "hi", [JudgeTurn("x", [])])
    assert len(fake_openai.requests) == 3


def test_env_with_judge_reports_raw_scores_per_turn_as_late_turn_rewards(fake_openai: FakeOpenAI) -> None:
    # Task 0 with the oracle: 6 turns, R = 1, every turn judged 1 -> a perfect trajectory, 15 in the metrics.
    fake_openai.default = all_ones
    env = TauEnv("retail", judge=fast_client(fake_openai))
    log = run_episode(env, oracle_policy, seed=0, options={"task": {"id": "0"}})
    info, n = log.infos[-1], len(log.rewards)
    assert n == 6 and info["judge_scores"] == [1] * n and info["tarl_category"] == "perfect"
    assert info["reward_components"] == {"task": 1.0}  # raw R; TARL's 10x is the trainer's
    assert info["late_reward_components"] == [{"judge": 1.0}] * n
    assert all("late_reward_components" not in i for i in log.infos[:-1])
    assert log.rewards == [0.0] * (n - 1) + [1.0 + n]  # the final step reveals R and every turn's score
    assert log.metrics["env/tarl_score"] == 15.0 and log.metrics["env/judge_ok"] == 1.0
    assert log.metrics["reward/judge"] == n and log.metrics["reward/task"] == 1.0


def test_env_judge_minus_one_on_turn_two(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = lambda body: all_ones(body).replace('"score_1": 1', '"score_1": -1')
    env = TauEnv("retail", judge=fast_client(fake_openai))
    log = run_episode(env, oracle_policy, seed=0, options={"task": {"id": "0"}})
    info = log.infos[-1]
    assert [t["judge"] for t in info["late_reward_components"]] == [1.0, -1.0, 1.0, 1.0, 1.0, 1.0]
    assert info["tarl_category"] == "good"
    assert log.metrics["env/tarl_score"] == pytest.approx(10.0 - 5.0 + 5.0 * 5 / 6)


def test_env_reports_a_judge_failure_and_pays_the_worst_outcome(fake_openai: FakeOpenAI) -> None:
    fake_openai.default = "no scores at all"
    env = TauEnv("retail", judge=fast_client(fake_openai))
    log = run_episode(env, oracle_policy, seed=0, options={"task": {"id": "0"}})
    info = log.infos[-1]
    assert "judge_error" in info and "no JSON object" in info["judge_error"]
    assert log.metrics["env/judge_ok"] == 0.0 and log.metrics["env/success"] == 1.0  # the verifier's R is reported
    # ... but the reward is the worst a judge could give: R withheld, a -1 on the last turn (TARL: -5)
    assert info["reward_components"] == {"task": 0.0}
    assert [t["judge"] for t in info["late_reward_components"]] == [0.0] * 5 + [-1.0]
    assert log.metrics["env/tarl_score"] == -5.0 < combine_tarl(0.0, [1, -1, 1, 1, 1, 1]).total
    assert sum(log.rewards) == -1.0
