"""The scripted customer over every τ²-bench task: it never recites its scenario, gives a fact only when asked, and
confirms only the actions its task's gold actions contain."""

from __future__ import annotations

import re
from typing import Any

import pytest

from envs.tau.data import load_domain
from envs.tau.env import TauEnv, oracle_policy
from envs.tau.user import REQUESTS, STOP, ScriptedUser, has_stop_marker, task_facts

TASKS = [(d, t) for d in ("retail", "airline") for t in load_domain(d).tasks]
IDS = [f"{d}-{t['id']}" for d, t in TASKS]

#: How a test agent proposes each write tool, with the gold action's order / reservation id filled in.
PROPOSE = {
    "return_delivered_order_items": "return the items of order {id}",
    "exchange_delivered_order_items": "exchange the items of order {id}",
    "modify_pending_order_items": "modify the items of order {id}",
    "cancel_pending_order": "cancel order {id}",
    "modify_pending_order_address": "change the shipping address of order {id}",
    "modify_pending_order_payment": "change the payment method of order {id}",
    "modify_user_address": "update the address on your account",
    "book_reservation": "book the flights",
    "update_reservation_flights": "change the flights of reservation {id}",
    "cancel_reservation": "cancel reservation {id}",
    "update_reservation_baggages": "add bags to reservation {id}",
    "update_reservation_passengers": "update the passengers of reservation {id}",
}
DOMAIN_TOOLS = {
    "retail": [k for k in PROPOSE if "reservation" not in k],
    "airline": [k for k in PROPOSE if "reservation" in k],
}
FACT_QUESTIONS = [
    "What is your name?",
    "What is your zip code?",
    "Could you provide your email address?",
    "What is your user id?",
    "What is the order id?",
    "What is the reservation number?",
    "Which items are you asking about?",
    "Which options would you like instead?",
    "Which payment method should I use?",
    "What is the new address?",
    "What is the reason?",
    "Where and when would you like to fly, and in which cabin?",
    "How many bags?",
    "Who are the passengers?",
]
IDENTITY_QUESTIONS = [
    ("name", "What is your name?"),
    ("zip", "What is your zip code?"),
    ("email", "What is your email?"),
    ("user_id", "What is your user id?"),
    ("order_id", "What is the order id?"),
    ("reservation_id", "What is the reservation id?"),
]
SMALL_TALK = ["How can I help you today?", "Could you tell me a bit more?", "How are you doing today?"]


def writes(task: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in task["evaluation_criteria"]["actions"] if a["name"] in REQUESTS]


def propose(action: dict[str, Any], *, id_: str | None = None) -> str:
    args = action["arguments"]
    primary = id_ or args.get("order_id") or args.get("reservation_id") or ""
    return f"I can {PROPOSE[action['name']].format(id=primary)} now. Do you confirm (yes/no)?"


def sentences(task: dict[str, Any]) -> list[str]:
    """Every sentence of the scenario (3+ words), normalised: what the customer must never say verbatim."""
    instr = task["user_scenario"]["instructions"]
    texts = [instr] if isinstance(instr, str) else [str(v) for v in instr.values() if v]
    if task["user_scenario"].get("persona"):
        texts.append(task["user_scenario"]["persona"])
    out = []
    for text in texts:
        for sent in re.split(r"(?<=[.!?])\s+|\n+", text):
            norm = " ".join(sent.lower().split()).strip(" .")
            if len(norm.split()) >= 3:
                out.append(norm)
    return out


def fact_values(facts: dict[str, str]) -> list[str]:
    """The identifying values inside the customer's fact sentences (names, ids, emails, zip codes)."""
    values = []
    for kind in ("name", "zip", "email", "user_id", "order_id", "reservation_id"):
        if kind in facts:
            values += re.findall(r"#W\d{7}|[\w.+-]+@[\w.-]+\w|\b[a-z]+_[a-z]+_\d{4}\b|\b\d{5}\b|\b[A-Z0-9]{6}\b",
                                 facts[kind])  # fmt: skip
            if kind == "name":
                values.append(facts[kind].removeprefix("My name is ").rstrip("."))
    return values


def scripted_run(domain: str, task: dict[str, Any]) -> list[str]:
    """The customer's messages over a probing conversation: small talk, every fact question, each gold write
    proposed (and a wrong one), then "anything else?"."""
    user = ScriptedUser(patience=100)
    said = [user.start(task)]
    said += [user.reply(q) for q in SMALL_TALK + FACT_QUESTIONS]
    wrong = next(t for t in DOMAIN_TOOLS[domain] if t not in {a["name"] for a in writes(task)})
    said.append(user.reply(propose({"name": wrong, "arguments": {}}, id_="#W0000000")))
    said += [user.reply(propose(a)) for a in writes(task)]
    said.append(user.reply("Is there anything else I can help you with?"))
    return said


