"""LoRA (``--lora-rank``, ``--lora-alpha``, ``--lora-targets``): the merged folder is ``W + (alpha / r) B A``, it
generates what the trainer's adapter model generates, the reference is the base with the adapter disabled (no
second copy), checkpoints hold the adapter and a resume from it equals an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym_turn.error import DataNotFound, InvalidArgument
from tests.trainers import toy_env
from tests.trainers.conftest import tiny_llama
from trainers import modeling as M

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
ENV = "tests.trainers.toy_env:" + toy_env.ENV_ID
RANK, ALPHA = 4, 8.0


def _adapted(vocab: int, targets: tuple[str, ...] = (M.LORA_ALL_LINEAR,)):
    """A tiny Llama wrapped with LoRA whose B matrices are non-zero (so the adapter changes the output)."""
    model = M.add_lora(tiny_llama(vocab), RANK, ALPHA, targets=targets)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


def test_merged_weights_are_base_plus_scaled_b_a(tmp_path, tokenizer):
    from safetensors.torch import load_file

    model = _adapted(len(tokenizer))
    M.save_policy(model, tokenizer, str(tmp_path / "merged"))
    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    base = model.get_base_model()
    checked = 0
    for name, module in base.named_modules():
        if hasattr(module, "lora_A"):
            a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
            expected = module.base_layer.weight + (ALPHA / RANK) * (b @ a)
            torch.testing.assert_close(merged[f"{name}.weight"], expected.detach(), rtol=1e-6, atol=1e-6)
            checked += 1
    assert checked == 2 * 7  # every linear of both layers (q, k, v, o, gate, up, down); the LM head is not adapted
    assert not any("lora" in k for k in merged)


def test_greedy_of_the_adapter_model_equals_greedy_of_the_merged_folder(tmp_path, tokenizer):
    from agentgym_turn.models import load_causal_lm
    from trainers.engine_api import SamplingConfig
    from trainers.engine_transformers import TransformersEngine

    model = _adapted(len(tokenizer))
    M.save_policy(model, tokenizer, str(tmp_path / "merged"))
    merged, _ = load_causal_lm(str(tmp_path / "merged"))
    prompts = [[1 + (13 * i + 7 * j) % 500 for j in range(4 + i)] for i in range(4)]
    greedy = SamplingConfig(max_new_tokens=12, temperature=0)
    ours = TransformersEngine(model, [0]).generate(prompts, greedy)
    theirs = TransformersEngine(merged.eval(), [0]).generate(prompts, greedy)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    base = TransformersEngine(tiny_llama(len(tokenizer)).eval(), [0]).generate(prompts, greedy)
    assert [g.token_ids for g in ours] != [g.token_ids for g in base]  # the adapter matters


def test_reference_is_the_base_with_the_adapter_disabled(tokenizer):
    model = _adapted(len(tokenizer))
    plain = tiny_llama(len(tokenizer)).eval()
    ids = torch.tensor([[5, 9, 2, 44, 7]])
    ref, ctx = M.reference_context(model, None)
    assert ref is model  # no second copy of the weights
    with torch.no_grad(), ctx:
        torch.testing.assert_close(ref(ids).logits, plain(ids).logits)
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, plain(ids).logits)  # adapter back on


def test_lora_targets_pick_the_adapted_layers_and_unknown_names_fail(tokenizer):
    model = M.add_lora(tiny_llama(len(tokenizer)), RANK, ALPHA, targets=("q_proj", "v_proj"))
    adapted = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if hasattr(m, "lora_A")}
    assert adapted == {"q_proj", "v_proj"}
    with pytest.raises(InvalidArgument, match=r"\['qproj'\] name no linear layer.*'q_proj'"):
        M.add_lora(tiny_llama(len(tokenizer)), RANK, ALPHA, targets=("qproj",))
    with pytest.raises(InvalidArgument, match="alone or module names"):
        M.add_lora(tiny_llama(len(tokenizer)), RANK, ALPHA, targets=("all-linear", "q_proj"))


def _cfg(tmp_path: Path, model_dir: str, **kw):
    from trainers.rl import RLConfig

    base = dict(env=[ENV], model=model_dir, strategy="grpo_mr", steps=2, tasks_per_step=2, group_size=2,
                max_new_tokens=8, max_context=256, max_turns=2, lr=1e-2, bf16=False, dtype="bfloat16", threads=1,
                out_dir=str(tmp_path / "run"), seed=0, sft_episodes=0, engine="transformers", kl_coef=0.01,
                lora_rank=RANK, lora_alpha=ALPHA, device="cpu")  # fmt: skip
    return RLConfig(**{**base, **kw})


def test_checkpoints_hold_the_adapter_and_a_resume_from_it_equals_an_uninterrupted_run(tmp_path, tiny_model_dir):
    from trainers.checkpoint import policy_folder
    from trainers.rl import train

    full = train(_cfg(tmp_path / "a", tiny_model_dir, steps=3))
    train(_cfg(tmp_path / "b", tiny_model_dir, steps=2))
    ckpt = tmp_path / "b" / "run" / "checkpoint-000002"
    assert (ckpt / "adapter" / "adapter_config.json").is_file() and not (ckpt / "policy").exists()
    config = json.loads((ckpt / "adapter" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (RANK, ALPHA)
    with pytest.raises(DataNotFound, match="--save-merged"):
        policy_folder(str(tmp_path / "b" / "run"))
    resumed = train(_cfg(tmp_path / "b", tiny_model_dir, steps=3, resume=True))
    assert resumed["rollout/return"] == pytest.approx(full["rollout/return"])
    assert resumed["losses/policy"] == pytest.approx(full["losses/policy"], rel=1e-4, abs=1e-6)
    from safetensors.torch import load_file

    a = load_file(str(tmp_path / "a" / "run" / "checkpoint-000003" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(tmp_path / "b" / "run" / "checkpoint-000003" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert any(v.abs().sum() > 0 for k, v in a.items() if "lora_B" in k)  # the adapter trained


def test_save_merged_writes_a_plain_folder_beside_the_adapter(tmp_path, tiny_model_dir):
    from agentgym_turn.models import load_causal_lm
    from trainers.checkpoint import policy_folder
    from trainers.rl import train

    train(_cfg(tmp_path, tiny_model_dir, steps=1, save_merged=True))
    folder = policy_folder(str(tmp_path / "run"))
    assert folder.endswith("checkpoint-000001/policy")
    model, _ = load_causal_lm(folder)
    assert not any("lora" in n for n, _ in model.named_parameters())


@pytest.mark.slow
def test_vllm_with_the_pushed_adapter_samples_what_the_merged_folder_does(tmp_path, tokenizer, vllm_engine):
    """vLLM serves the base weights; a push is the adapter (a LoRARequest): greedy equals the merged folder's; a push
    of full weights afterwards drops the adapter (the shared engine: ``conftest.vllm_engine``)."""
    from agentgym_turn.models import load_causal_lm
    from trainers.engine_api import SamplingConfig
    from trainers.engine_transformers import TransformersEngine

    engine, vocab, stops = vllm_engine, len(tokenizer), vllm_engine.stop_token_ids
    assert engine.lora_rank >= RANK
    model = M.add_lora(tiny_llama(vocab, vllm_heads=True), RANK, ALPHA)  # vLLM's CPU attention: heads of 64
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    M.save_policy(model, tokenizer, str(tmp_path / "merged"))
    merged, _ = load_causal_lm(str(tmp_path / "merged"))
    prompts = [[1 + (13 * i + 7 * j) % 500 for j in range(4 + i)] for i in range(4)]
    greedy = SamplingConfig(max_new_tokens=8, temperature=0)
    base_model = tiny_llama(vocab, vllm_heads=True).eval()
    engine.update_weights(base_model)  # the base, whatever the shared engine served before
    base = [g.token_ids for g in engine.generate(prompts, greedy)]
    engine.update_weights(model)
    pushed = [g.token_ids for g in engine.generate(prompts, greedy)]
    assert engine.last_push_seconds is not None
    assert pushed == [g.token_ids for g in TransformersEngine(merged.eval(), stops).generate(prompts, greedy)]
    assert pushed != base
    with torch.no_grad():  # a second push replaces the first adapter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.zero_()
    engine.update_weights(model)
    assert [g.token_ids for g in engine.generate(prompts, greedy)] == base
    assert len(list(Path(engine.sync_dir).glob("adapter-*"))) == 1
    with torch.no_grad():  # the adapter on again, then full weights: they replace the base and drop the adapter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    engine.update_weights(model)
    assert [g.token_ids for g in engine.generate(prompts, greedy)] != base
    engine.update_weights(base_model)
    assert [g.token_ids for g in engine.generate(prompts, greedy)] == base
    assert not list(Path(engine.sync_dir).glob("adapter-*"))


@pytest.mark.slow
@pytest.mark.parametrize("own_engine", [False, True], ids=["shared-engine", "own-engine"])
def test_rl_on_vllm_pushes_the_adapter_every_step(tmp_path, tokenizer, vllm_engine, own_engine):
    """The RL loop on the shared engine (``train(engine=...)``: it pushes the base, then the adapter every step), and
    once on the engine ``train`` builds itself as the CLI does (vLLM started on the base folder, the adapter pushed)."""
    from trainers.rl import train

    model_dir = tmp_path / "model"
    tiny_llama(len(tokenizer), seed=3, vllm_heads=True).save_pretrained(model_dir)  # not the engine's start-up base
    tokenizer.save_pretrained(model_dir)
    cfg = _cfg(tmp_path, str(model_dir), engine="vllm", engine_kv_cache_gib=1)
    train(cfg) if own_engine else train(cfg, engine=vllm_engine)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["perf/weight_push_seconds"] > 0 and r["rollout/policy_tokens"] > 0 for r in rows)
    assert (tmp_path / "run" / "checkpoint-000002" / "adapter" / "adapter_model.safetensors").is_file()
    # vLLM sampled from the pushed base + adapter: its log-probs are the policy's own up to bf16 (measured 4e-3;
    # another base, e.g. the weights the shared engine started with, is off by tenths)
    assert all(r["rollout/logprob_diff_max"] < 0.05 for r in rows), rows
