"""GiGPO, the unbiased turn baseline (RTG), Turn-PPO and discounted MT-GRPO: hand tables, naive loops, the bias.

Token layout helpers come from ``test_credit`` (``make_episode``: P prompt tokens, then (policy, env) per turn).
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym_turn.error import InvalidArgument
from tests.trainers.test_credit import EXACT, make_episode, per_turn, wiki_group
from trainers.credit import CreditConfig, get_strategy, needs_critic, needs_state_keys, value_positions
from trainers.episode import Episode

MEAN_ONLY = CreditConfig(eps=1e-12, whiten_advantages=False, scale_by_std=False)


def keyed(turns, rewards, keys, group=0, **kw) -> Episode:
    ep = make_episode(turns, rewards, group=group, **kw)
    ep.state_keys = list(keys)
    return ep


# ------------------------------------------------------------------------------------------------------------ GiGPO


def gigpo_group(group: int = 0) -> list[Episode]:
    """R = [1.2, 1.0, 0.2]; anchors: every turn 0 in state A; e0/e2 turn 1 in B, e1 turn 1 in C."""
    return [
        keyed([(2, 2), (2, 0)], [{"tool": 0.2}, {"em": 1.0}], ["A", "B"], group),
        keyed([(2, 2), (2, 0)], [{"tool": 0.0}, {"em": 1.0}], ["A", "C"], group),
        keyed([(2, 2), (2, 0)], [{"tool": 0.2}, {"em": 0.0}], ["A", "B"], group),
    ]


# gigpo_gamma 0.5, mean-only: A^E = R - 0.8 = [0.4, 0.2, -0.6]; G_0 = [0.7, 0.5, 0.2] (anchor A, mean 0.4667),
# G_1 = [1.0, 1.0, 0.0]: anchor B = {e0: 1.0, e2: 0.0} mean 0.5, anchor C = {e1} singleton -> 0.
GIGPO_TABLE = {
    1.0: [[0.4 + 0.7 - 1.4 / 3, 0.9], [0.2 + 0.5 - 1.4 / 3, 0.2], [-0.6 + 0.2 - 1.4 / 3, -1.1]],
    2.0: [[0.4 + 2 * (0.7 - 1.4 / 3), 1.4], [0.2 + 2 * (0.5 - 1.4 / 3), 0.2], [-0.6 + 2 * (0.2 - 1.4 / 3), -1.6]],
}


@pytest.mark.parametrize("omega", sorted(GIGPO_TABLE))
def test_gigpo_hand_table(omega):
    eps = gigpo_group()
    cfg = CreditConfig(eps=1e-12, scale_by_std=False, gigpo_gamma=0.5, gigpo_omega=omega)
    out = get_strategy("gigpo")(eps, None, cfg)
    assert needs_state_keys("gigpo") and not needs_critic("gigpo") and not needs_state_keys("mt_grpo")
    for ep, adv, want in zip(eps, out.advantages, GIGPO_TABLE[omega], strict=True):
        assert per_turn(adv, ep) == pytest.approx(want, abs=1e-6)
        assert np.all(adv[ep.loss_mask == 0] == 0.0)


def test_gigpo_groups_are_separate_and_missing_keys_raise():
    eps = gigpo_group(0) + gigpo_group(1)
    out = get_strategy("gigpo")(eps, None, CreditConfig(eps=1e-12, scale_by_std=False, gigpo_gamma=0.5))
    for i in range(3):  # equal keys in another group do not join the anchor group
        assert np.array_equal(out.advantages[i], out.advantages[i + 3])
    eps[4].state_keys = None
    with pytest.raises(InvalidArgument, match="state_key"):
        get_strategy("gigpo")(eps, None, EXACT)


def naive_gigpo(eps: list[Episode], gamma: float, omega: float, eps_: float) -> list[list[float]]:
    """2505.10978 eqs. 3-8 with plain loops: sample std (statistics.stdev), singleton groups 0."""

    def norm(x: float, pool: list[float]) -> float:
        if len(pool) < 2:
            return 0.0
        return (x - statistics.mean(pool)) / (statistics.stdev(pool) + eps_)

    ret = {i: sum(sum(t.values()) for t in ep.turn_rewards) for i, ep in enumerate(eps)}
    out = []
    for i, ep in enumerate(eps):
        same = [ret[j] for j, o in enumerate(eps) if o.group == ep.group]
        a_e = norm(ret[i], same)
        row = []
        for k in range(ep.num_turns):

            def g(e: Episode, m: int) -> float:
                return sum(gamma ** (m2 - m) * sum(e.turn_rewards[m2].values()) for m2 in range(m, e.num_turns))

            pool = [
                g(o, m)
                for o in eps
                if o.group == ep.group
                for m in range(o.num_turns)
                if o.state_keys[m] == ep.state_keys[k]
            ]
            row.append(a_e + omega * norm(g(ep, k), pool))
        out.append(row)
    return out


@settings(max_examples=30, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.integers(0, 1),  # group
            st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1)), min_size=1, max_size=4),  # (state, reward)
            st.integers(0, 1),  # outcome
        ),
        min_size=1,
        max_size=6,
    ),
    gamma=st.sampled_from([0.0, 0.5, 0.95, 1.0]),
    omega=st.sampled_from([0.0, 1.0, 0.7]),
)
def test_gigpo_matches_naive_loop(specs, gamma, omega):
    eps = []
    for group, steps, outcome in specs:
        rewards = [{"tool": float(r)} for _, r in steps]
        rewards[-1]["em"] = float(outcome)
        eps.append(keyed([(1, 1)] * len(steps), rewards, [f"s{s}" for s, _ in steps], group))  # revisits allowed
    out = get_strategy("gigpo")(eps, None, CreditConfig(eps=1e-6, gigpo_gamma=gamma, gigpo_omega=omega))
    for ep, adv, want in zip(eps, out.advantages, naive_gigpo(eps, gamma, omega, 1e-6), strict=True):
        assert per_turn(adv, ep) == pytest.approx(want, abs=1e-5)


# ---------------------------------------------------------------------------------------- unbiased turn baseline


def rtg_group() -> list[Episode]:
    return [
        make_episode([(1, 1)] * 3, [{"tool": 1.0}, {"tool": 1.0}, {"em": 1.0}]),
        make_episode([(1, 1)] * 2, [{"tool": 1.0}, {"em": 0.0}]),
        make_episode([(1, 1)] * 3, [{"tool": 0.0}, {"tool": 1.0}, {"em": 0.0}]),
    ]


def test_mt_grpo_rtg_hand_table():
    """Turn return-to-go T = [2,1,0], [1,0], [1,1,0]; outcome O = [1,1,1], [0,0], [0,0,0] (gamma 1).
    Index 0 (all three): T -> [2/3,-1/3,-1/3], O -> [2/3,-1/3,-1/3]; index 1: T -> [1/3,-2/3,1/3], O the same as
    index 0; index 2 (e0, e2): T -> [0, 0], O -> [1/2, -1/2]."""
    eps = rtg_group()
    out = get_strategy("mt_grpo_rtg")(eps, None, MEAN_ONLY)
    want = [[4 / 3, 1.0, 0.5], [-2 / 3, -1.0], [-2 / 3, 0.0, -0.5]]
    for ep, adv, w in zip(eps, out.advantages, want, strict=True):
        assert per_turn(adv, ep) == pytest.approx(w, abs=1e-6)
    # RLOO: n/(n-1) times the same numbers (index 0, 1: 3/2; index 2: 2)
    rloo = get_strategy("mt_rloo_rtg")(eps, None, MEAN_ONLY)
    want = [[2.0, 1.5, 1.0], [-1.0, -1.5], [-1.0, 0.0, -1.0]]
    for ep, adv, w in zip(eps, rloo.advantages, want, strict=True):
        assert per_turn(adv, ep) == pytest.approx(w, abs=1e-6)
    # discounted (turn_gamma 0.5), index 0: T = [1 + 0.5, 1, 0.5] mean 1; O = [0.25, 0, 0] mean 1/12
    disc = get_strategy("mt_grpo_rtg")(eps, None, CreditConfig(eps=1e-12, scale_by_std=False, turn_gamma=0.5))
    assert per_turn(disc.advantages[0], eps[0])[0] == pytest.approx(0.5 + 0.25 - 1 / 12, abs=1e-6)


def naive_rtg(eps: list[Episode], gamma: float, kind: str, eps_: float) -> list[list[float]]:
    def norm(x: float, pool: list[float]) -> float:
        n = len(pool)
        if n < 2:
            return 0.0
        if kind == "rloo":
            return (x - statistics.mean(pool)) * n / (n - 1)
        return (x - statistics.mean(pool)) / (statistics.stdev(pool) + eps_)

    def t(e: Episode, k: int) -> float:
        return sum(gamma ** (m - k) * e.level_reward("turn", m) for m in range(k, e.num_turns))

    def o(e: Episode, k: int) -> float:
        return gamma ** (e.num_turns - 1 - k) * e.level_reward("outcome")

    out = []
    for ep in eps:
        mates = [e for e in eps if e.group == ep.group]
        out.append(
            [
                norm(t(ep, k), [t(e, k) for e in mates if e.num_turns > k])
                + norm(o(ep, k), [o(e, k) for e in mates if e.num_turns > k])
                for k in range(ep.num_turns)
            ]
        )
    return out


@settings(max_examples=30, deadline=None)
@given(
    specs=st.lists(
        st.tuples(st.integers(0, 1), st.lists(st.floats(-1, 1), min_size=1, max_size=4), st.floats(0, 1)),
        min_size=1,
        max_size=6,
    ),
    gamma=st.sampled_from([0.5, 0.9, 1.0]),
    kind=st.sampled_from(["grpo", "rloo"]),
)
def test_rtg_matches_naive_loop(specs, gamma, kind):
    eps = []
    for group, turn_r, outcome in specs:
        rewards = [{"tool": r} for r in turn_r]
        rewards[-1]["em"] = outcome
        eps.append(make_episode([(1, 1)] * len(turn_r), rewards, group=group))
    cfg = CreditConfig(eps=1e-4, turn_gamma=gamma)
    out = get_strategy(f"mt_{kind}_rtg")(eps, None, cfg)
    for ep, adv, want in zip(eps, out.advantages, naive_rtg(eps, gamma, kind, 1e-4), strict=True):
        assert per_turn(adv, ep) == pytest.approx(want, abs=1e-4)


def test_rtg_refuses_trees():
    eps = [make_episode([(1, 0)], [{"em": 1.0}], node_ids=["a"]), make_episode([(1, 0)], [{"em": 0.0}], node_ids=["b"])]
    with pytest.raises(InvalidArgument, match="tree"):
        get_strategy("mt_grpo_rtg")(eps, None, EXACT)


def stop_or_continue_batch(seed: int, groups: int, size: int = 6, horizon: int = 3) -> list[Episode]:
    """Each turn pays tool ~ Bernoulli(1/2); after each turn but the last the policy stops with probability 1/2,
    independently of everything; the outcome is Bernoulli(1/2), independent too."""
    rng = np.random.default_rng(seed)
    eps = []
    for g in range(groups):
        for _ in range(size):
            k = 1
            while k < horizon and rng.random() < 0.5:
                k += 1
            rewards = [{"tool": float(rng.random() < 0.5)} for _ in range(k)]
            rewards[-1]["em"] = float(rng.random() < 0.5)
            eps.append(make_episode([(1, 1)] * k, rewards, group=g))
    return eps


def test_per_index_baseline_is_biased_and_rtg_removes_the_bias():
    """The decision at turn 0 is "stop" (episode has 1 turn) or "continue". The true advantage of continuing over
    stopping is the expected reward of the extra turns: 0.5 x E[extra turns | continue] = 0.5 x 1.5 = 0.75 (the
    outcome does not depend on it). Leave-one-out baselines make the expectation exact for mt_rloo_rtg; mt_rloo
    (per-index normalisation, verl RFC #7244) cancels each extra turn's reward with its own baseline: ~0."""
    eps = stop_or_continue_batch(seed=0, groups=1500)
    cfg = CreditConfig(eps=1e-12, mt_final_turn_advantage=True)
    gap = {}
    for name in ("mt_rloo", "mt_rloo_rtg"):
        out = get_strategy(name)(eps, None, cfg)
        a0 = np.array([per_turn(a, ep)[0] for a, ep in zip(out.advantages, eps, strict=True)])
        cont = np.array([ep.num_turns > 1 for ep in eps])
        gap[name] = a0[cont].mean() - a0[~cont].mean()
    assert gap["mt_rloo_rtg"] == pytest.approx(0.75, abs=0.06)
    assert abs(gap["mt_rloo"]) < 0.06  # the hidden -E[R_intermediate] = -0.75 on "take another turn"
    # the same holds without the final-turn extension (eq. 9 as in 000): MT-RLOO still ignores the extra turns
    out = get_strategy("mt_rloo")(eps, None, CreditConfig(eps=1e-12))
    a0 = np.array([per_turn(a, ep)[0] for a, ep in zip(out.advantages, eps, strict=True)])
    cont = np.array([ep.num_turns > 1 for ep in eps])
    assert a0[cont].mean() - a0[~cont].mean() < 0.4


# ---------------------------------------------------------------------------------------------------- Turn-PPO


def test_value_positions_are_each_turns_first_policy_token():
    ep = make_episode([(2, 2), (0, 1), (3, 0)], [{"tool": 0.2}, {"tool": 0.3}, {"em": 1.0}])
    assert value_positions(ep).tolist() == [2, 7]  # turn 1 generated nothing: no state of its own


@pytest.mark.parametrize(
    ("truncated", "want_adv", "want_ret"),
    [
        # terminated: d1 = 1 - 0.7 = 0.3; d0 = 0.2 + 0.9*0.7 - 0.5 = 0.33; A0 = 0.33 + 0.72*0.3 = 0.546
        (False, [0.546, 0.3], [1.046, 1.0]),
        # truncated, bootstrap V_end = 0.6: d1 = 1 + 0.54 - 0.7 = 0.84; A0 = 0.33 + 0.72*0.84 = 0.9348
        (True, [0.9348, 0.84], [1.4348, 1.54]),
    ],
)
def test_turn_ppo_hand_values(truncated, want_adv, want_ret):
    ep = make_episode([(2, 2), (2, 0)], [{"tool": 0.2}, {"em": 1.0}], terminated=not truncated, truncated=truncated)
    values = np.array([0.0, 0.1, 0.5, 0.3, 0.2, 0.1, 0.7, 0.4, 0.6])
    cfg = CreditConfig(gamma=0.9, gae_lambda=0.8, whiten_advantages=False, bootstrap_truncated=True)
    out = get_strategy("turn_ppo")([ep], [values], cfg)
    assert needs_critic("turn_ppo")
    assert per_turn(out.advantages[0], ep) == pytest.approx(want_adv, abs=1e-6)
    assert out.value_masks[0].tolist() == [0, 0, 1, 0, 0, 0, 1, 0]
    assert out.returns[0][[2, 6]].tolist() == pytest.approx(want_ret, abs=1e-6)
    assert np.all(out.returns[0][out.value_masks[0] == 0] == 0)
    assert out.token_rewards[0].tolist() == pytest.approx([0, 0, 0, 0.2, 0, 0, 0, 1.0])


def naive_turn_gae(ep: Episode, v: np.ndarray, gamma: float, lam: float) -> list[float]:
    """Turns with tokens are the steps; an empty turn's reward joins the turn before it (or the first)."""
    turns = [k for k in range(ep.num_turns) if np.any(ep.turn_index == k)]
    r = {k: 0.0 for k in turns}
    for k in range(ep.num_turns):
        owner = max([t for t in turns if t <= k], default=turns[0])
        r[owner] += ep.level_reward("turn", k)
    r[turns[-1]] += ep.level_reward("outcome")
    vs = [float(v[np.flatnonzero(ep.turn_index == k)[0]]) for k in turns]
    end = float(v[-1]) if ep.truncated else 0.0
    adv = {}
    running = 0.0
    for j in range(len(turns) - 1, -1, -1):
        nxt = vs[j + 1] if j + 1 < len(turns) else end
        running = r[turns[j]] + gamma * nxt - vs[j] + gamma * lam * running
        adv[turns[j]] = running
    return [adv.get(k, 0.0) for k in range(ep.num_turns)]


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=4),
    gamma=st.floats(0.5, 1.0),
    lam=st.floats(0.0, 1.0),
    truncated=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_turn_ppo_matches_naive_turn_gae(turns, gamma, lam, truncated, seed):
    if all(p == 0 for p, _ in turns):
        turns = [(1, 0), *turns]
    rng = np.random.default_rng(seed)
    rewards = [{"tool": float(rng.normal())} for _ in turns]
    rewards[-1]["em"] = float(rng.integers(0, 2))
    ep = make_episode(turns, rewards, terminated=not truncated, truncated=truncated)
    v = rng.normal(size=len(ep.token_ids) + 1)
    cfg = CreditConfig(gamma=gamma, gae_lambda=lam, whiten_advantages=False, bootstrap_truncated=True)
    out = get_strategy("turn_ppo")([ep], [v], cfg)
    want = naive_turn_gae(ep, v, gamma, lam)
    for k in range(ep.num_turns):
        toks = ep.turn_index == k
        if toks.any():
            assert np.allclose(out.advantages[0][toks], want[k], atol=1e-5)
    pos = value_positions(ep)
    assert np.array_equal(np.flatnonzero(out.value_masks[0]), pos)
    assert np.allclose(out.returns[0][pos], [want[ep.turn_index[p]] + v[p] for p in pos], atol=1e-5)


