"""The credit-signal instruments (``trainers.instruments``): what they count, and that their "nothing to do"
readings mean what the module says (a turn-level strategy then computes GRPO-OR's advantages)."""

from __future__ import annotations

import numpy as np
import pytest

from trainers.credit import CreditConfig, get_strategy
from trainers.episode import Episode
from trainers.instruments import MAX_TURNS_LOGGED, advantage_difference, turn_signal

LEVELS = {"search": "turn", "answer": "outcome"}


def two_turn(group: int, query: int, search: float, answer: float) -> Episode:
    """A two-turn episode: prompt, turn 1 (``query`` as its two tokens), a tool result, turn 2 (an answer)."""
    ids = [1, 1, query, query, 3, 3, 9, 9]
    mask = [0, 0, 1, 1, 0, 0, 1, 1]
    turn = [-1, -1, 0, 0, -1, -1, 1, 1]
    rewards = [{"search": search}, {"answer": answer}]
    return Episode("TurnRL/Test-v0", group, ids, mask, turn, [0.0] * len(ids), rewards, LEVELS, True)


def test_verbatim_first_turns_read_as_nothing_to_do():
    # every episode of each group searches the same query and finds the same thing; only the answers differ
    eps = [two_turn(g, 5, s, a) for g, s in ((0, 1.0), (1, 0.0)) for a in (0.0, 1.0, 1.0, 0.0)]
    sig = turn_signal(eps)
    assert sig["credit/turn1_reward_varies"] == 0.0 and sig["credit/turn1_groups"] == 2.0
    assert sig["credit/turn1_distinct_actions"] == 0.25  # 1 of G=4
    assert sig["credit/turn2_reward_varies"] == 1.0
    cfg = CreditConfig()
    mt = get_strategy("mt_grpo")(eps, None, cfg)
    diff = advantage_difference(eps, mt, cfg)
    assert diff["credit/adv_differs_from_grpo_or"] == 0.0  # MT-GRPO's turn terms are all 0: it is GRPO-OR
    assert diff["credit/turn_varying_episodes"] == 0.0


def test_varied_first_turns_give_turn_level_credit_something_to_do():
    eps = [two_turn(0, q, s, a) for q, s, a in ((5, 1.0, 1.0), (6, 0.0, 1.0), (5, 1.0, 0.0), (7, 0.0, 0.0))]
    sig = turn_signal(eps)
    assert sig["credit/turn1_reward_varies"] == 1.0
    assert sig["credit/turn1_distinct_actions"] == 0.75
    cfg = CreditConfig()
    mt = get_strategy("mt_grpo")(eps, None, cfg)
    diff = advantage_difference(eps, mt, cfg)
    # MT-GRPO adds the turn-1 advantage to turn 1's tokens only: half the policy tokens differ from GRPO-OR's
    assert diff["credit/adv_differs_from_grpo_or"] == pytest.approx(0.5)
    assert diff["credit/turn_varying_episodes"] == 1.0
    same = advantage_difference(eps, get_strategy("grpo_or")(eps, None, cfg), cfg)
    assert same["credit/adv_differs_from_grpo_or"] == 0.0


def test_groups_of_one_and_unequal_lengths():
    short = Episode("TurnRL/Test-v0", 0, [1, 5, 5], [0, 1, 1], [-1, 0, 0], [0.0] * 3, [{"answer": 1.0}], LEVELS, True)
    eps = [short, two_turn(0, 6, 0.0, 0.0), two_turn(1, 5, 1.0, 1.0)]
    sig = turn_signal(eps)
    # group 0: both play turn 1 (rewards 1.0 vs 0.0); only one plays turn 2; group 1 has one episode
    assert sig["credit/turn1_groups"] == 1.0 and sig["credit/turn1_reward_varies"] == 1.0
    assert "credit/turn2_groups" not in sig


def test_long_episodes_pool_later_turns():
    turns = MAX_TURNS_LOGGED + 3

    def long_ep(reward_late: float) -> Episode:
        ids = [1] + [7] * turns
        rewards = [{"search": 0.0}] * (turns - 1) + [{"search": reward_late}]
        return Episode("TurnRL/Test-v0", 0, ids, [0] + [1] * turns, [-1, *range(turns)], [0.0] * len(ids), rewards,
                       LEVELS, True)  # fmt: skip

    sig = turn_signal([long_ep(0.0), long_ep(1.0)])
    assert f"credit/turn{MAX_TURNS_LOGGED}_groups" in sig and f"credit/turn{MAX_TURNS_LOGGED + 1}_groups" not in sig
    assert sig["credit/turn_later_groups"] == 3.0  # three later turns, one group each, pooled
    assert sig["credit/turn_later_reward_varies"] == pytest.approx(1 / 3)


def test_empty_batch_logs_nothing():
    assert turn_signal([]) == {}
    ep = Episode("TurnRL/Test-v0", 0, [1, 2], [0, 0], [-1, -1], [0.0, 0.0], [], LEVELS, True)
    out = get_strategy("grpo_or")([ep], None, CreditConfig())
    assert advantage_difference([ep], out, CreditConfig()) == {}
    assert np.all(out.advantages[0] == 0)
