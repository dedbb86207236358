"""Model-side pieces of the update: packing episodes without padding, per-token log-probs/entropy/values of packed
sequences, the critic (a value head on a copy of the backbone), the frozen reference, and optional LoRA.

Packing: episodes are laid end to end in rows of at most ``pack_tokens`` tokens (first-fit by decreasing length)
with per-episode position ids and a block-diagonal causal attention mask, so no compute is spent on padding and no
token attends across episodes. A row with a single episode gets no explicit mask (the fast causal attention path;
measured here, an explicit mask costs 20-50% more per token on CPU, so keep ``pack_tokens`` near the episode
length). Per-token arrays are aligned with ``Episode.token_ids``: ``logprobs[t]`` is
``log p(token_t | tokens_<t)`` (0 at an episode's first token) and ``head[t]`` is the value head's output at
position ``t`` (``trainers.credit`` reads ``V(s_t)`` as ``head[t - 1]``).

Prefix sharing (:func:`pack_shared`, the RL default): the episodes of a group share their prompt (system prompt and
question, ~330 of ~550 tokens of a WikiTwoTurn episode) and every episode of a step shares the system prompt. A
shared pack computes the tokens its members have in common once (a forward that keeps its KV), then each member's
suffix as its own forward attending to that KV (positions continue after the prefix; gradients flow back into the
prefix through its KV). Only tokens before the first position whose output is needed are shared: the position
before an episode's first policy token predicts that token (and holds the critic's first value), so policy tokens,
which tree rollouts share across a group, are never part of a prefix. Outputs at prefix positions are not computed
(log-prob 0, value 0). Measured on CPU, a prefix KV reused by one forward per suffix beat one row with a
prefix-plus-suffixes mask (the mask's attention grows with the whole row and takes the slower masked path).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
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
    shared: int | None = None  # None: one row; else every member's first `shared` tokens are computed once (see
    # pack_shared), then each member's remaining tokens in their own forward; input_ids still hold every token

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def gather(self, arrays: Sequence[np.ndarray], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Concatenate one per-episode array per member into a flat ``(L,)`` tensor (on the pack's device)."""
        flat = np.concatenate([arrays[i] for i in self.members])
        return torch.as_tensor(flat, dtype=dtype, device=self.input_ids.device)

    def split(self, flat: torch.Tensor) -> dict[int, np.ndarray]:
        """The inverse of :meth:`gather`: episode index -> its slice (as numpy)."""
        values = flat.detach().float().cpu().numpy()
        return {m: values[a:b] for m, a, b in zip(self.members, self.offsets[:-1], self.offsets[1:], strict=True)}


def pack_episodes(
    episodes: Sequence[Episode], indices: Sequence[int], pack_tokens: int, *, device: Any = None
) -> list[Pack]:
    """Pack ``episodes[indices]`` into rows of at most ``pack_tokens`` tokens (a longer episode gets its own row);
    the pack's tensors are created on ``device`` (the model's; ``None``: the CPU)."""
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
    return [_make_pack(episodes, members, device=device) for members in rows]


def _make_pack(
    episodes: Sequence[Episode], members: Sequence[int], shared: int | None = None, *, device: Any = None
) -> Pack:
    """``episodes[members]`` end to end on ``device``; one row (block-diagonal mask) unless ``shared`` is given."""
    device = torch.device("cpu") if device is None else torch.device(device)
    lengths = [len(episodes[i].token_ids) for i in members]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    seq = torch.as_tensor(np.repeat(np.arange(len(members)), lengths), device=device)
    total = int(offsets[-1])
    mask = None
    if shared is None and len(members) > 1:
        causal = torch.ones(total, total, dtype=torch.bool, device=device).tril()
        mask = ((seq[:, None] == seq[None, :]) & causal)[None, None]
    return Pack(
        members=list(members),
        offsets=[int(o) for o in offsets],
        input_ids=torch.as_tensor(np.concatenate([episodes[i].token_ids for i in members]), device=device)[None],
        position_ids=torch.as_tensor(np.concatenate([np.arange(n) for n in lengths]), device=device)[None],
        attention_mask=mask,
        seq_ids=seq,
        shared=shared,
    )


