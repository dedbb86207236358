"""Every credit-assignment strategy against hand-computed numbers, GAE against a plain loop, masks, properties.

Shared fixture (``wiki_group``): one group of three two-turn episodes, levels tool=turn, em=outcome::

    e0: turn0 {tool: 0.2}  turn1 {em: 1.0}
    e1: turn0 {tool: 0.0}  turn1 {em: 1.0}
    e2: turn0 {tool: 0.2}  turn1 {em: 0.0}

    R^O  = [1, 1, 0]      mean 2/3, sample std sqrt(1/3) = 0.57735  -> A^O = [0.57735, 0.57735, -1.15470]
    R^MR = [1.2, 1.0, 0.2] mean 0.8, sample std sqrt(0.28) = 0.52915 -> A   = [0.75593, 0.37796, -1.13389]
    R^T0 = [0.2, 0, 0.2]  mean 0.13333, std 0.11547                 -> A^T = [0.57735, -1.15470, 0.57735]

Token layout of every episode (P prompt, A policy, E env): ``P P A A E E A A`` (turn 0 = tokens 2-3, env 4-5,
turn 1 = tokens 6-7). Tests use ``eps=1e-12`` so the hand numbers need no eps correction.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgym_turn.error import InvalidArgument
from trainers.credit import (
    STRATEGIES,
    CreditConfig,
    gae,
    get_strategy,
    needs_critic,
    tarl_score,
)
from trainers.episode import Episode

LEVELS = {"tool": "turn", "em": "outcome"}
EXACT = CreditConfig(eps=1e-12, whiten_advantages=False)
A_O = [0.5773503, 0.5773503, -1.1547005]


def make_episode(
    turns: list[tuple[int, int]],
    rewards: list[dict[str, float]],
    group: int = 0,
    prompt: int = 2,
    levels: dict | None = None,
    node_ids: list[str] | None = None,
    terminated: bool = True,
    truncated: bool = False,
) -> Episode:
    """``turns`` = [(policy tokens, env tokens after them), ...] after ``prompt`` prompt tokens."""
    mask, tidx = [0] * prompt, [-1] * prompt
    for k, (n_pol, n_env) in enumerate(turns):
        mask += [1] * n_pol + [0] * n_env
        tidx += [k] * n_pol + [-1] * n_env
    n = len(mask)
    return Episode(
        env_id="TurnRL/Test-v0",
        group=group,
        token_ids=np.arange(n),
        loss_mask=mask,
        turn_index=tidx,
        logprobs=np.zeros(n),
        turn_rewards=rewards,
        reward_levels=levels or LEVELS,
        terminated=terminated,
        truncated=truncated,
        node_ids=node_ids,
    )


def wiki_group(group: int = 0) -> list[Episode]:
    rewards = [
        [{"tool": 0.2}, {"em": 1.0}],
        [{"tool": 0.0}, {"em": 1.0}],
        [{"tool": 0.2}, {"em": 0.0}],
    ]
    return [make_episode([(2, 2), (2, 0)], r, group=group) for r in rewards]


def per_turn(adv: np.ndarray, ep: Episode) -> list[float]:
    """The advantage of each turn (asserting it is uniform within the turn)."""
    out = []
    for k in range(ep.num_turns):
        vals = adv[ep.turn_index == k]
        assert np.allclose(vals, vals[0])
        out.append(float(vals[0]))
    return out


# ---------------------------------------------------------------------------------------------- critic-free table

TRAJECTORY_TABLE = {
    # strategy: one advantage per episode of wiki_group (hand values in the module docstring)
    "grpo_or": A_O,
    "grpo_mr": [0.7559289, 0.3779645, -1.1338934],
    "rloo": [0.6, 0.3, -0.9],  # 3/2 * (R - 0.8); e0: 1.2 - mean(1.0, 0.2) = 0.6
    "rloo_or": [0.5, 0.5, -1.0],  # 3/2 * (R^O - 2/3)
    "reinforce": [1.2, 1.0, 0.2],  # the merged return itself
    "reinforce_or": [1.0, 1.0, 0.0],
    # REINFORCE++: [1.2, 1.0, 0.2] whitened over the 12 policy tokens (4 per episode, population std 0.43205)
    "reinforce_pp": [0.9258201, 0.4629100, -1.3887301],
    # REINFORCE++-baseline: [0.4, 0.2, -0.6] (minus group mean) whitened the same way
    "reinforce_pp_baseline": [0.9258201, 0.4629100, -1.3887301],
}


@pytest.mark.parametrize("name", sorted(TRAJECTORY_TABLE))
def test_trajectory_level_strategies(name):
    eps = wiki_group()
    out = get_strategy(name)(eps, None, EXACT)
    assert out.returns is None and not needs_critic(name)
    for ep, adv, want in zip(eps, out.advantages, TRAJECTORY_TABLE[name], strict=True):
        assert adv.dtype == np.float32 and adv.shape == ep.token_ids.shape
        assert per_turn(adv, ep) == pytest.approx([want, want], abs=1e-5)
        assert np.all(adv[ep.loss_mask == 0] == 0.0)


def test_default_eps_is_in_the_denominator():
    out = get_strategy("grpo_or")(wiki_group(), None, CreditConfig())
    # 1/3 / (0.57735 + 1e-4) = 0.577250
    assert out.advantages[0][2] == pytest.approx((1 / 3) / (np.sqrt(1 / 3) + 1e-4), rel=1e-6)


def test_population_std_option():
    out = get_strategy("grpo_or")(wiki_group(), None, CreditConfig(eps=1e-12, std_ddof=0))
    # population std of [1, 1, 0] = sqrt(2/9) = 0.471405; (1 - 2/3) / 0.471405 = 0.707107
    assert out.advantages[0][2] == pytest.approx(0.7071068, abs=1e-6)


def test_groups_are_normalised_separately_and_degenerate_groups_give_zero():
    eps = [*wiki_group(group=0), make_episode([(2, 0)], [{"em": 1.0}], group=1)]  # group 1: one sample
    eps += [make_episode([(2, 0)], [{"em": 0.5}], group=2), make_episode([(1, 0)], [{"em": 0.5}], group=2)]
    out = get_strategy("grpo_or")(eps, None, EXACT)
    assert per_turn(out.advantages[0], eps[0]) == pytest.approx([A_O[0]] * 2, abs=1e-5)
    for i in (3, 4, 5):  # single sample; all-equal rewards (zero std)
        assert np.all(out.advantages[i] == 0.0)
    assert np.all(get_strategy("rloo")(eps, None, EXACT).advantages[3] == 0.0)


# -------------------------------------------------------------------------------------------------------- MT-GRPO


def test_mt_grpo_two_turns_eq9():
    # c = 1: turn0 = A^T + A^O = [1.15470, -0.57735, -0.57735]; turn1 = A^O
    eps = wiki_group()
    out = get_strategy("mt_grpo")(eps, None, EXACT)
    want0 = [1.1547005, -0.5773503, -0.5773503]
    for ep, adv, w0, w1 in zip(eps, out.advantages, want0, A_O, strict=True):
        assert per_turn(adv, ep) == pytest.approx([w0, w1], abs=1e-5)
    # c = 0.5: turn0 = A^T + 0.5 A^O = [0.866025, -0.866025, 0.0]
    out = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, turn_coef=0.5))
    assert [per_turn(a, e)[0] for a, e in zip(out.advantages, eps, strict=True)] == pytest.approx(
        [0.8660254, -0.8660254, 0.0], abs=1e-5
    )


def test_mt_rloo_appendix_c():
    # A^T = 3/2 * ([0.2, 0, 0.2] - 0.13333) = [0.1, -0.2, 0.1]; A^O = 3/2 * ([1, 1, 0] - 2/3) = [0.5, 0.5, -1]
    # turn0 = A^T + A^O = [0.6, 0.3, -0.9]; turn1 = A^O
    eps = wiki_group()
    out = get_strategy("mt_rloo")(eps, None, EXACT)
    for ep, adv, want in zip(eps, out.advantages, [[0.6, 0.5], [0.3, 0.5], [-0.9, -1.0]], strict=True):
        assert per_turn(adv, ep) == pytest.approx(want, abs=1e-6)


def test_mt_grpo_flat_group_with_unequal_turn_counts():
    # e1 answers at turn 0: its outcome component sits in turn 0's dict and still counts as R^O.
    # R^O = [1, 1, 0] -> A^O as before; A^T_0 over all three = [0.57735, -1.15470, 0.57735];
    # A^T_1 over e0, e2 only = [0, 0]. With c = 0.5:
    #   e0: turn1 = A^O = 0.57735; turn0 = 0.57735 + 0.5 * 0.57735 = 0.866025
    #   e1: one turn: turn0 = A^T_0 + A^O = -1.15470 + 0.57735 = -0.57735
    #   e2: turn1 = -1.15470; turn0 = 0.57735 + 0.5 * -1.15470 = 0.0
    eps = [
        make_episode([(2, 2), (2, 0)], [{"tool": 0.2}, {"em": 1.0}]),
        make_episode([(3, 0)], [{"tool": 0.0, "em": 1.0}]),
        make_episode([(2, 2), (2, 0)], [{"tool": 0.2}, {"em": 0.0}]),
    ]
    out = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, turn_coef=0.5))
    got = [per_turn(a, e) for a, e in zip(out.advantages, eps, strict=True)]
    assert got[0] == pytest.approx([0.8660254, 0.5773503], abs=1e-5)
    assert got[1] == pytest.approx([-0.5773503], abs=1e-5)
    assert got[2] == pytest.approx([0.0, -1.1547005], abs=1e-5)


def test_mt_grpo_three_turn_flat_matches_eq12():
    # Two episodes, three turns, turn rewards [1, 0], [0, 1], [0, 0] per turn -> each A^T_k = +-0.70711 or 0,
    # outcome [1, 0] -> A^O = [0.70711, -0.70711]. c = 0.5, eq. 12 for e0 (0-based turns):
    #   A_2 = A^O = 0.70711; A_1 = A^T_1 + c A_2 = -0.70711 + 0.35355 = -0.35355;
    #   A_0 = A^T_0 + c A_1 = 0.70711 - 0.17678 = 0.53033
    eps = [
        make_episode([(1, 1)] * 3, [{"tool": 1.0}, {"tool": 0.0}, {"em": 1.0}]),
        make_episode([(1, 1)] * 3, [{"tool": 0.0}, {"tool": 1.0}, {"em": 0.0}]),
    ]
    out = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, turn_coef=0.5))
    assert per_turn(out.advantages[0], eps[0]) == pytest.approx([0.5303301, -0.3535534, 0.7071068], abs=1e-5)
    assert per_turn(out.advantages[1], eps[1]) == pytest.approx([-0.5303301, 0.3535534, -0.7071068], abs=1e-5)


def final_turn_group() -> list[Episode]:
    """Turn-level rewards on both turns (as Sokoban and τ with a judge pay them), outcome on the last::

    e0: turn0 {tool: 1}  turn1 {tool: 1, em: 1}     A^O   = [0.57735, 0.57735, -1.15470]
    e1: turn0 {tool: 0}  turn1 {tool: 0, em: 1}     A^T_0 = [0.57735, -1.15470, 0.57735]   (R^T_0 = [1, 0, 1])
    e2: turn0 {tool: 1}  turn1 {tool: 0, em: 0}     A^T_1 = [1.15470, -0.57735, -0.57735]  (R^T_1 = [1, 0, 0])
    """
    rewards = [
        [{"tool": 1.0}, {"tool": 1.0, "em": 1.0}],
        [{"tool": 0.0}, {"tool": 0.0, "em": 1.0}],
        [{"tool": 1.0}, {"tool": 0.0, "em": 0.0}],
    ]
    return [make_episode([(2, 2), (2, 0)], r) for r in rewards]


# (strategy, turn_coef, mt_final_turn_advantage) -> per-episode [turn0, turn1], by hand from final_turn_group:
MT_FINAL_TURN_TABLE = {
    # 000 eq. 9 / 001 eq. 12 (the default): turn1 = A^O; turn0 = A^T_0 + c A^O. A^T_1 never enters.
    ("mt_grpo", 1.0, False): [[1.1547005, 0.5773503], [-0.5773503, 0.5773503], [-0.5773503, -1.1547005]],
    ("mt_grpo", 0.5, False): [[0.8660254, 0.5773503], [-0.8660254, 0.5773503], [0.0, -1.1547005]],
    # the extension: turn1 = A^T_1 + A^O = [1.73205, 0, -1.73205]; turn0 = A^T_0 + c turn1
    ("mt_grpo", 1.0, True): [[2.3094011, 1.7320508], [-1.1547005, 0.0], [-1.1547005, -1.7320508]],
    ("mt_grpo", 0.5, True): [[1.4433757, 1.7320508], [-1.1547005, 0.0], [-0.2886751, -1.7320508]],
    # MT-RLOO: A^T_0 = 3/2 ([1, 0, 1] - 2/3) = [0.5, -1, 0.5]; A^O = [0.5, 0.5, -1]; A^T_1 = [1, -0.5, -0.5]
    ("mt_rloo", 1.0, False): [[1.0, 0.5], [-0.5, 0.5], [-0.5, -1.0]],
    ("mt_rloo", 1.0, True): [[2.0, 1.5], [-1.0, 0.0], [-1.0, -1.5]],
}


@pytest.mark.parametrize(("name", "coef", "final"), sorted(MT_FINAL_TURN_TABLE))
def test_mt_grpo_final_turn_has_no_turn_level_advantage_unless_asked(name, coef, final):
    eps = final_turn_group()
    cfg = CreditConfig(eps=1e-12, turn_coef=coef, mt_final_turn_advantage=final)
    out = get_strategy(name)(eps, None, cfg)
    got = [per_turn(a, e) for a, e in zip(out.advantages, eps, strict=True)]
    assert got == [pytest.approx(w, abs=1e-6) for w in MT_FINAL_TURN_TABLE[(name, coef, final)]]


def test_mt_grpo_tree_branched_final_level():
    # root -> a, b (turn 0: tool 1, 0) -> a1 a2 / b1 b2 (turn 1, branched: tool 1, 0 / 0, 0; em 1, 0 / 1, 0).
    # A^T(a, b) = +-0.70711; A^O over leaves [1, 0, 1, 0] = [0.86603, -0.86603, 0.86603, -0.86603].
    # Paper form: leaves get A^O; A(a) = 0.70711 + mean(0.86603, -0.86603) = 0.70711, A(b) = -0.70711.
    # Extension: A^T(a1, a2) = +-0.70711 (b1, b2 equal -> 0): leaves [1.57314, -1.57314, 0.86603, -0.86603].
    spec = [(["a", "a1"], 1.0, 1.0, 1.0), (["a", "a2"], 1.0, 0.0, 0.0), (["b", "b1"], 0.0, 0.0, 1.0)]
    spec.append((["b", "b2"], 0.0, 0.0, 0.0))
    eps = [
        make_episode([(2, 1), (1, 0)], [{"tool": t0}, {"tool": t1, "em": o}], node_ids=ids) for ids, t0, t1, o in spec
    ]
    paper = get_strategy("mt_grpo")(eps, None, EXACT)
    ext = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, mt_final_turn_advantage=True))
    a_o = [0.8660254, -0.8660254, 0.8660254, -0.8660254]
    leaves_ext = [1.5731321, -1.5731321, 0.8660254, -0.8660254]
    for i, ep in enumerate(eps):
        root = 0.7071068 if i < 2 else -0.7071068
        assert per_turn(paper.advantages[i], ep) == pytest.approx([root, a_o[i]], abs=1e-6)
        assert per_turn(ext.advantages[i], ep) == pytest.approx([root, leaves_ext[i]], abs=1e-6)


def tree_group() -> list[Episode]:
    """K = 3, G = 2: root -> a, b (turn 0) -> a1 a2 / b1 b2 (turn 1) -> one final node each (turn 2).

    turn rewards  a: 1.0  b: 0.0 | a1: 0.5  a2: 0.0  b1: 0.3  b2: 0.3 | finals: none
    outcomes      a1f: 1  a2f: 0  b1f: 1  b2f: 1
    """
    spec = [
        (["a", "a1", "a1f"], [1.0, 0.5], 1.0),
        (["a", "a2", "a2f"], [1.0, 0.0], 0.0),
        (["b", "b1", "b1f"], [0.0, 0.3], 1.0),
        (["b", "b2", "b2f"], [0.0, 0.3], 1.0),
    ]
    return [
        make_episode([(2, 1), (2, 1), (1, 0)], [{"tool": t0}, {"tool": t1}, {"em": o}], node_ids=ids)
        for ids, (t0, t1), o in [(s[0], s[1], s[2]) for s in spec]
    ]


def test_mt_grpo_tree_appendix_f():
    # Siblings: A^T(a), A^T(b) = +-0.70711; A^T(a1), A^T(a2) = +-0.70711; b1, b2 equal -> 0; finals alone -> 0.
    # Outcome over all 4 leaves [1, 0, 1, 1]: mean 0.75, sample std 0.5 -> A^O = [0.5, -1.5, 0.5, 0.5].
    # c = 0.5. Leaves: A(xf) = 0 + A^O.  Turn 1: A(a1) = 0.70711 + 0.5*0.5 = 0.95711; A(a2) = -0.70711 - 0.75
    # = -1.45711; A(b1) = A(b2) = 0.25.  Turn 0: A(a) = 0.70711 + 0.5*mean(0.95711, -1.45711) = 0.58211;
    # A(b) = -0.70711 + 0.5*0.25 = -0.58211. Check: A(a) is the mean over its two leaves of eq. 12 along each
    # path: (0.70711 + 0.35355 + 0.125 ; 0.70711 - 0.35355 - 0.375) -> mean 0.58211.
    eps = tree_group()
    out = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, turn_coef=0.5))
    want = [
        [0.5821068, 0.9571068, 0.5],
        [0.5821068, -1.4571068, -1.5],
        [-0.5821068, 0.25, 0.5],
        [-0.5821068, 0.25, 0.5],
    ]
    for ep, adv, w in zip(eps, out.advantages, want, strict=True):
        assert per_turn(adv, ep) == pytest.approx(w, abs=1e-5)
    # A shared node's tokens get the same advantage in every leaf episode that contains them.
    assert np.array_equal(out.advantages[0][:5], out.advantages[1][:5])


def test_mt_grpo_tree_rejects_inconsistent_shared_node():
    eps = tree_group()
    eps[1].turn_rewards[0] = {"tool": 0.0}  # node "a" paid 1.0 in episode 0
    with pytest.raises(InvalidArgument, match="node 'a'"):
        get_strategy("mt_grpo")(eps, None, EXACT)


def test_mt_grpo_tree_and_flat_cannot_mix():
    flat = make_episode([(2, 1), (2, 1), (1, 0)], [{"tool": 0.0}, {"tool": 0.0}, {"em": 0.0}])
    eps = [*tree_group()[:2], flat]
    with pytest.raises(InvalidArgument, match="mixes"):
        get_strategy("mt_grpo")(eps, None, EXACT)


# ----------------------------------------------------------------------------------------------------------- TARL

TARL_LEVELS = {"judge": "turn", "task": "outcome"}


def tarl_group() -> list[Episode]:
    spec = [([1, 1], 1), ([1, 0], 1), ([-1, 1], 0), ([0, 0, 1], 0)]
    return [
        make_episode(
            [(2, 1)] * len(js),
            [{"judge": j} for j in js[:-1]] + [{"judge": js[-1], "task": task}],
            levels=TARL_LEVELS,
        )
        for js, task in spec
    ]


def test_tarl_scores_and_grpo_sum():
    # 10 x terminal + 5 x (-1 turn) + 5/T x other turns:
    #   [1, 1] ok -> 10 + 2.5 + 2.5 = 15 (perfect); [1, 0] ok -> 12.5; [-1, 1] fail -> -5 + 2.5 = -2.5;
    #   [0, 0, 1] fail -> 5/3 = 1.66667.  GRPO over [15, 12.5, -2.5, 1.66667]: mean 6.66667, sample std 8.41625
    #   -> [0.99015, 0.69310, -1.08916, -0.59409]
    eps = tarl_group()
    assert [tarl_score(ep, EXACT) for ep in eps] == pytest.approx([15.0, 12.5, -2.5, 5 / 3])
    assert tarl_score(eps[0], CreditConfig(tarl_turn_scale=1.0)) == pytest.approx(11.0)  # the literal 1/T reading
    out = get_strategy("tarl")(eps, None, EXACT)
    want = [0.9901475, 0.6931033, -1.0891623, -0.5940885]
    for ep, adv, w in zip(eps, out.advantages, want, strict=True):
        assert per_turn(adv, ep) == pytest.approx([w] * ep.num_turns, abs=1e-5)


def test_tarl_ppo_turn_and_traj_reward_placement():
    eps = tarl_group()
    values = [np.zeros(len(ep.token_ids) + 1) for ep in eps]
    turn = get_strategy("tarl_ppo_turn")(eps, values, EXACT)
    # episode 2 ([-1, 1], fail): tokens P P A A E A A E -> -5 on token 3, 2.5 on token 6 (its last token)
    assert turn.token_rewards[2].tolist() == pytest.approx([0, 0, 0, -5, 0, 0, 2.5, 0])
    # episode 0 (perfect): 2.5 on token 3; 2.5 + 10 on token 6
    assert turn.token_rewards[0].tolist() == pytest.approx([0, 0, 0, 2.5, 0, 0, 12.5, 0])
    traj = get_strategy("tarl_ppo_traj")(eps, values, EXACT)
    assert traj.token_rewards[0].tolist() == pytest.approx([0, 0, 0, 0, 0, 0, 0.9901475, 0], abs=1e-5)
    # gamma = lambda = 1, V = 0: every policy token's advantage is the trajectory's normalised score
    assert traj.advantages[3][traj.value_masks[3] > 0] == pytest.approx([-0.5940885] * 6, abs=1e-5)
    assert needs_critic("tarl_ppo_turn") and needs_critic("tarl_ppo_traj") and not needs_critic("tarl")


# ------------------------------------------------------------------------------------------------------ PPO / GAE

# One episode P P A A E E A A (turn0 = 2-3 pays tool 0.2, turn1 = 6-7 pays em 1.0).
# V(s_t) for t = 0..8; env-token values (9.0) must not matter with the advantage mask on; V after the end = 7.0.
PPO_VALUES = np.array([0.0, 0.0, 0.5, 0.4, 9.0, 9.0, 0.6, 0.8, 7.0])
PPO_CFG = CreditConfig(gamma=0.9, gae_lambda=0.5, whiten_advantages=False)
# mt_ppo: chain of policy tokens rewards [0, 0.2, 0, 1.0], V [0.5, 0.4, 0.6, 0.8], last 0, gamma*lambda 0.45:
#   deltas: t7 1.0 - 0.8 = 0.2; t6 0.9*0.8 - 0.6 = 0.12; t3 0.2 + 0.9*0.6 - 0.4 = 0.34; t2 0.9*0.4 - 0.5 = -0.14
#   A7 = 0.2; A6 = 0.12 + 0.45*0.2 = 0.21; A3 = 0.34 + 0.45*0.21 = 0.4345; A2 = -0.14 + 0.45*0.4345 = 0.055525
# ppo_or: rewards [0, 0, 0, 1.0]: A3 = 0.14 + 0.0945 = 0.2345; A2 = -0.14 + 0.45*0.2345 = -0.034475
# ppo_mr: rewards [0, 0, 0, 1.2]: A7 = 0.4; A6 = 0.12 + 0.18 = 0.3; A3 = 0.14 + 0.135 = 0.275; A2 = -0.01625
PPO_TABLE = {
    "mt_ppo": [0.055525, 0.4345, 0.21, 0.2],
    "ppo_or": [-0.034475, 0.2345, 0.21, 0.2],
    "ppo_mr": [-0.01625, 0.275, 0.3, 0.4],
}


def ppo_episode(**kw) -> Episode:
    return make_episode([(2, 2), (2, 0)], [{"tool": 0.2}, {"em": 1.0}], **kw)


@pytest.mark.parametrize("name", sorted(PPO_TABLE))
def test_ppo_family_hand_values(name):
    ep = ppo_episode()
    out = get_strategy(name)([ep], [PPO_VALUES], PPO_CFG)
    adv = out.advantages[0]
    assert needs_critic(name)
    assert adv[[2, 3, 6, 7]].tolist() == pytest.approx(PPO_TABLE[name], abs=1e-6)
    assert np.all(adv[[0, 1, 4, 5]] == 0.0)
    assert out.returns[0][[2, 3, 6, 7]] == pytest.approx(np.add(PPO_TABLE[name], [0.5, 0.4, 0.6, 0.8]), abs=1e-6)
    assert out.value_masks[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]


def test_mt_ppo_reward_placement_eq9():
    out = get_strategy("mt_ppo")([ppo_episode()], [PPO_VALUES], PPO_CFG)
    assert out.token_rewards[0].tolist() == pytest.approx([0, 0, 0, 0.2, 0, 0, 0, 1.0])
    # one-turn episode paying turn and outcome components at turn 0: both on its last policy token
    ep = make_episode([(3, 0)], [{"tool": 0.2, "em": 1.0}])
    out = get_strategy("mt_ppo")([ep], [np.zeros(6)], PPO_CFG)
    assert out.token_rewards[0].tolist() == pytest.approx([0, 0, 0, 0, 1.2])


def test_gae_without_advantage_mask_runs_over_env_tokens():
    # Chain = every response token 2..7: V [0.5, 0.4, 9, 9, 0.6, 0.8], rewards [0, 0.2, 0, 0, 0, 1.0]
    #   A7 = 0.2; A6 = 0.21; d5 = 0.9*0.6 - 9 = -8.46 -> A5 = -8.46 + 0.45*0.21 = -8.3655
    #   d4 = 0.9*9 - 9 = -0.9 -> A4 = -0.9 + 0.45*-8.3655 = -4.664475
    #   d3 = 0.2 + 0.9*9 - 0.4 = 7.9 -> A3 = 7.9 + 0.45*-4.664475 = 5.80098625
    #   d2 = -0.14 -> A2 = -0.14 + 0.45*5.80098625 = 2.4704438125
    cfg = CreditConfig(gamma=0.9, gae_lambda=0.5, whiten_advantages=False, use_advantage_mask=False)
    out = get_strategy("mt_ppo")([ppo_episode()], [PPO_VALUES], cfg)
    want = [0, 0, 2.4704438125, 5.80098625, -4.664475, -8.3655, 0.21, 0.2]
    assert out.advantages[0].tolist() == pytest.approx(want, abs=1e-5)
    assert out.value_masks[0].tolist() == [0, 0, 1, 1, 1, 1, 1, 1]


def test_truncated_episode_bootstraps_from_final_value_only_when_asked():
    # ppo_or, truncated, bootstrap_truncated=True: last step's delta = 1.0 + 0.9*7.0 - 0.8 = 6.5
    boot = dataclasses.replace(PPO_CFG, bootstrap_truncated=True)
    out = get_strategy("ppo_or")([ppo_episode(terminated=False, truncated=True)], [PPO_VALUES], boot)
    assert out.advantages[0][7] == pytest.approx(6.5)
    assert CreditConfig().bootstrap_truncated is False  # the default, as verl: the head there is never trained
    cfg = CreditConfig(gamma=0.9, gae_lambda=0.5, whiten_advantages=False)
    out = get_strategy("ppo_or")([ppo_episode(terminated=False, truncated=True)], [PPO_VALUES], cfg)
    assert out.advantages[0][7] == pytest.approx(0.2)


def test_ppo_whitening_and_value_errors():
    eps = wiki_group()
    values = [np.linspace(0, 1, len(ep.token_ids) + 1) for ep in eps]
    out = get_strategy("mt_ppo")(eps, values, CreditConfig())
    flat = np.concatenate([a[m > 0] for a, m in zip(out.advantages, out.value_masks, strict=True)])
    assert flat.mean() == pytest.approx(0.0, abs=1e-6) and flat.std() == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(InvalidArgument, match="needs critic values"):
        get_strategy("mt_ppo")(eps, None, CreditConfig())
    with pytest.raises(InvalidArgument, match="expected"):
        get_strategy("mt_ppo")(eps, [v[:-1] for v in values], CreditConfig())


def naive_gae(rewards, values, last_value, gamma, lam, done):
    """cleanrl's loop, verbatim in spirit: one trajectory, next_value/next_done at the end."""
    n = len(rewards)
    adv = np.zeros(n)
    lastgaelam = 0.0
    for t in reversed(range(n)):
        if t == n - 1:
            nextnonterminal = 1.0 - done
            nextvalues = last_value
        else:
            nextnonterminal = 1.0
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        adv[t] = lastgaelam = delta + gamma * lam * nextnonterminal * lastgaelam
    return adv


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=4),
    gamma=st.floats(0.5, 1.0),
    lam=st.floats(0.0, 1.0),
    truncated=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_mt_ppo_matches_naive_gae_over_policy_tokens(turns, gamma, lam, truncated, seed):
    rng = np.random.default_rng(seed)
    turns = [(max(p, 1), e) for p, e in turns]  # every turn generated at least one token
    rewards = [{"tool": float(rng.normal())} for _ in turns]
    rewards[-1]["em"] = float(rng.normal())
    ep = make_episode(turns, rewards, prompt=3, truncated=truncated, terminated=not truncated)
    values = rng.normal(size=len(ep.token_ids) + 1)
    cfg = CreditConfig(gamma=gamma, gae_lambda=lam, whiten_advantages=False, bootstrap_truncated=True)
    out = get_strategy("mt_ppo")([ep], [values], cfg)
    # Reference: drop env/prompt tokens, build the compact reward list by hand, run cleanrl's loop.
    pos = np.flatnonzero(ep.loss_mask)
    compact_r = np.zeros(len(pos))
    for k in range(len(turns)):
        compact_r[np.flatnonzero(ep.turn_index[pos] == k)[-1]] += rewards[k]["tool"]
    compact_r[-1] += rewards[-1]["em"]
    want = naive_gae(compact_r, values[pos], values[-1], gamma, lam, done=0.0 if truncated else 1.0)
    assert out.advantages[0][pos] == pytest.approx(want, abs=1e-4)
    assert np.all(out.advantages[0][ep.loss_mask == 0] == 0.0)
    assert gae(compact_r, values[pos], 0.0, gamma, lam) == pytest.approx(
        naive_gae(compact_r, values[pos], 0.0, gamma, lam, done=1.0)
    )
    # Advantage mask off: the chain is every response token, env tokens as zero-reward steps with their own V.
    off = get_strategy("mt_ppo")(
        [ep],
        [values],
        CreditConfig(
            gamma=gamma, gae_lambda=lam, whiten_advantages=False, use_advantage_mask=False, bootstrap_truncated=True
        ),
    )
    resp = np.arange(pos[0], len(ep.token_ids))
    full_r = np.zeros(len(ep.token_ids))
    full_r[pos] = compact_r
    want = naive_gae(full_r[resp], values[resp], values[-1], gamma, lam, done=0.0 if truncated else 1.0)
    assert off.advantages[0][resp] == pytest.approx(want, abs=1e-4)


