"""Shared trainer fixtures: SmolLM2's tokenizer (template only, no weights) and tiny random Llama models."""

from __future__ import annotations

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