def shareable_tokens(episode: Episode) -> int:
    """How many leading tokens of ``episode`` may be shared: those before the position whose output is first
    needed, i.e. before the one predicting its first policy token (log-probs, entropy and critic values are all
    read from there on). An episode without policy tokens needs no output at all."""
    policy = np.flatnonzero(episode.loss_mask)
    return max(int(policy[0]) - 1, 0) if len(policy) else len(episode.token_ids)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    k = min(len(a), len(b))
    differ = np.flatnonzero(a[:k] != b[:k])
    return int(differ[0]) if len(differ) else k


def pack_shared(
    episodes: Sequence[Episode], indices: Sequence[int], pack_tokens: int, *, device: Any = None
) -> list[Pack]:
    """Pack ``episodes[indices]`` for prefix sharing: each pack's members share their first ``shared`` tokens
    (at most :func:`shareable_tokens` of each), computed once; a pack computes at most ``pack_tokens`` tokens
    (``shared`` + the members' suffixes; one longer episode gets its own pack), or, when its members share more
    than ``pack_tokens`` tokens (τ's ~5k-token policy document), that prefix once plus at most ``pack_tokens``
    tokens of suffixes: never more than ``pack_tokens`` beyond the longest member alone, for a fraction of the
    compute of one pack per member. Tensors go to ``device``.

    Episodes are taken in lexicographic order of their shareable tokens, so a task's group is contiguous and
    neighbouring groups still share the system prompt; a pack grows while its computed tokens fit.
    """
    limit = {i: shareable_tokens(episodes[i]) for i in indices}
    order = sorted(indices, key=lambda i: tuple(episodes[i].token_ids[: limit[i]].tolist()))
    packs: list[Pack] = []
    members: list[int] = []
    shared = 0
    for i in order:
        if members:
            s = min(shared, limit[i], common_prefix(episodes[members[0]].token_ids, episodes[i].token_ids))
            rest = sum(len(episodes[j].token_ids) - s for j in [*members, i])
            if s + rest <= pack_tokens or (s > pack_tokens and rest <= pack_tokens):
                members.append(i)
                shared = s
                continue
            packs.append(_make_pack(episodes, members, shared if len(members) > 1 else 0, device=device))
        members, shared = [i], limit[i]
    if members:
        packs.append(_make_pack(episodes, members, shared if len(members) > 1 else 0, device=device))
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