# ---------------------------------------------------------------------------------------------------------- masks


def test_mask_switches_agent_r1_table4():
    eps = wiki_group()
    both = get_strategy("mt_grpo")(eps, None, EXACT)
    assert both.loss_masks[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    # loss mask off: every response token (from the first policy token) enters the loss; the prompt never does
    no_loss = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, use_loss_mask=False))
    assert no_loss.loss_masks[0].tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    assert np.array_equal(no_loss.advantages[0], both.advantages[0])  # env tokens carry advantage 0
    # advantage mask off: env tokens take the advantage of the turn before them (turn 0 for tokens 4-5)
    no_adv = get_strategy("mt_grpo")(eps, None, CreditConfig(eps=1e-12, use_advantage_mask=False))
    assert no_adv.advantages[0].tolist() == pytest.approx([0, 0] + [1.1547005] * 4 + [A_O[0]] * 2, abs=1e-5)
    assert no_adv.loss_masks[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]


def test_unknown_component_level_raises():
    ep = make_episode([(2, 0)], [{"mystery": 1.0}])
    with pytest.raises(InvalidArgument, match="mystery"):
        get_strategy("grpo_mr")([ep], None, EXACT)


# ------------------------------------------------------------------------------------------------------- registry


def test_get_strategy_typo_suggests():
    with pytest.raises(InvalidArgument, match="Did you mean 'mt_grpo'"):
        get_strategy("mt_gpro")
    with pytest.raises(InvalidArgument, match="Known strategies"):
        get_strategy("sarsa")


