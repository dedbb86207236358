"""TARL from ``env.step`` to the token rewards (003 §3.2, eq. 4-5): a real ``TurnRL/TauRetail-v1`` episode with a
judge, played by the scripted oracle through :func:`trainers.rollout.collect`, then :mod:`trainers.credit`.

The judge is a local OpenAI-compatible HTTP server started by the test (it answers with fixed scores; it says
nothing about judge quality), given to the env as a chat-model spec exactly as ``--env-kwarg judge=URL#MODEL``
would. Regression: v0 paid the judge's components already TARL-scaled on the last step and the strategies scaled
them again (a perfect 6-turn trajectory scored 106.25; a -1 on turn 2 landed on the last token as -12.5).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from envs.tau.judge import combine_tarl
from tests.envs.tau.conftest import FakeOpenAI, fake_openai  # noqa: F401  (the local judge server fixture)
from trainers.credit import CreditConfig, get_strategy, tarl_score
from trainers.engines import stop_token_ids
from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor

ENV = "TurnRL/TauRetail-v1"
EXACT = CreditConfig(eps=1e-12, whiten_advantages=False)


def judge_reply(minus_one_at: int | None):
    """A judge answer scoring every ``[Turn i]`` of the request 1, except turn ``minus_one_at`` (0-based): -1."""

    def reply(body: dict) -> str:
        n = len(re.findall(r"\[Turn \d+\]", body["messages"][-1]["content"]))
        scores = ", ".join(f'"score_{i}": {-1 if i == minus_one_at else 1}' for i in range(n))
        return "<think>checked every turn</think>\n{" + scores + "}"

    return reply


@pytest.fixture
def judged_episodes(tokenizer, fake_openai: FakeOpenAI):  # noqa: F811
    """One task, two oracle episodes: the judge scores the first all 1, the second -1 on turn 2 (index 1)."""
    fake_openai.replies = [judge_reply(None), judge_reply(1)]
    pool = EnvPool([ENV], make_kwargs={"judge": fake_openai.spec("judge")})
    actor = scripted_actor(tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), ["oracle"], None)
    cfg = RolloutConfig(max_new_tokens=1024, max_context=1 << 16, max_turns=30)
    try:
        episodes, _ = collect(pool, actor, tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=1, group_size=2, seed=0)
    finally:
        pool.close()
    assert len(fake_openai.requests) == 2
    return episodes


def test_judge_scores_land_raw_on_their_turns_and_score_15_in_env_and_trainer(judged_episodes) -> None:
    perfect, flawed = judged_episodes
    n = perfect.num_turns
    assert n >= 3 and flawed.num_turns == n and perfect.terminated
    assert perfect.reward_levels == {"task": "outcome", "judge": "turn"}
    assert perfect.turn_rewards == [{"judge": 1.0}] * (n - 1) + [{"task": 1.0, "judge": 1.0}]
    assert flawed.turn_rewards[1] == {"judge": -1.0}
    # 15 in the env's metrics and in the trainer, for the same episode
    assert perfect.metrics["env/tarl_score"] == pytest.approx(15.0) == tarl_score(perfect, EXACT)
    want = 10.0 - 5.0 + 5.0 * (n - 1) / n
    assert flawed.metrics["env/tarl_score"] == pytest.approx(want) == pytest.approx(tarl_score(flawed, EXACT))


def test_tarl_ppo_turn_puts_each_scaled_score_on_its_turns_last_policy_token(judged_episodes) -> None:
    values = [np.zeros(len(ep.token_ids) + 1) for ep in judged_episodes]
    out = get_strategy("tarl_ppo_turn")(judged_episodes, values, EXACT)
    for ep, rewards, minus in zip(judged_episodes, out.token_rewards, [None, 1], strict=True):
        n = ep.num_turns
        tarl = combine_tarl(1.0, [-1 if k == minus else 1 for k in range(n)])
        want = np.zeros(len(ep.token_ids))
        for k in range(n):  # 003 eq. 4: R_{j+1} is the turn's reward at its last token, 0 elsewhere
            want[np.flatnonzero(ep.turn_index == k)[-1]] += tarl.per_turn[k]
        want[np.flatnonzero(ep.loss_mask)[-1]] += 10.0
        assert rewards == pytest.approx(want.astype(np.float32))
        assert rewards.sum() == pytest.approx(tarl.total)
    flawed, rewards = judged_episodes[1], out.token_rewards[1]
    assert rewards[np.flatnonzero(flawed.turn_index == 1)[-1]] == pytest.approx(-5.0)  # on turn 2, not the last
    assert rewards[np.flatnonzero(flawed.loss_mask)[-1]] == pytest.approx(10.0 + 5.0 / flawed.num_turns)


def test_tarl_grpo_normalises_the_two_scores(judged_episodes) -> None:
    # 003 eq. 5 with the population std (ddof 0): two different scores normalise to +-1
    out = get_strategy("tarl")(judged_episodes, None, CreditConfig(eps=1e-12, std_ddof=0))
    for ep, adv, want in zip(judged_episodes, out.advantages, [1.0, -1.0], strict=True):
        assert adv[ep.loss_mask == 1] == pytest.approx(want, abs=1e-6)


def test_an_episode_cut_by_the_turn_limit_scores_the_worst_outcome_never_better_than_failing(
    tokenizer,
    fake_openai: FakeOpenAI,  # noqa: F811
) -> None:
    """A long τ task cut by the trainer's ``max_turns`` never reaches the verifier or the judge: it gets task 0 and
    the worst judged scores (TARL -5), no better than the judged failure of a finished episode, and is counted as
    truncated. Regression: a cut episode had no rewards at all (TARL 0, better than any failure from -5 to 0)."""
    from trainers.metrics import episode_summary

    fake_openai.replies = [judge_reply(None)]  # would judge every turn 1 if it were asked (it must not be)
    pool = EnvPool([ENV], make_kwargs={"judge": fake_openai.spec("judge")})
    actor = scripted_actor(tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), ["oracle"], None)
    stops = stop_token_ids(tokenizer)
    cfg = RolloutConfig(max_new_tokens=1024, max_context=1 << 16, max_turns=2)
    try:
        episodes, _ = collect(pool, actor, tokenizer, stops, cfg, num_tasks=2, group_size=1, seed=0)
    finally:
        pool.close()
    assert not fake_openai.requests  # a cut episode is never judged
    for ep in episodes:
        assert ep.truncated and not ep.terminated and ep.num_turns == 2
        assert ep.turn_rewards == [{"judge": 0.0}, {"task": 0.0, "judge": -1.0}]
        assert ep.metrics["env/success"] == 0.0
        assert ep.metrics["env/tarl_score"] == pytest.approx(-5.0) == tarl_score(ep, EXACT)
        assert tarl_score(ep, EXACT) <= combine_tarl(0.0, [0, -1]).total  # no better than a judged failure
    assert episode_summary(episodes, stops)["rollout/truncated"] == 1.0


def test_a_cut_episode_without_a_judge_fails_the_task(tokenizer) -> None:
    pool = EnvPool([ENV])
    actor = scripted_actor(tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), ["oracle"], None)
    cfg = RolloutConfig(max_new_tokens=1024, max_context=1 << 16, max_turns=1)
    try:
        (ep,), _ = collect(pool, actor, tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=1, group_size=1, seed=3)
    finally:
        pool.close()
    assert ep.truncated and ep.turn_rewards[-1] == {"task": 0.0} and ep.metrics["env/success"] == 0.0