def autocast(bf16: bool, device: Any = "cpu") -> Any:
    """bf16 autocast on ``device``'s type (``"cpu"``, ``"cuda"``) when ``bf16``, else a no-op context."""
    kind = torch.device(device).type
    return torch.autocast(kind, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


#: ``run(input_ids, position_ids, attention_mask, past_key_values, keep, use_cache) -> (outputs, past_key_values)``:
#: one forward of a model over a ``(1, l)`` chunk, returning its outputs at the chunk's positions ``keep``.
Runner = Callable[..., tuple[torch.Tensor, Any]]


def pack_forward(run: Runner, pack: Pack, keep: torch.Tensor) -> torch.Tensor:
    """A model's outputs at the flat positions ``keep`` (sorted) of ``pack``, in that order: one forward of the
    row, or (``pack.shared`` set) the shared prefix once and one forward per member's suffix on the prefix's KV.
    Members with no position in ``keep`` are not run at all."""
    from transformers import DynamicCache

    if pack.shared is None:
        return run(pack.input_ids, pack.position_ids, pack.attention_mask, None, keep, False)[0]
    n_shared = pack.shared
    starts = torch.as_tensor(pack.offsets[:-1], device=keep.device)
    in_prefix = (keep[:, None] >= starts) & (keep[:, None] < starts + n_shared)
    if bool(in_prefix.any()):
        raise InvalidArgument(
            f"an output is asked at a position inside the pack's shared prefix of {n_shared} tokens (position "
            f"{int(keep[in_prefix.any(-1)][0])}); pack with pack_shared, which stops before the first needed output."
        )
    kv = None
    if n_shared:
        a = pack.offsets[0]
        chunk = slice(a, a + n_shared)
        _, past = run(pack.input_ids[:, chunk], pack.position_ids[:, chunk], None, None, keep[:0], True)
        kv = [(layer.keys, layer.values) for layer in past.layers]
    outs = []
    for a, b in zip(pack.offsets[:-1], pack.offsets[1:], strict=True):
        mine = keep[(keep >= a + n_shared) & (keep < b)]
        if not len(mine):
            continue
        chunk = slice(a + n_shared, b)
        cache = DynamicCache(kv) if kv is not None else None  # a fresh cache per suffix, over the same prefix KV
        out, _ = run(pack.input_ids[:, chunk], pack.position_ids[:, chunk], None, cache, mine - chunk.start, False)
        outs.append(out)
    return torch.cat(outs) if outs else run(pack.input_ids[:, :1], pack.position_ids[:, :1], None, None, keep, False)[0]


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
    starts = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    starts[pack.offsets[:-1]] = True
    need_lp = ~starts if positions is None else positions.bool() & ~starts
    need_ent = entropy_mask.bool() & ~starts if entropy_mask is not None else torch.zeros_like(starts)
    need = need_lp | need_ent
    targets = torch.nonzero(need).squeeze(-1)  # token positions t >= 1 whose log-prob/entropy is asked

    def run(input_ids: torch.Tensor, position_ids: torch.Tensor, mask: Any, past: Any, keep: torch.Tensor,
            use_cache: bool) -> tuple[torch.Tensor, Any]:  # fmt: skip
        out = model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, past_key_values=past,
                    use_cache=use_cache, logits_to_keep=keep)  # fmt: skip
        return out.logits[0], out.past_key_values

    logits = pack_forward(run, pack, targets - 1)  # at the predicting positions
    if temperature != 1.0:
        logits = logits / temperature
    lp = torch.zeros(ids.shape[0], dtype=torch.float32, device=ids.device)
    lp_rows = need_lp[targets]
    if bool(lp_rows.any()):
        lp = lp.index_put((targets[lp_rows],), token_logprobs(logits[lp_rows], ids[targets[lp_rows]]))
    ent = None
    if entropy_mask is not None:
        ent = torch.zeros(ids.shape[0], dtype=torch.float32, device=ids.device)
        ent_rows = need_ent[targets]
        if bool(ent_rows.any()):
            ent = ent.index_put((targets[ent_rows],), entropy_from_logits(logits[ent_rows]))
    return TokenStats(lp, ent)


