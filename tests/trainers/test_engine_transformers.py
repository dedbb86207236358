"""The transformers engine's fast loop against its generic loop (the HF forward with a DynamicCache, the engine as
it was before), a full forward pass, and itself without prefix reuse; the prefix cache's bounds and invalidation.

The tiny models are random Llamas with sharp logits (so greedy choices are not near-ties); the slow test runs the
real SmolLM2-135M in fp32, where the two loops must pick identical greedy tokens. Under bf16 autocast the loops
round differently (the fast loop keeps its KV in bf16), so there only the log-probs' distance to an fp32 forward is
checked.
"""

from __future__ import annotations

import logging

import pytest

from tests.trainers.conftest import tiny_llama
from trainers.engine_api import SamplingConfig
from trainers.engine_transformers import TransformersEngine
from trainers.llama_decode import EngineStats, PrefixCache, unsupported_reason

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 512
GREEDY = SamplingConfig(max_new_tokens=10, temperature=0)


def _llama(seed: int = 0):
    """The shared tiny random Llama (4 query heads on 2 KV heads) with sharp logits: its linear and embedding
    weights drawn with std 0.2 instead of 0.02, so greedy choices are not near-ties."""
    model = tiny_llama(VOCAB, seed).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(10)
    return model


def _prompts() -> list[list[int]]:
    base = [(7 * i + 3) % VOCAB for i in range(40)]
    return [base[:37], [9, 8, 7] * 7, base[:37], base[5:30], [11, 12]]


def _engine(model, **kw) -> TransformersEngine:
    return TransformersEngine(model, stop_token_ids=[0], **kw)


def _same(a, b, tol=1e-4) -> None:
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finished for g in a] == [g.finished for g in b]
    for x, y in zip(a, b, strict=True):
        assert x.logprobs == pytest.approx(y.logprobs, abs=tol)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_fast_loop_greedy_equals_the_generic_loop_over_two_turns():
    """Same tokens, stops and log-probs as the generic loop on a batch with duplicates, stops and a second turn
    that extends the first (so it is prefilled from the prefix cache)."""
    model = _llama()
    assert unsupported_reason(model) is None
    first = _engine(model, fast=False).generate(_prompts()[:1], SamplingConfig(max_new_tokens=4, temperature=0))
    stop = first[0].token_ids[2]  # a token greedy decoding reaches: some rows stop, others run to the budget
    fast, generic = (TransformersEngine(model, [stop], fast=f) for f in (True, False))
    a, b = fast.generate(_prompts(), GREEDY), generic.generate(_prompts(), GREEDY)
    _same(a, b)
    assert any(g.finished for g in a) and not all(g.finished for g in a)
    turn2 = [p + g.token_ids + [21, 22, 23] for p, g in zip(_prompts(), a, strict=True)]
    _same(fast.generate(turn2, GREEDY), generic.generate(turn2, GREEDY))
    assert fast.stats.reused_tokens > 0


def test_logprobs_equal_a_full_forward_also_after_prefix_reuse():
    model = _llama(1)
    engine = _engine(model)
    sampling = SamplingConfig(max_new_tokens=8, temperature=0.7, seed=3)
    turn1 = engine.generate(_prompts(), sampling)
    turn2 = [p + g.token_ids + [40, 41] for p, g in zip(_prompts(), turn1, strict=True)]
    gens = engine.generate(turn2, sampling)
    assert engine.stats.reused_tokens > 0
    for prompt, gen in zip(turn2, gens, strict=True):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].float() / 0.7, dim=-1)
        want = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(gen.token_ids)]
        assert gen.logprobs == pytest.approx(want, abs=1e-4)


def test_seeded_sampling_is_reproducible_and_tiny_top_p_is_greedy():
    engine = _engine(_llama(2))
    run = [engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, seed=s)) for s in (11, 11, 12)]
    assert [g.token_ids for g in run[0]] == [g.token_ids for g in run[1]]
    assert [g.token_ids for g in run[0]] != [g.token_ids for g in run[2]]
    greedy = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, temperature=0))
    nucleus = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, top_p=1e-6, seed=5))
    assert [g.token_ids for g in nucleus] == [g.token_ids for g in greedy]


