"""Loss math against hand-computed values: clipped surrogate, aggregation, KL estimators, entropy, value loss."""

from __future__ import annotations

import math

import pytest
import torch

from agentgym_turn.error import InvalidArgument
from trainers.losses import (
    aggregate,
    aggregate_denominator,
    entropy_from_logits,
    kl_loss,
    kl_penalty,
    policy_loss,
    segment_log_ratio,
    token_logprobs,
    value_loss,
)

torch.set_num_threads(1)


def t(*xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def test_policy_loss_clip_inactive_and_active():
    old = torch.zeros(5)
    ratios = t(1.1, 1.5, 0.5, 1.5, 0.9)
    adv = t(2.0, 1.0, -1.0, -1.0, 1.0)
    # token 0: inside the clip range: -1.1*2 = -2.2
    # token 1: r=1.5, A>0 -> clipped to 1.2: -1.2
    # token 2: r=0.5, A<0 -> max(0.5, 0.8) = 0.8 (clipped)
    # token 3: r=1.5, A<0 -> max(1.5, 1.2) = 1.5 (pessimistic, not clipped)
    # token 4: r=0.9, A>0 -> max(-0.9, -0.9) = -0.9
    logp = ratios.log().requires_grad_()
    per_token = []
    for i in range(5):
        mask = torch.zeros(5)
        mask[i] = 1
        loss, _ = policy_loss(logp, old, adv, mask, aggregation="token_mean")
        per_token.append(loss.item())
    assert per_token == pytest.approx([-2.2, -1.2, 0.8, 1.5, -0.9], abs=1e-6)
    loss, stats = policy_loss(logp, old, adv, torch.ones(5), aggregation="token_mean")
    assert loss.item() == pytest.approx((-2.2 - 1.2 + 0.8 + 1.5 - 0.9) / 5, abs=1e-6)
    assert stats.clip_fraction == pytest.approx(2 / 5)
    loss.backward()
    # clipped tokens (1, 2) get no gradient; d/dlogp of -r A = -r A
    assert logp.grad.tolist() == pytest.approx([-2.2 / 5, 0.0, 0.0, 1.5 / 5, -0.9 / 5], abs=1e-6)


def test_policy_loss_eps_high_and_dual_clip():
    old = torch.zeros(2)
    logp = t(1.25, 5.0).log()
    adv = t(1.0, -1.0)
    # eps_high = 0.28: r=1.25 stays unclipped -> -1.25; eps_high default 0.2 -> -1.2
    loss, _ = policy_loss(logp, old, adv, t(1, 0), clip_eps_high=0.28)
    assert loss.item() == pytest.approx(-1.25)
    loss, _ = policy_loss(logp, old, adv, t(1, 0))
    assert loss.item() == pytest.approx(-1.2)
    # r=5, A=-1: plain PPO loss max(5, 1.2) = 5; dual clip c=3 bounds it at -c*A = 3
    loss, _ = policy_loss(logp, old, adv, t(0, 1))
    assert loss.item() == pytest.approx(5.0)
    loss, _ = policy_loss(logp, old, adv, t(0, 1), dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    with pytest.raises(InvalidArgument):
        policy_loss(logp, old, adv, t(1, 1), dual_clip=0.5)


def test_turn_level_ratio_hand_values():
    """The module docstring's example: token ratios [1.5, 0.9] in one turn share sqrt(1.35) = 1.1619, unclipped,
    where token by token the 1.5 is clipped. A second turn (ratios 1.9, 1.1: geometric mean 1.4457) is clipped as
    a whole: no gradient reaches its tokens, not even the 1.1 whose own ratio is inside the range."""
    old = torch.zeros(5)
    logp = t(1.5, 0.9, 1.0, 1.9, 1.1).log().requires_grad_()
    adv, mask = t(1.0, 1.0, 0.0, 1.0, 1.0), t(1, 1, 0, 1, 1)
    seg = torch.tensor([0, 0, -1, 1, 1])
    token_loss, token_stats = policy_loss(logp[:2], old[:2], adv[:2], mask[:2])
    assert token_loss.item() == pytest.approx(-1.05) and token_stats.clip_fraction == pytest.approx(0.5)
    loss, stats = policy_loss(logp[:2], old[:2], adv[:2], mask[:2], ratio_segments=seg[:2])
    assert loss.item() == pytest.approx(-math.sqrt(1.35), abs=1e-6) and stats.clip_fraction == 0.0
    loss, stats = policy_loss(logp, old, adv, mask, ratio_segments=seg, aggregation="token_mean")
    assert loss.item() == pytest.approx(-(2 * math.sqrt(1.35) + 2 * 1.2) / 4, abs=1e-6)
    assert stats.clip_fraction == pytest.approx(0.5)
    loss.backward()
    # turn 0: both its tokens' terms are -r_seg, each with d r_seg / d logp_t = r_seg / 2; over 4 masked tokens
    g = 2 * math.sqrt(1.35) / 2 / 4
    assert logp.grad.tolist() == pytest.approx([-g, -g, 0.0, 0.0, 0.0], abs=1e-6)


def test_segment_ratio_loss_matches_a_naive_loop():
    """Random packed sequences, turns and advantages: loss and gradient equal a per-segment Python loop."""
    gen = torch.Generator().manual_seed(0)
    n = 40
    seq_ids = torch.sort(torch.randint(0, 4, (n,), generator=gen)).values
    turns = torch.randint(-1, 3, (n,), generator=gen)
    mask = (turns >= 0).float()
    segments = seq_ids * 10 + turns + 1
    adv = torch.randn(n, generator=gen)
    old = torch.randn(n, generator=gen) * 0.1 - 1.0
    base = old + torch.randn(n, generator=gen) * 0.2
    for mode in ("token_mean", "seq_mean_token_mean"):
        logp = base.clone().requires_grad_()
        loss, _ = policy_loss(logp, old, adv, mask, seq_ids=seq_ids, aggregation=mode, ratio_segments=segments)
        loss.backward()
        ref_logp = base.clone().requires_grad_()
        per_seq: dict[int, list[torch.Tensor]] = {}
        for i in range(n):
            if mask[i] == 0:
                continue
            same = [j for j in range(n) if segments[j] == segments[i] and mask[j] == 1]
            r = torch.exp(sum(ref_logp[j] - old[j] for j in same) / len(same))
            term = -torch.minimum(r * adv[i], r.clamp(0.8, 1.2) * adv[i])
            per_seq.setdefault(int(seq_ids[i]), []).append(term)
        if mode == "token_mean":
            ref = sum(sum(v) for v in per_seq.values()) / sum(len(v) for v in per_seq.values())
        else:
            ref = sum(sum(v) / len(v) for v in per_seq.values()) / len(per_seq)
        ref.backward()
        assert loss.item() == pytest.approx(ref.item(), abs=1e-6), mode
        torch.testing.assert_close(logp.grad, ref_logp.grad, atol=1e-6, rtol=1e-5)


def test_segment_log_ratio_checks_shapes_and_leaves_empty_segments_at_one():
    lr = segment_log_ratio(t(0.2, 0.4, 9.0), t(1, 1, 0), torch.tensor([3, 3, 7]))
    assert lr.tolist() == pytest.approx([0.3, 0.3, 0.0])
    with pytest.raises(InvalidArgument, match="ratio segments"):
        segment_log_ratio(t(0.2, 0.4), t(1, 1), torch.tensor([0]))


def test_aggregate_sequence_mean_vs_token_mean_packed_and_padded():
    # packed: seq 0 tokens [1, 3], seq 1 token [10], a masked token [100] in seq 1, seq 2 fully masked
    vals = t(1, 3, 10, 100, 7)
    mask = t(1, 1, 1, 0, 0)
    seq = torch.tensor([0, 0, 1, 1, 2])
    assert aggregate(vals, mask, seq).item() == pytest.approx((2 + 10) / 2)  # 001 eq. 3
    assert aggregate(vals, mask, seq, "token_mean").item() == pytest.approx(14 / 3)
    padded = t(1, 3, 10, 100).reshape(2, 2)
    pmask = t(1, 1, 1, 0).reshape(2, 2)
    assert aggregate(padded, pmask).item() == pytest.approx(6.0)
    assert aggregate(vals, torch.zeros(5), seq).item() == 0.0
    with pytest.raises(InvalidArgument):
        aggregate(vals, mask, seq, "sum")  # type: ignore[arg-type]


def test_kl_estimators_hand_values():
    logp, ref = t(math.log(0.5)), t(math.log(0.25))
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(math.log(2))  # 0.693147
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)  # 0.240227
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(0.5 + math.log(2) - 1)  # 0.193147
    assert kl_penalty(ref, ref, "k3").item() == 0.0
    with pytest.raises(InvalidArgument):
        kl_penalty(logp, ref, "k4")  # type: ignore[arg-type]


def test_kl_estimators_are_unbiased_in_expectation():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(6), 0)
    q = torch.softmax(torch.randn(6), 0)
    exact = (p * (p.log() - q.log())).sum()
    ids = torch.multinomial(p, 200_000, replacement=True)
    for kind in ("k1", "k3"):
        est = kl_penalty(p.log()[ids], q.log()[ids], kind).mean()
        assert est.item() == pytest.approx(exact.item(), abs=0.01)


