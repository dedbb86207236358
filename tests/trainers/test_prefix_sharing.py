"""Prefix sharing in the update: a pack's common prompt computed once gives the losses and gradients of the
unshared path (policy with KL and entropy, reference log-probs, critic values and value loss), never shares a
policy token (tree rollouts), and mixes episodes with different prompts in one pack."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainers.conftest import tiny_llama
from trainers import modeling as M
from trainers.config import from_flat
from trainers.credit import CreditConfig, get_strategy
from trainers.episode import Episode
from trainers.rl import RLConfig, critic_minibatch, policy_minibatch

torch = pytest.importorskip("torch")
VOCAB = 97


def _episodes(rng: np.random.Generator, *, tree: bool) -> list[Episode]:
    """Two groups of three two-turn episodes under one system prompt (a question per group), and two episodes of
    another system prompt. ``tree``: a group's episodes share their first policy turn, as MT-GRPO trees do."""
    system = [rng.integers(0, VOCAB, 20), rng.integers(0, VOCAB, 14)]
    specs = [(0, 0), (0, 0), (0, 0), (0, 1), (0, 1), (0, 1), (1, 2), (1, 2)]  # (system prompt, group)
    questions = {g: rng.integers(0, VOCAB, int(rng.integers(4, 9))) for g in range(3)}
    first_turns = {g: rng.integers(0, VOCAB, int(rng.integers(3, 7))) for g in range(3)}
    out = []
    for s, g in specs:
        turn0 = first_turns[g] if tree else rng.integers(0, VOCAB, int(rng.integers(3, 7)))
        parts = [np.concatenate([system[s], questions[g]]), turn0, rng.integers(0, VOCAB, int(rng.integers(3, 8))),
                 rng.integers(0, VOCAB, int(rng.integers(2, 7)))]  # fmt: skip
        kinds = [(0, -1), (1, 0), (0, -1), (1, 1)]  # (loss mask, turn index) of prompt, turn 0, env, turn 1
        mask = np.concatenate([np.full(len(p), k) for p, (k, _) in zip(parts, kinds, strict=True)])
        turns = np.concatenate([np.full(len(p), t) for p, (_, t) in zip(parts, kinds, strict=True)])
        out.append(Episode(env_id="toy", group=g, token_ids=np.concatenate(parts), loss_mask=mask, turn_index=turns,
                           logprobs=-rng.random(len(mask)) * mask,
                           turn_rewards=[{"t": float(rng.random())}, {"o": float(rng.integers(0, 2))}],
                           reward_levels={"t": "turn", "o": "outcome"}, terminated=True,
                           node_ids=[f"{g}", f"{g}/{len(out)}"] if tree else None))  # fmt: skip
    return out