def test_prefix_reuse_gives_the_result_of_no_reuse():
    model = _llama(3)
    cached, uncached = _engine(model), _engine(model, prefix_cache_gib=0)
    first = cached.generate(_prompts(), GREEDY)
    _same(first, uncached.generate(_prompts(), GREEDY))
    turn2 = [p + g.token_ids + [5, 6, 7, 8] for p, g in zip(_prompts(), first, strict=True)]
    _same(cached.generate(turn2, GREEDY), uncached.generate(turn2, GREEDY), tol=1e-5)
    assert cached.stats.reused_tokens > 0 and uncached.stats.reused_tokens == 0
    # a prompt that shares only part of a cached sequence reuses that part
    branch = turn2[0][:30] + [99] * 20
    before = cached.stats.reused_tokens
    _same(cached.generate([branch], GREEDY), uncached.generate([branch], GREEDY), tol=1e-5)
    assert cached.stats.reused_tokens - before == 30


def test_identical_prompts_are_prefilled_once():
    model = _llama(4)
    engine = _engine(model)
    prompt = _prompts()[0]
    gens = engine.generate([prompt] * 4, GREEDY)
    assert engine.stats.prefilled_tokens == len(prompt)
    assert engine.stats.shared_tokens == 3 * len(prompt)
    assert all(g.token_ids == gens[0].token_ids for g in gens)
    _same(gens[:1], _engine(model, fast=False).generate([prompt], GREEDY))


@pytest.mark.parametrize("fast", [True, False])
def test_identical_prompts_of_a_seeded_batch_sample_different_completions(fast):
    """A GRPO group is one prompt repeated: its members must not sample the same completion (shared prefill or not)."""
    engine = _engine(_llama(4), fast=fast)
    sampling = SamplingConfig(max_new_tokens=8, temperature=1.0, seed=5)
    first = [tuple(g.token_ids) for g in engine.generate([_prompts()[0]] * 8, sampling)]
    assert len(set(first)) >= 6, first
    assert first == [tuple(g.token_ids) for g in engine.generate([_prompts()[0]] * 8, sampling)]


def test_cached_kv_is_dropped_when_the_weights_change():
    """An optimizer step in place (no update_weights call) and update_weights itself both empty the cache: the next
    turn matches a fresh engine on the new weights, with no reused tokens."""
    model = _llama(5)
    engine = _engine(model)
    first = engine.generate(_prompts(), GREEDY)
    turn2 = [p + g.token_ids + [3, 4] for p, g in zip(_prompts(), first, strict=True)]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model(torch.tensor([_prompts()[0]])).logits.sum().backward()
    opt.step()
    reused = engine.stats.reused_tokens
    _same(engine.generate(turn2, GREEDY), _engine(model, fast=False).generate(turn2, GREEDY))
    assert engine.stats.reused_tokens == reused  # the cache held KV of the old weights: not used

    engine.generate(turn2, GREEDY)  # fills the cache again
    assert len(engine._cache) > 0
    engine.update_weights(model)
    assert len(engine._cache) == 0
    reused = engine.stats.reused_tokens
    engine.generate(turn2, GREEDY)
    assert engine.stats.reused_tokens == reused


def test_prefix_cache_is_bounded_and_evicts_the_least_recently_used():
    kv = lambda n: torch.zeros(2, 1, 1, n, 4)  # noqa: E731  (2 * n * 4 floats = 32 n bytes)
    cache = PrefixCache(max_bytes=32 * 100)
    a, b, c = tuple(range(40)), tuple(range(100, 140)), tuple(range(200, 240))
    cache.put(a, kv(40))
    cache.put(b, kv(40))
    assert cache.lookup([*a, 7])[1] == 40  # touches a: b is now the oldest
    cache.put(c, kv(40))
    assert cache.nbytes <= cache.max_bytes and len(cache) == 2
    assert cache.lookup([*b, 7]) == (None, 0)
    entry, n = cache.lookup(list(a[:20]) + [999] * 10)
    assert entry is not None and entry.tokens == a and n == 20
    assert cache.lookup(list(a))[1] == 39  # at least one token is always left to prefill
    cache.put(tuple(range(500, 700)), kv(200))  # larger than the bound: not kept
    assert len(cache) == 2


