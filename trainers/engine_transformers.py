"""The transformers generation engine: batched sampling with a ``transformers`` causal LM on the trainer's module.

It is the fallback where vLLM is not installed (and the engine for LoRA policies); it shares the policy module with
the trainer, so updated weights are used at once. Log-probs are those of ``log_softmax(logits / temperature)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym_turn.error import InvalidArgument, require
from trainers.engines import Generation, SamplingConfig


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
    """Batched sampling with a ``transformers`` causal LM: left padding, KV cache, per-row stop.

    Attributes:
        model: the policy module (shared with the trainer; it is only read here).
        stop_token_ids: ids that end a turn (EOS and ``<|im_end|>`` for ChatML models).
        pad_token_id: the id used for left padding (masked out, never sampled).
        batch_size: at most this many prompts go through one forward pass.
        autocast_bf16: run the forward passes under CPU bf16 autocast.
    """

    model: Any
    stop_token_ids: Sequence[int]
    pad_token_id: int = 0
    batch_size: int = 64
    autocast_bf16: bool = False
    _generator: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.stop_token_ids:
            raise InvalidArgument("TransformersEngine needs at least one stop token id (the tokenizer's EOS).")
        if self.batch_size < 1:
            raise InvalidArgument(f"batch_size={self.batch_size} must be >= 1.")

    def update_weights(self, model: Any) -> None:
        self.model = model  # same process, same module: nothing to copy

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        torch = require("torch", "train")
        if sampling.seed is not None:
            self._generator = torch.Generator().manual_seed(sampling.seed)
        elif self._generator is None:
            self._generator = torch.Generator().manual_seed(torch.seed())
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self._generate_batch(prompts[start : start + self.batch_size], sampling))
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        import contextlib

        import torch

        if any(len(p) == 0 for p in prompts):
            raise InvalidArgument("every prompt needs at least one token.")
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = 1
        stop = torch.tensor(list(self.stop_token_ids), dtype=torch.long)
        tokens = torch.zeros((n, sampling.max_new_tokens), dtype=torch.long)
        logps = torch.zeros((n, sampling.max_new_tokens), dtype=torch.float32)
        lengths = torch.full((n,), sampling.max_new_tokens, dtype=torch.long)
        finished = torch.zeros(n, dtype=torch.bool)
        temperature = sampling.temperature if sampling.temperature > 0 else 1.0
        cache = None
        step_ids, positions = ids, (mask.cumsum(-1) - 1).clamp(min=0)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if self.autocast_bf16 else contextlib.nullcontext()
        was_training = self.model.training
        # only the last position's logits are sampled: skip the LM head over the whole prompt (~10% of a prefill)
        keep_last = {"logits_to_keep": 1} if _accepts(self.model.forward, "logits_to_keep") else {}
        self.model.eval()
        try:
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
                        nxt = _sample_top_p(logprobs, sampling.top_p, self._generator)
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
        finally:
            self.model.train(was_training)
        return [
            Generation(
                token_ids=tokens[i, : lengths[i]].tolist(),
                logprobs=logps[i, : lengths[i]].tolist(),
                finished=bool(finished[i]),
            )
            for i in range(n)
        ]


def _sample_top_p(logprobs: Any, top_p: float, generator: Any) -> Any:
    """Sample one id per row from ``exp(logprobs)`` restricted to the smallest set with mass >= ``top_p``."""
    import torch

    probs = logprobs.exp()
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the most likely token
        sorted_probs = sorted_probs * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