def test_registry_lists_every_strategy_of_the_seeds():
    seeds = {"grpo_or", "grpo_mr", "mt_grpo", "rloo", "mt_rloo", "reinforce", "ppo_or", "ppo_mr", "mt_ppo", "tarl"}
    assert seeds <= set(STRATEGIES)
    assert {n for n in STRATEGIES if needs_critic(n)} == {
        "ppo_or",
        "ppo_mr",
        "mt_ppo",
        "tarl_ppo_turn",
        "tarl_ppo_traj",
        "turn_ppo",
    }
    with pytest.raises(InvalidArgument):
        CreditConfig(gamma=1.5)


# ---------------------------------------------------------------------------------------------------- properties

episode_specs = st.lists(
    st.tuples(
        st.integers(0, 2),  # group
        st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2)), min_size=1, max_size=3),  # turns
        st.lists(st.floats(-2, 2), min_size=6, max_size=6),  # reward pool
    ),
    min_size=1,
    max_size=6,
)


def build(specs) -> list[Episode]:
    eps = []
    for group, turns, pool in specs:
        rewards = [{"tool": pool[k]} for k in range(len(turns))]
        rewards[-1]["em"] = pool[5]
        ep = make_episode(turns, rewards, group=group)
        ep.state_keys = [f"s{k}:{pool[0] > 0 and k > 0}" for k in range(len(turns))]  # for GiGPO's anchor groups
        eps.append(ep)
    return eps


