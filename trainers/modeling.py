"""Model-side pieces of the update: packing episodes without padding, per-token log-probs/entropy/values of packed
sequences, the critic (a value head on a copy of the backbone), the frozen reference, and optional LoRA.

Packing: episodes are laid end to end in rows of at most ``pack_tokens`` tokens (first-fit by decreasing length)
with per-episode position ids and a block-diagonal causal attention mask, so no compute is spent on padding and no
token attends across episodes. A row with a single episode gets no explicit mask (the fast causal attention path;
measured here, an explicit mask costs 20-50% more per token on CPU, so keep ``pack_tokens`` near the episode
length). Per-token arrays are aligned with ``Episode.token_ids``: ``logprobs[t]`` is
``log p(token_t | tokens_<t)`` (0 at an episode's first token) and ``head[t]`` is the value head's output at
position ``t`` (``trainers.credit`` reads ``V(s_t)`` as ``head[t - 1]``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from agentgym_turn.error import InvalidArgument, require
from trainers.episode import Episode
from trainers.losses import entropy_from_logits, token_logprobs


def seed_everything(seed: int, threads: int | None = None) -> None:
    """The trainer's one seeding block: Python's, NumPy's and torch's generators; ``threads`` caps torch's pool."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)


@dataclass
class Pack:
    """Several episodes in one row: ``members[j]`` is an episode index, its tokens at ``offsets[j]:offsets[j+1]``."""

    members: list[int]
    offsets: list[int]
    input_ids: torch.Tensor  # (1, L)
    position_ids: torch.Tensor  # (1, L)
    attention_mask: torch.Tensor | None  # (1, 1, L, L) bool, block-diagonal causal; None for one member (plain causal)
    seq_ids: torch.Tensor  # (L,) index of the member each token belongs to

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def gather(self, arrays: Sequence[np.ndarray], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Concatenate one per-episode array per member into a flat ``(L,)`` tensor."""
        return torch.as_tensor(np.concatenate([arrays[i] for i in self.members]), dtype=dtype)

    def split(self, flat: torch.Tensor) -> dict[int, np.ndarray]:
        """The inverse of :meth:`gather`: episode index -> its slice (as numpy)."""
        values = flat.detach().float().cpu().numpy()
        return {m: values[a:b] for m, a, b in zip(self.members, self.offsets[:-1], self.offsets[1:], strict=True)}


def pack_episodes(episodes: Sequence[Episode], indices: Sequence[int], pack_tokens: int) -> list[Pack]:
    """Pack ``episodes[indices]`` into rows of at most ``pack_tokens`` tokens (a longer episode gets its own row)."""
    order = sorted(indices, key=lambda i: -len(episodes[i].token_ids))
    rows: list[list[int]] = []
    sizes: list[int] = []
    for i in order:
        n = len(episodes[i].token_ids)
        for r, size in enumerate(sizes):
            if size + n <= pack_tokens:
                rows[r].append(i)
                sizes[r] += n
                break
        else:
            rows.append([i])
            sizes.append(n)
    packs = []
    for members in rows:
        lengths = [len(episodes[i].token_ids) for i in members]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        seq = torch.as_tensor(np.repeat(np.arange(len(members)), lengths))
        total = int(offsets[-1])
        causal = torch.ones(total, total, dtype=torch.bool).tril() if len(members) > 1 else None
        packs.append(
            Pack(
                members=list(members),
                offsets=[int(o) for o in offsets],
                input_ids=torch.as_tensor(np.concatenate([episodes[i].token_ids for i in members]))[None],
                position_ids=torch.as_tensor(np.concatenate([np.arange(n) for n in lengths]))[None],
                attention_mask=None if len(members) == 1 else ((seq[:, None] == seq[None, :]) & causal)[None, None],
                seq_ids=seq,
            )
        )
    return packs


class MasterWeights:
    """Mixed precision without autocast: ``model``'s weights become bf16 (every matmul and elementwise op runs in
    bf16 with no per-forward recasting of fp32 weights, as autocast does), while ``params``, fp32 copies of its
    trainable parameters, are what the optimizer steps (fp32 optimizer state; steps below bf16's resolution are
    kept, not rounded away).

    Each bf16 gradient is added into its master's fp32 ``.grad`` as soon as backward has accumulated it (a
    post-accumulate-grad hook) and then freed, so gradients summed over packs keep fp32 precision. After
    ``opt.step()``: :meth:`push` writes the masters back, rounded to bf16. :meth:`full_precision` puts the fp32
    values in the model for saving a checkpoint::

        master = MasterWeights(model)                 # model is now bf16
        opt = torch.optim.AdamW(master.params, ...)
        loss.backward(); opt.step(); master.push(); opt.zero_grad()
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.trained = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
        self.params = [p.detach().float().clone().requires_grad_(True) for p in self.trained]
        model.to(torch.bfloat16)
        for p, m in zip(self.trained, self.params, strict=True):
            p.register_post_accumulate_grad_hook(self._to_master(m))

    @staticmethod
    def _to_master(master: torch.Tensor) -> Any:
        def hook(p: torch.Tensor) -> None:
            if master.grad is None:
                master.grad = p.grad.float()
            else:
                master.grad.add_(p.grad)
            p.grad = None

        return hook

    @torch.no_grad()
    def push(self) -> None:
        """Copy the (stepped) fp32 masters into the bf16 weights."""
        for p, m in zip(self.trained, self.params, strict=True):
            p.copy_(m)

    @contextlib.contextmanager
    def full_precision(self) -> Any:
        """The model in fp32 holding the masters' exact values (to save it), bf16 again afterwards."""
        self.model.float()
        with torch.no_grad():
            for p, m in zip(self.trained, self.params, strict=True):
                p.copy_(m)
        try:
            yield self.model
        finally:
            self.model.to(torch.bfloat16)


