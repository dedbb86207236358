"""τ²-bench's train / test splits over the full task sets of both domains, and the training tasks of the v2 ids:
disjoint from the held-out tasks by id and by content (scenario, request, gold writes, expected outputs)."""

from __future__ import annotations

import json
import re
from typing import Any

import gymnasium as gym
import pytest

import agentgym_turn
from agentgym_turn.registration import held_out_kwargs
from envs.tau.data import DOMAINS, SAME_REQUEST, gold_writes, held_out_overlaps, load_domain, request_overlap
from envs.tau.verifier import write_tool_names

gym.register_envs(agentgym_turn)

#: domain -> (train, test, v2's training tasks)
SIZES = {"retail": (74, 40, 52), "airline": (30, 20, 26)}
#: the τ²-bench training tasks v2 leaves out, each with the test tasks it overlaps (read pair by pair: one customer's
#: scenario told again with a twist, e.g. retail 67 / 68 word for word, airline 38 / 2 with a detour added)
OVERLAPS = {
    "retail": {
        "6": ("5", "9"),
        "7": ("5", "9"),
        "8": ("5", "9"),
        "13": ("12",),
        "14": ("12",),
        "25": ("26",),
        "30": ("32",),
        "31": ("32",),
        "34": ("33",),
        "37": ("36", "38"),
        "41": ("42",),
        "54": ("55",),
        "57": ("56",),
        "63": ("62",),
        "67": ("68",),
        "72": ("71",),
        "85": ("86",),
        "87": ("86",),
        "93": ("94",),
        "95": ("94",),
        "96": ("97",),
        "112": ("111",),
    },
    "airline": {"9": ("37",), "15": ("16",), "17": ("22",), "38": ("2",)},
}


def _text(value: Any) -> str:
    return re.sub(r"\s+", " ", json.dumps(value, sort_keys=True) if not isinstance(value, str) else value).lower()


def content_overlaps(domain: str, train: list[dict], test: list[dict]) -> set[tuple[str, str, str]]:
    """Every ``(what, train id, test id)`` the two task lists share: the id, the whole task but its id, the user
    scenario, the customer's request (whitespace and case aside), a gold database write, an expected output
    (``communicate_info``), or a request overlap (:func:`request_overlap`) at or above ``SAME_REQUEST``."""
    writes = write_tool_names(domain)
    found = set()
    for a in train:
        for b in test:
            ia, ib = a["user_scenario"]["instructions"], b["user_scenario"]["instructions"]
            checks = {
                "id": a["id"] == b["id"],
                "task": _text({**a, "id": None}) == _text({**b, "id": None}),
                "scenario": _text(a["user_scenario"]) == _text(b["user_scenario"]),
                "request": _text(ia.get("reason_for_call")) == _text(ib.get("reason_for_call")),
                "write": bool(gold_writes(a, writes) & gold_writes(b, writes)),
                "output": bool(
                    {_text(str(x)) for x in a["evaluation_criteria"].get("communicate_info") or []}
                    & {_text(str(x)) for x in b["evaluation_criteria"].get("communicate_info") or []}
                ),
                "similar request": request_overlap(a, b) >= SAME_REQUEST,
            }
            found |= {(what, a["id"], b["id"]) for what, hit in checks.items() if hit}
    return found


@pytest.mark.parametrize("domain", DOMAINS)
def test_tau2_splits_partition_the_tasks_by_id(domain: str) -> None:
    data = load_domain(domain)
    train, test = data.splits["train"], data.splits["test"]
    assert (len(train), len(test)) == SIZES[domain][:2]
    assert len(set(train)) == len(train) and len(set(test)) == len(test)
    assert not set(train) & set(test)
    assert set(train) | set(test) == set(data.splits["base"]) == {t["id"] for t in data.tasks}


@pytest.mark.parametrize("domain", DOMAINS)
def test_tau2s_own_train_split_holds_test_tasks_told_again(domain: str) -> None:
    """The raw split is disjoint by id and by whole scenario, not by content: the check below can fail."""
    data = load_domain(domain)
    found = content_overlaps(domain, data.split_tasks("train"), data.split_tasks("test"))
    assert not {f for f in found if f[0] in ("id", "task", "scenario")}
    assert {t for _, t, _ in found} == set(OVERLAPS[domain])
    assert held_out_overlaps(data, write_tool_names(domain)) == OVERLAPS[domain]
    retail_67_68, airline_15_16 = ("request", "67", "68"), ("request", "15", "16")  # word for word
    assert (retail_67_68 if domain == "retail" else airline_15_16) in found


@pytest.mark.parametrize("domain", DOMAINS)
def test_v2_trains_on_no_held_out_task_by_id_or_content(domain: str) -> None:
    env_id = f"TurnRL/Tau{domain.capitalize()}-v2"
    train = gym.make(env_id).unwrapped._tasks
    held = gym.make(env_id, **held_out_kwargs(env_id)).unwrapped._tasks
    _, n_test, n_train = SIZES[domain]
    assert (len(train), len(held)) == (n_train, n_test)
    data = load_domain(domain)
    assert {t["id"] for t in train} == set(data.splits["train"]) - set(OVERLAPS[domain])
    assert {t["id"] for t in held} == set(data.splits["test"])
    assert content_overlaps(domain, train, held) == set()


def test_only_the_training_split_is_filtered() -> None:
    data = load_domain("retail")
    for split in ("test", "base", "all"):
        assert data.split_tasks(split, disjoint_held_out=write_tool_names("retail")) == data.split_tasks(split)
    assert len(data.split_tasks("train", disjoint_held_out=None)) == SIZES["retail"][0]
