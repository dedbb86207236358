"""Policy and critic loss math: pure torch functions on packed (flat) or padded tensors with masks.

No model code lives here. Each per-token quantity is reduced with :func:`aggregate`, which implements the two
normalisations the seeds use:

- ``"seq_mean_token_mean"`` (default): mean over tokens within each sequence, then mean over sequences
  (001 eq. 3 / 000 eq. 4: ``1/G sum_i 1/|y_i| sum_t``).
- ``"token_mean"``: one mean over every masked token of the batch (003 eq. 3's ``1 / sum |x^i|`` within an
  episode; verl's ``token-mean``).

Packing splits a minibatch into several forward passes: pass each pack's terms ``denominator`` =
:func:`aggregate_denominator` of the whole minibatch (its masked tokens, or its sequences that have one), and the
packs' terms add up to the minibatch's mean whatever ``--pack-tokens`` is (per-token losses ``[1]*10 | [0] | [0]``
in three packs give 10/12 under ``token_mean``).

Tensors are either flat ``(N,)`` with ``seq_ids`` (which sequence each token belongs to, e.g. from packing) or
padded ``(B, T)`` where each row is a sequence. ``mask`` is 1 where a token counts (the ``loss_masks`` from
``trainers.credit``).

Worked example (one sequence, two tokens, eps = 0.2): ratios [1.5, 0.9], advantages [1, 1] ->
surrogate min(r A, clip(r) A) = [1.2, 0.9] -> loss = -(1.2 + 0.9) / 2 = -1.05, clip fraction 0.5. With both tokens
in one ratio segment (``ratio_segments``: one turn, Turn-PPO's turn-level ratio), each token's ratio is the
segment's geometric mean sqrt(1.5 * 0.9) = 1.1619, inside the clip range: loss -1.1619, clip fraction 0.

Defaults follow the seeds: ε = 0.2 (001 D.1.3, 003 Table 5); β = 0.001 (001 D.1.3) on the k3 estimator when KL is
a loss term (003's ``kl_loss_coef``); the dual clip (c = 3) and a separate ε_high are off unless asked for; the
value-clip range 0.5 is verl's default (the seeds give none). KL enters as a loss term only: a KL penalty folded
into PPO's token rewards (verl's ``kl_coef`` in 003 Table 5) is not implemented.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from agentgym_turn.error import InvalidArgument

Aggregation = Literal["seq_mean_token_mean", "token_mean"]
KLEstimator = Literal["k1", "k2", "k3"]

AGGREGATIONS: tuple[str, ...] = ("seq_mean_token_mean", "token_mean")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


@dataclass
class PolicyLossStats:
    """Diagnostics of one policy-loss evaluation (detached scalars, for logging under ``losses/...``)."""

    clip_fraction: float
    approx_kl: float
    ratio_mean: float


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    seq_ids: torch.Tensor | None = None,
    mode: Aggregation = "seq_mean_token_mean",
    denominator: float | None = None,
) -> torch.Tensor:
    """Masked mean of per-token ``values``: per sequence then over sequences, or over all tokens.

    Sequences with no masked token are left out of the mean over sequences. An all-zero mask gives 0 (with a
    gradient path), never NaN. ``denominator`` replaces this call's own count (masked tokens, or sequences with a
    masked token) by a given one: :func:`aggregate_denominator` of the minibatch this pack is a part of.
    """
    if mode not in AGGREGATIONS:
        raise InvalidArgument(f"aggregation mode {mode!r} is not one of {AGGREGATIONS}.")
    mask = mask.to(values.dtype)
    if mode == "token_mean":
        count = mask.sum().clamp(min=1.0) if denominator is None else max(denominator, 1.0)
        return (values * mask).sum() / count
    if seq_ids is None:
        if values.dim() == 1:
            values, mask = values.unsqueeze(0), mask.unsqueeze(0)
        per_seq_sum = (values * mask).sum(dim=-1)
        per_seq_n = mask.sum(dim=-1)
    else:
        if values.dim() != 1 or seq_ids.shape != values.shape:
            raise InvalidArgument(
                f"seq_ids of shape {tuple(seq_ids.shape)} needs flat values of the same shape, got "
                f"{tuple(values.shape)}; pass padded (B, T) tensors without seq_ids instead."
            )
        seq_ids = seq_ids.long()
        n_seq = int(seq_ids.max().item()) + 1 if seq_ids.numel() else 0
        per_seq_sum = torch.zeros(n_seq, dtype=values.dtype, device=values.device).index_add(0, seq_ids, values * mask)
        per_seq_n = torch.zeros(n_seq, dtype=values.dtype, device=values.device).index_add(0, seq_ids, mask)
    present = per_seq_n > 0
    per_seq = per_seq_sum / per_seq_n.clamp(min=1.0)
    count = present.sum().clamp(min=1) if denominator is None else max(denominator, 1.0)
    return (per_seq * present).sum() / count


def aggregate_denominator(masks: Sequence[np.ndarray | torch.Tensor], mode: Aggregation) -> float:
    """What :func:`aggregate` divides by over a whole minibatch of sequences (one mask each): the masked tokens
    (``token_mean``) or the sequences with at least one masked token (``seq_mean_token_mean``)."""
    if mode not in AGGREGATIONS:
        raise InvalidArgument(f"aggregation mode {mode!r} is not one of {AGGREGATIONS}.")
    counts = [float(np.asarray(m, dtype=np.float64).sum()) for m in masks]
    return float(sum(counts)) if mode == "token_mean" else float(sum(c > 0 for c in counts))


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """log p(ids) under ``logits`` (``(..., V)`` and ``(...)``), in float32, without a full log-softmax copy.

    Computes ``logit[id] - logsumexp(logits)`` in chunks of rows so that at most ``chunk_size x V`` float32 values
    exist at once, whatever the logits' dtype. Align before calling: logits at position t-1 score token t.
    """
    if logits.shape[:-1] != ids.shape:
        raise InvalidArgument(f"logits {tuple(logits.shape)} and ids {tuple(ids.shape)} must agree but for the vocab.")
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_ids = ids.reshape(-1).long()
    out = []
    for start in range(0, flat_logits.shape[0], chunk_size):
        rows = flat_logits[start : start + chunk_size].float()
        picked = rows.gather(-1, flat_ids[start : start + chunk_size].unsqueeze(-1)).squeeze(-1)
        out.append(picked - torch.logsumexp(rows, dim=-1))
    if not out:
        return torch.zeros(ids.shape, dtype=torch.float32, device=logits.device)
    return torch.cat(out).reshape(ids.shape)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """Per-position entropy ``logsumexp(z) - sum softmax(z) z`` of the categorical over the last dim (float32)."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = []
    for start in range(0, flat.shape[0], chunk_size):
        rows = flat[start : start + chunk_size].float()
        lse = torch.logsumexp(rows, dim=-1)
        out.append(lse - (torch.softmax(rows, dim=-1) * rows).sum(dim=-1))
    if not out:
        return torch.zeros(logits.shape[:-1], dtype=torch.float32, device=logits.device)
    return torch.cat(out).reshape(logits.shape[:-1])


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π_θ || π_ref) from sampled tokens (Schulman's k1/k2/k3 estimators).

    k1 = log π - log π_ref (unbiased, can be negative); k2 = ½ (log π - log π_ref)²;
    k3 = exp(log π_ref - log π) - (log π_ref - log π) - 1 (unbiased, always >= 0; GRPO's choice).
    """
    diff = logprobs - ref_logprobs
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.square()
    if kind == "k3":
        neg = (-diff).clamp(max=20.0)  # exp overflow guard: a ratio above e^20 is already a broken update
        return torch.exp(neg) - neg - 1.0
    raise InvalidArgument(f"KL estimator {kind!r} is not one of {KL_ESTIMATORS}.")


def segment_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """Each token's log-ratio replaced by the mean log-ratio of the masked tokens of its segment.

    ``exp`` of it is the segment's geometric-mean ratio ``(prod_t r_t)^(1/n)``: a turn-level ratio when a segment
    is one policy turn (Turn-PPO, arXiv 2512.17008; ST-PPO's turn-level importance sampling, arXiv 2511.20718, eq.
    4), GSPO's sequence-level one when a segment is a whole sequence. ``segments`` holds one integer id per token
    (flat, like ``log_ratio``); tokens with equal ids share a ratio, and its gradient reaches every masked token of
    the segment (``d r_seg = r_seg * mean_t d log p_t``). A segment with no masked token gets 0 (ratio 1).
    """
    if segments.shape != log_ratio.shape:
        raise InvalidArgument(
            f"ratio segments of shape {tuple(segments.shape)} must match the log-ratios' {tuple(log_ratio.shape)}."
        )
    _, inverse = torch.unique(segments.long(), return_inverse=True)
    n = int(inverse.max().item()) + 1 if inverse.numel() else 0
    m = mask.to(log_ratio.dtype)
    sums = torch.zeros(n, dtype=log_ratio.dtype, device=log_ratio.device).index_add(0, inverse, log_ratio * m)
    counts = torch.zeros(n, dtype=log_ratio.dtype, device=log_ratio.device).index_add(0, inverse, m)
    return (sums / counts.clamp(min=1.0))[inverse]


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    dual_clip: float | None = None,
    seq_ids: torch.Tensor | None = None,
    aggregation: Aggregation = "seq_mean_token_mean",
    denominator: float | None = None,
    ratio_segments: torch.Tensor | None = None,
) -> tuple[torch.Tensor, PolicyLossStats]:
    """Clipped surrogate loss ``-min(r A, clip(r, 1-ε, 1+ε_high) A)`` (000 eq. 1, 001 eq. 3), to minimise.

    ``clip_eps_high`` defaults to ``clip_eps``. ``dual_clip`` = c > 1 additionally bounds the loss of negative-
    advantage tokens by ``-c A`` (dual-clip PPO; verl's ``clip_ratio_c``). ``denominator``: see :func:`aggregate`.
    ``ratio_segments`` (one integer id per token): ``r`` is the geometric mean over the masked tokens of each
    token's segment (:func:`segment_log_ratio`), so a whole turn (or sequence) is clipped together; None = the
    token-level ratio. ``approx_kl`` stays a token-level diagnostic. Returns the loss and its stats.
    """
    if clip_eps <= 0:
        raise InvalidArgument(f"clip_eps={clip_eps!r} must be > 0 (the papers use 0.2).")
    high = clip_eps if clip_eps_high is None else clip_eps_high
    if dual_clip is not None and dual_clip <= 1.0:
        raise InvalidArgument(f"dual_clip={dual_clip!r} must be > 1 (verl uses 3.0) or None.")
    log_ratio = logprobs - old_logprobs
    if ratio_segments is not None:
        log_ratio = segment_log_ratio(log_ratio, mask, ratio_segments)
    ratio = torch.exp(log_ratio.clamp(max=20.0))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + high)
    losses = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        losses = torch.where(advantages < 0, torch.minimum(losses, -advantages * dual_clip), losses)
    loss = aggregate(losses, mask, seq_ids, aggregation, denominator)
    with torch.no_grad():
        m = mask.to(losses.dtype)
        n = m.sum().clamp(min=1.0)
        stats = PolicyLossStats(
            clip_fraction=float(((clipped > unclipped).to(m.dtype) * m).sum() / n),
            approx_kl=float((kl_penalty(old_logprobs, logprobs, "k3") * m).sum() / n),
            ratio_mean=float((ratio * m).sum() / n),
        )
    return loss, stats


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float | None = 0.5,
    seq_ids: torch.Tensor | None = None,
    aggregation: Aggregation = "token_mean",
    denominator: float | None = None,
) -> torch.Tensor:
    """Critic loss ``½ max((V - R)², (clip(V, V_old ± ε_v) - R)²)``; ``clip_eps=None`` gives plain ½ MSE.

    ``values`` are the critic's new predictions of V(s_t), ``old_values`` the ones GAE used, ``returns`` the
    targets from ``trainers.credit`` (``CreditOutput.returns``), ``mask`` its ``value_masks``; ``denominator``: see
    :func:`aggregate`.
    """
    err = (values - returns).square()
    if clip_eps is not None:
        clipped = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        err = torch.maximum(err, (clipped - returns).square())
    return 0.5 * aggregate(err, mask, seq_ids, aggregation, denominator)


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float = 0.001,
    kind: KLEstimator = "k3",
    seq_ids: torch.Tensor | None = None,
    aggregation: Aggregation = "seq_mean_token_mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """β times the aggregated per-token KL to the frozen reference (001 eq. 3's ``- β D_KL``, as a loss term).

    Returns ``(beta * kl, kl)``: the term to add to the loss and the unweighted KL to log (``losses/kl``).
    β = 0 (000/001's GRPO runs) still returns the KL for logging.
    """
    if beta < 0:
        raise InvalidArgument(f"beta={beta!r} must be >= 0 (001 uses 0.001; 0 disables the penalty).")
    kl = aggregate(kl_penalty(logprobs, ref_logprobs, kind), mask, seq_ids, aggregation)
    return beta * kl, kl.detach()