class ValueModel(nn.Module):
    """The critic: a copy of the policy's backbone with a scalar head (001 D.1.3: its own learning rate)."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1, device=next(backbone.parameters()).device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy: nn.Module) -> ValueModel:
        """A critic whose backbone starts as a copy of ``policy``'s (its LM head is not copied)."""
        backbone = copy.deepcopy(getattr(policy, policy.base_model_prefix))
        critic = cls(backbone, policy.config.hidden_size)
        return critic.to(next(policy.parameters()).dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        past_key_values: Any = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """Head outputs ``(B, l)`` (float32) and the KV cache (``use_cache``, or extended ``past_key_values``)."""
        out = self.backbone(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                            past_key_values=past_key_values, use_cache=use_cache)  # fmt: skip
        return self.head(out.last_hidden_state).squeeze(-1).float(), out.past_key_values

    def pack_values(self, pack: Pack) -> torch.Tensor:
        """Head output at every position of a pack, flat ``(L,)`` (0 inside a shared prefix, never read)."""

        def run(input_ids: torch.Tensor, position_ids: torch.Tensor, mask: Any, past: Any, keep: torch.Tensor,
                use_cache: bool) -> tuple[torch.Tensor, Any]:  # fmt: skip
            values, cache = self(input_ids, position_ids, mask, past, use_cache)
            return values[0, keep], cache

        if pack.shared is None:
            return self(pack.input_ids, pack.position_ids, pack.attention_mask)[0][0]
        device = pack.input_ids.device
        keep = torch.ones(pack.num_tokens, dtype=torch.bool, device=device)
        for a in pack.offsets[:-1]:
            keep[a : a + pack.shared] = False
        where = torch.nonzero(keep).squeeze(-1)
        return torch.zeros(pack.num_tokens, device=device).index_put((where,), pack_forward(run, pack, where))


def critic_values(head: np.ndarray) -> np.ndarray:
    """``trainers.credit``'s ``values`` array (length n + 1) from head outputs at the n positions."""
    return np.concatenate([[0.0], np.asarray(head, dtype=np.float64)])


def frozen_copy(model: nn.Module) -> nn.Module:
    """A frozen copy (the reference policy for the KL term)."""
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


#: ``--lora-targets`` default: every linear layer but the LM head (peft's ``"all-linear"``).
LORA_ALL_LINEAR = "all-linear"


def add_lora(
    model: nn.Module, rank: int, alpha: float, dropout: float = 0.0, targets: Sequence[str] = (LORA_ALL_LINEAR,)
) -> nn.Module:
    """Wrap ``model`` with LoRA adapters (``peft``; lazy import) on ``targets``: ``("all-linear",)`` (every linear
    layer but the LM head) or module names such as ``("q_proj", "v_proj")``. A merged weight is
    ``W + (alpha / rank) * B @ A``; ``B`` starts at zero, so the wrapped model starts as ``model``."""
    peft = require("peft", "train")
    if rank < 1:
        raise InvalidArgument(f"lora_rank={rank} must be >= 1 (0 disables LoRA).")
    targets = list(targets)
    if not targets or (LORA_ALL_LINEAR in targets and len(targets) > 1):
        raise InvalidArgument(
            f"--lora-targets {targets} must be {LORA_ALL_LINEAR!r} alone or module names, e.g. q_proj v_proj."
        )
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    missing = [t for t in targets if t != LORA_ALL_LINEAR and t not in names]
    if missing:
        raise InvalidArgument(
            f"--lora-targets {missing} name no linear layer of this model; its linear layers are {sorted(names)} "
            f"(or use {LORA_ALL_LINEAR!r})."
        )
    target_modules = LORA_ALL_LINEAR if targets == [LORA_ALL_LINEAR] else targets
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules)
    return peft.get_peft_model(model, cfg)


def is_lora(model: nn.Module) -> bool:
    """Whether ``model`` is wrapped with LoRA adapters (a peft model)."""
    return hasattr(model, "peft_config")


def save_adapter(model: nn.Module, path: str) -> None:
    """Save only the LoRA adapter of a peft ``model`` (``adapter_config.json`` + ``adapter_model.safetensors``, a
    few MB): what ``peft.PeftModel.from_pretrained(base, path)``, :func:`load_adapter` and vLLM's ``LoRARequest``
    load."""
    if not is_lora(model):
        raise InvalidArgument("save_adapter needs a LoRA-wrapped model (add_lora); save_policy saves full weights.")
    model.save_pretrained(path)


def load_adapter(model: nn.Module, path: str) -> None:
    """Load the adapter weights that :func:`save_adapter` wrote into the LoRA-wrapped ``model`` (same rank and
    targets), in place."""
    peft = require("peft", "train")
    from safetensors.torch import load_file

    file = f"{path}/adapter_model.safetensors"
    state = load_file(file, device=str(next(model.parameters()).device))
    result = peft.set_peft_model_state_dict(model, state)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise InvalidArgument(
            f"adapter {path} holds weights this model has no place for ({unexpected[:3]} ...): it was trained with "
            "another --lora-rank / --lora-targets; resume with the run's own flags."
        )


def reference_context(policy: nn.Module, reference: nn.Module | None) -> tuple[nn.Module, Any]:
    """The module and context that compute reference log-probs: a frozen copy, or with LoRA the policy with its
    adapters disabled (no second copy of the weights)."""
    if reference is not None:
        return reference, contextlib.nullcontext()
    if hasattr(policy, "disable_adapter"):
        return policy, policy.disable_adapter()
    raise InvalidArgument("no reference model: pass a frozen copy, or use LoRA (its base weights are the reference).")


def save_policy(model: nn.Module, tokenizer: Any, path: str) -> None:
    """Save a plain HF folder (LoRA adapters merged into a copy) that ``load_causal_lm(path)`` and vLLM load."""
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