def _cfg(**kw) -> RLConfig:
    base = dict(env=["TurnRL/WikiTwoTurn-v2"], kl_coef=0.1, entropy_coef=0.01, bf16=False, engine="transformers",
                sft_episodes=0, aggregation="token_mean")  # fmt: skip
    base.update(kw)
    return from_flat(RLConfig, base)  # flat: loss_mask is RLConfig.credit_cfg.use_loss_mask


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("loss_mask", [True, False])
def test_shared_prefix_gives_the_losses_and_gradients_of_the_unshared_path(tree: bool, loss_mask: bool) -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    eps = _episodes(rng, tree=tree)
    cfg = _cfg(loss_mask=loss_mask)
    model, reference = tiny_llama(VOCAB), M.frozen_copy(tiny_llama(VOCAB, seed=1))
    critic = M.ValueModel.from_policy(model)
    with torch.no_grad():
        for p in critic.head.parameters():
            p.normal_()
    values = [rng.normal(size=len(e.token_ids) + 1) for e in eps]
    credit = get_strategy("mt_ppo")(eps, values, cfg.credit_cfg)
    old = {i: e.logprobs - 0.1 for i, e in enumerate(eps)}
    every = range(len(eps))
    unshared = M.pack_episodes(eps, every, 10_000)  # one row: the block-diagonal mask path
    single = M.pack_episodes(eps, every, 1)  # one episode per row: the plain causal path
    shared = M.pack_shared(eps, every, 10_000)
    assert len(shared) == 1 and shared[0].shared == 0  # the two system prompts agree on no token...
    split = M.pack_shared(eps, [0, 1, 2, 3, 4, 5], 10_000)  # ...one system prompt: shared up to the questions
    assert len(split) == 1 and split[0].shared == 20
    group = M.pack_shared(eps, [0, 1, 2], 10_000)[0]
    first_policy = min(int(np.flatnonzero(eps[i].loss_mask)[0]) for i in group.members)
    assert group.shared == first_policy - 1  # the whole prompt but its last token, never a policy token
    budget = M.pack_shared(eps, every, 60)  # several packs when the computed tokens would not fit
    assert len(budget) > 1 and all(p.shared is not None for p in budget)
    assert sorted(i for p in budget for i in p.members) == list(every)

    positions = [credit.loss_masks[i] for i in every]
    results = []
    layouts = {
        "one episode per row (plain causal)": single,
        "one row (block-diagonal mask)": unshared,
        "different system prompts in one pack (nothing shared)": shared,
        "one question's group shared, then the rest": [group, *M.pack_shared(eps, range(3, 8), 10_000)],
        "two questions in one pack (system prompt shared)": [*split, *M.pack_shared(eps, [6, 7], 10_000)],
        "small packs": budget,
    }
    for packs in layouts.values():
        ref: dict[int, np.ndarray] = {}
        heads: dict[int, np.ndarray] = {}
        with torch.no_grad():
            for pack in packs:
                ref.update(pack.split(M.pack_logprobs(reference, pack, positions=pack.gather(positions)).logprobs))
                heads.update(pack.split(critic.pack_values(pack)))
        model.zero_grad(), critic.zero_grad()
        logs, lp = policy_minibatch(model, packs, old, credit, ref, cfg)
        vloss = critic_minibatch(critic, packs, values, credit, value_clip=cfg.value_clip, autocast=cfg.autocast)
        grads = [p.grad.clone() for p in [*model.parameters(), *critic.parameters()] if p.grad is not None]
        results.append((ref, heads, logs, lp, vloss, grads))
    base = results[0]
    for ref, heads, logs, lp, vloss, grads in results[1:]:
        for i in every:
            on = positions[i].astype(bool)
            np.testing.assert_allclose(ref[i][on], base[0][i][on], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(lp[i][on], base[3][i][on], rtol=1e-5, atol=1e-5)
            read = np.arange(len(eps[i].token_ids)) >= np.flatnonzero(eps[i].loss_mask)[0] - 1  # V(s_t), t >= t0
            np.testing.assert_allclose(heads[i][read], base[1][i][read], rtol=1e-5, atol=1e-5)
        for key in ("losses/policy", "losses/kl", "losses/entropy", "losses/clip_fraction"):
            assert logs[key] == pytest.approx(base[2][key], rel=1e-5, abs=1e-6), key
        assert vloss == pytest.approx(base[4], rel=1e-5)
        assert len(grads) == len(base[5])
        for a, b in zip(grads, base[5], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_prompt_longer_than_the_pack_budget_is_still_shared() -> None:
    """τ's policy document makes a ~5k-token prompt, longer than --share-pack-tokens (2048): a group's episodes
    still share it, with at most the budget's tokens of their rests in the pack (computed alone, each episode
    would need its own pass over the whole prompt)."""
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, VOCAB, 50)

    def episode(rest: int) -> Episode:
        ids = np.concatenate([prompt, rng.integers(0, VOCAB, rest)])
        mask = np.r_[np.zeros(len(prompt)), np.ones(rest)].astype(np.int64)
        return Episode(env_id="toy", group=0, token_ids=ids, loss_mask=mask, turn_index=mask - 1,
                       logprobs=-rng.random(len(ids)) * mask, turn_rewards=[{"o": 1.0}], reward_levels={"o": "outcome"},
                       terminated=True)  # fmt: skip

    eps = [episode(5), episode(6), episode(4), episode(9)]  # 49 shareable tokens; rests of 6, 7, 5 and 10
    [pack] = M.pack_shared(eps, [0, 1, 2], 18)  # the prefix once (49 > 18) + 6 + 7 + 5 tokens of rests
    assert pack.shared == 49 and pack.members == [0, 1, 2]
    packs = M.pack_shared(eps, range(4), 18)  # the fourth's rest would take the rests to 28 > 18: its own pack
    assert [(p.members, p.shared) for p in packs] == [([0, 1, 2], 49), ([3], 0)]
    assert [p.members for p in M.pack_shared(eps, range(4), 16)] == [[0, 1], [2, 3]]  # 6 + 7, then 5 + 10
    [whole] = M.pack_shared(eps, range(4), 100)  # all within the budget (49 + 28): one pack, as before
    assert whole.shared == 49
    assert [p.members for p in M.pack_shared(eps, [0, 1], 55)] == [[0], [1]]  # a prefix within the budget: the
    # budget holds for the whole pack (49 + 13 > 55), as before


def test_the_credit_output_is_the_same_with_values_from_shared_packs() -> None:
    """GAE reads the critic from the position before the first policy token on: the prefix's zeros never enter."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    eps = _episodes(rng, tree=False)
    critic = M.ValueModel.from_policy(tiny_llama(VOCAB))
    with torch.no_grad():
        for p in critic.head.parameters():
            p.normal_()
    outs = []
    for packs in (M.pack_episodes(eps, range(8), 1), M.pack_shared(eps, range(8), 10_000)):
        heads: dict[int, np.ndarray] = {}
        with torch.no_grad():
            for pack in packs:
                heads.update(pack.split(critic.pack_values(pack)))
        values = [M.critic_values(heads[i]) for i in range(8)]
        for name in ("mt_ppo", "turn_ppo"):
            for adv_mask in (True, False):
                outs.append(get_strategy(name)(eps, values, CreditConfig(use_advantage_mask=adv_mask)))
    half = len(outs) // 2
    for a, b in zip(outs[:half], outs[half:], strict=True):
        for x, y in zip(a.advantages + a.returns, b.advantages + b.returns, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_an_output_asked_inside_the_shared_prefix_is_an_error() -> None:
    rng = np.random.default_rng(2)
    eps = _episodes(rng, tree=False)
    pack = M.pack_shared(eps, [0, 1], 10_000)[0]
    model = tiny_llama(VOCAB)
    every = torch.ones(pack.num_tokens)  # log-probs of prompt tokens too: not computable from a shared prefix
    with pytest.raises(ValueError, match="shared prefix"):
        M.pack_logprobs(model, pack, positions=every)