@pytest.mark.parametrize(("domain", "task"), TASKS, ids=IDS)
def test_no_instruction_sentence_ever_appears_in_a_user_message(domain: str, task: dict[str, Any]) -> None:
    said = " ".join(" ".join(m.lower().split()) for m in scripted_run(domain, task))
    leaked = [s for s in sentences(task) if s in said]
    assert not leaked


@pytest.mark.parametrize(("domain", "task"), TASKS, ids=IDS)
def test_facts_appear_only_after_being_asked(domain: str, task: dict[str, Any]) -> None:
    facts = task_facts(task, load_domain(domain).db)
    values = fact_values(facts)
    user = ScriptedUser(patience=100)
    unasked = [user.start(task)] + [user.reply(q) for q in SMALL_TALK]
    assert not [v for v in values if any(v in m for m in unasked)]
    for kind, question in IDENTITY_QUESTIONS:
        answer = user.reply(question)
        if kind in facts:
            assert facts[kind] in answer
            others = [v for k in facts if k != kind for v in fact_values({k: facts[k]})]
            assert not [v for v in others if v in answer and v not in facts[kind]]
        else:
            assert answer.startswith("I don't remember")


@pytest.mark.parametrize(("domain", "task"), TASKS, ids=IDS)
def test_confirms_only_the_gold_actions(domain: str, task: dict[str, Any]) -> None:
    gold = writes(task)
    user = ScriptedUser(patience=100)
    user.start(task)
    for tool in DOMAIN_TOOLS[domain]:
        if tool not in {a["name"] for a in gold}:
            primary = "#W0000000" if domain == "retail" else "ZZ9ZZ9"
            assert user.reply(propose({"name": tool, "arguments": {}}, id_=primary)).startswith("No,")
    for action in gold:
        args = action["arguments"]
        if "order_id" in args or "reservation_id" in args:
            wrong_id = "#W0000000" if "order_id" in args else "ZZ9ZZ9"
            assert user.reply(propose(action, id_=wrong_id)).startswith("No,"), action
        assert user.reply(propose(action)) == "Yes, please go ahead.", action
    again = [a for a in gold if "order_id" in a["arguments"] or "reservation_id" in a["arguments"]]
    if again and len({a["name"] for a in gold}) == len(gold):  # each gold write once: a repeat is not wanted
        assert user.reply(propose(again[0])).startswith("No,")
    assert has_stop_marker(user.reply("Is there anything else I can help you with?")) == STOP


def test_wrong_item_ids_are_declined(retail: Any) -> None:
    task = retail.task_by_id("0")  # exchange two items of #W2378156
    user = ScriptedUser()
    user.start(task)
    (action,) = writes(task)
    item, new = action["arguments"]["item_ids"][0], action["arguments"]["new_item_ids"][0]
    no = f"I will exchange item {item} of order #W2378156 for item 1234567890. Shall I proceed?"
    assert user.reply(no).startswith("No, that is not what I want.")
    yes = f"I will exchange item {item} of order #W2378156 for item {new}. Shall I proceed?"
    assert user.reply(yes) == "Yes, please go ahead."


def test_stop_rules_and_patience(retail: Any) -> None:
    user = ScriptedUser(patience=2)
    assert user.start(retail.task_by_id("0")) == "Hi. I'd like to exchange some items I received."
    assert user.reply("Is there anything else?") == "I'd like to exchange some items I received."  # still pending
    assert user.reply("Anything else?") == "I'd like to exchange some items I received."
    assert has_stop_marker(user.reply("Anything else?")) == STOP  # patience (2 replies) spent
    user.start(retail.task_by_id("0"))
    assert has_stop_marker(user.reply("The exchange is done.")) == STOP  # asks nothing


def test_env_episodes_with_the_oracle_and_a_probing_agent_leak_nothing() -> None:
    for domain in ("retail", "airline"):
        env = TauEnv(domain, split="test")
        for task in env._tasks[:5]:
            env.reset(seed=0, options={"task": {"id": task["id"]}})
            for _ in range(40):
                _, _, terminated, _, _ = env.step(oracle_policy(env, None))  # type: ignore[arg-type]
                if terminated:
                    break
            env.reset(seed=0, options={"task": {"id": task["id"]}})
            for question in FACT_QUESTIONS[:4]:
                _, _, terminated, _, _ = env.step(question)
                if terminated:
                    break
            users = " ".join(" ".join(m["content"].lower().split()) for m in env.history if m["role"] == "user")
            assert not [s for s in sentences(task) if s in users]
        env.close()