@settings(max_examples=30, deadline=None)
@given(specs=episode_specs, adv_mask=st.booleans(), loss=st.booleans())
def test_advantages_vanish_outside_the_advantage_mask(specs, adv_mask, loss):
    eps = build(specs)
    cfg = CreditConfig(use_advantage_mask=adv_mask, use_loss_mask=loss)
    values = [np.linspace(-1, 1, len(ep.token_ids) + 1) for ep in eps]
    for name, fn in STRATEGIES.items():
        out = fn(eps, values if needs_critic(name) else None, cfg)
        for ep, adv, lm in zip(eps, out.advantages, out.loss_masks, strict=True):
            allowed = ep.loss_mask > 0 if adv_mask else np.arange(len(adv)) >= np.flatnonzero(ep.loss_mask)[0]
            assert np.all(adv[~allowed] == 0.0), name
            assert np.all(np.isfinite(adv)) and adv.dtype == np.float32
            assert np.all(lm[: np.flatnonzero(ep.loss_mask)[0]] == 0.0)


@settings(max_examples=30, deadline=None)
@given(specs=episode_specs)
def test_grpo_and_rloo_advantages_sum_to_zero_within_a_group(specs):
    eps = build(specs)
    for name in ("grpo_or", "grpo_mr", "rloo", "tarl"):
        out = get_strategy(name)(eps, None, CreditConfig())
        per_episode = np.array([a[np.flatnonzero(ep.loss_mask)[0]] for a, ep in zip(out.advantages, eps, strict=True)])
        for g in {ep.group for ep in eps}:
            members = [i for i, ep in enumerate(eps) if ep.group == g]
            assert abs(per_episode[members].sum()) < 1e-3 * max(1.0, len(members)), name


