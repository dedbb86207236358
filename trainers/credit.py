"""Credit assignment: per-turn rewards of a batch of episodes -> per-token advantages (and critic targets).

Every strategy is a pure function with one signature, registered by name in :data:`STRATEGIES`::

    fn(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput

Nothing else in the code base branches on a strategy's name: the trainer calls ``get_strategy(name)`` and reads
what the strategy declared it needs, ``needs(name)`` (:class:`Needs`: a critic, groups of episodes per task,
anchor-state keys, the ratio level of its clipped loss). Rewards are rebuilt from each episode's per-turn reward
components and the env's ``reward_levels`` (``"turn"`` or ``"outcome"``), so one env serves every paper's signal.

Worked example (``grpo_or``, one group of G = 3 two-turn episodes, default ``eps``, sample std)::

    outcome rewards R^O = [1.0, 0.0, 0.5]   mean 0.5, std (ddof=1) 0.5
    advantages      A   = [1.0, -1.0, 0.0]   (divided by std + eps, so 0.9998 ...), on every policy token

The same episodes under ``mt_grpo`` add a turn-level advantage on turn 0 (eqs. 9-10 of 000 / eqs. 5-6 of 001):
``A_0 = A^T + turn_coef * A^O`` and ``A_1 = A^O``.

Layout of the arrays (all indexed by token position ``t`` of ``Episode.token_ids``, length ``n``):

- ``advantages[i][t]``: the advantage of token ``t``; zero wherever the advantage mask excludes ``t``.
- ``loss_masks[i][t]``: 1.0 where token ``t`` enters the policy loss (see "Masks" below).
- ``values[i]`` (input, critic strategies): length ``n + 1``; ``values[i][t]`` is V(s_t), the critic's value of
  the state *just before* token ``t`` is generated, i.e. the value head's output at position ``t - 1``;
  ``values[i][n]`` is the value after the last token (used only to bootstrap truncated episodes). Build it as
  ``np.concatenate([[0.0], head_outputs])`` where ``head_outputs`` has one value per position.
- ``returns[i][t]``: the critic target for V(s_t) (compare with the new head output at position ``t - 1``),
  defined where ``value_masks[i][t]`` is 1.

Strategies (one line each; "uniform" = one number for every token of the trajectory):

- ``grpo_or``: GRPO (000 eq. 3) on the outcome reward only; uniform.
- ``grpo_mr``: GRPO on the merged reward (every component of every turn); uniform.
- ``mt_grpo``: MT-GRPO, turn-level advantages (000 eqs. 9-10; 001 eqs. 5-6; K turns per 001 eq. 12; on a rollout
  tree when the episodes carry ``node_ids``, 001 Appendix F).
- ``rloo`` / ``rloo_or``: RLOO (000 eq. 5) on the merged / outcome reward; uniform.
- ``mt_rloo``: MT-RLOO (000 Appendix C, eqs. 11-12): MT-GRPO with the leave-one-out normaliser.
- ``reinforce`` / ``reinforce_or``: REINFORCE (000 eq. 6), the advantage is the return itself; uniform.
- ``reinforce_pp`` / ``reinforce_pp_baseline``: REINFORCE++ and REINFORCE++-baseline as compared in 004 Table 3
  (return, or return minus its group mean, whitened over the batch's tokens).
- ``ppo_or``: PPO with the outcome reward on the trajectory's last policy token; GAE (001 eq. 8).
- ``ppo_mr``: PPO with the merged reward on the trajectory's last policy token (001 PPO-MR, MDP M2).
- ``mt_ppo``: MT-PPO (001 eq. 9): each turn's turn-level reward on that turn's last policy token, the outcome
  reward on the trajectory's last policy token; GAE over policy tokens.
- ``tarl``: TARL reward combination (003 §3.2) as a GRPO score: 10 x terminal + 5 x a -1 turn + 5 x other turns / T.
- ``tarl_ppo_turn``: TARL per-turn assignment for PPO: each turn's scaled judge score on its last policy token, the
  scaled terminal reward on the trajectory's last policy token; GAE (003 eq. 4, §5.1 "turn-level").
- ``tarl_ppo_traj``: TARL trajectory-level assignment for PPO: the group-normalised TARL score as the single
  trajectory reward on the last policy token; GAE (003 §5.1 "trajectory-level").
- ``gigpo``: GiGPO (Feng et al. 2025, arXiv 2505.10978): episode-level group advantage of the return plus ω times a
  step-level advantage of each turn's discounted return within its anchor-state group (needs ``Episode.state_keys``).
- ``mt_grpo_rtg`` / ``mt_rloo_rtg``: turn-level advantages whose baseline stays unbiased when the policy chooses
  when to stop (verl RFC #7244): each turn's *return-to-go* is normalised per turn index, instead of summing
  per-index-normalised turn rewards as MT-GRPO does.
- ``turn_ppo``: Turn-PPO (Li et al. 2025, arXiv 2512.17008): the critic read only at turn boundaries, GAE over turns,
  each turn's advantage spread over its tokens.

Masks (004 Agent-R1 §3.2 and Table 4). Two independent switches in :class:`CreditConfig`:

- ``use_loss_mask`` (default on): the policy loss covers the policy's own tokens only (``Episode.loss_mask``).
  Off: it covers every *response* token, i.e. every token from the first policy token to the end, env tokens
  included (the prompt before the first policy token never enters the loss).
- ``use_advantage_mask`` (default on): advantages are computed on, and aligned to, the policy's tokens only. For
  GAE this means the recursion runs over policy tokens only: env tokens are skipped, so a reward never lands on an
  env token and gamma/lambda never decay across one, and V(s) is read only at states where the policy acts. Off:
  GAE runs over every response token (env tokens are ordinary steps with reward 0 and their own value), and the
  critic-free strategies give each env token the advantage of the policy turn before it (001 §2.1 counts the env
  feedback f_k as part of action a_k = [l_k, f_k]).
- Interaction: with the loss mask on, advantages on env tokens are never used, so the advantage mask matters only
  through how GAE walks the sequence (PPO family); for the critic-free strategies it is then a no-op, which is why
  004 did not ablate it for GRPO. With the loss mask off and the advantage mask on, env tokens enter the loss with
  advantage 0 (they only dilute the per-sequence mean and add KL/entropy terms). Both off reproduces 004's last
  PPO row. ``value_masks`` follow the advantage mask (the critic is trained where GAE read it).

Ambiguities resolved (each is tested in ``tests/trainers/test_credit.py``):

1. Which components are "turn" and which "outcome": exactly the env's ``reward_levels``, wherever they are paid.
   An episode that answers at turn 0 has outcome components in turn 0's dict; they still count as outcome (R^O),
   and for PPO they land on the trajectory's last policy token, which is then also turn 0's last token. A
   component missing from ``reward_levels`` raises :class:`~agentgym_turn.error.InvalidArgument` (never dropped).
2. Group std: sample std (``std_ddof=1``, as torch/TRL, which 000 and 001 trained with) plus ``eps`` (1e-4, TRL's
   constant) in the denominator. A group of one sample, or one whose rewards are all equal, gets advantage 0
   (the numerator is 0; a NaN std of one sample is treated as 0). RLOO with G = 1 also gives 0.
3. MT-GRPO's coefficient (λ in 000, α in 001) is not given in the papers; default ``turn_coef = 1.0``.
4. MT-GRPO with K turns on flat groups (001 eq. 12, 0-based turns k of an episode with K_i turns):
   ``A_k = sum_{l=k}^{K_i-1} c^(l-k) A^T_l + c^(K_i-1-k) A^O`` where ``A^T_l`` normalises the turn-level reward of
   turn l across the episodes of the group that *have* a turn l, and ``A^O`` normalises the outcome reward across
   the whole group; an episode with fewer turns than its group mates still gets A^O on its last turn. The final
   turn has no turn-level advantage of its own (eq. 9: ``A_2 = A^O``; eq. 12: the sum stops at K-1, as only turns
   1..K-1 are sampled per state): ``A^T`` is 0 at the group's final turn position, turn ``K - 1`` with K the most
   turns any episode of the group played (for trees: the deepest level). So for equal turn counts the last turn
   gets exactly ``A^O``, and an episode that ended before the group's horizon (WikiTwoTurn answering at turn 0)
   keeps its last turn's ``A^T`` as eq. 9's ``A_1 = A^T + c A^O`` does. ``mt_final_turn_advantage=True`` is the
   extension: ``A^T`` of the final position too (it matters where the last turn pays turn-level rewards: Sokoban,
   τ with a judge). (001 §3.2 notes MT-GRPO assumes equal turn counts; unequal ones are handled as said.)
5. MT-GRPO on a rollout tree (001 Appendix F), used automatically when every episode of a group has
   ``node_ids``: the turn-level reward of a node is normalised against its *siblings* (the nodes with the same
   parent); the outcome reward of a leaf is normalised across all leaves of the group (Appendix F's G^(K-1)
   trajectories). A node's advantage is ``A^T(node) + c * mean_{children} A(child)`` and a leaf's is
   ``A^T(leaf) + A^O(leaf)``: for a chain this is eq. 12; for a node shared by several leaves it is the mean of
   eq. 12 over the leaves below it when the tree is balanced (each level averages its children otherwise, e.g.
   when some episodes answered early). Every copy of the shared node's tokens, in every leaf episode, gets that
   same number (so in the loss a node's tokens weigh as many times as it has leaves, as when each leaf is trained as
   a full sample; a trainer wanting each node once can zero repeated copies in ``loss_masks``). An unbranched
   final turn has no siblings, so its A^T is 0, matching eq. 12's missing A^I_K; a branched one at the tree's
   deepest level gets A^T 0 as well unless ``mt_final_turn_advantage``. Leaves of
   different depth (an episode that answered early) are handled the same way.
6. GRPO-MR's trajectory reward is the plain sum of every component (001 §3.1's sum of gamma^k R_k with gamma=1,
   the value 001 D.1.3 uses).
7. PPO: ``returns = advantages + V`` before whitening; advantages are then whitened over the batch's
   advantage-masked tokens (``whiten_advantages``, as verl, 001's and 003's code base, does). A terminated
   episode's last value is 0; a truncated one bootstraps from ``values[i][n]`` when ``bootstrap_truncated``
   (Gymnasium's meaning of truncation; opt-in, since no target ever trains the head at that position), else 0
   (the default, as verl). A turn with no policy tokens (empty generation) puts its
   reward on the latest policy token before it (or the first policy token).
8. TARL: the terminal reward R(tau) is the sum of outcome components, each turn's judge score the sum of that
   turn's turn-level components, both raw as the env reports them (a judge scores every turn after the episode;
   the env reports those late turn rewards per turn and the rollout puts each on its turn, see
   :mod:`agentgym_turn.core`), so the scaling below happens here, once. A negative score is a "major deviation"
   and is multiplied by 5 (every negative turn, the at-most-one rule is the judge's job), any other score by 5/T
   with T the episode's number of policy turns. 003 §3.2 writes "scaled by 1/T so that the maximum contribution
   from turn-level rewards is capped at 5 points", and its categories (perfect = 15 = 10 + 5; failed between -5
   and 0; good attempt 0-5) need the non-negative turns to sum to at most 5, so we scale by 5/T
   (``tarl_turn_scale=1.0`` gives the literal 1/T). "Trajectory-level assignment" for PPO places the
   group-normalised score on the last policy token; with gamma = lambda = 1 (003 footnote 1) its return-to-go is
   then the same for every token, which is how we read "applied uniformly" (a reward copied onto every token
   would make returns scale with length).
9. Discounted turn returns in MT-GRPO / MT-RLOO (``turn_gamma``): ``A_k = A^T_k + turn_coef * turn_gamma *
   A_{k+1}`` (trees: times the children's mean), i.e. eq. 12 with the future terms discounted by ``turn_gamma``
   per turn of distance; ``turn_gamma = 1`` computes exactly today's numbers (tested bit for bit). Inside
   MT-GRPO the normalised advantages, not raw rewards, are summed, so a discount can only act on that sum and
   enters as a product with 001's α; it is its own knob because the same ``turn_gamma`` discounts the raw
   returns-to-go of ``mt_grpo_rtg`` / ``mt_rloo_rtg``, so one flag sets the discount across the family.
10. GiGPO (2505.10978 eqs. 3-8; verl-agent ``gigpo/core_gigpo.py``). Episode level: the return ``R(τ)`` (every
    component of every turn) normalised within the group, each episode counted once (eq. 3; verl-agent's default
    counts a trajectory once per step, which weighs long episodes more; we follow the paper). Step level: turn k's
    discounted return ``G_k = sum_{l>=k} gigpo_gamma^(l-k) r_l`` (eq. 5, ``r_l`` everything paid at turn l;
    the paper's γ = 0.95) normalised within its anchor-state group: every turn of every episode of the group whose
    ``state_keys`` entry is equal (eq. 6), repeated visits of one state inside one episode included, as the code
    does. A singleton group gives 0. ``A = A^E + gigpo_omega * A^S`` (eq. 8, ω = 1 in the paper). Both levels use
    the GRPO normaliser with ``scale_by_std`` (on: eq. 3's F_norm = std; off: F_norm = 1, verl-agent's
    ``mean_norm`` mode), ``eps`` and ``std_ddof``. The env defines what "same state" means (``info["state_key"]``,
    :mod:`agentgym_turn.core`); exact key equality, no similarity clustering.
11. The unbiased turn baseline (verl RFC #7244). MT-GRPO's turn-k advantage (``turn_coef = 1``, mean baseline)
    is ``sum_{l=k}^{K_i-1} (r_l - b_l) + (R^O - b^O)``: the number of baseline terms is set by the episode's own
    stopping turn ``K_i``, an action-dependent baseline, so the gradient is biased whenever the policy chooses
    when to stop: an extra turn's reward is cancelled by its own baseline ``b_l``, i.e. "take another turn"
    carries a hidden ``-E[R_intermediate]``. The fix (``mt_grpo_rtg``, ``mt_rloo_rtg``) normalises the
    return-to-go, ``A_k = N_k[sum_{l>=k} turn_gamma^(l-k) r^T_l] + N_k[turn_gamma^(K_i-1-k) R^O]``, where
    ``N_k`` compares the episodes of the group that reached turn k: one baseline per turn index, computed from the
    other episodes, whatever the episode does later. ``mt_rloo_rtg``'s leave-one-out baseline makes it exactly
    unbiased (``mt_grpo_rtg`` has GRPO's usual self-inclusion). Choices: turn-level and outcome parts are
    normalised separately, as in MT-GRPO; every turn's own turn reward counts, the final one included (skipping
    the group's last index, as MT-GRPO's eq. 9 does, would again depend on how long each episode ran), so
    ``mt_final_turn_advantage`` and ``turn_coef`` do not apply. Flat groups only: on a rollout tree the
    episodes below one node share that node's action, so a per-index baseline over them is not independent of
    it (use ``mt_grpo``'s sibling baselines there).
12. Turn-PPO (2512.17008): the turn is the MDP step. ``V(s_k)`` is read at turn k's first policy token, i.e.
    ``values[t_k]`` = the head's output at the last prompt/env token before the turn (:func:`value_positions`);
    the turn's reward is MT-PPO's (its turn-level components, plus the outcome on the last turn; an empty turn's
    reward joins the turn before it); ``A_k = delta_k + gamma*lambda*A_{k+1}``, ``delta_k = r_k + gamma
    V(s_{k+1}) - V(s_k)`` with ``gamma`` / ``gae_lambda`` now per turn (the paper prefers 0.99 / 0.9) and the
    same terminal/bootstrap rule as item 7. ``returns`` and ``value_masks`` are set at the turn boundaries only, so
    the critic is trained exactly where it is read; advantages are whitened over the advantage-masked tokens.
    The paper's turn-level importance ratio is a loss change, not credit assignment: ``--ratio-level turn``
    (:func:`trainers.losses.segment_log_ratio`: each turn's tokens share the geometric mean of their ratios).
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from agentgym_turn.error import InvalidArgument
from trainers.config import arg
from trainers.episode import Episode

Normaliser = Literal["grpo", "rloo"]

# TARL's reward combination (003 §3.2).
TARL_TERMINAL_SCALE = 10.0
TARL_MAJOR_SCALE = 5.0
TARL_TURN_SCALE = 5.0


@dataclass(frozen=True)
class CreditConfig:
    """Hyper-parameters of every credit-assignment strategy (one flat record; each strategy reads what it needs).

    Attributes:
        gamma: discount of GAE (001 D.1.3 and 003 use 1.0).
        gae_lambda: GAE's lambda (001 D.1.3 and 003 use 1.0).
        turn_coef: MT-GRPO / MT-RLOO coefficient on future advantages (λ in 000 eq. 9, α in 001 eq. 12).
        mt_final_turn_advantage: MT-GRPO / MT-RLOO also add the final turn's own turn-level advantage (an
            extension; off = 000 eq. 9 / 001 eq. 12, where the final turn gets ``A^O`` only).
        eps: added to the group std in GRPO-style normalisation.
        std_ddof: delta degrees of freedom of the group std (1 = sample std, as torch/TRL; 0 = 003 eq. 5).
        scale_by_std: divide by the group std (GRPO); False keeps only the mean baseline.
        whiten_advantages: whiten GAE (and REINFORCE++) advantages over the batch's advantage-masked tokens.
        bootstrap_truncated: a truncated episode's final state takes its critic value (else 0).
        tarl_terminal_scale: TARL's weight on the binary terminal reward (10).
        tarl_major_scale: TARL's weight on a negative (major deviation) turn score (5).
        tarl_turn_scale: TARL's weight on the other turn scores, divided by the number of turns T (5, see docstring).
        use_loss_mask: the policy loss covers policy tokens only (off: every response token; 004 Table 4).
        use_advantage_mask: advantages/GAE on policy tokens only (off: every response token; 004 Table 4).
        turn_gamma: discount per turn for the MT-GRPO family: MT-GRPO / MT-RLOO discount future turn advantages
            by it, MT-GRPO-RTG / MT-RLOO-RTG their returns-to-go (1.0 = undiscounted, today's numbers).
        gigpo_gamma: GiGPO's discount of each turn's return for the step-level advantage (0.95 in 2505.10978).
        gigpo_omega: GiGPO's weight ω of the step-level advantage (1.0 in 2505.10978).
    """

    # the fields declared with arg() are flags of the RL trainers (``RLConfig.credit_cfg``), in this order
    gamma: float = arg(1.0, "GAE discount (001: 1.0)")
    gae_lambda: float = arg(1.0, "GAE lambda (001: 1.0)")
    turn_coef: float = arg(1.0, "MT-GRPO coefficient on later turns' advantages")
    use_loss_mask: bool = arg(True, "policy loss on policy tokens only (Agent-R1 loss mask)", flag="loss_mask")
    use_advantage_mask: bool = arg(
        True, "advantages/GAE on policy tokens only (Agent-R1 advantage mask)", flag="advantage_mask"
    )
    std_ddof: int = arg(
        1,
        "group std of GRPO-style advantages: 1 = sample std (TRL), 0 = population (003 eq. 5)",
        choices=(0, 1),
        flag="group_std_ddof",
    )
    eps: float = arg(1e-4, "added to the group std in GRPO-style normalisation", flag="group_std_eps")
    scale_by_std: bool = arg(True, "divide group-centred rewards by the group std (GRPO)")
    whiten_advantages: bool = arg(True, "whiten GAE / REINFORCE++ advantages over the batch's tokens (verl)")
    turn_gamma: float = arg(1.0, "per-turn discount: mt_grpo/mt_rloo future advantages, mt_*_rtg returns-to-go")
    gigpo_gamma: float = arg(0.95, "GiGPO: discount of each turn's return (step-level advantage)")
    gigpo_omega: float = arg(1.0, "GiGPO: weight omega of the step-level advantage")
    mt_final_turn_advantage: bool = arg(
        False,
        "MT-GRPO/MT-RLOO: add the final turn's own turn-level advantage (an extension of 000 eq. 9 / 001 eq. 12)",
    )
    bootstrap_truncated: bool = arg(
        False,
        "GAE of a truncated episode starts from the critic's value after its last token (a head output no target "
        "ever trains) instead of 0 (verl's choice, the default)",
    )
    tarl_terminal_scale: float = TARL_TERMINAL_SCALE
    tarl_major_scale: float = TARL_MAJOR_SCALE
    tarl_turn_scale: float = TARL_TURN_SCALE

    def __post_init__(self) -> None:
        for name in ("gamma", "gae_lambda", "turn_gamma", "gigpo_gamma"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InvalidArgument(f"{_knob(name)}={value!r} must lie in [0, 1]; the papers use 1.0.")
        if self.turn_coef < 0.0:
            raise InvalidArgument(f"{_knob('turn_coef')}={self.turn_coef!r} must be >= 0 (001 uses [0, 1]).")
        if self.gigpo_omega < 0.0:
            raise InvalidArgument(f"{_knob('gigpo_omega')}={self.gigpo_omega!r} must be >= 0 (2505.10978 uses 1).")
        if self.eps <= 0.0:
            raise InvalidArgument(f"{_knob('eps')}={self.eps!r} must be > 0; it keeps a zero std finite.")
        if self.std_ddof not in (0, 1):
            raise InvalidArgument(f"{_knob('std_ddof')}={self.std_ddof!r} must be 0 or 1.")


def _knob(name: str) -> str:
    """How an error names a CreditConfig field: ``CreditConfig.eps (--group-std-eps)``."""
    flag = CreditConfig.__dataclass_fields__[name].metadata.get("flag") or name
    return f"CreditConfig.{name} (--{flag.replace('_', '-')})"


@dataclass
class CreditOutput:
    """What a strategy returns: one array per episode, each the length of that episode's ``token_ids``.

    Attributes:
        advantages: float32 per-token advantages (zero outside the advantage mask).
        loss_masks: float32, 1.0 where the token enters the policy loss (``use_loss_mask``).
        returns: float32 critic targets for V(s_t) (critic strategies), else ``None``.
        value_masks: float32, 1.0 where ``returns`` is defined and the critic is trained, else ``None``.
        token_rewards: float32 per-token rewards fed to GAE (critic strategies; for logging/tests), else ``None``.
    """

    advantages: list[np.ndarray]
    loss_masks: list[np.ndarray]
    returns: list[np.ndarray] | None = None
    value_masks: list[np.ndarray] | None = None
    token_rewards: list[np.ndarray] | None = None


StrategyFn = Callable[[Sequence[Episode], Sequence[np.ndarray] | None, CreditConfig], CreditOutput]


# --------------------------------------------------------------------------------------------------------------
# Pure helpers: rewards, masks, normalisers, GAE
# --------------------------------------------------------------------------------------------------------------


def check_levels(ep: Episode) -> None:
    """Raise InvalidArgument if a paid component has no level in ``ep.reward_levels``."""
    for k, turn in enumerate(ep.turn_rewards):
        for name in turn:
            if ep.reward_levels.get(name) not in ("turn", "outcome"):
                raise InvalidArgument(
                    f"reward component {name!r} paid at turn {k} of an {ep.env_id} episode has no level in "
                    f"reward_levels={ep.reward_levels!r}; the env must declare it 'turn' or 'outcome'."
                )


def outcome_reward(ep: Episode) -> float:
    """R^O: every outcome-level component the episode was paid, at whatever turn."""
    return ep.level_reward("outcome")


def merged_reward(ep: Episode) -> float:
    """R^O + R^T: every component of every turn (GRPO-MR, RLOO, REINFORCE)."""
    return ep.total_reward


def turn_level_rewards(ep: Episode) -> np.ndarray:
    """R^T_k for each turn k: the sum of that turn's turn-level components."""
    return np.array([ep.level_reward("turn", k) for k in range(ep.num_turns)], dtype=np.float64)


def tarl_turn_scores(ep: Episode, cfg: CreditConfig) -> np.ndarray:
    """Each turn's judge score rescaled as TARL does: x5 if negative (major deviation), else x5/T."""
    scores = turn_level_rewards(ep)
    if len(scores) == 0:
        return scores
    return np.where(scores < 0, cfg.tarl_major_scale * scores, cfg.tarl_turn_scale * scores / len(scores))


def tarl_score(ep: Episode, cfg: CreditConfig) -> float:
    """TARL's trajectory score: 10 x terminal + sum of rescaled turn scores (a perfect trajectory scores 15)."""
    return float(cfg.tarl_terminal_scale * outcome_reward(ep) + tarl_turn_scores(ep, cfg).sum())


def response_mask(ep: Episode) -> np.ndarray:
    """1 for every token from the first policy token to the end (policy and env tokens), 0 for the prompt."""
    out = np.zeros(len(ep.token_ids), dtype=bool)
    policy = np.flatnonzero(ep.loss_mask)
    if len(policy):
        out[policy[0] :] = True
    return out


def advantage_mask(ep: Episode, cfg: CreditConfig) -> np.ndarray:
    """Tokens that carry an advantage: policy tokens (``use_advantage_mask``) or every response token."""
    return ep.loss_mask.astype(bool) if cfg.use_advantage_mask else response_mask(ep)


def loss_mask(ep: Episode, cfg: CreditConfig) -> np.ndarray:
    """Tokens that enter the policy loss (float32): policy tokens (``use_loss_mask``) or every response token."""
    return (ep.loss_mask.astype(bool) if cfg.use_loss_mask else response_mask(ep)).astype(np.float32)


def token_turns(ep: Episode) -> np.ndarray:
    """For each token, the policy turn it belongs to or, for env tokens, the turn before them (-1 in the prompt)."""
    turns = ep.turn_index.astype(np.int64)
    return np.maximum.accumulate(np.where(turns >= 0, turns, -1)) if len(turns) else turns


def broadcast_turns(ep: Episode, turn_adv: Sequence[float], cfg: CreditConfig) -> np.ndarray:
    """Spread one advantage per turn onto that turn's tokens (and, without the advantage mask, its env tokens)."""
    turn_adv = np.asarray(turn_adv, dtype=np.float64)
    out = np.zeros(len(ep.token_ids), dtype=np.float32)
    turns = token_turns(ep)
    where = advantage_mask(ep, cfg) & (turns >= 0)
    out[where] = turn_adv[turns[where]]
    return out


def group_normalise(x: Sequence[float], kind: Normaliser, cfg: CreditConfig) -> np.ndarray:
    """Group-relative advantages of rewards ``x``: GRPO (000 eq. 3) or RLOO's G/(G-1)(x - mean) (000 eq. 5)."""
    x = np.asarray(x, dtype=np.float64)
    g = len(x)
    if g <= 1:
        return np.zeros(g)
    centred = x - x.mean()
    if kind == "rloo":
        return centred * g / (g - 1)
    if not cfg.scale_by_std:
        return centred
    return centred / (x.std(ddof=cfg.std_ddof) + cfg.eps)


def groups_of(episodes: Sequence[Episode]) -> dict[int, list[int]]:
    """Episode indices per group id, in order of first appearance."""
    out: dict[int, list[int]] = {}
    for i, ep in enumerate(episodes):
        out.setdefault(ep.group, []).append(i)
    return out


def whiten(arrays: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    """Shift and scale every masked entry of every array to mean 0, std 1 (population std, +1e-8 in the root)."""
    flat = np.concatenate([a[m.astype(bool)] for a, m in zip(arrays, masks, strict=True)] + [np.zeros(0)])
    mean = flat.mean() if len(flat) else 0.0
    std = np.sqrt(flat.var() + 1e-8) if len(flat) else 1.0
    return [
        np.where(m.astype(bool), (a - mean) / std, 0.0).astype(np.float32) for a, m in zip(arrays, masks, strict=True)
    ]


def gae(rewards: np.ndarray, values: np.ndarray, last_value: float, gamma: float, lam: float) -> np.ndarray:
    """GAE (001 eq. 8) over one chain of steps: ``A_j = delta_j + gamma*lam*A_{j+1}``.

    ``values[j]`` is V of the state before step j; ``last_value`` is V after the last step (0 if terminal).
    Returns the advantages (float64); the returns are ``advantages + values``.
    """
    n = len(rewards)
    adv = np.zeros(n)
    next_value, running = float(last_value), 0.0
    for j in range(n - 1, -1, -1):
        delta = rewards[j] + gamma * next_value - values[j]
        running = delta + gamma * lam * running
        adv[j] = running
        next_value = values[j]
    return adv


def reward_position(ep: Episode, turn: int) -> int:
    """Token that receives turn ``turn``'s reward: its last policy token, else the latest policy token before it."""
    where = np.flatnonzero((ep.turn_index >= 0) & (ep.turn_index <= turn))
    if len(where):
        return int(where[-1])
    policy = np.flatnonzero(ep.loss_mask)
    if len(policy) == 0:
        raise InvalidArgument(f"an {ep.env_id} episode has no policy tokens; drop it before credit assignment.")
    return int(policy[0])


def place_rewards(ep: Episode, per_turn: Sequence[float], final: float) -> np.ndarray:
    """Token-level rewards (001 eq. 9): ``per_turn[k]`` on turn k's last policy token, ``final`` on the last one."""
    r = np.zeros(len(ep.token_ids), dtype=np.float64)
    if not ep.loss_mask.any():
        return r
    for k, value in enumerate(per_turn):
        if value:
            r[reward_position(ep, k)] += value
    r[np.flatnonzero(ep.loss_mask)[-1]] += final
    return r


def _check_values(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None) -> list[np.ndarray]:
    if values is None:
        raise InvalidArgument(
            "this strategy needs critic values (values=None given); run the critic or pick a "
            "critic-free strategy such as 'grpo_or' or 'mt_grpo'."
        )
    if len(values) != len(episodes):
        raise InvalidArgument(f"got {len(values)} value arrays for {len(episodes)} episodes; pass one per episode.")
    out = []
    for i, (ep, v) in enumerate(zip(episodes, values, strict=True)):
        v = np.asarray(v, dtype=np.float64)
        if v.shape != (len(ep.token_ids) + 1,):
            raise InvalidArgument(
                f"values[{i}] has shape {v.shape}, expected ({len(ep.token_ids) + 1},): V(s_t) before each of the "
                f"{len(ep.token_ids)} tokens plus the value after the last; np.concatenate([[0.0], head_outputs])."
            )
        out.append(v)
    return out


def gae_credit(
    episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, rewards: list[np.ndarray], cfg: CreditConfig
) -> CreditOutput:
    """Run GAE on each episode's token rewards over the advantage-masked tokens only (the PPO family's core).

    With the advantage mask on, the chain is the policy tokens: env tokens between turns are skipped, so
    V(s) is read only before policy tokens and gamma/lambda decay only across policy tokens.
    """
    vals = _check_values(episodes, values)
    advs, rets, vmasks = [], [], []
    for ep, v, r in zip(episodes, vals, rewards, strict=True):
        mask = advantage_mask(ep, cfg)
        if np.any(r[~mask]):
            raise InvalidArgument("a reward was placed on a token outside the advantage mask (internal error).")
        steps = np.flatnonzero(mask)
        last = v[len(ep.token_ids)] if (ep.truncated and cfg.bootstrap_truncated) else 0.0
        a = np.zeros(len(ep.token_ids))
        a[steps] = gae(r[steps], v[steps], last, cfg.gamma, cfg.gae_lambda)
        ret = np.zeros(len(ep.token_ids), dtype=np.float32)
        ret[steps] = a[steps] + v[steps]
        advs.append(a.astype(np.float32))
        rets.append(ret)
        vmasks.append(mask.astype(np.float32))
    if cfg.whiten_advantages:
        advs = whiten(advs, vmasks)
    return CreditOutput(
        advantages=advs,
        loss_masks=[loss_mask(ep, cfg) for ep in episodes],
        returns=rets,
        value_masks=vmasks,
        token_rewards=[
            np.where(advantage_mask(ep, cfg), r, 0.0).astype(np.float32)
            for ep, r in zip(episodes, rewards, strict=True)
        ],
    )


def trajectory_credit(episodes: Sequence[Episode], per_episode: Sequence[float], cfg: CreditConfig) -> CreditOutput:
    """One advantage per episode, copied onto every advantage-masked token (000 eq. 2)."""
    advs = [broadcast_turns(ep, [a] * ep.num_turns, cfg) for ep, a in zip(episodes, per_episode, strict=True)]
    return CreditOutput(advantages=advs, loss_masks=[loss_mask(ep, cfg) for ep in episodes])


def group_advantages(
    episodes: Sequence[Episode], score: Callable[[Episode], float], kind: Normaliser, cfg: CreditConfig
) -> np.ndarray:
    """Normalise ``score(ep)`` within each group; one advantage per episode."""
    out = np.zeros(len(episodes))
    for idx in groups_of(episodes).values():
        out[idx] = group_normalise([score(episodes[i]) for i in idx], kind, cfg)
    return out


# --------------------------------------------------------------------------------------------------------------
# MT-GRPO / MT-RLOO: flat groups (001 eq. 12) and rollout trees (001 Appendix F)
# --------------------------------------------------------------------------------------------------------------


def _flat_turn_advantages(group: list[Episode], kind: Normaliser, cfg: CreditConfig) -> list[np.ndarray]:
    a_out = group_normalise([outcome_reward(ep) for ep in group], kind, cfg)
    turn_r = [turn_level_rewards(ep) for ep in group]
    max_k = max((len(t) for t in turn_r), default=0)
    a_turn = [np.zeros(len(t)) for t in turn_r]
    for k in range(max_k if cfg.mt_final_turn_advantage else max_k - 1):
        members = [j for j, t in enumerate(turn_r) if len(t) > k]
        normed = group_normalise([turn_r[j][k] for j in members], kind, cfg)
        for j, a in zip(members, normed, strict=True):
            a_turn[j][k] = a
    out = []
    for j, ep in enumerate(group):
        adv = np.zeros(ep.num_turns)
        running = a_out[j]  # carried back from the last turn: A_{K-1} = A^O (+ A^T_{K-1} before the horizon)
        for k in range(ep.num_turns - 1, -1, -1):
            adv[k] = a_turn[j][k] + running
            running = cfg.turn_coef * cfg.turn_gamma * adv[k]
        out.append(adv)
    return out


def _tree_turn_advantages(group: list[Episode], kind: Normaliser, cfg: CreditConfig) -> list[np.ndarray]:
    # Nodes are (depth, node_id); children keyed by parent (None for the root's children).
    reward: dict[tuple[int, str], float] = {}
    children: dict[tuple[int, str] | None, list[tuple[int, str]]] = {}
    leaf_of: list[tuple[int, str]] = []
    turn_r = [turn_level_rewards(ep) for ep in group]
    for j, ep in enumerate(group):
        assert ep.node_ids is not None
        parent: tuple[int, str] | None = None
        for k, nid in enumerate(ep.node_ids):
            node = (k, nid)
            if node in reward:
                if not np.isclose(reward[node], turn_r[j][k]):
                    raise InvalidArgument(
                        f"tree node {nid!r} (turn {k}) has turn-level reward {reward[node]} in one episode and "
                        f"{turn_r[j][k]} in another; episodes sharing a node must share its rewards."
                    )
            else:
                reward[node] = float(turn_r[j][k])
                children.setdefault(parent, []).append(node)
            parent = node
        if parent is None:
            raise InvalidArgument("a tree episode has no turns; drop it before credit assignment.")
        if parent in leaf_of:
            raise InvalidArgument(f"two episodes end at the same tree node {parent[1]!r}; leaf ids must be unique.")
        leaf_of.append(parent)
    # A^T: each node against its siblings; none at the deepest level (the final turn) unless asked for.
    a_turn: dict[tuple[int, str], float] = {}
    deepest = max(node[0] for node in reward)
    for sibs in children.values():
        final = sibs[0][0] == deepest and not cfg.mt_final_turn_advantage
        normed = np.zeros(len(sibs)) if final else group_normalise([reward[s] for s in sibs], kind, cfg)
        for node, a in zip(sibs, normed, strict=True):
            a_turn[node] = a
    a_out = dict(zip(leaf_of, group_normalise([outcome_reward(ep) for ep in group], kind, cfg), strict=True))
    if any(node in children for node in leaf_of):
        raise InvalidArgument(
            "a tree episode ends at a node another episode continues from; every leaf must end "
            "exactly one episode (give the longer episodes their own leaf)."
        )
    memo: dict[tuple[int, str], float] = {}

    def node_adv(node: tuple[int, str]) -> float:
        if node not in memo:
            kids = children.get(node)
            future = (
                a_out[node]
                if not kids
                else cfg.turn_coef * cfg.turn_gamma * float(np.mean([node_adv(c) for c in kids]))
            )
            memo[node] = a_turn[node] + future
        return memo[node]

    return [np.array([node_adv((k, nid)) for k, nid in enumerate(ep.node_ids or [])]) for ep in group]


def mt_turn_advantages(episodes: Sequence[Episode], kind: Normaliser, cfg: CreditConfig) -> list[np.ndarray]:
    """One advantage per turn of each episode (MT-GRPO / MT-RLOO); trees when the group carries ``node_ids``."""
    out: list[np.ndarray] = [np.zeros(0)] * len(episodes)
    for idx in groups_of(episodes).values():
        group = [episodes[i] for i in idx]
        tree = [ep.node_ids is not None for ep in group]
        if any(tree) and not all(tree):
            raise InvalidArgument(f"group {group[0].group} mixes tree episodes (node_ids set) and flat ones.")
        per = _tree_turn_advantages(group, kind, cfg) if all(tree) else _flat_turn_advantages(group, kind, cfg)
        for i, a in zip(idx, per, strict=True):
            out[i] = a
    return out


# --------------------------------------------------------------------------------------------------------------
# Discounted turn returns, the unbiased turn baseline (verl RFC #7244), GiGPO, Turn-PPO
# --------------------------------------------------------------------------------------------------------------


def discounted_returns(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """Returns-to-go over turns: ``G_k = r_k + gamma * G_{k+1}`` (float64, same length)."""
    out = np.zeros(len(rewards))
    running = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = float(rewards[k]) + gamma * running
        out[k] = running
    return out


def per_index_normalise(per_episode: Sequence[np.ndarray], kind: Normaliser, cfg: CreditConfig) -> list[np.ndarray]:
    """Normalise entry k of every array across the arrays that have an entry k (one group's episodes)."""
    out = [np.zeros(len(x)) for x in per_episode]
    for k in range(max((len(x) for x in per_episode), default=0)):
        members = [j for j, x in enumerate(per_episode) if len(x) > k]
        for j, a in zip(members, group_normalise([per_episode[j][k] for j in members], kind, cfg), strict=True):
            out[j][k] = a
    return out


def rtg_turn_advantages(episodes: Sequence[Episode], kind: Normaliser, cfg: CreditConfig) -> list[np.ndarray]:
    """One advantage per turn: per-index-normalised turn-level return-to-go plus discounted outcome (item 11)."""
    out: list[np.ndarray] = [np.zeros(0)] * len(episodes)
    for idx in groups_of(episodes).values():
        group = [episodes[i] for i in idx]
        if any(ep.node_ids is not None for ep in group):
            raise InvalidArgument(
                f"group {group[0].group} is a rollout tree (node_ids set); the return-to-go baseline needs flat "
                "groups of independent episodes. Use 'mt_grpo' / 'mt_rloo' (sibling baselines) on trees."
            )
        turn_rtg = [discounted_returns(turn_level_rewards(ep), cfg.turn_gamma) for ep in group]
        outcome = [
            outcome_reward(ep) * cfg.turn_gamma ** np.arange(ep.num_turns - 1, -1, -1, dtype=np.float64) for ep in group
        ]
        for i, a_t, a_o in zip(
            idx, per_index_normalise(turn_rtg, kind, cfg), per_index_normalise(outcome, kind, cfg), strict=True
        ):
            out[i] = a_t + a_o
    return out


def state_keys_of(ep: Episode) -> list[str]:
    """The episode's per-turn anchor-state keys; InvalidArgument naming the fix when the env gave none."""
    if ep.state_keys is None:
        raise InvalidArgument(
            f"this strategy groups turns by anchor state, but an {ep.env_id} episode has no state_keys: the env does "
            "not report info['state_key'] from reset/step (override TurnEnv._state_key, see agentgym_turn.core), "
            "or the episode was not built by trainers.rollout. Pick a strategy without anchor states, e.g. 'mt_grpo'."
        )
    return list(ep.state_keys)


def gigpo_turn_advantages(episodes: Sequence[Episode], cfg: CreditConfig) -> list[np.ndarray]:
    """GiGPO (2505.10978 eq. 8): ``A^E(episode) + omega * A^S(turn)`` per turn of each episode (item 10)."""
    a_episode = group_advantages(episodes, merged_reward, "grpo", cfg)
    returns = [discounted_returns([ep.turn_reward(k) for k in range(ep.num_turns)], cfg.gigpo_gamma) for ep in episodes]
    a_step = [np.zeros(ep.num_turns) for ep in episodes]
    anchors: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for i, ep in enumerate(episodes):
        for k, key in enumerate(state_keys_of(ep)):
            anchors[(ep.group, key)].append((i, k))
    for members in anchors.values():
        normed = group_normalise([returns[i][k] for i, k in members], "grpo", cfg)
        for (i, k), a in zip(members, normed, strict=True):
            a_step[i][k] = a
    return [a_episode[i] + cfg.gigpo_omega * a_step[i] for i in range(len(episodes))]


def value_positions(ep: Episode) -> np.ndarray:
    """Turn-PPO's critic positions: the first policy token of each turn that has one (int64, increasing).

    ``values[i][t]`` at such a ``t`` is V(s_k), the value of the state the turn starts from (the value head's
    output at the last prompt/env token before it); ``CreditOutput.value_masks`` of ``turn_ppo`` is 1 exactly here.
    """
    turns = ep.turn_index
    starts = (turns >= 0) & np.concatenate([[True], turns[1:] != turns[:-1]])
    return np.flatnonzero(starts).astype(np.int64)


def turn_gae_credit(
    episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, rewards: list[np.ndarray], cfg: CreditConfig
) -> CreditOutput:
    """GAE over turns (item 12): token ``rewards`` summed per turn, V read at :func:`value_positions`."""
    vals = _check_values(episodes, values)
    advs, rets, vmasks = [], [], []
    for ep, v, r in zip(episodes, vals, rewards, strict=True):
        starts = value_positions(ep)
        if len(starts) == 0:
            raise InvalidArgument(f"an {ep.env_id} episode has no policy tokens; drop it before credit assignment.")
        step_r = np.add.reduceat(r, starts)  # turn k: its tokens and the env tokens up to the next turn
        if not np.isclose(step_r.sum(), r.sum()) or r[: starts[0]].any():
            raise InvalidArgument("a turn reward was placed before the first policy token (internal error).")
        last = v[len(ep.token_ids)] if (ep.truncated and cfg.bootstrap_truncated) else 0.0
        a_turn = gae(step_r, v[starts], last, cfg.gamma, cfg.gae_lambda)
        per_turn = np.zeros(ep.num_turns)
        per_turn[ep.turn_index[starts]] = a_turn
        advs.append(broadcast_turns(ep, per_turn, cfg))
        ret, vmask = np.zeros(len(ep.token_ids), dtype=np.float32), np.zeros(len(ep.token_ids), dtype=np.float32)
        ret[starts], vmask[starts] = a_turn + v[starts], 1.0
        rets.append(ret)
        vmasks.append(vmask)
    if cfg.whiten_advantages:
        advs = whiten(advs, [advantage_mask(ep, cfg) for ep in episodes])
    return CreditOutput(
        advantages=advs,
        loss_masks=[loss_mask(ep, cfg) for ep in episodes],
        returns=rets,
        value_masks=vmasks,
        token_rewards=[r.astype(np.float32) for r in rewards],
    )


# --------------------------------------------------------------------------------------------------------------
# The strategies
# --------------------------------------------------------------------------------------------------------------


RatioLevel = Literal["token", "turn", "sequence"]


@dataclass(frozen=True)
class Needs:
    """What a strategy needs from the trainer, declared once where it is registered (:func:`needs`).

    Attributes:
        critic: reads critic values (the trainer builds and trains a value model).
        groups: compares the episodes of one task's group (GRPO / RLOO normalisers, group baselines): with
            ``group_size`` 1 every advantage is 0, so a trainer refuses it.
        state_keys: groups turns by the env's anchor-state keys (``Episode.state_keys``; GiGPO).
        ratio_level: the clipped loss's importance ratio the strategy is defined with: ``"token"`` (PPO, GRPO) or
            ``"turn"`` (Turn-PPO clips whole turns); a trainer's ``--ratio-level auto`` takes it.
    """

    critic: bool = False
    groups: bool = False
    state_keys: bool = False
    ratio_level: RatioLevel = "token"


#: Every strategy by name, filled by :func:`_strategy` where each is defined (the one registration)
STRATEGIES: dict[str, StrategyFn] = {}


def _strategy(
    critic: bool = False, groups: bool = False, state_keys: bool = False, ratio_level: RatioLevel = "token"
) -> Callable[[StrategyFn], StrategyFn]:
    """Register the decorated strategy in :data:`STRATEGIES` under its function's name, with what it needs
    (:class:`Needs`) on it, read back by :func:`needs`. A second strategy of the same name raises."""

    def mark(fn: StrategyFn) -> StrategyFn:
        if fn.__name__ in STRATEGIES:
            raise InvalidArgument(f"a credit-assignment strategy named {fn.__name__!r} is already registered.")
        fn.needs = Needs(critic=critic, groups=groups, state_keys=state_keys, ratio_level=ratio_level)  # type: ignore[attr-defined]
        STRATEGIES[fn.__name__] = fn
        return fn

    return mark


def _checked(episodes: Sequence[Episode]) -> Sequence[Episode]:
    for ep in episodes:
        check_levels(ep)
    return episodes


@_strategy(groups=True)
def grpo_or(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """GRPO-OR: group-normalised outcome reward, uniform over the trajectory (000 eq. 3)."""
    batch = _checked(episodes)
    return trajectory_credit(batch, group_advantages(batch, outcome_reward, "grpo", cfg), cfg)


@_strategy(groups=True)
def grpo_mr(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """GRPO-MR: group-normalised merged (outcome + turn-level) reward, uniform over the trajectory."""
    batch = _checked(episodes)
    return trajectory_credit(batch, group_advantages(batch, merged_reward, "grpo", cfg), cfg)


def turn_credit(
    episodes: Sequence[Episode],
    turn_advantages: Callable[[Sequence[Episode], CreditConfig], list[np.ndarray]],
    cfg: CreditConfig,
) -> CreditOutput:
    """Check the batch, compute one advantage per turn with ``turn_advantages`` and spread each over its turn."""
    batch = _checked(episodes)
    per_turn = turn_advantages(batch, cfg)
    advs = [broadcast_turns(ep, a, cfg) for ep, a in zip(batch, per_turn, strict=True)]
    return CreditOutput(advantages=advs, loss_masks=[loss_mask(ep, cfg) for ep in batch])


def _grouped_turn_credit(
    episodes: Sequence[Episode], advantages: Callable[..., list[np.ndarray]], kind: Normaliser, cfg: CreditConfig
) -> CreditOutput:
    """Turn advantages ``advantages(batch, kind, cfg)`` (group normaliser ``kind``: "grpo" or "rloo") spread over
    each turn's tokens."""
    return turn_credit(episodes, lambda batch, c: advantages(batch, kind, c), cfg)


@_strategy(groups=True)
def mt_grpo(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """MT-GRPO: turn-level advantages A_k = A^T_k + c * A_{k+1}, final turn A^O (000 eq. 9, 001 eq. 12 / App. F)."""
    return _grouped_turn_credit(episodes, mt_turn_advantages, "grpo", cfg)


@_strategy(groups=True)
def mt_rloo(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """MT-RLOO: MT-GRPO with RLOO's leave-one-out normaliser G/(G-1)(R - mean) (000 Appendix C)."""
    return _grouped_turn_credit(episodes, mt_turn_advantages, "rloo", cfg)


@_strategy(groups=True)
def rloo(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """RLOO on the merged return: G/(G-1)(R - mean), uniform (000 eq. 5)."""
    batch = _checked(episodes)
    return trajectory_credit(batch, group_advantages(batch, merged_reward, "rloo", cfg), cfg)


@_strategy(groups=True)
def rloo_or(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """RLOO on the outcome reward only."""
    batch = _checked(episodes)
    return trajectory_credit(batch, group_advantages(batch, outcome_reward, "rloo", cfg), cfg)


@_strategy()
def reinforce(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """REINFORCE: the total (merged) return is the advantage, uniform (000 eq. 6)."""
    batch = _checked(episodes)
    return trajectory_credit(batch, [merged_reward(ep) for ep in batch], cfg)


@_strategy()
def reinforce_or(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """REINFORCE on the outcome reward only."""
    batch = _checked(episodes)
    return trajectory_credit(batch, [outcome_reward(ep) for ep in batch], cfg)


@_strategy()
def reinforce_pp(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """REINFORCE++ (004 Table 3): the merged return on every token, whitened over the batch's tokens."""
    out = reinforce(episodes, values, cfg)
    masks = [advantage_mask(ep, cfg) for ep in episodes]
    return CreditOutput(advantages=whiten(out.advantages, masks), loss_masks=out.loss_masks)


@_strategy(groups=True)
def reinforce_pp_baseline(
    episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig
) -> CreditOutput:
    """REINFORCE++-baseline (004 Table 3): return minus its group mean, whitened over the batch's tokens."""
    batch = _checked(episodes)
    centred = np.zeros(len(batch))
    for idx in groups_of(batch).values():
        r = np.array([merged_reward(batch[i]) for i in idx])
        centred[idx] = r - r.mean()
    out = trajectory_credit(batch, centred, cfg)
    masks = [advantage_mask(ep, cfg) for ep in batch]
    return CreditOutput(advantages=whiten(out.advantages, masks), loss_masks=out.loss_masks)


@_strategy(critic=True)
def ppo_or(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """PPO-OR: the outcome reward on the trajectory's last policy token; GAE (001 eq. 8, MDP M1)."""
    batch = _checked(episodes)
    return gae_credit(batch, values, [place_rewards(ep, [], outcome_reward(ep)) for ep in batch], cfg)


@_strategy(critic=True)
def ppo_mr(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """PPO-MR: the merged reward on the trajectory's last policy token; GAE (MDP M2)."""
    batch = _checked(episodes)
    return gae_credit(batch, values, [place_rewards(ep, [], merged_reward(ep)) for ep in batch], cfg)


@_strategy(critic=True)
def mt_ppo(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """MT-PPO: turn rewards on each turn's last policy token, outcome on the last one (001 eq. 9); GAE."""
    batch = _checked(episodes)
    rewards = [place_rewards(ep, turn_level_rewards(ep), outcome_reward(ep)) for ep in batch]
    return gae_credit(batch, values, rewards, cfg)


@_strategy(groups=True)
def tarl(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """TARL with GRPO: the summed TARL score normalised within the group, uniform (003 §3.2)."""
    batch = _checked(episodes)
    return trajectory_credit(batch, group_advantages(batch, lambda ep: tarl_score(ep, cfg), "grpo", cfg), cfg)


@_strategy(critic=True)
def tarl_ppo_turn(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """TARL per-turn assignment for PPO: rescaled turn scores on each turn's last token, 10 x terminal on the last."""
    batch = _checked(episodes)
    rewards = [
        place_rewards(ep, tarl_turn_scores(ep, cfg), cfg.tarl_terminal_scale * outcome_reward(ep)) for ep in batch
    ]
    return gae_credit(batch, values, rewards, cfg)


@_strategy(critic=True, groups=True)
def tarl_ppo_traj(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """TARL trajectory-level assignment for PPO: the group-normalised TARL score on the last policy token."""
    batch = _checked(episodes)
    scores = group_advantages(batch, lambda ep: tarl_score(ep, cfg), "grpo", cfg)
    return gae_credit(batch, values, [place_rewards(ep, [], s) for ep, s in zip(batch, scores, strict=True)], cfg)


@_strategy(groups=True, state_keys=True)
def gigpo(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """GiGPO: episode-level group advantage + ω x step-level advantage within anchor-state groups (2505.10978)."""
    return turn_credit(episodes, gigpo_turn_advantages, cfg)


@_strategy(groups=True)
def mt_grpo_rtg(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """MT-GRPO with the unbiased turn baseline: returns-to-go normalised per turn index (verl RFC #7244)."""
    return _grouped_turn_credit(episodes, rtg_turn_advantages, "grpo", cfg)


@_strategy(groups=True)
def mt_rloo_rtg(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """MT-RLOO with the unbiased turn baseline: leave-one-out per turn index on returns-to-go (exactly unbiased)."""
    return _grouped_turn_credit(episodes, rtg_turn_advantages, "rloo", cfg)


@_strategy(critic=True, ratio_level="turn")
def turn_ppo(episodes: Sequence[Episode], values: Sequence[np.ndarray] | None, cfg: CreditConfig) -> CreditOutput:
    """Turn-PPO: V read at turn boundaries, GAE over turns, each turn's advantage on its tokens (2512.17008)."""
    batch = _checked(episodes)
    rewards = [place_rewards(ep, turn_level_rewards(ep), outcome_reward(ep)) for ep in batch]
    return turn_gae_credit(batch, values, rewards, cfg)


def get_strategy(name: str) -> StrategyFn:
    """The strategy registered as ``name``; a typo raises InvalidArgument with the closest names."""
    try:
        return STRATEGIES[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), STRATEGIES, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise InvalidArgument(
            f"unknown credit-assignment strategy {name!r}.{hint} Known strategies: {', '.join(sorted(STRATEGIES))}."
        ) from None


def needs(name: str) -> Needs:
    """What the strategy ``name`` declared it needs (:class:`Needs`); a typo raises as :func:`get_strategy` does.

    >>> needs("mt_grpo")
    Needs(critic=False, groups=True, state_keys=False, ratio_level='token')
    """
    return get_strategy(name).needs  # type: ignore[attr-defined]


def needs_critic(name: str) -> bool:
    """Whether the strategy ``name`` reads critic values (the PPO family)."""
    return needs(name).critic


def needs_state_keys(name: str) -> bool:
    """Whether the strategy ``name`` groups turns by the env's anchor-state keys (``Episode.state_keys``)."""
    return needs(name).state_keys
