"""The transformers engine against a plain forward pass and HF generate; the HTTP client's response parsing; the
choice of `--engine auto` and the weight files of a vLLM push (the vLLM engine itself: test_vllm.py)."""

from __future__ import annotations

import pytest

from trainers.engine_api import Generation, SamplingConfig
from trainers.engine_transformers import TransformersEngine
from trainers.engines import parse_completion_choice, stop_token_ids

torch = pytest.importorskip("torch")


def _prompts():
    return [[5, 17, 42, 7, 9], [300, 12], [1, 2, 3, 4, 5, 6, 7, 8]]


def test_greedy_matches_hf_generate_with_left_padding(tiny_model):
    engine = TransformersEngine(tiny_model, stop_token_ids=[0], pad_token_id=0)
    gens = engine.generate(_prompts(), SamplingConfig(max_new_tokens=6, temperature=0))
    for prompt, gen in zip(_prompts(), gens, strict=True):
        ids = torch.tensor([prompt])
        ref = tiny_model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=0
        )
        assert gen.token_ids == ref[0, len(prompt) :].tolist()


def test_logprobs_equal_a_full_forward(tiny_model):
    engine = TransformersEngine(tiny_model, stop_token_ids=[0], pad_token_id=0)
    gens = engine.generate(_prompts(), SamplingConfig(max_new_tokens=5, temperature=0.7, seed=3))
    for prompt, gen in zip(_prompts(), gens, strict=True):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(tiny_model(ids).logits[0].float() / 0.7, dim=-1)
        want = [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(gen.token_ids)]
        assert gen.logprobs == pytest.approx(want, abs=1e-4)


def test_seeded_sampling_is_reproducible_and_top_p_restricts(tiny_model):
    engine = TransformersEngine(tiny_model, stop_token_ids=[0], pad_token_id=0)
    a = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, temperature=1.0, seed=11))
    b = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, temperature=1.0, seed=11))
    c = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, temperature=1.0, seed=12))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    greedy = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, temperature=0))
    tiny_p = engine.generate(_prompts(), SamplingConfig(max_new_tokens=8, temperature=1.0, top_p=1e-6, seed=5))
    assert [g.token_ids for g in tiny_p] == [g.token_ids for g in greedy]


def test_stops_per_row_at_a_stop_token(tiny_model):
    probe = TransformersEngine(tiny_model, stop_token_ids=[0], pad_token_id=0)
    first = probe.generate(_prompts()[:1], SamplingConfig(max_new_tokens=3, temperature=0))[0].token_ids
    engine = TransformersEngine(tiny_model, stop_token_ids=[first[1]], pad_token_id=0)
    gens = engine.generate(_prompts(), SamplingConfig(max_new_tokens=6, temperature=0))
    want = first[: first.index(first[1]) + 1]
    assert gens[0].token_ids == want and gens[0].finished
    assert len(gens[0].logprobs) == len(want)
    assert all(g.finished == (g.token_ids[-1] == first[1]) for g in gens)


def test_stop_ids_of_a_chatml_tokenizer(tokenizer):
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in stop_token_ids(tokenizer)


def test_parse_completion_choice():
    choice = {
        "index": 0,
        "finish_reason": "stop",
        "logprobs": {"tokens": ["token_id:12", "token_id:2"], "token_logprobs": [-0.5, -0.1]},
    }
    assert parse_completion_choice(choice, [2]) == Generation([12, 2], [-0.5, -0.1], finished=True)
    with pytest.raises(Exception, match="token_id"):
        parse_completion_choice({"logprobs": {"tokens": ["hi"], "token_logprobs": [0.0]}}, [2])


def test_auto_engine_is_vllm_where_installed_else_transformers_with_one_log_line(monkeypatch, caplog):
    """The selection logic of ``--engine auto`` (vLLM-less installs are simulated by hiding the module)."""
    import importlib.util
    import logging

    from trainers import engines

    real = importlib.util.find_spec
    installed = real("vllm") is not None
    assert engines.resolve_engine("auto") == ("vllm" if installed else "transformers")
    assert engines.resolve_engine("transformers") == "transformers"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trainers.engines"):
        assert engines.resolve_engine("auto") == "transformers"
    [record] = caplog.records
    assert "vllm is not installed" in record.getMessage() and "agentgym-turn[vllm]" in record.getMessage()


def test_save_hf_weights_writes_tied_head_and_replaces_atomically(tiny_model, tmp_path):
    from safetensors.torch import load_file

    from trainers.engines import save_hf_weights

    save_hf_weights(tiny_model, str(tmp_path))
    save_hf_weights(tiny_model, str(tmp_path))  # a second push replaces the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    state = load_file(str(tmp_path / "model.safetensors"))
    assert torch.equal(state["lm_head.weight"], tiny_model.lm_head.weight)
    assert torch.equal(state["model.embed_tokens.weight"], tiny_model.model.embed_tokens.weight)


def test_openai_engine_seeds_each_prompt_of_a_sampled_batch(tmp_path):
    """A real local HTTP server that samples like vLLM's /v1/completions: one seed per request, shared by every
    prompt of that request. Seeded sampling must send each prompt with its own seed (a group's identical prompts
    then differ), in order; greedy and unseeded batches stay one request."""
    import json
    import random
    from http.server import BaseHTTPRequestHandler

    from tests.http_server import send_json, serving
    from trainers.engines import OpenAIEngine

    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            choices = []
            for i, prompt in enumerate(body["prompt"]):
                rng = random.Random(f"{prompt}-{body.get('seed')}")  # the same seed for every prompt of a request
                ids = [rng.randrange(1, 1000) for _ in range(body["max_tokens"])]
                choices.append({"index": i, "logprobs": {"tokens": [f"token_id:{t}" for t in ids],
                                                         "token_logprobs": [-1.0] * len(ids)}})  # fmt: skip
            send_json(self, {"choices": choices})

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        engine = OpenAIEngine(f"{url}/v1", "m", stop_token_ids=[0])
        group = [[5, 9, 2], [5, 9, 2], [5, 9, 2], [7, 7]]
        sampled = engine.generate(group, SamplingConfig(max_new_tokens=6, temperature=1.0, seed=40))
        assert len({tuple(g.token_ids) for g in sampled[:3]}) == 3  # identical prompts, different samples
        assert sorted(b["seed"] for b in bodies) == [40, 41, 42, 43] and all(len(b["prompt"]) == 1 for b in bodies)
        by_seed = {b["seed"]: b["prompt"][0] for b in bodies}
        assert [by_seed[40 + i] for i in range(4)] == group  # prompt i went with seed + i, answers in prompt order
        assert sampled == engine.generate(group, SamplingConfig(max_new_tokens=6, temperature=1.0, seed=40))
        bodies.clear()
        engine.generate(group, SamplingConfig(max_new_tokens=6, temperature=0, seed=40))
        assert len(bodies) == 1 and len(bodies[0]["prompt"]) == 4  # greedy: one batched request