def test_turn_without_policy_tokens_pays_on_the_previous_token():
    # turn 1 generated nothing (tokens: P P A A E E | turn 2: A): its reward lands on token 3 (turn 0's last)
    ep = make_episode([(2, 2), (0, 1), (1, 0)], [{"tool": 0.2}, {"tool": 0.3}, {"em": 1.0}])
    out = get_strategy("mt_ppo")([ep], [np.zeros(len(ep.token_ids) + 1)], PPO_CFG)
    assert out.token_rewards[0].tolist() == pytest.approx([0, 0, 0, 0.5, 0, 0, 0, 1.0])
    assert np.all(np.isfinite(get_strategy("mt_grpo")([ep, ppo_episode()], None, EXACT).advantages[0]))


@settings(max_examples=25, deadline=None)
@given(
    depth=st.integers(1, 3),
    branch=st.integers(2, 3),
    coef=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
)
def test_tree_mt_grpo_equals_leaf_mean_of_eq12(depth, branch, coef, seed):
    """Balanced tree: ``depth`` branched turns, then one unbranched final turn; reference enumerates leaf paths."""
    rng = np.random.default_rng(seed)
    paths = [()]
    for _ in range(depth):
        paths = [(*p, c) for p in paths for c in range(branch)]
    node_reward: dict[tuple, float] = {}
    eps = []
    for path in paths:
        ids = ["r" + "".join(map(str, path[: k + 1])) for k in range(depth)] + ["f" + "".join(map(str, path))]
        rewards = []
        for k in range(depth):
            key = path[: k + 1]
            node_reward.setdefault(key, float(rng.integers(0, 3)) / 2)
            rewards.append({"tool": node_reward[key]})
        rewards.append({"em": float(rng.integers(0, 2))})
        eps.append(make_episode([(1, 1)] * depth + [(1, 0)], rewards, node_ids=ids))
    cfg = CreditConfig(eps=1e-12, turn_coef=coef)
    out = get_strategy("mt_grpo")(eps, None, cfg)

    def sib_norm(key: tuple) -> float:
        sibs = [node_reward[(*key[:-1], c)] for c in range(branch)]
        sd = np.std(sibs, ddof=1)
        return 0.0 if sd == 0 else (node_reward[key] - np.mean(sibs)) / (sd + 1e-12)

    outcomes = np.array([ep.level_reward("outcome") for ep in eps])
    sd = outcomes.std(ddof=1)
    a_out = np.zeros(len(eps)) if sd == 0 else (outcomes - outcomes.mean()) / (sd + 1e-12)

    def eq12(leaf: int, k: int) -> float:  # 001 eq. 12 along one leaf's path (final turn has no A^I)
        path = paths[leaf]
        return (
            sum(coef ** (m - k) * sib_norm(path[: m + 1]) for m in range(k, depth)) + coef ** (depth - k) * a_out[leaf]
        )

    for i, (ep, adv) in enumerate(zip(eps, out.advantages, strict=True)):
        got = per_turn(adv, ep)
        for k in range(depth):
            below = [j for j, p in enumerate(paths) if p[: k + 1] == paths[i][: k + 1]]
            assert got[k] == pytest.approx(np.mean([eq12(j, k) for j in below]), abs=1e-6)
        assert got[depth] == pytest.approx(a_out[i], abs=1e-6)
