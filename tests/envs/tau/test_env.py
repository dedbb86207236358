"""The τ-bench env end to end with the scripted customer: episodes, errors, budget, isolation, fork, fuzzing."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym_turn
from agentgym_turn.error import InvalidArgument, InvalidTask
from agentgym_turn.policies import get_scripted_policy, run_episode
from envs.tau.env import TauEnv, parse_turn, visible_reply

gym.register_envs(agentgym_turn)


@pytest.fixture(scope="module")
def retail_env() -> TauEnv:
    return TauEnv("retail", split="all")


def call(name: str, **arguments: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_make_reset_and_system_prompt() -> None:
    env = gym.make("TurnRL/TauAirline-v2")  # trains on split="train" by default
    messages, info = env.reset(seed=3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "<tool_call>" in messages[0]["content"] and '"book_reservation"' in messages[0]["content"]
    assert "Airline Agent Policy" in messages[0]["content"]
    assert info["task_id"] in load_split("airline", "train")
    assert env.unwrapped.max_turns == 30


def load_split(domain: str, split: str) -> set[str]:
    from envs.tau.data import load_domain

    return set(load_domain(domain).splits[split])


def test_bad_make_arguments_name_the_fix() -> None:
    with pytest.raises(InvalidArgument, match="split"):
        TauEnv("retail", split="dev")
    with pytest.raises(InvalidArgument, match="domain"):
        TauEnv("telecom")
    with pytest.raises(InvalidArgument, match="max_turns"):
        TauEnv("retail", max_turns=0)
    with pytest.raises(InvalidArgument, match="user="):
        TauEnv("retail", user=42)  # type: ignore[arg-type]
    env = TauEnv("retail")
    with pytest.raises(InvalidTask, match="'id'"):
        env.reset(options={"task": {"question": "x"}})
    with pytest.raises(InvalidArgument, match="no task id"):
        env.reset(options={"task": {"id": "9999"}})


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ('<tool_call>{"name": "get_order_details"', "unbalanced tags"),
        ("<tool_call>not json</tool_call>", "invalid JSON"),
        ('<tool_call>{"name": "drop_tables", "arguments": {}}</tool_call>', "unknown tool 'drop_tables'"),
        ('<tool_call>{"name": "get_order_details", "arguments": {}}</tool_call>', "missing required argument"),
        ('<tool_call>{"name": "get_order_details", "arguments": {"order_id": 1}}</tool_call>', "must be of type"),
        ("<think>only thinking</think>", "empty turn"),
        ("   ", "empty turn"),
        ("<tool_call>{}</tool_call>" * 17, "at most 16"),
    ],
)
def test_malformed_turns_become_error_observations(retail_env: TauEnv, action: str, error: str) -> None:
    retail_env.reset(seed=0, options={"task": {"id": "0"}})
    messages, reward, terminated, truncated, info = retail_env.step(action)
    assert not terminated and not truncated and reward == 0.0 and info["reward_components"] == {}
    assert any(m["role"] == "tool" and m["content"].startswith("Error: ") and error in m["content"] for m in messages)


def test_parse_turn_and_visible_reply() -> None:
    assert parse_turn("Hello there") is None
    calls = parse_turn('<think><tool_call>x</tool_call></think><tool_call>{"name": "a", "args": {"k": 1}}</tool_call>')
    assert len(calls) == 1 and calls[0].name == "a" and calls[0].args == {"k": 1}
    assert visible_reply("<think>secret</think> Hi!") == "Hi!"


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_scripted_policies_end_to_end(domain: str) -> None:
    env = gym.make(f"TurnRL/Tau{domain.capitalize()}-v2", split="test")
    oracle = run_episode(env, get_scripted_policy(env, "oracle"), seed=1)
    assert oracle.terminated and oracle.rewards[-1] == 1.0
    assert oracle.metrics["env/success"] == 1.0
    # the oracle's only failing calls are the gold actions that fail on purpose (e.g. a lookup by a mistyped id)
    assert oracle.metrics["env/tool_errors"] == len(oracle.infos[-1]["verifier"]["gold_errors"])
    assert all(r == 0.0 for r in oracle.rewards[:-1])
    assert oracle.infos[-1]["reward_components"] == {"task": 1.0}
    transfer = run_episode(env, get_scripted_policy(env, "transfer"), seed=1)
    assert transfer.terminated and len(transfer.rewards) == 1 and transfer.infos[-1]["end_reason"] == "transfer"
    no_tools = run_episode(env, get_scripted_policy(env, "no_tools"), seed=1)
    assert no_tools.infos[-1]["end_reason"] == "user_stop"
    task = env.unwrapped.task
    has_write = any(a["name"] not in ("transfer_to_human_agents",) and a["name"].split("_")[0] in
                    ("cancel", "exchange", "modify", "return", "book", "update", "send")
                    for a in task["evaluation_criteria"]["actions"])  # fmt: skip
    assert no_tools.rewards[-1] == (0.0 if has_write else 1.0)


def test_weak_policies_score_below_the_oracle_over_the_test_split() -> None:
    env = TauEnv("retail", split="test")
    scores = {}
    for name in ("oracle", "transfer", "no_tools"):
        rewards = [run_episode(env, TauEnv.scripted_policies[name], seed=0, options={"task": t}).rewards[-1]
                   for t in env._tasks]  # fmt: skip
        scores[name] = float(np.mean(rewards))
    assert scores["oracle"] == 1.0 and scores["transfer"] < 0.2 and scores["no_tools"] < 0.2


def test_turn_budget_ends_and_scores_the_episode() -> None:
    env = TauEnv("retail", max_turns=3)
    env.reset(seed=0, options={"task": {"id": "0"}})
    for i in range(3):
        messages, reward, terminated, truncated, info = env.step(call("get_order_details", order_id="#W2378156"))
        assert terminated == (i == 2) and not truncated
    assert info["end_reason"] == "max_turns" and reward == 0.0 and messages == []
    assert info["episode_metrics"]["env/turns"] == 3.0


def test_two_envs_never_see_each_others_writes() -> None:
    a, b = TauEnv("retail"), TauEnv("retail")
    a.reset(seed=0, options={"task": {"id": "0"}})
    b.reset(seed=0, options={"task": {"id": "0"}})
    out, *_ = a.step(call("cancel_pending_order", order_id="#W5918442", reason="no longer needed"))
    assert json.loads(out[0]["content"])["status"] == "cancelled"
    out, *_ = b.step(call("get_order_details", order_id="#W5918442"))
    assert json.loads(out[0]["content"])["status"] == "pending"
    a.reset(seed=0, options={"task": {"id": "0"}})  # a new episode starts from the pristine database
    out, *_ = a.step(call("get_order_details", order_id="#W5918442"))
    assert json.loads(out[0]["content"])["status"] == "pending"


def test_fork_copies_the_database() -> None:
    env = TauEnv("retail")
    env.reset(seed=0, options={"task": {"id": "0"}})
    child = env.fork()
    assert child._data is env._data and child.database is not env.database
    child.step(call("cancel_pending_order", order_id="#W5918442", reason="no longer needed"))
    out, *_ = env.step(call("get_order_details", order_id="#W5918442"))
    assert json.loads(out[0]["content"])["status"] == "pending"
    assert len(child.history) == len(env.history)


def test_output_check_needs_the_communicated_info() -> None:
    task_id = next(t["id"] for t in TauEnv("retail", split="all")._tasks
                   if t["evaluation_criteria"]["communicate_info"])  # fmt: skip
    for output_check, expected in ((False, 1.0), (True, 0.0)):
        env = TauEnv("retail", split="all", output_check=output_check)
        env.reset(seed=0, options={"task": {"id": task_id}})
        actions = env.task["evaluation_criteria"]["actions"]
        for a in actions:
            env.step(call(a["name"], **a["arguments"]))
        *_, info = env.step("All done, goodbye.")  # the right writes, but the info is never said
        assert info["reward_components"]["task"] == expected
        assert info["verifier"]["db_match"] is True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.text(max_size=200),
    st.builds(lambda n, a: f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>",
              st.sampled_from(["get_order_details", "cancel_pending_order", "calculate", "modify_user_address",
                               "return_delivered_order_items", "nope"]),
              st.dictionaries(st.sampled_from(["order_id", "reason", "expression", "user_id", "item_ids", "zip"]),
                              st.one_of(st.text(max_size=20), st.integers(), st.lists(st.text(max_size=5)),
                                        st.none()), max_size=4)),
    st.sampled_from(["<tool_call>", "</tool_call>", "<think>", "{", "Could you confirm?", "###STOP###"]),
), min_size=1, max_size=6))  # fmt: skip
def test_fuzzed_turns_never_raise(retail_env: TauEnv, actions: list[str]) -> None:
    retail_env.reset(seed=0, options={"task": {"id": "5"}})
    for action in actions:
        messages, reward, terminated, truncated, info = retail_env.step(action)
        assert isinstance(messages, list) and np.isfinite(reward) and not truncated
        assert set(info["reward_components"]) <= set(TauEnv.reward_levels)
        if terminated:
            assert messages == [] and reward in (0.0, 1.0)
            break


def test_a_custom_task_reusing_an_id_gets_its_own_gold_state() -> None:
    env = TauEnv("retail", split="all")
    custom = copy.deepcopy(env._data.task_by_id("0"))
    custom["evaluation_criteria"]["actions"] = [
        {"name": "cancel_pending_order", "arguments": {"order_id": "#W5918442", "reason": "no longer needed"}}
    ]
    env.reset(seed=0, options={"task": {"id": "0"}})
    *_, info = env.step("Bye.")
    assert info["reward_components"]["task"] == 0.0  # task 0 wants an exchange
    env.reset(seed=0, options={"task": custom})
    env.step(call("cancel_pending_order", order_id="#W5918442", reason="no longer needed"))
    *_, info = env.step("Bye.")
    assert info["reward_components"]["task"] == 1.0
