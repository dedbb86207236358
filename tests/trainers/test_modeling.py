"""The update's forward (LM head only where a log-prob is needed) against the full-logits computation."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainers import modeling as M
from trainers.losses import entropy_from_logits, policy_loss


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    return LlamaForCausalLM(cfg).float()


def episodes(rng: np.random.Generator, n: int = 4) -> list[SimpleNamespace]:
    """Stand-ins carrying what packing reads: token ids and the loss mask."""
    out = []
    for _ in range(n):
        length = int(rng.integers(12, 30))
        mask = np.zeros(length, dtype=np.int64)
        mask[length // 2 :] = 1  # the policy wrote the second half
        out.append(SimpleNamespace(token_ids=rng.integers(0, 97, length), loss_mask=mask))
    return out


def full_logits_stats(model, pack: M.Pack, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: logits at every position, log-prob and entropy of every token (0 at episode starts)."""
    logits = model(input_ids=pack.input_ids, position_ids=pack.position_ids,
                   attention_mask=pack.attention_mask).logits[0] / temperature  # fmt: skip
    ids = pack.input_ids[0]
    lp = torch.zeros(ids.shape[0])
    lp[1:] = torch.log_softmax(logits[:-1].float(), -1).gather(-1, ids[1:, None]).squeeze(-1)
    ent = torch.zeros(ids.shape[0])
    ent[1:] = entropy_from_logits(logits[:-1])
    starts = torch.zeros(ids.shape[0], dtype=torch.bool)
    starts[pack.offsets[:-1]] = True
    return lp.masked_fill(starts, 0.0), ent.masked_fill(starts, 0.0)


@pytest.mark.parametrize("pack_tokens", [30, 200])  # one episode per row, and several per row
def test_masked_head_matches_full_logits_and_gradients(pack_tokens: int) -> None:
    rng = np.random.default_rng(0)
    eps = episodes(rng)
    model = tiny_llama()
    for pack in M.pack_episodes(eps, range(len(eps)), pack_tokens):
        mask = pack.gather([e.loss_mask for e in eps])
        ref_lp, ref_ent = full_logits_stats(model, pack, 0.7)
        stats = M.pack_logprobs(model, pack, temperature=0.7, entropy_mask=mask, positions=mask)
        on = mask.bool()
        torch.testing.assert_close(stats.logprobs[on], ref_lp[on], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stats.entropy[on], ref_ent[on], atol=1e-5, rtol=1e-5)
        assert not stats.logprobs[~on].any()
        full = M.pack_logprobs(model, pack, temperature=0.7)  # positions=None: every token
        torch.testing.assert_close(full.logprobs, ref_lp, atol=1e-5, rtol=1e-5)

        old = (ref_lp + 0.05 * torch.randn(ref_lp.shape)).detach()
        adv = torch.randn(ref_lp.shape)
        grads = []
        for lp in (ref_lp, stats.logprobs):
            model.zero_grad()
            if lp is ref_lp:
                lp, _ = full_logits_stats(model, pack, 0.7)
            else:
                lp = M.pack_logprobs(model, pack, temperature=0.7, positions=mask).logprobs
            loss, _ = policy_loss(lp, old, adv, mask, clip_eps=0.2, seq_ids=pack.seq_ids, aggregation="token_mean")
            loss.backward()
            grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
        torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-6, rtol=1e-5)
        for a, b in zip(grads[0][1], grads[1][1], strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_bf16_weights_with_fp32_masters_match_the_autocast_path_and_step_in_fp32() -> None:
    """Issue 11 item 4: bf16 weights (no per-forward casts) with fp32 master weights and optimizer state give the
    loss and gradients of the fp32-weights-under-autocast path within bf16 tolerance; a step far below bf16's
    resolution still moves the masters, and a full-precision save holds the masters."""
    import copy

    rng = np.random.default_rng(0)
    eps = episodes(rng)
    fp32 = tiny_llama()
    half = copy.deepcopy(fp32)
    master = M.MasterWeights(half)
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    assert all(p.dtype == torch.float32 for p in master.params)
    assert len(master.params) == len([p for p in fp32.parameters() if p.requires_grad])  # tied weights once
    packs = M.pack_episodes(eps, range(len(eps)), 200)
    adv = [rng.normal(size=len(e.token_ids)).astype(np.float32) for e in eps]

    def loss_and_grads(model, autocast: bool, params) -> tuple[float, list[torch.Tensor]]:
        total = 0.0
        for pack in packs:
            mask = pack.gather([e.loss_mask for e in eps])
            with M.autocast(autocast):
                lp = M.pack_logprobs(model, pack, positions=mask).logprobs
            loss, _ = policy_loss(lp, lp.detach() - 0.01, pack.gather(adv), mask, seq_ids=pack.seq_ids)
            loss.backward()
            total += float(loss.detach())
        return total, [p.grad.clone() for p in params]

    ref_model = copy.deepcopy(fp32)
    exact = loss_and_grads(ref_model, False, list(ref_model.parameters()))
    auto = loss_and_grads(fp32, True, list(fp32.parameters()))
    mixed = loss_and_grads(half, False, master.params)
    assert all(p.grad is None for p in half.parameters())  # accumulated into the masters, bf16 grads freed
    for got in (auto, mixed):
        assert got[0] == pytest.approx(exact[0], rel=2e-2, abs=2e-3)
        for a, b in zip(got[1], exact[1], strict=True):
            assert torch.linalg.vector_norm(a - b) <= 5e-2 * torch.linalg.vector_norm(b) + 1e-6

    before = [p.detach().clone() for p in master.params]
    opt = torch.optim.AdamW(master.params, lr=1e-5, weight_decay=0.0)
    opt.step()
    master.push()
    moved = [not torch.equal(a, b) for a, b in zip(before, master.params, strict=True)]
    assert all(moved)  # 1e-5 steps are below bf16's resolution for most weights: the masters keep them
    name = next(n for n, _ in half.named_parameters())
    with master.full_precision():
        assert half.get_parameter(name).dtype == torch.float32
        assert torch.equal(half.get_parameter(name), master.params[0])
    assert half.get_parameter(name).dtype == torch.bfloat16
