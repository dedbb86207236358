"""The leaderboard metric code: pass^k against hand-computed values, CIs, trials bookkeeping, the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest

import agentgym_turn
from agentgym_turn.error import InvalidArgument
from leaderboards.families import FAMILIES, EpisodeResult, compute_metrics, family_for, per_task
from leaderboards.reported import REPORTED


def episodes(table: list[list[float]], key: str = "env/success") -> list[EpisodeResult]:
    """One episode per cell of a [tasks][trials] table."""
    return [EpisodeResult(g, t, {key: v}) for g, row in enumerate(table) for t, v in enumerate(row)]


# successes per task 4, 2, 0, 3 out of n = 4 trials
TAU_TABLE = [[1, 1, 1, 1], [1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 1, 1]]


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (1, (1 + 2 / 4 + 0 + 3 / 4) / 4),  # C(c,1)/C(4,1) = c/4
        (2, (1 + 1 / 6 + 0 + 3 / 6) / 4),  # C(2,2)/C(4,2) = 1/6, C(3,2)/6 = 1/2
        (3, (1 + 0 + 0 + 1 / 4) / 4),  # C(3,3)/C(4,3) = 1/4
        (4, (1 + 0 + 0 + 0) / 4),
    ],
)
def test_pass_k_matches_hand_computed(k: int, expected: float) -> None:
    m = compute_metrics(FAMILIES["tau"], episodes(TAU_TABLE), trials=4)
    assert m[f"pass^{k}"].estimate == pytest.approx(expected)
    assert m[f"pass^{k}"].n_tasks == 4


def test_pass_k_is_monotone_and_skips_k_beyond_trials() -> None:
    m = compute_metrics(FAMILIES["tau"], episodes(TAU_TABLE), trials=4)
    values = [m[f"pass^{k}"].estimate for k in range(1, 5)]
    assert values == sorted(values, reverse=True)
    two = compute_metrics(FAMILIES["tau"], episodes([r[:2] for r in TAU_TABLE]), trials=2)
    assert set(two) == {"pass^1", "pass^2", "success"}
    assert two["pass^2"].estimate == pytest.approx((1 + 0 + 0 + 0) / 4)  # only task 0 has both of 2 trials right


def test_success_sd_over_trials_is_hand_computed() -> None:
    m = compute_metrics(FAMILIES["tau"], episodes(TAU_TABLE), trials=4)["success"]
    per_trial = [0.5, 0.5, 0.5, 0.75]  # trial j's success rate over the 4 tasks
    assert m.estimate == pytest.approx(np.mean(per_trial))
    mean = sum(per_trial) / 4
    assert m.sd == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in per_trial) / 3))


def test_ci_contains_the_estimate_and_has_zero_width_for_constant_values() -> None:
    fam = FAMILIES["sokoban"]
    const = [EpisodeResult(g, 0, {"env/success": 1.0, "env/effective_action_rate": 0.5}) for g in range(8)]
    m = compute_metrics(fam, const, trials=1)
    assert (m["success"].low, m["success"].high) == (1.0, 1.0)
    assert (m["effective_action_rate"].low, m["effective_action_rate"].high) == (0.5, 0.5)
    mixed = [EpisodeResult(g, 0, {"env/success": float(g % 2), "env/effective_action_rate": g / 8}) for g in range(8)]
    for v in compute_metrics(fam, mixed, trials=1).values():
        assert v.low <= v.estimate <= v.high
        assert v.low < v.high
        assert v.confidence == 0.95


def test_bootstrap_ci_agrees_with_the_normal_approximation_on_many_tasks() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2, size=400).astype(float)
    m = compute_metrics(FAMILIES["arithmetic"], episodes([[v] for v in values]), trials=1)["success"]
    half = 1.96 * values.std(ddof=1) / math.sqrt(values.size)
    assert m.estimate == pytest.approx(values.mean())
    assert m.high - m.low == pytest.approx(2 * half, rel=0.15)


def test_ci_narrows_with_more_tasks() -> None:
    def width(n: int) -> float:
        m = compute_metrics(FAMILIES["arithmetic"], episodes([[float(i % 2)] for i in range(n)]), trials=1)
        return m["success"].high - m["success"].low

    assert width(256) < width(16) / 2


def test_wiki_columns_are_mean_reward_components() -> None:
    fam = FAMILIES["wiki_two_turn"]
    eps = [
        EpisodeResult(0, 0, {"reward/tool_execution": 0.2, "reward/search_answer": 0.5, "reward/xml_format": 0.2,
                             "reward/exact_match": 1.0}),
        EpisodeResult(1, 0, {"reward/tool_execution": 0.0, "reward/search_answer": 0.0, "reward/xml_format": 0.1,
                             "reward/exact_match": 0.0}),
    ]  # fmt: skip
    m = compute_metrics(fam, eps, trials=1)
    assert {k: round(v.estimate, 6) for k, v in m.items()} == {
        "tool_execution": 0.1,
        "search_answer": 0.25,
        "xml_format": 0.15,
        "exact_match": 0.5,
    }


def test_truncated_episode_without_a_score_counts_as_failure_but_a_terminated_one_raises() -> None:
    cut = [EpisodeResult(0, 0, {}, truncated=True), EpisodeResult(1, 0, {"env/success": 1.0})]
    assert per_task(cut, "env/success", 1).tolist() == [[0.0], [1.0]]
    with pytest.raises(KeyError, match="env/success"):
        per_task([EpisodeResult(0, 0, {"env/return": 1.0})], "env/success", 1)


def test_bad_inputs_raise_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="0/1"):
        compute_metrics(FAMILIES["tau"], episodes([[0.5, 1.0]]), trials=2)
    with pytest.raises(InvalidArgument, match=r"trials 0\.\.1"):
        compute_metrics(FAMILIES["tau"], episodes([[1.0]]), trials=2)
    with pytest.raises(InvalidArgument, match="no episodes"):
        compute_metrics(FAMILIES["tau"], [], trials=1)
    with pytest.raises(InvalidArgument, match="TurnRL/WikiTwoTurn-v2"):
        family_for("TurnRL/Nope-v0")


def test_registry_covers_every_registered_env_and_reported_rows_name_real_columns() -> None:
    for env_id in agentgym_turn.ENV_SPECS:
        assert env_id in family_for(env_id).env_ids  # every registered env has a leaderboard
    for row in REPORTED:
        fam = FAMILIES[row.family]
        assert set(row.values) <= {c.key for c in fam.columns}, row
        assert row.env_id is None or row.env_id in fam.env_ids
        assert set(row.group or {}) <= set(fam.group_by)


def test_tau_rows_name_their_protocol_and_both_are_reported() -> None:
    fam = FAMILIES["tau"]
    retail = fam.env_ids[0]
    assert fam.group_by == ("output_check",)
    assert fam.group_value("output_check", retail, {"split": "test"}) == "off"  # older rows: the family default
    assert fam.group_value("output_check", retail, {"output_check": True}) == "on"
    protocols = {r.group["output_check"] for r in REPORTED if r.family == "tau" and r.group}
    assert protocols == {"on", "off"}
    qwen_on = [r for r in REPORTED if r.model == "Qwen3-8B" and r.group == {"output_check": "on"}]
    assert {r.source for r in qwen_on} == {"003 Table 6"} and len(qwen_on) == 2  # retail and airline
    assert "35 %" in fam.notes and "32 %" in fam.notes  # the do-nothing floor beside the table
