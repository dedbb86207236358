"""What every registered strategy declares it needs (``trainers.credit.needs``) matches what it does, and the
trainer reads the declaration instead of the strategy's name.

The behavioural check: a batch of groups of ONE episode each, with rewards that differ between episodes. A strategy
that declares ``groups`` compares the episodes of a group, so it must give every token advantage 0 there (which is
why the trainer refuses ``--group-size 1`` for it); a strategy that does not declare it must still give some token
a non-zero advantage. Critic strategies get all-zero values, so every non-zero advantage comes from the rewards.
"""

from __future__ import annotations

import numpy as np
import pytest

from agentgym_turn.error import InvalidArgument
from trainers.credit import STRATEGIES, CreditConfig, Needs, get_strategy, needs
from trainers.episode import Episode
from trainers.rl import RLConfig

LEVELS = {"tool": "turn", "judge": "turn", "task": "outcome"}


def singleton(group: int, tool: float, judge: float, task: float) -> Episode:
    """A two-turn episode alone in its group: ``P P A A E E A A`` (turn 0 = tokens 2-3, turn 1 = tokens 6-7)."""
    mask = np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int8)
    turns = np.array([-1, -1, 0, 0, -1, -1, 1, 1], dtype=np.int32)
    return Episode(
        env_id="toy",
        group=group,
        token_ids=np.arange(8),
        loss_mask=mask,
        turn_index=turns,
        logprobs=np.zeros(8),
        turn_rewards=[{"tool": tool, "judge": judge}, {"task": task, "judge": judge}],
        reward_levels=LEVELS,
        terminated=True,
        truncated=False,
        state_keys=[f"start-{group}", f"after-search-{group}"],
    )


def singleton_batch() -> list[Episode]:
    return [singleton(0, 0.2, 1.0, 1.0), singleton(1, 0.0, -1.0, 0.0), singleton(2, 0.2, 0.0, 1.0)]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_declared_groups_match_what_a_group_of_one_gets(name):
    batch = singleton_batch()
    declared = needs(name)
    values = [np.zeros(len(ep.token_ids) + 1) for ep in batch] if declared.critic else None
    out = get_strategy(name)(batch, values, CreditConfig())
    largest = max(float(np.abs(a).max()) for a in out.advantages)
    if declared.groups:
        assert largest == 0.0, f"{name} declares groups, yet a group of one got advantage {largest}"
    else:
        assert largest > 0.0, f"{name} declares no groups, yet groups of one got no advantage at all"


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_declared_critic_matches_whether_values_are_read(name):
    batch = singleton_batch()
    fn = get_strategy(name)
    if needs(name).critic:
        with pytest.raises((InvalidArgument, ValueError, TypeError)):
            fn(batch, None, CreditConfig())
        zero = fn(batch, [np.zeros(9) for _ in batch], CreditConfig(whiten_advantages=False))
        shifted = fn(batch, [np.full(9, 0.5) for _ in batch], CreditConfig(whiten_advantages=False))
        assert any(not np.allclose(a, b) for a, b in zip(zero.advantages, shifted.advantages, strict=True))
        assert zero.returns is not None
    else:
        assert fn(batch, None, CreditConfig()).returns is None


def test_every_strategy_declares_its_needs():
    for name, fn in STRATEGIES.items():
        assert isinstance(fn.needs, Needs), name
    assert {n for n in STRATEGIES if needs(n).ratio_level != "token"} == {"turn_ppo"}
    assert {n for n in STRATEGIES if needs(n).state_keys} == {"gigpo"}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_trainer_refuses_a_group_of_one_exactly_for_grouped_strategies(name):
    if needs(name).groups:
        with pytest.raises(InvalidArgument, match=r"--group-size=1 .*--group-size 2"):
            RLConfig(strategy=name, group_size=1)
    else:
        cfg = RLConfig(strategy=name, group_size=1)
        assert cfg.ratio_level == needs(name).ratio_level  # --ratio-level auto takes the declared level


def test_a_strategy_is_registered_once_where_it_is_defined():
    """The decorator is the one registration: every strategy sits in STRATEGIES under its function's name, and a
    second strategy of a registered name is refused rather than silently replacing the first."""
    import inspect

    from trainers import credit

    decorated = [name for name, fn in inspect.getmembers(credit, inspect.isfunction) if hasattr(fn, "needs")]
    assert sorted(decorated) == sorted(STRATEGIES) and len(STRATEGIES) == 20
    assert all(fn.__name__ == name for name, fn in STRATEGIES.items())
    before = dict(STRATEGIES)

    def grpo_or(episodes, values, cfg):  # the name of a registered strategy
        raise AssertionError("never called")

    with pytest.raises(InvalidArgument, match="'grpo_or' is already registered"):
        credit._strategy()(grpo_or)
    assert before == STRATEGIES