def test_token_logprobs_and_entropy_match_reference():
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 50)
    ids = torch.randint(0, 50, (3, 7))
    ref = torch.log_softmax(logits, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, ids, chunk_size=4), ref, atol=1e-5)
    got_bf16 = token_logprobs(logits.bfloat16(), ids, chunk_size=5)
    assert got_bf16.dtype == torch.float32
    assert torch.allclose(got_bf16, token_logprobs(logits.bfloat16().float(), ids), atol=1e-5)
    ent = entropy_from_logits(logits, chunk_size=3)
    assert torch.allclose(ent, torch.distributions.Categorical(logits=logits).entropy(), atol=1e-5)
    assert entropy_from_logits(torch.zeros(1, 4)).item() == pytest.approx(math.log(4))
    with pytest.raises(InvalidArgument):
        token_logprobs(logits, ids[:, :3])


def test_value_loss_clipping():
    v, old, ret = t(1.0), t(0.0), t(2.0)
    # unclipped (1-2)^2 = 1; clipped V = 0 + clip(1, +-0.5) = 0.5 -> (0.5-2)^2 = 2.25; 0.5 * max = 1.125
    assert value_loss(v, old, ret, t(1), clip_eps=0.5).item() == pytest.approx(1.125)
    assert value_loss(v, old, ret, t(1), clip_eps=None).item() == pytest.approx(0.5)
    # moving towards the target inside the clip range: plain MSE: V=1.8, old=1.5 -> 0.5 * 0.04
    assert value_loss(t(1.8), t(1.5), ret, t(1), clip_eps=0.5).item() == pytest.approx(0.02)