# ------------------------------------------------------------------------------------ discounted MT-GRPO family


def test_turn_gamma_discounts_mt_grpo_future_terms():
    """Three-turn flat group, mean-only: A_k = A^T_k + c*g*A_{k+1}; with g = 1 exactly the undiscounted numbers."""
    eps = [
        make_episode([(1, 1)] * 3, [{"tool": 1.0}, {"tool": 0.0}, {"em": 1.0}]),
        make_episode([(1, 1)] * 3, [{"tool": 0.0}, {"tool": 1.0}, {"em": 0.0}]),
    ]
    # A^T_0 = [0.5, -0.5], A^T_1 = [-0.5, 0.5], A^O = [0.5, -0.5]
    for g, want in [(1.0, [0.5, 0.0, 0.5]), (0.5, [0.5 + 0.5 * (-0.5 + 0.25), -0.5 + 0.25, 0.5])]:
        cfg = CreditConfig(eps=1e-12, scale_by_std=False, turn_gamma=g)
        out = get_strategy("mt_grpo")(eps, None, cfg)
        assert per_turn(out.advantages[0], eps[0]) == pytest.approx(want, abs=1e-9)
    base = get_strategy("mt_grpo")(wiki_group(), None, EXACT)
    same = get_strategy("mt_grpo")(wiki_group(), None, CreditConfig(eps=1e-12, whiten_advantages=False, turn_gamma=1))
    assert all(np.array_equal(a, b) for a, b in zip(base.advantages, same.advantages, strict=True))
    with pytest.raises(InvalidArgument, match="turn_gamma"):
        CreditConfig(turn_gamma=1.2)
