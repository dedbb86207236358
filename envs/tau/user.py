"""The simulated customer: an LLM playing the task's ``user_scenario``, or a deterministic scripted user.

Both speak through one small interface, :class:`UserSimulator`: ``start(task)`` resets it and returns the
customer's first message (answering the agent's fixed greeting :data:`GREETING`), ``reply(agent_text)`` answers the
agent. A reply containing one of :data:`STOP_MARKERS` ends the conversation:

* ``###STOP###``: the customer's goal is met (or they give up);
* ``###TRANSFER###``: the customer was transferred to a human agent;
* ``###OUT-OF-SCOPE###``: the scenario gives the customer nothing more to say.

:class:`ScriptedUser` is a deterministic, rule-based customer (its rules are in its docstring): it states its
request in its own words, gives a fact only when the agent asks for it, and confirms only the actions its task's
gold actions contain; it never reads its scenario aloud.

:class:`LLMUser` follows τ²-bench's simulation guidelines (one message at a time, follow the scenario strictly,
never invent information, disclose it only when asked, do not end early) in its own wording, and by default the
ReAct format TARL §2.1 uses for its simulator: ``Thought:`` then ``User Response:``. A chat-model failure raises
:class:`~agentgym_turn.error.ServiceError`.

    >>> from envs.tau.data import load_domain
    >>> user = ScriptedUser()
    >>> user.start(load_domain("retail").task_by_id("0"))
    "Hi. I'd like to exchange some items I received."
    >>> user.reply("Sure. What is your name and zip code?")
    'My name is Yusuf Rossi. My zip code is 19122.'
    >>> user.reply("Shall I cancel order #W2378156?")       # not what the task wants
    "No, that is not what I want. I'd like to exchange some items I received."
    >>> user.reply("I will exchange 2 items of order #W2378156. Do you confirm (yes/no)?")
    'Yes, please go ahead.'
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

from agentgym_turn.chat import ChatModel, make_chat_model

GREETING = "Hi! How can I help you today?"
STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
STOP_MARKERS = (STOP, TRANSFER, OUT_OF_SCOPE)

GUIDELINES = f"""# How to play the customer
You are a customer talking to a customer-service agent. Play the scenario below so that the conversation feels like
a real one.

## Rules
- Write one message at a time, as the customer, and keep the conversation flowing naturally.
- Follow the scenario instructions strictly.
- Never invent information that the scenario does not give you. Anything the scenario does not mention is unknown
  to you or not available.
- Do not copy the instructions word for word; say things in your own words.
- Reveal information gradually: give a detail only when the agent asks for it.

## Ending the conversation
- Keep going until the task is done. Do not stop early: the agent offering or agreeing to do something is not the
  same as having done it, so wait until the agent confirms the action is complete.
- Before ending, check that every request in your instructions has been handled, not just some of them.
- When the goal of the instructions is met, write {STOP} to end the conversation.
- If you are transferred to another agent, write {TRANSFER}.
- If the scenario does not give you enough information to continue, write {OUT_OF_SCOPE} to end the conversation.
"""

REACT_FORMAT = """## Output format
Reply in exactly this format, both parts every time:
Thought:
<your private reasoning about what to say next, which the agent will not see>

User Response:
<the message you send to the agent>
"""


def has_stop_marker(text: str) -> str | None:
    """The first stop marker in ``text``, or ``None``."""
    for marker in STOP_MARKERS:
        if marker in text:
            return marker
    return None


def scenario_text(task: dict[str, Any]) -> str:
    """The task's user scenario (persona and instructions) as text for the simulator's prompt."""
    scenario = task["user_scenario"]
    parts = []
    if scenario.get("persona"):
        parts.append(f"Persona:\n{scenario['persona']}")
    instr = scenario["instructions"]
    if isinstance(instr, str):
        parts.append(f"Instructions:\n{instr}")
    else:
        labels = (
            ("domain", "Domain"),
            ("reason_for_call", "Reason for call"),
            ("known_info", "Known info"),
            ("unknown_info", "Unknown info"),
            ("task_instructions", "Task instructions"),
        )
        parts += [f"{label}:\n{instr[key]}" for key, label in labels if instr.get(key)]
    return "\n\n".join(parts)


def parse_react(text: str) -> tuple[str, bool]:
    """The customer's message from a ReAct reply and whether the ``User Response:`` marker was present."""
    head, sep, tail = text.rpartition("User Response:")
    if sep:
        return tail.strip(), True
    return re.sub(r"^\s*Thought:.*?(\n\s*\n|$)", "", text, count=1, flags=re.S).strip() or text.strip(), False


