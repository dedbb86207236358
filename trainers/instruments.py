"""Instruments of the credit signal: does turn-level credit have anything to act on in this batch?

A strategy that credits turns (MT-GRPO, GiGPO, MT-PPO, ...) can only differ from one that credits whole episodes
(GRPO-OR) where the episodes of a group differ turn by turn: in what they did at turn k and in what turn k paid.
The trainer logs three families of numbers every step, for every strategy (``credit/...`` in ``metrics.jsonl``,
TensorBoard, W&B and ``leaderboards.view``):

``credit/turn{k}_reward_varies``
    Of the *sampled* groups (every episode rolled out, before dynamic sampling drops any) in which at least two
    episodes played turn k, the fraction whose turn-k reward (the sum of every component the env paid for turn k,
    late ones included) is not the same for all of them. ``credit/turn{k}_groups`` counts those groups.
``credit/turn{k}_distinct_actions``
    The mean, over the same groups, of the number of distinct turn-k actions (token sequences) divided by the number
    of episodes that played turn k: 1/G when every episode of a group of G did the same thing, 1 when all differ.
``credit/adv_differs_from_grpo_or``
    The fraction of policy tokens (of the episodes trained on) whose advantage under the run's strategy differs from
    GRPO-OR's advantage for the same batch and credit settings (computed beside the update, not trained on).
    ``credit/turn_varying_episodes``: the fraction of those episodes whose advantage is not one value over all their
    policy tokens (GRPO-OR gives every token of an episode the same one).

What "nothing to do" looks like: ``turn{k}_reward_varies`` = 0 for every turn before the last means a turn-level
strategy of the MT-GRPO family computes exactly GRPO-OR's advantages (its turn terms are 0 in every group); a
``turn1_distinct_actions`` of 1/G means the policy never tries a different first turn, so no credit can tell first
turns apart; ``adv_differs_from_grpo_or`` = 0 says so directly for the strategy being run. A critic strategy
(MT-PPO, PPO-OR) differs from GRPO-OR on nearly every token by construction (GAE, whitening), so its
``adv_differs_from_grpo_or`` is near 1 whatever the rewards: read the turn-reward and action numbers for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from trainers.credit import CreditConfig, CreditOutput, get_strategy
from trainers.episode import Episode

MAX_TURNS_LOGGED = 10  # turns beyond this are pooled under ``credit/turn_later_...`` (long Sokoban / τ episodes)
ATOL = 1e-5  # advantages closer than this (float32) count as equal


def _turn_tokens(ep: Episode, k: int) -> tuple[int, ...]:
    return tuple(int(t) for t in ep.token_ids[ep.turn_index == k])


def _turn_reward(ep: Episode, k: int) -> float:
    return float(sum(ep.turn_rewards[k].values()))


def turn_signal(episodes: Sequence[Episode], max_turns: int = MAX_TURNS_LOGGED) -> dict[str, float]:
    """Per turn k (1-based in the keys): the fraction of groups whose turn-k reward varies, the number of groups
    with two or more episodes at turn k, and the mean fraction of distinct turn-k actions in a group.

    >>> import numpy as np
    >>> from trainers.episode import Episode
    >>> def ep(group, actions, rewards):
    ...     ids = [1] + [t for a in actions for t in (a, 2)]  # prompt, then (action token, env token) per turn
    ...     turn = [-1] + [i for k in range(len(actions)) for i in (k, -1)]
    ...     mask = [0] + [m for _ in actions for m in (1, 0)]
    ...     return Episode("x", group, ids, mask, turn, [0.0] * len(ids), [{"r": r} for r in rewards], {"r": "turn"},
    ...                    True)
    >>> sig = turn_signal([ep(0, [5, 6], [0.0, 1.0]), ep(0, [7, 6], [1.0, 1.0]), ep(1, [5, 6], [0.0, 0.0]),
    ...                    ep(1, [5, 6], [0.0, 1.0])])
    >>> sig["credit/turn1_reward_varies"], sig["credit/turn2_reward_varies"], sig["credit/turn1_distinct_actions"]
    (0.5, 0.5, 0.75)
    """
    groups: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[ep.group].append(ep)
    varies: dict[str, list[float]] = defaultdict(list)
    distinct: dict[str, list[float]] = defaultdict(list)
    for members in groups.values():
        turns = max(ep.num_turns for ep in members)
        for k in range(turns):
            at_k = [ep for ep in members if ep.num_turns > k]
            if len(at_k) < 2:
                continue
            key = f"turn{k + 1}" if k < max_turns else "turn_later"
            rewards = [_turn_reward(ep, k) for ep in at_k]
            varies[key].append(float(max(rewards) - min(rewards) > ATOL))
            distinct[key].append(len({_turn_tokens(ep, k) for ep in at_k}) / len(at_k))
    out: dict[str, float] = {}
    for key, flags in varies.items():
        out[f"credit/{key}_reward_varies"] = float(np.mean(flags))
        out[f"credit/{key}_groups"] = float(len(flags))
        out[f"credit/{key}_distinct_actions"] = float(np.mean(distinct[key]))
    return out


def advantage_difference(
    episodes: Sequence[Episode], credit: CreditOutput, cfg: CreditConfig, *, reference: str = "grpo_or"
) -> dict[str, float]:
    """How far the run's advantages (``credit``, on ``episodes``) are from ``reference``'s on the same batch: the
    fraction of policy tokens whose advantage differs, and the fraction of episodes whose advantage varies across
    their policy tokens. Empty when the batch has no policy token."""
    mask = [ep.loss_mask.astype(bool) for ep in episodes]
    total = sum(int(m.sum()) for m in mask)
    if not total:
        return {}
    out: dict[str, float] = {}
    varying = [float(np.ptp(a[m]) > ATOL) for a, m in zip(credit.advantages, mask, strict=True) if m.any()]
    out["credit/turn_varying_episodes"] = float(np.mean(varying))
    ref = get_strategy(reference)(episodes, None, cfg)
    differ = sum(
        int(np.sum(~np.isclose(a[m], b[m], rtol=0.0, atol=ATOL)))
        for a, b, m in zip(credit.advantages, ref.advantages, mask, strict=True)
    )
    out[f"credit/adv_differs_from_{reference}"] = differ / total
    return out
