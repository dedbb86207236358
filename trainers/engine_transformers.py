"""The transformers generation engine: batched sampling with a ``transformers`` causal LM on the trainer's module.

It is the fallback where vLLM is not installed (and the engine for LoRA policies); it shares the policy module with
the trainer, so updated weights are used at once. Log-probs are those of ``log_softmax(logits / temperature)``.

Two decode loops sit behind :class:`TransformersEngine`:

* the **fast loop** (Llama-family modules: ``model_type`` llama or qwen2, LoRA-wrapped or not) in
  :mod:`trainers.llama_decode`: the model's own submodules over a preallocated KV cache, identical prompts prefilled
  once, and a bounded prefix cache (``prefix_cache_gib``) that lets the next turn prefill only its new tokens.
* the **generic loop** (any other causal LM; ``fast=False`` forces it) is the HF forward with a ``DynamicCache``
  and left padding, which the fast loop is tested against.

The prefix cache is emptied whenever the weights may have changed: :meth:`~TransformersEngine.update_weights` is
called, or any parameter was modified in place (an optimizer step) or replaced, which the parameters' version
counters and storage pointers reveal. Writes through ``param.data`` bypass the version counter: call
``update_weights`` after those.

    >>> engine = TransformersEngine(model, stop_token_ids=[tok.eos_token_id], autocast_bf16=True)  # doctest: +SKIP
    >>> [g] = engine.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=8, seed=0))                # doctest: +SKIP
    >>> engine.stats.prefix_hit_rate                                                                # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_turn.error import InvalidArgument, require
from trainers.engine_api import Generation, SamplingConfig
from trainers.llama_decode import (
    EngineStats,
    LlamaDecoder,
    PrefixCache,
    sample_top_p,
    unsupported_reason,
    weights_fingerprint,
)

log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def _accepts(fn: Any, name: str) -> bool:
    """Whether callable ``fn`` takes a keyword argument ``name``."""
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@dataclass
class TransformersEngine:
    """Batched sampling with a ``transformers`` causal LM: KV cache, prefix reuse, per-row stop.

    Attributes:
        model: the policy module (shared with the trainer; it is only read here).
        stop_token_ids: ids that end a turn (EOS and ``<|im_end|>`` for ChatML models).
        pad_token_id: the id used for left padding in the generic loop (masked out, never sampled).
        batch_size: at most this many prompts go through one batch.
        autocast_bf16: compute the linear layers in bf16 (CPU autocast in the generic loop).
        prefix_cache_gib: bound of the KV kept from finished sequences for reuse (GiB; 0 disables it).
        fast: use the fast loop where the architecture is supported (else, or when False, the generic loop).
        stats: counters of prompt, prefilled, reused and generated tokens (read them, reset them freely).
    """

    model: Any
    stop_token_ids: Sequence[int]
    pad_token_id: int = 0
    batch_size: int = 64
    autocast_bf16: bool = False
    prefix_cache_gib: float = 1.0
    fast: bool = True
    stats: EngineStats = field(default_factory=EngineStats)
    _generator: Any = field(default=None, init=False, repr=False)
    _decoder: Any = field(default=None, init=False, repr=False)
    _cache: Any = field(default=None, init=False, repr=False)
    _weights_version: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.stop_token_ids:
            raise InvalidArgument("TransformersEngine needs at least one stop token id (the tokenizer's EOS).")
        if self.batch_size < 1:
            raise InvalidArgument(f"batch_size={self.batch_size} must be >= 1.")
        if self.prefix_cache_gib < 0:
            raise InvalidArgument(f"prefix_cache_gib={self.prefix_cache_gib} must be >= 0 (0 disables reuse).")
        self._cache = PrefixCache(int(self.prefix_cache_gib * 2**30))

    def close(self) -> None:
        """Nothing to release: the engine samples from the trainer's own model in this process."""

    def update_weights(self, model: Any) -> None:
        """Sample from ``model`` from now on (same process, same module: nothing is copied); cached KV and the
        fast loop's weight casts are dropped at once (memory the update can use)."""
        self.model = model
        self._weights_version += 1
        self._decoder = None
        self._cache.clear()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        torch = require("torch", "train")
        if any(len(p) == 0 for p in prompts):
            raise InvalidArgument("every prompt needs at least one token.")
        device = next(self.model.parameters()).device  # sampling runs there (the generator too)
        if self._generator is not None and self._generator.device != device:
            self._generator = None
        if sampling.seed is not None:
            self._generator = torch.Generator(device=device).manual_seed(sampling.seed)
        elif self._generator is None:
            self._generator = torch.Generator(device=device).manual_seed(torch.seed())
        decoder = self._fast_decoder()
        out: list[Generation] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompts), self.batch_size):
                chunk = prompts[start : start + self.batch_size]
                self.stats.prompt_tokens += sum(len(p) for p in chunk)
                if decoder is None:
                    t0 = time.perf_counter()
                    gens = self._generate_generic(chunk, sampling)
                    self.stats.prefilled_tokens += sum(len(p) for p in chunk)
                    self.stats.decode_seconds += time.perf_counter() - t0
                else:
                    with torch.no_grad():
                        gens = decoder.generate(chunk, sampling, self._generator, self._cache, self.stats)
                self.stats.generated_tokens += sum(len(g.token_ids) for g in gens)
                out.extend(gens)
        finally:
            self.model.train(was_training)
        return out

    # ------------------------------------------------------------------------------------------------ fast loop
    def _fast_decoder(self) -> LlamaDecoder | None:
        """The fast loop for the current model and weights (``None``: use the generic loop)."""
        if not self.fast:
            return None
        reason = unsupported_reason(self.model)
        if reason is not None:
            if reason not in _WARNED:
                _WARNED.add(reason)
                log.warning("TransformersEngine: %s; generating with the generic (slower) loop.", reason)
            return None
        compute_dtype = _compute_dtype(self.model, self.autocast_bf16)
        key = (id(self.model), self._weights_version, compute_dtype, weights_fingerprint(self.model))
        if self._decoder is None or self._decoder.key != key:
            self._cache.clear()  # KV computed by other weights must never be reused
            self._decoder = LlamaDecoder(self.model, compute_dtype, self.autocast_bf16, self.stop_token_ids, key)
        return self._decoder

    # ------------------------------------------------------------------------------------------------ generic loop
    def _generate_generic(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        """Left-padded batch through the HF forward with its ``DynamicCache`` (any causal LM)."""
        import torch

        n, width = len(prompts), max(len(p) for p in prompts)
        dev = next(self.model.parameters()).device
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long, device=dev)
        mask = torch.zeros((n, width), dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long, device=dev)
            mask[i, width - len(p) :] = 1
        stop = torch.tensor(list(self.stop_token_ids), dtype=torch.long, device=dev)
        tokens = torch.zeros((n, sampling.max_new_tokens), dtype=torch.long, device=dev)
        logps = torch.zeros((n, sampling.max_new_tokens), dtype=torch.float32, device=dev)
        lengths = torch.full((n,), sampling.max_new_tokens, dtype=torch.long, device=dev)
        finished = torch.zeros(n, dtype=torch.bool, device=dev)
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        cache = None
        step_ids, positions = ids, (mask.cumsum(-1) - 1).clamp(min=0)
        autocast = torch.autocast(dev.type, dtype=torch.bfloat16) if self.autocast_bf16 else contextlib.nullcontext()
        # only the last position's logits are sampled: skip the LM head over the whole prompt (~10% of a prefill)
        keep_last = {"logits_to_keep": 1} if _accepts(self.model.forward, "logits_to_keep") else {}
        with torch.no_grad(), autocast:
            for t in range(sampling.max_new_tokens):
                out = self.model(
                    input_ids=step_ids,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                    **keep_last,
                )
                cache = out.past_key_values
                logits = out.logits[:, -1, :].float() / temperature
                logprobs = torch.log_softmax(logits, dim=-1)
                if sampling.temperature == 0:
                    nxt = logits.argmax(dim=-1)
                else:
                    nxt = sample_top_p(logprobs.exp(), sampling.top_p, self._generator)
                nxt = torch.where(finished, torch.full_like(nxt, self.pad_token_id), nxt)
                tokens[:, t] = nxt
                logps[:, t] = logprobs.gather(-1, nxt[:, None]).squeeze(-1)
                hit = ~finished & torch.isin(nxt, stop)
                lengths = torch.where(hit, torch.full_like(lengths, t + 1), lengths)
                finished |= hit
                if bool(finished.all()):
                    break
                step_ids = nxt[:, None]
                mask = torch.cat([mask, (~finished | hit).long()[:, None]], dim=1)
                positions = positions[:, -1:] + 1
        return [
            Generation(
                token_ids=tokens[i, : lengths[i]].tolist(),
                logprobs=logps[i, : lengths[i]].tolist(),
                finished=bool(finished[i]),
            )
            for i in range(n)
        ]


def _compute_dtype(model: Any, autocast_bf16: bool) -> Any:
    import torch

    return torch.bfloat16 if autocast_bf16 else next(model.parameters()).dtype
