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
