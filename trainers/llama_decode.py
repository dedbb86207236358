"""The fast decode loop of :class:`~trainers.engine_transformers.TransformersEngine` for Llama-family modules.

:class:`LlamaDecoder` (``model_type`` llama or qwen2, LoRA-wrapped or not) runs the model's own submodules
(embedding, per layer RMSNorm, q/k/v projections, rotary, attention, o-projection, MLP; final norm; LM head at the
last position only) over a preallocated KV cache, one ``[rows, kv_heads, max_len, head_dim]`` tensor per layer
written in place. Attention reads the few KV heads directly (the query heads of a group are folded into the query
axis), never repeating them. Identical prompts of a batch (a group's shared task) are prefilled once and their KV
copied; the KV of every finished sequence goes into a bounded LRU cache keyed by its token ids, so a later prompt
that extends it (the next turn: generated ids + the env's reply) prefills only the new tokens. Rows that finish
leave the batch (it is compacted when half of its rows are done).

Prefix cache: :class:`PrefixCache` bounds the bytes of cached KV (entries are evicted least recently used first;
an entry larger than the bound is not kept; 0 disables reuse). An entry costs ``2 * layers * kv_heads * head_dim``
values per token: 23 KiB a token for SmolLM2-135M in bf16 (the compute dtype under ``autocast_bf16``), so 1 GiB
holds ~45k tokens, e.g. 64 WikiTwoTurn episodes after their first turn.

Under ``autocast_bf16`` the fast loop computes the linear layers in bf16 from a bf16 copy of the weights made at
the first call after a weight change (the values autocast would cast to on every step), keeps the residual stream
and norms in the model's dtype and stores the KV in bf16; the sampled distribution is the fp32 ``log_softmax``.

    >>> unsupported_reason(model) is None                                       # doctest: +SKIP
    True
    >>> decoder = LlamaDecoder(model, torch.float32, False, [eos], key=None)    # doctest: +SKIP
    >>> decoder.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=8), generator, PrefixCache(2**30), EngineStats())
    ... # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainers.engine_api import Generation, SamplingConfig

FAST_MODEL_TYPES = ("llama", "qwen2")
_BLOCK = 16  # prefix-cache index granularity (tokens per hashed block)
_PREFILL_CHUNK_TOKENS = 8192  # prompt tokens per packed prefill pass (bounds activation memory)


@dataclass
class EngineStats:
    """Token counts and times accumulated over :meth:`~trainers.engine_transformers.TransformersEngine.generate` calls.

    ``prompt_tokens`` = ``prefilled_tokens`` (run through the model) + ``reused_tokens`` (KV copied from the prefix
    cache of earlier calls) + ``shared_tokens`` (KV copied from an identical prompt of the same batch).
    """

    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    reused_tokens: int = 0
    shared_tokens: int = 0
    generated_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def prefix_hit_rate(self) -> float:
        """Fraction of prompt tokens whose KV was not computed again."""
        return (self.reused_tokens + self.shared_tokens) / max(self.prompt_tokens, 1)


def sample_top_p(probs: Any, top_p: float, generator: Any, *, inverse_cdf: bool = False) -> Any:
    """Sample one id per row from ``probs`` restricted to the smallest set with mass >= ``top_p``.

    ``inverse_cdf`` draws one uniform per row and inverts the cumulative distribution instead of
    ``torch.multinomial``'s exponential race over the whole vocabulary: the same distribution, several times
    cheaper, another random stream.
    """
    import torch

    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the most likely token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    if not inverse_cdf:
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    cdf = probs.cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)


def _pick(logits: Any, sampling: SamplingConfig, generator: Any) -> tuple[Any, Any]:
    """Next ids and their log-probs ``log_softmax(logits / T)`` from fp32 ``logits`` ``[rows, vocab]`` (consumed)."""
    scaled = logits.div_(sampling.temperature) if sampling.temperature > 0 else logits
    scaled = scaled.sub_(scaled.amax(dim=-1, keepdim=True))  # shifted first: exact log-probs for large logits
    lse = scaled.logsumexp(dim=-1, keepdim=True)
    if sampling.temperature == 0:
        nxt = scaled.argmax(dim=-1)
    else:
        nxt = sample_top_p(scaled.sub(lse).exp_(), sampling.top_p, generator, inverse_cdf=True)
    return nxt, (scaled.gather(-1, nxt[:, None]) - lse).squeeze(-1)


# ---------------------------------------------------------------------------------------------------- weights
def _base_model(model: Any) -> Any:
    """The transformers model inside a PEFT wrapper (the module itself otherwise)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def unsupported_reason(model: Any) -> str | None:
    """Why the fast loop cannot run ``model`` (``None`` when it can)."""
    base = _base_model(model)
    cfg = getattr(base, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in FAST_MODEL_TYPES:
        return f"no fast loop for model_type={kind!r} (it covers {FAST_MODEL_TYPES})"
    if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        return f"no fast loop for sliding-window attention (model_type={kind!r})"
    body = getattr(base, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if body is None or not all(hasattr(body, n) for n in needed) or not hasattr(base, "lm_head"):
        return f"{type(base).__name__} lacks the Llama module layout (model.{needed}, lm_head)"
    return None


def weights_fingerprint(model: Any) -> tuple[tuple[int, int], ...]:
    """Storage pointer and version counter of every parameter: changes when a weight is replaced or modified in
    place (optimizer steps, ``load_state_dict``, ``torch.no_grad`` updates)."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


# ---------------------------------------------------------------------------------------------------- prefix cache
@dataclass
class _Entry:
    tokens: tuple[int, ...]
    kv: Any  # [2, layers, kv_heads, len, head_dim]
    hashes: list[int]

    @property
    def nbytes(self) -> int:
        return int(self.kv.numel() * self.kv.element_size())


def _block_hashes(tokens: Sequence[int], limit: int | None = None) -> list[int]:
    """Chained hashes of the full ``_BLOCK``-token blocks of ``tokens`` (the i-th names ``tokens[:(i+1)*_BLOCK]``)."""
    out, h = [], 0
    n = len(tokens) if limit is None else min(limit, len(tokens))
    for start in range(0, n - _BLOCK + 1, _BLOCK):
        h = hash((h, tuple(tokens[start : start + _BLOCK])))
        out.append(h)
    return out


class PrefixCache:
    """KV of finished sequences keyed by their token ids, least recently used evicted beyond ``max_bytes``.

    :meth:`lookup` finds the entry sharing the longest prefix with a prompt through chained hashes of 16-token
    blocks (then compares the ids, so a hash collision cannot return a wrong KV).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        # block hash -> the entries holding that block prefix (a group's rows share their prompt's blocks)
        self._index: dict[int, dict[tuple[int, ...], _Entry]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._index.clear()
        self.nbytes = 0

    def lookup(self, prompt: Sequence[int]) -> tuple[_Entry | None, int]:
        """``(entry, n)``: the cached KV of ``prompt[:n]`` is ``entry.kv[..., :n, :]`` (``n`` < ``len(prompt)``)."""
        best, matched, h = None, 0, 0
        for start in range(0, len(prompt) - _BLOCK + 1, _BLOCK):
            h = hash((h, tuple(prompt[start : start + _BLOCK])))
            holders = self._index.get(h)
            if not holders:
                break
            best, matched = next(reversed(holders.values())), start + _BLOCK  # the newest holder
        if best is None:
            return None, 0
        if tuple(prompt[:matched]) != best.tokens[:matched]:
            return None, 0  # a hash collision
        limit = min(len(best.tokens), len(prompt) - 1)
        while matched < limit and best.tokens[matched] == prompt[matched]:
            matched += 1
        matched = min(matched, len(prompt) - 1)
        if matched == 0:
            return None, 0
        self._entries.move_to_end(best.tokens)
        return best, matched

    def put(self, tokens: tuple[int, ...], kv: Any) -> None:
        """Keep ``kv`` (``[2, layers, kv_heads, len(tokens), head_dim]``) for ``tokens``, evicting old entries."""
        entry = _Entry(tokens, kv, _block_hashes(tokens))
        if entry.nbytes > self.max_bytes or len(tokens) < _BLOCK:
            return
        self.discard(tokens)
        self._entries[tokens] = entry
        self.nbytes += entry.nbytes
        for h in entry.hashes:
            self._index.setdefault(h, {})[tokens] = entry
        while self.nbytes > self.max_bytes:
            self.discard(next(iter(self._entries)))

    def discard(self, tokens: tuple[int, ...]) -> None:
        """Drop the entry for exactly ``tokens`` (if any)."""
        entry = self._entries.pop(tokens, None)
        if entry is None:
            return
        self.nbytes -= entry.nbytes
        for h in entry.hashes:
            holders = self._index[h]
            del holders[tokens]
            if not holders:
                del self._index[h]


# ---------------------------------------------------------------------------------------------------- fast loop
_MIN_SHARED = 32  # rows whose prompts share at least this many leading tokens read that prefix's KV once
_QUERY_CHUNK = 1024  # prefill queries per attention call (bounds the score matrix)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    """Rotary embedding of ``x`` ``[..., heads, head_dim]`` with ``cos``/``sin`` ``[..., head_dim]``."""
    import torch

    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(-2) + rotated * sin.unsqueeze(-2)


def share_groups(prompts: Sequence[Sequence[int]]) -> list[tuple[int, list[int]]]:
    """Rows grouped by a common prompt prefix, as ``(shared length, rows)``: a row joins the group whose first row
    shares the most leading tokens with it (at least ``_MIN_SHARED``); a row alone shares nothing."""
    import numpy as np

    groups: list[tuple[Any, list[int], list[int]]] = []  # (first row's ids, [shared length], rows)
    for r, p in enumerate(prompts):
        ids = np.asarray(p)
        best, best_len = None, 0
        for group in groups:
            n = min(len(group[0]), len(ids))
            diff = np.flatnonzero(group[0][:n] != ids[:n])
            common = int(diff[0]) if diff.size else n
            if common >= _MIN_SHARED and common > best_len:
                best, best_len = group, common
        if best is None:
            groups.append((ids, [len(ids)], [r]))
        else:
            best[1][0] = min(best[1][0], best_len)
            best[2].append(r)
    return [(shared[0] if len(rows) > 1 else 0, rows) for _, shared, rows in groups]


class _BatchKV:
    """The KV of a decode batch: each group's shared prompt prefix once (``ks``/``vs``: ``[groups, kv_heads, P,
    head_dim]`` per layer, P the longest shared prefix) and each row's positions after it (``ko``/``vo``: ``[rows,
    kv_heads, W, head_dim]``), all preallocated and written in place.

    Attention reads a shared prefix once for all rows of its group: their queries (and the query heads of a KV
    head) are stacked on the query axis of one product with the group's keys; the scores of both parts meet in one
    softmax. Rows finished leave in :meth:`compact`.
    """

    def __init__(
        self, groups: list[tuple[int, list[int]]], kc: list, vc: list, source: list[int], lengths: list[int], extra: int
    ) -> None:
        """Lay out rows ``groups`` (:func:`share_groups`) from the prefill's per-prompt KV ``kc``/``vc`` (row r's is
        ``source[r]``; each layer is released once copied), with room for ``extra`` more tokens a row."""
        import torch

        n, (_, kv_heads, _, head_dim), dtype = len(lengths), kc[0].shape, kc[0].dtype
        dev = kc[0].device
        self.group = torch.zeros(n, dtype=torch.long, device=dev)
        for g, (_, rows) in enumerate(groups):
            self.group[rows] = g
        self.shared = torch.tensor([s for s, _ in groups], dtype=torch.long, device=dev)
        pmax = int(self.shared.max())
        own = max(length - int(self.shared[self.group[r]]) for r, length in enumerate(lengths)) + extra
        self.ks, self.vs, self.ko, self.vo = [], [], [], []
        for li in range(len(kc)):
            # keys past a row's length are masked (any value will do); values there meet probability 0: zeros
            ks = torch.empty(len(groups), kv_heads, pmax, head_dim, dtype=dtype, device=dev)
            vs = torch.zeros(len(groups), kv_heads, pmax, head_dim, dtype=dtype, device=dev)
            ko = torch.empty(n, kv_heads, own, head_dim, dtype=dtype, device=dev)
            vo = torch.zeros(n, kv_heads, own, head_dim, dtype=dtype, device=dev)
            for g, (shared, rows) in enumerate(groups):
                ks[g, :, :shared] = kc[li][source[rows[0]], :, :shared]
                vs[g, :, :shared] = vc[li][source[rows[0]], :, :shared]
                for r in rows:
                    ko[r, :, : lengths[r] - shared] = kc[li][source[r], :, shared : lengths[r]]
                    vo[r, :, : lengths[r] - shared] = vc[li][source[r], :, shared : lengths[r]]
            kc[li] = vc[li] = None  # peak memory: one layer in both layouts
            self.ks.append(ks)
            self.vs.append(vs)
            self.ko.append(ko)
            self.vo.append(vo)
        self._index()

    def _index(self) -> None:
        """Slot tables: ``slot[g, j]`` = the j-th row of group g (padded), ``flat[r]`` = row r's place in them."""
        import torch

        dev = self.group.device
        members = [torch.nonzero(self.group == g).flatten() for g in range(len(self.shared))]
        width = max(len(m) for m in members)
        self.slot = torch.zeros(len(members), width, dtype=torch.long, device=dev)
        self.flat = torch.zeros(len(self.group), dtype=torch.long, device=dev)
        for g, rows in enumerate(members):
            self.slot[g, : len(rows)] = rows
            self.flat[rows] = g * width + torch.arange(len(rows), device=dev)
        self.row_shared = self.shared[self.group]
        pmax = self.ks[0].shape[2]
        self.shared_mask = (torch.arange(pmax, device=dev)[None, :] < self.row_shared[:, None])[:, None, None, :]
        self._back: Any = None  # scatter buffer of the shared part's probabilities (padded slots stay 0)

    def compact(self, keep: Any) -> None:
        """Keep rows ``keep`` (indices) in this order; groups left without rows are dropped."""
        import torch

        groups = torch.unique(self.group[keep])
        remap = torch.full((len(self.shared),), -1, dtype=torch.long, device=groups.device)
        remap[groups] = torch.arange(len(groups), device=groups.device)
        self.group, self.shared = remap[self.group[keep]], self.shared[groups]
        self.ko, self.vo = [k[keep] for k in self.ko], [v[keep] for v in self.vo]
        if len(groups) < len(remap):
            self.ks, self.vs = [k[groups] for k in self.ks], [v[groups] for v in self.vs]
        self._index()

    def row_kv(self, r: int, length: int) -> Any:
        """Row r's KV of its first ``length`` positions: ``[2, layers, kv_heads, length, head_dim]``."""
        import torch

        p = int(self.row_shared[r])
        g = int(self.group[r])
        kv = torch.empty((2, len(self.ko), *self.ko[0].shape[1:2], length, self.ko[0].shape[3]), dtype=self.ko[0].dtype,
                         device=self.ko[0].device)  # fmt: skip
        for li in range(len(self.ko)):
            kv[0, li, :, :p], kv[1, li, :, :p] = self.ks[li][g, :, :p], self.vs[li][g, :, :p]
            kv[0, li, :, p:], kv[1, li, :, p:] = self.ko[li][r, :, : length - p], self.vo[li][r, :, : length - p]
        return kv

    def attend(self, li: int, q: Any, mask: Any, scale: float) -> Any:
        """Attention of queries ``q`` ``[rows, kv_heads, group, d]`` over both parts; ``mask`` ``[rows, 1, 1, P+W]``."""
        import torch

        own = q @ self.ko[li].transpose(-1, -2)  # the full width: a slice would be copied by bf16 bmm
        pmax = self.ks[li].shape[2]
        if pmax == 0:
            probs = own.float().mul_(scale).masked_fill_(~mask, float("-inf")).softmax(-1).to(q.dtype)
            return probs @ self.vo[li]
        groups, width = self.slot.shape
        kvh, rep, d = q.shape[1:]
        qs = q[self.slot].permute(0, 2, 1, 3, 4).reshape(groups, kvh, width * rep, d)
        shared = (qs @ self.ks[li].transpose(-1, -2)).view(groups, kvh, width, rep, pmax)
        shared = shared.permute(0, 2, 1, 3, 4).reshape(groups * width, kvh, rep, pmax)[self.flat]
        scores = torch.cat([shared, own], dim=-1).float().mul_(scale).masked_fill_(~mask, float("-inf"))
        probs = scores.softmax(-1).to(q.dtype)
        out = probs[..., pmax:] @ self.vo[li]
        if self._back is None:
            self._back = torch.zeros(groups * width, kvh, rep, pmax, dtype=q.dtype, device=q.device)
        back = self._back
        back[self.flat] = probs[..., :pmax]
        back = back.view(groups, width, kvh, rep, pmax).permute(0, 2, 1, 3, 4).reshape(groups, kvh, width * rep, pmax)
        part = (back @ self.vs[li]).view(groups, kvh, width, rep, d).permute(0, 2, 1, 3, 4)
        return out + part.reshape(groups * width, kvh, rep, d)[self.flat]


class LlamaDecoder:
    """Prefill and decode over a Llama-family module's submodules (weights read at call time, bf16 casts cached)."""

    def __init__(self, model: Any, dtype: Any, autocast_bf16: bool, stop_token_ids: Sequence[int], key: Any) -> None:
        import torch

        self.key = key
        base = _base_model(model)
        cfg = base.config
        self.body, self.lm_head = base.model, base.lm_head
        self.layers = list(self.body.layers)
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = float(getattr(self.layers[0].self_attn, "scaling", self.head_dim**-0.5))
        self.dtype = dtype
        self.autocast = autocast_bf16
        self.device = self.lm_head.weight.device  # every tensor of the loop is made there
        self.stop = torch.tensor(list(stop_token_ids), dtype=torch.long, device=self.device)
        self._weights: dict[int, tuple[Any, Any]] = {}

    # -------------------------------------------------------------------------------------------- building blocks
    def _linear(self, module: Any, x: Any) -> Any:
        """``module(x)`` in the compute dtype (a plain ``nn.Linear`` reads a cached cast of its weight)."""
        import torch
        import torch.nn.functional as F

        if type(module) is torch.nn.Linear:
            pair = self._weights.get(id(module))
            if pair is None:
                bias = None if module.bias is None else module.bias.detach().to(self.dtype)
                pair = self._weights[id(module)] = (module.weight.detach().to(self.dtype), bias)
            return F.linear(x, pair[0], pair[1])
        ctx = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()
        with ctx:  # e.g. a LoRA-wrapped linear: its own forward
            return module(x).to(self.dtype)

    def _qkv(self, layer: Any, h: Any, cos: Any, sin: Any) -> tuple[Any, Any, Any]:
        """Rotated queries ``[n, heads, d]``, keys and values ``[n, kv_heads, d]`` of hidden states ``h [n, D]``."""
        attn = layer.self_attn
        x = layer.input_layernorm(h).to(self.dtype)
        n = x.shape[0]
        q = self._linear(attn.q_proj, x).view(n, self.heads, self.head_dim)
        k = self._linear(attn.k_proj, x).view(n, self.kv_heads, self.head_dim)
        v = self._linear(attn.v_proj, x).view(n, self.kv_heads, self.head_dim)
        return _rotate(q, cos, sin).to(self.dtype), _rotate(k, cos, sin).to(self.dtype), v

    def _finish_layer(self, layer: Any, h: Any, attn_out: Any) -> Any:
        """Residual stream after the o-projection and the MLP."""
        h = h + self._linear(layer.self_attn.o_proj, attn_out)
        mlp = layer.mlp
        x = layer.post_attention_layernorm(h).to(self.dtype)
        gate = mlp.act_fn(self._linear(mlp.gate_proj, x))
        return h + self._linear(mlp.down_proj, gate * self._linear(mlp.up_proj, x))

    def _logits(self, h: Any) -> Any:
        return self._linear(self.lm_head, self.body.norm(h).to(self.dtype)).float()

    def _rope(self, h: Any, positions: Any) -> tuple[Any, Any]:
        cos, sin = self.body.rotary_emb(h, positions[None])
        return cos[0], sin[0]

    # -------------------------------------------------------------------------------------------- prefill
    def _prefill(self, kc: list, vc: list, prompts: list[Sequence[int]], starts: list[int]) -> Any:
        """Run ``prompts[i][starts[i]:]`` through the model (packed: one token axis for all rows, attention per
        row), writing their KV into row i of ``kc``/``vc`` from ``starts[i]``; returns the last positions' logits."""
        import torch

        dev = self.device
        flat = [t for p, s in zip(prompts, starts, strict=True) for t in p[s:]]
        ids = torch.tensor(flat, dtype=torch.long, device=dev)
        pos = torch.cat([torch.arange(s, len(p), device=dev) for p, s in zip(prompts, starts, strict=True)])
        spans, off = [], 0
        for p, s in zip(prompts, starts, strict=True):
            spans.append((off, len(p) - s, s))
            off += len(p) - s
        h = self.body.embed_tokens(ids)
        cos, sin = self._rope(h, pos)
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, h, cos, sin)
            out = torch.empty(q.shape[0], self.heads * self.head_dim, dtype=self.dtype, device=dev)
            for row, (o, n, s) in enumerate(spans):
                kc[li][row, :, s : s + n] = k[o : o + n].transpose(0, 1)
                vc[li][row, :, s : s + n] = v[o : o + n].transpose(0, 1)
                keys, vals = kc[li][row, :, : s + n], vc[li][row, :, : s + n]
                for c in range(0, n, _QUERY_CHUNK):
                    m = min(_QUERY_CHUNK, n - c)
                    out[o + c : o + c + m] = self._attend_prefill(q[o + c : o + c + m], keys, vals, s + c)
            h = self._finish_layer(layer, h, out)
        last = torch.tensor([o + n - 1 for o, n, _ in spans], device=dev)
        return self._logits(h[last])

    def _attend_prefill(self, q: Any, keys: Any, vals: Any, start: int) -> Any:
        """Causal attention of queries ``q`` ``[n, heads, d]`` at positions ``start...`` over ``keys``/``vals``
        ``[kv_heads, start + n, d]`` (or more: later positions are masked). The query heads of a KV head are stacked
        on the query axis of one product (the KV heads are not repeated); measured faster on CPU than SDPA with
        ``enable_gqa`` and a mask, in bf16 and fp32."""
        import torch

        n, group = q.shape[0], self.heads // self.kv_heads
        width = start + n
        keys, vals = keys[:, :width], vals[:, :width]
        qf = q.transpose(0, 1).reshape(self.kv_heads, group * n, self.head_dim)
        scores = (qf @ keys.transpose(-1, -2)).float().mul_(self.scale)
        future = torch.arange(width, device=q.device)[None, :] > torch.arange(start, width, device=q.device)[:, None]
        scores.view(self.kv_heads, group, n, width).masked_fill_(future, float("-inf"))
        out = scores.softmax(-1).to(self.dtype) @ vals
        return out.view(self.heads, n, self.head_dim).transpose(0, 1).reshape(n, -1)

    # -------------------------------------------------------------------------------------------- decode
    def _decode(self, kv: _BatchKV, ids: Any, lens: Any) -> Any:
        """Feed one token per row at position ``lens[row]``; logits ``[rows, vocab]``."""
        import torch

        b = ids.shape[0]
        rows = torch.arange(b, device=ids.device)
        own = lens - kv.row_shared
        own_mask = (torch.arange(kv.ko[0].shape[2], device=ids.device)[None, :] <= own[:, None])[:, None, None, :]
        mask = torch.cat([kv.shared_mask, own_mask], dim=-1)
        h = self.body.embed_tokens(ids)
        cos, sin = self._rope(h, lens)
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, h, cos, sin)
            kv.ko[li][rows, :, own] = k
            kv.vo[li][rows, :, own] = v
            q = q.view(b, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
            h = self._finish_layer(layer, h, kv.attend(li, q, mask, self.scale).reshape(b, -1))
        return self._logits(h)

    # -------------------------------------------------------------------------------------------- one batch
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        generator: Any,
        cache: PrefixCache,
        stats: EngineStats,
    ) -> list[Generation]:
        import torch

        t0 = time.perf_counter()
        n = len(prompts)
        prompts = [list(p) for p in prompts]
        # (1) each distinct prompt once: KV from the prefix cache where it has a prefix, the rest prefilled
        first: dict[tuple[int, ...], int] = {}
        distinct = [first.setdefault(tuple(p), len(first)) for p in prompts]
        uniq = [prompts[distinct.index(u)] for u in range(len(first))]
        width = max(len(p) for p in uniq)
        shape = (len(uniq), self.kv_heads, width, self.head_dim)
        kc = [torch.empty(shape, dtype=self.dtype, device=self.device) for _ in self.layers]  # read where written
        vc = [torch.empty(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        starts, sources = [], []
        for u, p in enumerate(uniq):
            entry, m = cache.lookup(p)
            if entry is not None:
                for li in range(len(self.layers)):
                    kc[li][u, :, :m], vc[li][u, :, :m] = entry.kv[0, li, :, :m], entry.kv[1, li, :, :m]
                if m == len(entry.tokens):
                    sources.append(entry.tokens)  # extended whole: the new sequence will contain it
            starts.append(m)
        for src in sources:  # copied out: freed before the batch's own KV grows
            cache.discard(src)
        parts = [
            self._prefill([k[lo:hi] for k in kc], [v[lo:hi] for v in vc], uniq[lo:hi], starts[lo:hi])
            for lo, hi in _chunks([len(p) - s for p, s in zip(uniq, starts, strict=True)])
        ]
        logits = torch.cat(parts)[torch.tensor(distinct, device=self.device)]
        stats.reused_tokens += sum(starts)
        stats.prefilled_tokens += sum(len(p) for p in uniq) - sum(starts)
        stats.shared_tokens += sum(len(p) for p in prompts) - sum(len(p) for p in uniq)
        # (2) the decode layout: rows sharing a prompt prefix keep its KV once
        kv = _BatchKV(share_groups(prompts), kc, vc, distinct, [len(p) for p in prompts], sampling.max_new_tokens)
        t1 = time.perf_counter()
        stats.prefill_seconds += t1 - t0

        # (3) decode: `alive` maps batch rows to prompts; finished rows leave once a quarter of the batch is done
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        finished = [False] * n
        alive = list(range(n))
        lens = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=self.device)
        for t in range(sampling.max_new_tokens):
            nxt, lp = _pick(logits, sampling, generator)
            stopped = torch.isin(nxt, self.stop).tolist()
            for r, (i, tok, x) in enumerate(zip(alive, nxt.tolist(), lp.tolist(), strict=True)):
                if not finished[i]:
                    tokens[i].append(tok)
                    logps[i].append(x)
                    finished[i] = stopped[r]
            if t == sampling.max_new_tokens - 1:
                break
            done = [r for r, i in enumerate(alive) if finished[i]]
            if len(done) == len(alive):
                break
            if len(done) * 4 >= len(alive):
                self._store(cache, kv, [(r, alive[r]) for r in done], prompts, tokens)
                keep = torch.tensor([r for r, i in enumerate(alive) if not finished[i]], device=self.device)
                kv.compact(keep)
                alive = [alive[r] for r in keep.tolist()]
                nxt, lens = nxt[keep], lens[keep]
            logits = self._decode(kv, nxt, lens)
            lens = lens + 1
        self._store(cache, kv, list(enumerate(alive)), prompts, tokens)
        stats.decode_seconds += time.perf_counter() - t1
        return [Generation(tokens[i], logps[i], finished=finished[i]) for i in range(n)]

    def _store(
        self,
        cache: PrefixCache,
        kv: _BatchKV,
        rows: list[tuple[int, int]],
        prompts: list[list[int]],
        tokens: list[list[int]],
    ) -> None:
        """Put the KV of rows ``(batch row, prompt index)`` into ``cache``: prompt + generated ids but the last
        (never fed)."""
        if cache.max_bytes == 0:
            return
        for r, i in rows:
            seq = tuple(prompts[i] + tokens[i][:-1])
            if len(seq) >= _BLOCK:
                cache.put(seq, kv.row_kv(r, len(seq)))


def _chunks(lengths: list[int]) -> list[tuple[int, int]]:
    """Consecutive ``[lo, hi)`` ranges of ``lengths`` summing to at most ``_PREFILL_CHUNK_TOKENS`` (a longer item
    forms its own range)."""
    out, lo, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > lo and total + n > _PREFILL_CHUNK_TOKENS:
            out.append((lo, i))
            lo, total = i, 0
        total += n
    if lengths:
        out.append((lo, len(lengths)))
    return out