def test_kl_loss_scales_aggregated_kl_by_beta():
    logp = t(math.log(0.5), math.log(0.5), 0.0)
    ref = t(math.log(0.25), math.log(0.5), -3.0)
    seq = torch.tensor([0, 0, 1])
    # k3 per token [0.193147, 0, ignored (masked)]: per-sequence mean -> seq 0: 0.0965735; seq 1 has no token
    term, kl = kl_loss(logp, ref, t(1, 1, 0), beta=0.1, seq_ids=seq)
    assert kl.item() == pytest.approx((0.5 + math.log(2) - 1) / 2)
    assert term.item() == pytest.approx(0.1 * kl.item())
    with pytest.raises(InvalidArgument):
        kl_loss(logp, ref, t(1, 1, 1), beta=-1.0)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean"])
def test_packs_with_the_minibatch_denominator_add_up_to_the_unpacked_mean(mode):
    """Issue 12 item 8: per-token losses [1]*10 | [0] | [0] in three packs -> 10/12 = 0.833 under token_mean (not
    0.333, a mean per pack weighted by members / minibatch), 1/3 under the per-sequence mean; any packing agrees."""
    episodes = [torch.ones(10), torch.zeros(1), torch.zeros(1)]
    masks = [torch.ones(10), torch.ones(1), torch.ones(1)]
    den = aggregate_denominator(masks, mode)
    one_seq = torch.zeros(10, dtype=torch.long)
    per_pack = sum(aggregate(v, m, one_seq[: len(v)], mode, den) for v, m in zip(episodes, masks, strict=True))
    one_pack = aggregate(torch.cat(episodes), torch.cat(masks), torch.tensor([0] * 10 + [1, 2]), mode)
    expected = 10 / 12 if mode == "token_mean" else 1 / 3
    assert per_pack.item() == pytest.approx(expected) and one_pack.item() == pytest.approx(expected)
    # a sequence without any masked token counts in neither denominator
    assert aggregate_denominator([*masks, torch.zeros(4)], mode) == den
    v, m = t(1, 3, 5), t(1, 1, 0)
    assert value_loss(v, t(0, 0, 0), t(0, 0, 0), m, clip_eps=None, denominator=4.0).item() == pytest.approx(5 / 4)
    assert policy_loss(t(0, 0, 0), t(0, 0, 0), t(1, 1, 1), m, aggregation="token_mean", denominator=4.0)[
        0
    ].item() == pytest.approx(-2 / 4)