def test_prefix_cache_finds_an_entry_after_a_sibling_with_the_same_prefix_leaves():
    """Sequences of a group share their prompt's blocks: dropping one keeps the others reachable."""
    cache = PrefixCache(max_bytes=2**20)
    prompt = list(range(32))
    first, second = (tuple(prompt + [t] * 20) for t in (900, 901))
    cache.put(first, torch.zeros(2, 1, 1, len(first), 4))
    cache.put(second, torch.zeros(2, 1, 1, len(second), 4))
    cache.discard(second)
    entry, n = cache.lookup([*first, 5])
    assert entry is not None and entry.tokens == first and n == len(first)
    cache.discard(first)
    assert cache.lookup([*first, 5]) == (None, 0) and cache._index == {}


def test_unsupported_architectures_use_the_generic_loop_with_one_log_line(caplog):
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2))
    assert "gpt2" in unsupported_reason(gpt2)
    engine = _engine(gpt2)
    with caplog.at_level(logging.WARNING, logger="trainers.engine_transformers"):
        a = engine.generate(_prompts(), GREEDY)
        engine.generate(_prompts(), GREEDY)
    assert sum("generic" in r.getMessage() for r in caplog.records) <= 1
    _same(a, _engine(gpt2, fast=False).generate(_prompts(), GREEDY))
    assert isinstance(engine.stats, EngineStats) and engine.stats.reused_tokens == 0


def test_lora_wrapped_llama_runs_the_fast_loop():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_llama(6), peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # adapters that change the output
    assert unsupported_reason(model) is None
    for bf16 in (False, True):
        fast = _engine(model, autocast_bf16=bf16).generate(_prompts(), GREEDY)
        generic = _engine(model, autocast_bf16=bf16, fast=False).generate(_prompts(), GREEDY)
        if not bf16:
            _same(fast, generic)
        else:  # bf16 rounds differently in the two loops: the distributions agree to bf16 precision
            for x, y in zip(fast, generic, strict=True):
                n = next(
                    (i for i, (s, t) in enumerate(zip(x.token_ids, y.token_ids, strict=False)) if s != t),
                    len(x.token_ids),
                )
                assert x.logprobs[:n] == pytest.approx(y.logprobs[:n], abs=0.1)


@pytest.mark.slow
def test_smollm2_fast_loop_is_greedy_identical_to_the_generic_loop_in_fp32():
    """The real model in fp32 on two turns of fixed chats: identical greedy tokens. In bf16 the fast loop's
    log-probs of its own tokens stay close to an fp32 forward (the rounding both loops accept)."""
    from agentgym_turn.models import load_causal_lm
    from trainers.engines import stop_token_ids
    from trainers.rollout import encode, render

    model, tok = load_causal_lm("smollm2")
    questions = [
        "What is the capital of France?",
        "Name a fish.",
        "Who wrote Hamlet?",
        "What is the capital of France?",
    ]
    chats = [[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}] for q in questions]
    prompts = [encode(tok, render(tok, c, generation_prompt=True)) for c in chats]
    stops = stop_token_ids(tok)
    sampling = SamplingConfig(max_new_tokens=24, temperature=0)
    fast = TransformersEngine(model, stops, pad_token_id=tok.pad_token_id)
    generic = TransformersEngine(model, stops, pad_token_id=tok.pad_token_id, fast=False)
    first = fast.generate(prompts, sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in generic.generate(prompts, sampling)]
    reply = encode(tok, "\n<|im_start|>user\nAre you sure? Say it again.<|im_end|>\n<|im_start|>assistant\n")
    turn2 = [p + g.token_ids + reply for p, g in zip(prompts, first, strict=True)]
    second = fast.generate(turn2, sampling)
    assert [g.token_ids for g in second] == [g.token_ids for g in generic.generate(turn2, sampling)]
    assert fast.stats.reused_tokens > 0 and fast.stats.shared_tokens > 0

    bf16 = TransformersEngine(model, stops, pad_token_id=tok.pad_token_id, autocast_bf16=True)
    gens = bf16.generate(turn2, SamplingConfig(max_new_tokens=24, seed=0))
    errors = []
    for prompt, gen in zip(turn2, gens, strict=True):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt + gen.token_ids])).logits[0].float(), dim=-1)
        errors += [
            abs(lp - logp[len(prompt) - 1 + i, t].item())
            for i, (t, lp) in enumerate(zip(gen.token_ids, gen.logprobs, strict=True))
        ]
    assert sum(errors) / len(errors) < 0.05 and max(errors) < 0.5