class UserSimulator(Protocol):
    """The customer side of a τ-bench conversation."""

    def start(self, task: dict[str, Any]) -> str:
        """Reset for ``task``; return the first customer message (the answer to :data:`GREETING`)."""
        ...

    def reply(self, agent_text: str) -> str:
        """The customer's answer to the agent's message ``agent_text``."""
        ...


# ---------------------------------------------------------------------------------------------- scripted customer
#: What each write tool does, as the customer asks for it (the high-level request, in the customer's own words).
REQUESTS: dict[str, str] = {
    "return_delivered_order_items": "return some items I received",
    "exchange_delivered_order_items": "exchange some items I received",
    "modify_pending_order_items": "change some items in an order that has not shipped yet",
    "cancel_pending_order": "cancel an order",
    "modify_pending_order_address": "change the shipping address of an order",
    "modify_pending_order_payment": "change the payment method of an order",
    "modify_user_address": "update the address on my account",
    "book_reservation": "book a flight",
    "update_reservation_flights": "change the flights of a reservation",
    "cancel_reservation": "cancel a reservation",
    "update_reservation_baggages": "add checked bags to a reservation",
    "update_reservation_passengers": "update the passenger details of a reservation",
}
_NO_WRITE_REQUEST = {"retail": "ask about one of my orders", "airline": "ask about one of my reservations"}

#: Fact kind -> what in the agent's message asks for it (lower-cased; "email address" counts as email only).
FACT_QUESTIONS: dict[str, re.Pattern[str]] = {
    kind: re.compile(pattern)
    for kind, pattern in (
        ("name", r"\bname\b"),
        ("zip", r"\bzip|postal code|postcode"),
        ("email", r"e-?mail"),
        ("user_id", r"\buser ?id\b|customer id|account id|username"),
        ("order_id", r"order (id|number)|which order"),
        ("reservation_id", r"reservation (id|number|code)|confirmation (number|code)|booking (reference|code|number)"
                           r"|which reservation"),
        ("items", r"which (item|product)|what (item|product)"),
        ("new_items", r"option|variant|colou?r|\bsize\b|instead|new item|replacement|which one would"),
        ("payment", r"payment|pay with|refund|credit card|paypal|gift card|certificate"),
        ("address", r"\baddress\b"),
        ("reason", r"\breason\b|\bwhy\b"),
        ("trip", r"\bwhere\b|destination|origin|which date|what date|\bwhen\b|cabin|which flight"),
        ("bags", r"\bbag"),
        ("passengers", r"passenger|traveler|traveller"),
    )
}  # fmt: skip
_ASKS = re.compile(r"\?|\b(please (provide|share|tell|give|confirm|let me know)|can you|could you|may i have)\b", re.I)
_CONFIRM_RE = re.compile(
    r"\b(confirm|proceed|yes/no|go ahead|shall i|should i|would you like me to|do you want me to)\b", re.I
)
_ANYTHING_ELSE = re.compile(r"\banything else\b|\bany other\b", re.I)
_VERB_CHANGE = r"\b(modify|change|update|switch|replace|swap|upgrade)"
#: (pattern in the agent's proposal, the write tools it may mean), per domain.
PROPOSALS: dict[str, tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]] = {
    "retail": (
        (re.compile(r"\breturn"), ("return_delivered_order_items",)),
        (re.compile(r"\bexchang"), ("exchange_delivered_order_items",)),
        (re.compile(r"\bcancel"), ("cancel_pending_order",)),
        (re.compile(_VERB_CHANGE + r".*\baddress|\baddress.*" + _VERB_CHANGE, re.S),
         ("modify_pending_order_address", "modify_user_address")),
        (re.compile(_VERB_CHANGE + r".*payment|payment.*" + _VERB_CHANGE, re.S), ("modify_pending_order_payment",)),
        (re.compile(_VERB_CHANGE + r".*\bitem|\bitem.*" + _VERB_CHANGE, re.S), ("modify_pending_order_items",)),
    ),
    "airline": (
        (re.compile(r"\bbook"), ("book_reservation",)),
        (re.compile(r"\bcancel"), ("cancel_reservation",)),
        (re.compile(r"\bbag"), ("update_reservation_baggages",)),
        (re.compile(_VERB_CHANGE + r".*passenger|passenger.*" + _VERB_CHANGE, re.S),
         ("update_reservation_passengers",)),
        (re.compile(_VERB_CHANGE + r".*(flight|cabin)|(flight|cabin).*" + _VERB_CHANGE, re.S),
         ("update_reservation_flights",)),
    ),
}  # fmt: skip
_ORDER_ID = re.compile(r"#W\d{7}")
_RESERVATION_ID = re.compile(r"\b(?![A-Z]{3}\d{3}\b)(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b")
_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{4}\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+\w")
_ZIP = re.compile(r"\b\d{5}\b")
_NAME = re.compile(
    r"(?:You are|You're|Your name is|You name is|called)\s+(?:user\s+)?([A-Z][a-z]+(?: [A-Z][a-z]+)?)\b(?! \()"
)
_PRIMARY_IDS = ("order_id", "reservation_id")
_IDENTITY = ("name", "zip", "email", "user_id", "order_id", "reservation_id")
_CANCEL_REASONS = {"no longer needed": "I no longer need it.", "ordered by mistake": "I ordered it by mistake."}