@contextlib.contextmanager
def full_precision(*masters: MasterWeights | None) -> Any:
    """Every given :class:`MasterWeights`' model in fp32 with its masters' values (``None`` entries are skipped)."""
    with contextlib.ExitStack() as stack:
        for m in masters:
            if m is not None:
                stack.enter_context(m.full_precision())
        yield


def autocast(bf16: bool) -> Any:
    """CPU bf16 autocast when ``bf16``, else a no-op context."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


@dataclass
class TokenStats:
    """Flat ``(L,)`` outputs for one pack: log-probs of each token, and the entropy where asked (else ``None``)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None


def pack_logprobs(
    model: nn.Module,
    pack: Pack,
    *,
    temperature: float = 1.0,
    entropy_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> TokenStats:
    """Per-token log-probs (at ``temperature``) of a pack; entropy of the next-token distribution where
    ``entropy_mask`` is set (the predicting position of those tokens).

    ``positions`` (flat ``(L,)``, e.g. the loss mask) restricts the log-probs to the tokens where it is set (0
    elsewhere): the LM head then runs only on the positions predicting those tokens (and the entropy tokens), which
    skips most of the head's compute and memory when the policy wrote a small share of the pack. ``None`` = all.
    """
    ids = pack.input_ids[0]
    starts = torch.zeros(ids.shape[0], dtype=torch.bool)
    starts[pack.offsets[:-1]] = True
    need_lp = ~starts if positions is None else positions.bool() & ~starts
    need_ent = entropy_mask.bool() & ~starts if entropy_mask is not None else torch.zeros_like(starts)
    need = need_lp | need_ent
    targets = torch.nonzero(need).squeeze(-1)  # token positions t >= 1 whose log-prob/entropy is asked
    out = model(
        input_ids=pack.input_ids,
        position_ids=pack.position_ids,
        attention_mask=pack.attention_mask,
        logits_to_keep=targets - 1,  # the predicting positions
    )
    logits = out.logits[0]
    if temperature != 1.0:
        logits = logits / temperature
    lp = torch.zeros(ids.shape[0], dtype=torch.float32)
    lp_rows = need_lp[targets]
    if bool(lp_rows.any()):
        lp = lp.index_put((targets[lp_rows],), token_logprobs(logits[lp_rows], ids[targets[lp_rows]]))
    ent = None
    if entropy_mask is not None:
        ent = torch.zeros(ids.shape[0], dtype=torch.float32)
        ent_rows = need_ent[targets]
        if bool(ent_rows.any()):
            ent = ent.index_put((targets[ent_rows],), entropy_from_logits(logits[ent_rows]))
    return TokenStats(lp, ent)


class ValueModel(nn.Module):
    """The critic: a copy of the policy's backbone with a scalar head (001 D.1.3: its own learning rate)."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy: nn.Module) -> ValueModel:
        """A critic whose backbone starts as a copy of ``policy``'s (its LM head is not copied)."""
        backbone = copy.deepcopy(getattr(policy, policy.base_model_prefix))
        critic = cls(backbone, policy.config.hidden_size)
        return critic.to(next(policy.parameters()).dtype)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.backbone(
            input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask
        ).last_hidden_state
        return self.head(hidden).squeeze(-1).float()

    def pack_values(self, pack: Pack) -> torch.Tensor:
        """Head output at every position of a pack, flat ``(L,)``."""
        return self(pack.input_ids, pack.position_ids, pack.attention_mask)[0]


def critic_values(head: np.ndarray) -> np.ndarray:
    """``trainers.credit``'s ``values`` array (length n + 1) from head outputs at the n positions."""
    return np.concatenate([[0.0], np.asarray(head, dtype=np.float64)])


def frozen_copy(model: nn.Module) -> nn.Module:
    """A frozen copy (the reference policy for the KL term)."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def add_lora(model: nn.Module, rank: int, alpha: float, dropout: float = 0.0) -> nn.Module:
    """Wrap ``model`` with LoRA adapters on every linear layer (``peft``; lazy import)."""
    peft = require("peft", "train")
    if rank < 1:
        raise InvalidArgument(f"lora_rank={rank} must be >= 1 (0 disables LoRA).")
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules="all-linear")
    return peft.get_peft_model(model, cfg)


def reference_context(policy: nn.Module, reference: nn.Module | None) -> tuple[nn.Module, Any]:
    """The module and context that compute reference log-probs: a frozen copy, or with LoRA the policy with its
    adapters disabled (no second copy of the weights)."""
    if reference is not None:
        return reference, contextlib.nullcontext()
    if hasattr(policy, "disable_adapter"):
        return policy, policy.disable_adapter()
    raise InvalidArgument("no reference model: pass a frozen copy, or use LoRA (its base weights are the reference).")


def save_policy(model: nn.Module, tokenizer: Any, path: str) -> None:
    """Save a plain HF folder (LoRA adapters merged into a copy) that ``load_causal_lm(path)`` reloads."""
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
