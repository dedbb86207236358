"""TurnRL/SearchR1-v2: the paper's rollout tables (Table 3, Table 4), the search-penalty arithmetic over several
turns, budget and invalid-turn edge cases, metrics, fork, scripted policies and fuzzing of ``step``."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym_turn  # noqa: F401  (registers the ids)
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.policies import get_scripted_policy, run_episode
from agentgym_turn.retrieval import Passage
from envs.search_r1.env import (
    INVALID_ACTION,
    MAX_INFORMATION_TOKENS,
    NO_RESULTS,
    SearchR1Env,
    cap_passages,
    render_information,
    word_token_spans,
)
from tests.envs.search_r1.conftest import TABLE3_TASK, TABLE4_TASK

# The paper's Table 3 turns (its bold markup removed).
TABLE3 = [
    "<think> I need to find out who will take the throne after the queen dies. I'll search for it. </think>\n"
    "<search> who will take the throne after the queen dies </search>",
    "<think> I found out that after the queen dies, her heir apparent will take the throne. I need to find out who "
    "the heir apparent is for Queen Elizabeth II. </think>\n<search> heir apparent for Queen Elizabeth II </search>",
    "<think> I found out that the heir apparent for Queen Elizabeth II is her eldest son, Charles, Prince of Wales. "
    "Now I can provide the answer. </think>\n<answer> Charles, Prince of Wales </answer>",
]
TABLE4 = [
    "<think> I need to find out in which sea pearl is found in India. I'll search for it. </think>\n"
    "<search> in which sea pearl is found in India </search>",
    "<think> I found out that pearls are found in the Indian Ocean. Now I need to find out in which sea pearls are "
    "found in India. </think>\n<search> in which sea are pearls found in India </search>",
    "<think> I found out that pearls are found in the Indian Ocean. Now I need to find out in which sea pearls are "
    "found in India. </think>\n<search> in which sea pearls are found in India </search>",
    "<think> I found out that pearls are found in the Indian Ocean. Now I need to find out in which sea pearls are "
    "found in India. </think>\n<search> in which sea are pearls found in India </search>",
]


@pytest.fixture()
def make(table_retriever):
    def _make(task=TABLE3_TASK, **kwargs) -> SearchR1Env:
        return SearchR1Env(tasks=[task], retriever=table_retriever, **kwargs)

    return _make


def play(env: SearchR1Env, actions, task=None):
    env.reset(seed=0, options={"task": task} if task else None)
    return [env.step(a) for a in actions]


def components(steps):
    return [s[4]["reward_components"] for s in steps]


def test_table3_correct_format(make):
    env = make()
    steps = play(env, TABLE3)
    assert components(steps) == [
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.1},
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.2},
        {"outcome": 1.0},
    ]
    assert [round(s[1], 10) for s in steps] == [0.0, -0.1, 1.0]
    assert [s[2] for s in steps] == [False, False, True]
    info = steps[-1][4]["episode_metrics"]
    assert info["env/answer_correct"] == info["env/format_correct"] == 1.0
    assert info["env/retrieval_correct"] == 0.0 and info["env/searches"] == 2.0
    assert math.isclose(info["env/return"], 0.9)
    first_obs = steps[0][0][0]["content"]
    assert first_obs.startswith("<information>Doc 1(Title: ") and first_obs.endswith("</information>")
    assert 1 <= first_obs.count("(Title: ") <= 3  # the top-3 passages (fewer match in this small corpus)


def test_table4_budget_spent_without_answer(make):
    env = make(TABLE4_TASK)
    steps = play(env, TABLE4)
    assert components(steps) == [
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.1},
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.2},
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.3},
        {"outcome": -1.0},  # the 4th turn is the last: its search is not run; no answer = broken format
    ]
    assert steps[-1][0] == [] and steps[-1][2] is True and steps[-1][4]["budget_spent"] is True
    ep = steps[-1][4]["episode_metrics"]
    assert ep["env/format_correct"] == 0.0 and ep["env/answered"] == 0.0 and ep["env/searches"] == 3.0
    assert math.isclose(ep["env/return"], -1.3)


def test_table4_with_a_larger_budget_runs_the_fourth_search(make):
    env = make(TABLE4_TASK, max_turns=5)
    steps = play(env, TABLE4)
    assert components(steps)[-1] == {"retrieval": 0.0, "format": 0.1, "search_count": -0.4}
    assert steps[-1][2] is False


def test_search_penalty_counts_searches_so_far(make):
    env = make(search_lambda=0.3, max_turns=6)
    search = "<think> t </think><search> heir apparent </search>"
    steps = play(env, [search, "no tags at all", search, "<search> q </search>", TABLE3[2]])
    assert components(steps) == [
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.3},
        {"format": -0.2, "search_count": -0.3},  # invalid: count unchanged, no retrieval component
        {"retrieval": 0.0, "format": 0.1, "search_count": -0.6},
        {"retrieval": 0.0, "format": -0.2, "search_count": -0.9},  # a search without <think> still counts
        {"outcome": 1.0},
    ]
    assert steps[1][0] == [{"role": "user", "content": INVALID_ACTION}]
    ep = steps[-1][4]["episode_metrics"]
    assert ep["env/searches"] == 3.0 and ep["env/invalid_turns"] == 1.0 and ep["env/format_correct"] == 0.0
    assert ep["env/answer_correct"] == 1.0


def test_zero_lambda_pays_no_penalty(make):
    env = make(search_lambda=0.0)
    steps = play(env, TABLE3)
    assert components(steps)[1] == {"retrieval": 0.0, "format": 0.1, "search_count": 0.0}


def test_retrieval_reward_when_gold_is_retrieved(make):
    task = {"question": "which island?", "answers": ["sri lanka"]}  # occurs in the "Bay of Bengal" passage
    env = make(task)
    steps = play(
        env, ["<think> t </think><search> gems Bay of Bengal </search>", "<think> t </think><answer>Sri Lanka</answer>"]
    )
    assert components(steps) == [{"retrieval": 0.3, "format": 0.1, "search_count": -0.1}, {"outcome": 1.0}]
    assert steps[-1][4]["episode_metrics"]["env/retrieval_correct"] == 1.0


def test_labels_and_no_results_message_earn_no_retrieval_reward(make):
    """Issue 12's reproduction: in v0 answer "3" earned 0.3 from the "Doc 3(Title:" label of irrelevant passages,
    and answer "no" from the "No passages found." of an empty search."""
    steps = play(make({"question": "how many?", "answers": ["3"]}), [TABLE4[0]])
    assert "Doc 3(Title:" in steps[0][0][0]["content"]
    assert components(steps)[0]["retrieval"] == 0.0
    steps = play(
        make({"question": "is it?", "answers": ["no"]}),
        ["<think> t </think><search></search>", "<think> t </think><answer>no</answer>"],
    )
    assert steps[0][0][0]["content"] == f"<information>{NO_RESULTS}</information>"
    assert components(steps)[0]["retrieval"] == 0.0 and steps[1][4]["episode_metrics"]["env/retrieval_correct"] == 0.0


def test_retrieved_content_is_capped_and_scored_as_shown(make):
    task = {"question": "which island?", "answers": ["Sri Lanka"]}
    search = "<think> t </think><search> gems Bay of Bengal </search>"
    # "Doc 1(Title: Bay of Bengal) the gems of Sri Lanka": "Lanka" is the 14th token
    [(obs, _, _, _, info)] = play(make(task, max_information_tokens=14), [search])
    assert obs[0]["content"] == "<information>Doc 1(Title: Bay of Bengal) the gems of Sri Lanka</information>"
    assert info["information_truncated"] and info["reward_components"]["retrieval"] == 0.3
    [(obs, _, _, _, info)] = play(make(task, max_information_tokens=13), [search])
    assert obs[0]["content"].endswith("the gems of Sri</information>")
    assert info["reward_components"]["retrieval"] == 0.0  # the gold the agent cannot see does not pay
    [(obs, _, _, _, info)] = play(make(task), [search])
    assert not info["information_truncated"] and obs[0]["content"].endswith("in abundance in the</information>")


def test_cap_passages_counts_labels_and_drops_cut_titles():
    ps = [Passage("1", "Alpha", "one two three", 1.0), Passage("2", "Beta Gamma", "four five", 0.5)]
    assert cap_passages(ps, None) == ps and cap_passages(ps, 100) == ps and cap_passages([], 1) == []
    # "Doc 1(Title: Alpha)" is 7 tokens, then one, two, three; "Doc 2(Title: Beta Gamma)" is 8 more
    assert cap_passages(ps, 8) == [Passage("1", "Alpha", "one", 1.0)]
    assert cap_passages(ps, 10) == [ps[0]]
    assert cap_passages(ps, 17) == [ps[0]]  # the budget ends inside Doc 2's label: Doc 2 is dropped
    assert cap_passages(ps, 19) == [ps[0], Passage("2", "Beta Gamma", "four", 0.5)]
    assert cap_passages(ps, 7) == cap_passages(ps, 3) == []
    long = [Passage("1", "Long", "word " * 3000, 1.0), Passage("2", "Next", "more", 1.0)]
    capped = cap_passages(long, MAX_INFORMATION_TOKENS)
    body = render_information(capped).removeprefix("<information>").removesuffix("</information>")
    assert len(capped) == 1 and len(word_token_spans(body)) == MAX_INFORMATION_TOKENS


@pytest.mark.slow
def test_cap_counts_the_policy_tokenizer_when_given(make):
    pytest.importorskip("transformers")
    task = {"question": "which island?", "answers": ["Sri Lanka"]}
    env = make(task, max_information_tokens=20, information_tokenizer="smollm2")
    [(obs, _, _, _, info)] = play(env, ["<think> t </think><search> gems Bay of Bengal </search>"])
    body = obs[0]["content"].removeprefix("<information>").removesuffix("</information>")
    assert info["information_truncated"] and body.startswith("Doc 1(Title: Bay of Bengal) the gems of Sri Lanka")
    assert len(env._token_spans(body)) <= 20 < len(env._token_spans(body + " and other"))


def test_answer_edge_cases(make):
    env = make()
    assert play(env, ["<think> t </think><answer> Elizabeth </answer>"])[0][1] == 0.2
    steps = play(env, ["<answer> Charles, Prince of Wales </answer>"])  # right answer, broken format
    assert steps[0][1] == -1.0 and steps[0][4]["episode_metrics"]["env/answer_correct"] == 1.0
    assert steps[0][4]["episode_metrics"]["env/format_correct"] == 0.0


def test_empty_query_is_a_search_that_finds_nothing(make):
    env = make()
    steps = play(env, ["<think> t </think><search>   </search>"])
    assert steps[0][0][0]["content"] == f"<information>{NO_RESULTS}</information>"
    assert components(steps) == [{"retrieval": 0.0, "format": 0.1, "search_count": -0.1}]


def test_oversized_and_long_query_turns(make):
    env = make(max_action_chars=100)
    steps = play(env, ["<think>" + "x" * 200 + "</think><search> q </search>"])
    assert steps[0][4]["action"] == "invalid" and "error" in steps[0][4]
    env = make(max_query_chars=50)
    steps = play(env, ["<think> t </think><search> " + "pearl " * 2000 + "</search>"])
    assert len(steps[0][4]["query"]) <= 50 and steps[0][4]["action"] == "search"


def test_budget_of_one_turn(make):
    env = make(max_turns=1)
    steps = play(env, [TABLE3[0]])
    assert components(steps) == [{"outcome": -1.0}] and steps[0][2]


def test_reset_messages_and_system_prompt(make):
    env = make(max_turns=5)
    msgs, info = env.reset(seed=0)
    assert [m["role"] for m in msgs] == ["system", "user"]
    for tag in ("<think>", "<search>", "<information>", "<answer>"):
        assert tag in msgs[0]["content"]
    assert "5 turns" in msgs[0]["content"]
    assert msgs[1]["content"] == f"Question: {TABLE3_TASK['question']}" and info["task_id"] == "table3"


def test_render_information_layout():
    from agentgym_turn.retrieval import Passage

    block = render_information([Passage("1", "Pearl", "pearls come", 1.0), Passage("2", "Bay", "gems", 0.5)])
    assert block == "<information>Doc 1(Title: Pearl) pearls come\nDoc 2(Title: Bay) gems</information>"


def test_fork_is_independent(make):
    env = make()
    env.reset(seed=0)
    env.step(TABLE3[0])
    twin = env.fork()
    assert twin._retriever is env._retriever  # shared, not copied
    a = twin.step(TABLE3[2])
    b = env.step(TABLE3[1])
    assert a[2] is True and b[2] is False and env.turn == 2 and twin.turn == 2


def test_bad_arguments(table_retriever):
    tasks = [TABLE3_TASK]
    for kwargs, match in [
        ({"max_turns": 0}, "max_turns"),
        ({"top_k": 0}, "top_k"),
        ({"search_lambda": -0.1}, "search_lambda"),
        ({"reward_mode": "llm"}, "reward_mode"),
        ({"reward_mode": "judge"}, "needs judge"),
        ({"on_judge_failure": "ignore"}, "on_judge_failure"),
        ({"retriever": "elastic"}, "retriever="),
        ({"max_information_tokens": 0}, "max_information_tokens"),
    ]:
        kwargs.setdefault("retriever", table_retriever)
        with pytest.raises(InvalidArgument, match=match):
            SearchR1Env(tasks=tasks, **kwargs)
    with pytest.raises(InvalidArgument, match="dataset="):
        SearchR1Env(dataset="squad2", retriever=table_retriever)
    with pytest.raises(InvalidTask, match="answers"):
        SearchR1Env(tasks=[{"question": "q", "answers": []}], retriever=table_retriever)
    env = SearchR1Env(tasks=tasks, retriever=table_retriever)
    with pytest.raises(InvalidTask, match="question"):
        env.reset(options={"task": {"answers": ["x"]}})


def test_scripted_policies(make):
    env = make()
    log = run_episode(env, get_scripted_policy(env, "oracle"), seed=0)
    assert log.rewards[-1] == 1.0 and log.metrics["env/answer_correct"] == 1.0 and len(log.actions) == 2
    log = run_episode(env, get_scripted_policy(env, "direct"), seed=0)
    assert len(log.actions) == 1 and log.rewards == [0.2] and log.metrics["env/searches"] == 0.0


def test_gym_make_with_kwargs(table_retriever):
    env = gym.make("TurnRL/SearchR1-v2", tasks=[TABLE3_TASK], retriever=table_retriever, max_turns=6)
    assert env.unwrapped.max_turns == 6 and env.unwrapped.reward_levels["outcome"] == "outcome"
    env.close()


ALLOWED = {
    "retrieval": {0.0, 0.3},
    "format": {0.1, -0.2},
    "outcome": {1.0, 0.2, -1.0},
}
PIECES = [
    "<think>",
    "</think>",
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<information>",
    "</information>",
    " Charles, Prince of Wales ",
    " heir apparent ",
    "<",
    ">",
    "/",
    "\n",
    "x",
    "日",
    "\x00",
    "Elizabeth",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(PIECES), max_size=14).map("".join), min_size=1, max_size=6))
def test_fuzz_step(make, turns):
    env = make(max_turns=4)
    env.reset(seed=0)
    for i, text in enumerate(turns):
        msgs, reward, terminated, truncated, info = env.step(text)
        comps = info["reward_components"]
        assert math.isfinite(reward) and math.isclose(reward, sum(comps.values()))
        assert not truncated
        for name, value in comps.items():
            if name in ALLOWED:
                assert value in ALLOWED[name], (name, value)
        if "search_count" in comps:
            assert math.isclose(comps["search_count"], -0.1 * env._searches)
        assert terminated == (info["action"] == "answer" or i + 1 == 4)
        if terminated:
            assert msgs == [] and set(comps) == {"outcome"} and "episode_metrics" in info
            break
        assert len(msgs) == 1 and msgs[0]["role"] == "user"