def _join(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _gold_writes(task: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for a in task["evaluation_criteria"]["actions"] if a["name"] in REQUESTS]


def _payment_text(db: dict[str, Any], method_id: str) -> str:
    for user in db.get("users", {}).values():
        method = user.get("payment_methods", {}).get(method_id)
        if method is None:
            continue
        source = method.get("source")
        if source == "credit_card":
            brand = f"{method['brand']} " if method.get("brand") else ""
            return f"my {brand}credit card ending in {method.get('last_four', '')}"
        return {"paypal": "my PayPal account", "gift_card": "my gift card"}.get(source, f"my travel {source}")
    return "the payment method on my account"


def task_facts(task: dict[str, Any], db: dict[str, Any] | None = None) -> dict[str, str]:
    """What the scripted customer can tell the agent, one first-person sentence per fact kind (see
    :data:`FACT_QUESTIONS`). Identity and ids come from the scenario's text (``known_info``, the reason for the call,
    the task instructions; names and zip codes also from the gold lookup's arguments); what the customer wants done
    (items, options, payment, address, reason, trip, bags, passengers) from the gold write actions' arguments, read
    against the domain database ``db`` where an id must become words (item names, options, payment methods)."""
    instr = task["user_scenario"]["instructions"]
    if isinstance(instr, str):
        known, text = instr, instr
    else:
        known = instr.get("known_info") or ""
        text = " ".join(str(instr.get(k) or "") for k in ("known_info", "reason_for_call", "task_instructions"))
    db = db or {}
    actions = task["evaluation_criteria"]["actions"]
    facts: dict[str, str] = {}
    lookup = next((a["arguments"] for a in actions if a["name"] == "find_user_id_by_name_zip"), {})
    name = f"{lookup['first_name']} {lookup['last_name']}" if lookup.get("first_name") else None
    found = _NAME.search(known)
    if name is None and found:
        name = found.group(1)
    user_ids = _USER_ID.findall(known)
    if name is None and user_ids:
        name = " ".join(w.capitalize() for w in user_ids[0].split("_")[:2])
    if name:
        facts["name"] = f"My name is {name}."
    zips = _ZIP.findall(known)
    zip_code = lookup.get("zip") if lookup.get("zip") in zips else (zips[-1] if zips else None)
    if zip_code:
        facts["zip"] = f"My zip code is {zip_code}."
    emails = _EMAIL.findall(known)
    if emails:
        facts["email"] = f"My email is {emails[0]}." if len(emails) == 1 else f"My emails are {_join(emails)}."
    if user_ids:
        facts["user_id"] = f"My user id is {user_ids[0]}."
    orders = list(dict.fromkeys(_ORDER_ID.findall(text)))
    if orders:
        facts["order_id"] = f"The order id{' is' if len(orders) == 1 else 's are'} {_join(orders)}."
    reservations = list(dict.fromkeys(_RESERVATION_ID.findall(text)))
    if reservations:
        facts["reservation_id"] = f"The reservation id is {_join(reservations)}."
    items, new_items, payments, sentences = [], [], [], {}
    for action in _gold_writes(task):
        args = action["arguments"]
        order = db.get("orders", {}).get(args.get("order_id"), {})
        names = {i["item_id"]: i["name"] for i in order.get("items", [])}
        items += [names[i].lower() for i in args.get("item_ids", []) if i in names]
        for item_id in args.get("new_item_ids", []):
            for product in db.get("products", {}).values():
                variant = product.get("variants", {}).get(item_id)
                if variant is not None:
                    options = ", ".join(f"{k} {v}" for k, v in variant.get("options", {}).items())
                    new_items.append(f"the {product['name'].lower()} with {options}")
        for key in ("payment_method_id", "payment_id"):
            if args.get(key):
                payments.append(_payment_text(db, args[key]))
        if "address1" in args:
            parts = [args.get(k) for k in ("address1", "address2", "city", "state", "zip", "country")]
            sentences["address"] = f"The new address is {', '.join(p for p in parts if p)}."
        if action["name"] == "cancel_pending_order":
            sentences["reason"] = _CANCEL_REASONS.get(args.get("reason", ""), "I no longer need it.")
        if action["name"] == "book_reservation":
            first = (args.get("flights") or [{}])[0]
            kind = str(args.get("flight_type", "")).replace("_", " ")
            sentences["trip"] = (f"I want a {kind} trip from {args.get('origin')} to {args.get('destination')}, "
                                 f"leaving on {first.get('date')}, in {args.get('cabin')}.")  # fmt: skip
        if action["name"] == "update_reservation_flights":
            flights = [f"{f['flight_number']} on {f['date']}" for f in args.get("flights", [])]
            sentences["trip"] = f"I would like {args.get('cabin')} on the flights {_join(flights)}."
        if action["name"] == "update_reservation_baggages":
            sentences["bags"] = f"I want {args.get('total_baggages')} checked bags in total."
        if args.get("passengers"):
            people = [f"{q['first_name']} {q['last_name']}, born {q['dob']}" for q in args["passengers"]]
            sentences["passengers"] = f"The passengers are {'; '.join(people)}."
    if items:
        facts["items"] = f"It is about the {_join(list(dict.fromkeys(items)))}."
    if new_items:
        facts["new_items"] = f"I would like {_join(new_items)}."
    if payments:
        facts["payment"] = f"Please use {_join(list(dict.fromkeys(payments)))}."
    facts.update(sentences)
    return facts


def asked_facts(agent_text: str) -> list[str]:
    """The fact kinds the agent's message asks for, in :data:`FACT_QUESTIONS` order."""
    text = agent_text.lower().replace("email address", "email").replace("e-mail address", "email")
    return [kind for kind, pattern in FACT_QUESTIONS.items() if pattern.search(text)]


class ScriptedUser:
    """A deterministic customer derived from the task, for tests and for running the env without an LLM.

    It never recites its scenario; it speaks from a small set of first-person templates filled with the task's facts
    (:func:`task_facts`). Its rules, applied to each agent message in this order:

    1. Opening (the answer to :data:`GREETING`): the high-level request only, in its own words, built from the kinds
       of the task's gold write actions (:data:`REQUESTS`, e.g. "I'd like to exchange some items I received."), or
       a general question about an order / a reservation when the task writes nothing. No name, id or detail.
    2. After ``patience`` replies: ``###STOP###``.
    3. A message that asks nothing (no ``?``, no "please provide / could you / ..."): thanks and ``###STOP###``.
    4. A confirmation request ("confirm", "proceed", "shall I", ...): the proposed action is read off the message
       (:data:`PROPOSALS`: "return", "exchange", "cancel", "change ... address", ...). It is confirmed ("Yes, please
       go ahead.") only when every proposed action is a gold write of the task not yet confirmed, the message names
       that gold action's order / reservation id, and every order id, reservation id and 10-digit item id it names
       belongs to those gold actions. Otherwise the customer declines and restates what it wants; a request to
       confirm that names no action gets a request for the details. Identity questions in the same message are
       answered too; words about the proposal's details (items, address, payment, ...) are not taken as questions.
    5. Questions for facts (:func:`asked_facts`: name, zip, email, user id, order id, reservation id, items, new
       options, payment, address, reason, trip, bags, passengers): each asked fact it knows, one sentence each;
       for an asked fact it does not know, "I don't remember ..." (it never invents one).
    6. "Anything else?" with every gold write confirmed: thanks and ``###STOP###``.
    7. Any other question: it restates the requests not yet confirmed.
    """

    def __init__(self, patience: int = 10) -> None:
        self.patience = patience
        self._task: dict[str, Any] = {}
        self._facts: dict[str, str] = {}
        self._pending: list[dict[str, Any]] = []
        self._replies = 0

    def start(self, task: dict[str, Any]) -> str:
        domain = task.get("domain", "retail")
        db: dict[str, Any] = {}
        if domain in PROPOSALS:
            from envs.tau.data import load_domain

            db = load_domain(domain).db
        self._task = task
        self._facts = task_facts(task, db)
        self._pending = _gold_writes(task)
        self._replies = 0
        return f"Hi. {self._request()}"

    def _request(self) -> str:
        """The requests not yet confirmed, in the customer's words (a general question when the task writes
        nothing; nothing left to ask once every gold write is confirmed)."""
        kinds = list(dict.fromkeys(REQUESTS[a["name"]] for a in self._pending))
        if kinds:
            return f"I'd like to {_join(kinds)}."
        if _gold_writes(self._task):
            return "That is all I wanted."
        return f"I'd like to {_NO_WRITE_REQUEST.get(self._task.get('domain', ''), 'ask a question')}."

    def _unknown(self, kind: str) -> str:
        what = {"email": "my email address", "order_id": "the order id", "reservation_id": "the reservation id",
                "user_id": "my user id", "zip": "my zip code"}.get(kind, f"the {kind.replace('_', ' ')}")  # fmt: skip
        return f"I don't remember {what}."

    def _confirm(self, agent_text: str) -> str:
        domain = self._task.get("domain", "retail")
        proposed = [tools for pattern, tools in PROPOSALS.get(domain, ()) if pattern.search(agent_text.lower())]
        if not proposed:
            return "Could you tell me exactly what you are going to do?"
        matched: list[dict[str, Any]] = []
        for tools in proposed:
            action = next((a for a in self._pending if a["name"] in tools and a not in matched
                           and all(a["arguments"][k] in agent_text for k in _PRIMARY_IDS if k in a["arguments"])),
                          None)  # fmt: skip
            if action is None:
                return f"No, that is not what I want. {self._request()}"
            matched.append(action)
        allowed = {json.dumps(v) for a in matched for v in a["arguments"].values()}
        allowed_text = " ".join(allowed)
        named = _ORDER_ID.findall(agent_text) + _RESERVATION_ID.findall(agent_text)
        named += re.findall(r"\b\d{10}\b", agent_text)
        if any(n not in allowed_text for n in named):
            return f"No, that is not what I want. {self._request()}"
        for action in matched:
            self._pending.remove(action)
        return "Yes, please go ahead."

    def reply(self, agent_text: str) -> str:
        self._replies += 1
        if self._replies > self.patience:
            return f"I have to go now. {STOP}"
        if not _ASKS.search(agent_text):
            return f"Thank you, that is all. {STOP}"
        parts = []
        kinds = asked_facts(agent_text)
        if _CONFIRM_RE.search(agent_text):
            parts.append(self._confirm(agent_text))
            kinds = [k for k in kinds if k in _IDENTITY]  # the proposal's own details are not questions
        parts += [self._facts.get(kind) or self._unknown(kind) for kind in kinds]
        if parts:
            return " ".join(parts)
        if not self._pending and (_ANYTHING_ELSE.search(agent_text) or _gold_writes(self._task)):
            return f"No, that is everything. Thank you! {STOP}"
        return self._request()


#: v0's confirmation questions ("do you want me to" came with v1's customer).
_CONFIRM_V0 = re.compile(r"\b(confirm|proceed|yes/no|go ahead|shall i|should i|would you like me to)\b", re.I)


class ScriptedUserV0:
    """v0's scripted customer (``user="scripted-v0"``, the default of the ``TurnRL/Tau*-v0`` ids), kept to reproduce
    v0 results; it leaks its scenario, which :class:`ScriptedUser` does not.

    It opens with the task's reason for calling and everything it knows; it answers any confirmation question
    ("confirm", "proceed", "yes/no", ...) with a yes; to any other question it repeats what it knows; a message
    without a question ends the conversation with ``###STOP###``. After ``patience`` answers it stops anyway.
    """

    def __init__(self, patience: int = 10) -> None:
        self.patience = patience
        self._known = ""
        self._replies = 0

    def start(self, task: dict[str, Any]) -> str:
        instr = task["user_scenario"]["instructions"]
        if isinstance(instr, str):
            reason, known = instr, ""
        else:
            reason, known = instr.get("reason_for_call") or "", instr.get("known_info") or ""
        self._known = known.strip()
        self._replies = 0
        return f"Hi. {reason.strip()} {self._known}".strip()

    def reply(self, agent_text: str) -> str:
        self._replies += 1
        if self._replies > self.patience:
            return f"I have to go now. {STOP}"
        if "?" not in agent_text:
            return f"Thank you, that is all. {STOP}"
        if _CONFIRM_V0.search(agent_text):
            return "Yes, please go ahead."
        return f"Here is what I know: {self._known}" if self._known else "I don't know."


#: The ``user=`` names of the scripted customers: ``"scripted"`` (v1 on) and ``"scripted-v0"``.
SCRIPTED_USERS: dict[str, type[ScriptedUser] | type[ScriptedUserV0]] = {
    "scripted": ScriptedUser,
    "scripted-v0": ScriptedUserV0,
}


class LLMUser:
    """An LLM customer (τ²-bench guidelines, optional ReAct format) behind the shared chat-model client.

    Attributes:
        model: a :class:`~agentgym_turn.chat.ChatModel` or a spec for :func:`~agentgym_turn.chat.make_chat_model`.
        react: ask for ``Thought:`` / ``User Response:`` and send only the response (TARL §2.1).
        temperature, max_tokens: sampling settings; ``seed`` is passed per call (offset by the turn).
    """

    def __init__(
        self, model: ChatModel | str, *, react: bool = True, temperature: float = 0.0, max_tokens: int = 512
    ) -> None:
        self.model = make_chat_model(model)
        self.react = react
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed: int | None = None
        self.messages: list[dict[str, str]] = []
        self.format_errors = 0

    def system_prompt(self, task: dict[str, Any]) -> str:
        """The simulator's system prompt for ``task``."""
        fmt = f"\n{REACT_FORMAT}" if self.react else ""
        return f"{GUIDELINES}{fmt}\n# Scenario\n{scenario_text(task)}\n"

    def start(self, task: dict[str, Any]) -> str:
        self.messages = [{"role": "system", "content": self.system_prompt(task)}]
        self.format_errors = 0
        return self.reply(GREETING)

    def reply(self, agent_text: str) -> str:
        # Roles are flipped: the agent speaks as "user" to the simulator, the simulator answers as "assistant".
        self.messages.append({"role": "user", "content": agent_text})
        seed = None if self.seed is None else self.seed + len(self.messages)
        raw = self.model.complete(
            self.messages, max_tokens=self.max_tokens, temperature=self.temperature, seed=seed
        )  # raises ServiceError
        text = raw
        if self.react:
            text, ok = parse_react(raw)
            self.format_errors += not ok
        self.messages.append({"role": "assistant", "content": raw})
        return text

    def transcript(self) -> Sequence[dict[str, str]]:
        """The simulator's own conversation (system prompt, flipped roles, raw replies)."""
        return list(self.messages)
