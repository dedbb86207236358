"""The customer simulators: the scripted user's rules, and the LLM user's prompt/protocol/parse/retry path against
a local OpenAI-compatible HTTP server (not model quality)."""

from __future__ import annotations

import pytest

from agentgym_turn.chat import OpenAIChat
from agentgym_turn.error import ServiceError
from envs.tau.data import DomainData
from envs.tau.env import TauEnv
from envs.tau.user import GREETING, LLMUser, ScriptedUser, has_stop_marker, parse_react

from .conftest import FakeOpenAI


def client(server: FakeOpenAI) -> OpenAIChat:
    return OpenAIChat(server.url, "user-model", timeout=5.0, retries=1, backoff=0.01)


def test_scripted_user_rules(retail: DomainData) -> None:
    user = ScriptedUser(patience=3)
    first = user.start(retail.task_by_id("0"))
    assert first == "Hi. I'd like to exchange some items I received."  # no name, zip or order id until asked
    assert user.reply("What is your zip code?") == "My zip code is 19122."
    assert user.reply("Shall I exchange the items of order #W2378156?") == "Yes, please go ahead."
    assert has_stop_marker(user.reply("The exchange is done.")) == "###STOP###"
    assert has_stop_marker(user.reply("Anything else?")) == "###STOP###"  # patience spent


@pytest.mark.parametrize(
    ("raw", "text", "ok"),
    [
        ("Thought:\nI should greet.\n\nUser Response:\nHi, return a lamp.", "Hi, return a lamp.", True),
        ("User Response: Thanks! ###STOP###", "Thanks! ###STOP###", True),
        ("Thought:\nhmm\n\nHello there.", "Hello there.", False),
        ("Just a plain reply.", "Just a plain reply.", False),
    ],
)  # fmt: skip
def test_parse_react(raw: str, text: str, ok: bool) -> None:
    assert parse_react(raw) == (text, ok)


def test_llm_user_prompt_roles_and_react(fake_openai: FakeOpenAI, retail: DomainData) -> None:
    fake_openai.replies = ["Thought:\nstart\n\nUser Response:\nHi, I need to exchange two items.", "No thought here"]
    user = LLMUser(client(fake_openai))
    assert user.start(retail.task_by_id("0")) == "Hi, I need to exchange two items."
    first = fake_openai.requests[0]
    system = first["messages"][0]["content"]
    for part in ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###", "User Response:", "#W2378156", "19122"):
        assert part in system
    assert first["messages"][1:] == [{"role": "user", "content": GREETING}]
    assert first["model"] == "user-model" and first["temperature"] == 0.0
    assert user.reply("What is your zip?") == "No thought here" and user.format_errors == 1
    assert [m["role"] for m in fake_openai.requests[1]["messages"]] == ["system", "user", "assistant", "user"]


def test_env_with_llm_user_runs_and_stops(fake_openai: FakeOpenAI) -> None:
    fake_openai.replies = [
        "Thought:\nopen\n\nUser Response:\nHello, I want to cancel an order.",
        "Thought:\nall done\n\nUser Response:\nGreat, thanks! ###STOP###",
    ]
    env = TauEnv("retail", user=LLMUser(client(fake_openai)))
    messages, _ = env.reset(seed=0, options={"task": {"id": "0"}})
    assert messages[-1] == {"role": "user", "content": "Hello, I want to cancel an order."}
    messages, reward, terminated, _, info = env.step("<think>plan</think>Your order is handled.")
    assert terminated and messages == [] and info["end_reason"] == "user_stop" and reward == 0.0
    assert fake_openai.requests[1]["messages"][-1] == {"role": "user", "content": "Your order is handled."}


def test_a_failing_simulator_raises_service_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.replies = ["User Response: Hi there, I need help with an order."]
    fake_openai.default = 500
    env = TauEnv("retail", user=LLMUser(client(fake_openai)))
    env.reset(seed=0, options={"task": {"id": "0"}})
    with pytest.raises(ServiceError, match="failed after 2 attempt"):
        env.step("How can I help?")
