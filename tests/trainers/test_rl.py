"""The RL loop on a tiny random Llama: weights move, losses are finite, a killed run resumes, configs validate."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainers import toy_env
from tests.trainers.conftest import tiny_llama
from trainers.config import parse_config
from trainers.rl import RLConfig, train

torch = pytest.importorskip("torch")
ENV = "tests.trainers.toy_env:" + toy_env.ENV_ID
REPO = Path(__file__).resolve().parents[2]


def _cfg(tmp_path, model_dir, **kw) -> RLConfig:
    base = dict(
        env=[ENV],
        model=model_dir,
        steps=2,
        tasks_per_step=2,
        group_size=2,
        max_new_tokens=8,
        max_context=256,
        max_turns=2,
        lr=1e-2,
        critic_lr=1e-2,
        pack_tokens=512,
        bf16=False,
        threads=1,
        out_dir=str(tmp_path / "run"),
        seed=0,
        sft_episodes=0,
        engine="transformers",  # a tiny model with 8-wide heads, which vLLM's CPU attention does not take
    )
    base.update(kw)
    return RLConfig(**base)


def _weights(path: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


@pytest.mark.parametrize(
    ("strategy", "extra"),
    [
        ("mt_ppo", {"kl_coef": 0.01}),
        ("mt_grpo", {"kl_coef": 0.0, "tree": True}),
        ("grpo_mr", {"lora_rank": 2, "kl_coef": 0.01}),
    ],
)
def test_tiny_training_run_moves_weights_and_losses_are_finite(tmp_path, tiny_model_dir, strategy, extra):
    cfg = _cfg(tmp_path, tiny_model_dir, strategy=strategy, **extra)
    last = train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    losses = {k: v for r in rows for k, v in r.items() if k.startswith("losses/")}
    assert {"losses/policy", "losses/entropy", "losses/grad_norm"} <= set(losses)
    assert ("losses/value" in losses) == (strategy == "mt_ppo")
    assert ("losses/kl" in losses) == (extra["kl_coef"] > 0)
    assert all(math.isfinite(v) for r in rows for v in r.values())
    assert "reward/tool" in last and "reward/exact_match" in last and last["rollout/policy_tokens"] > 0
    assert (tmp_path / "run" / "rewards.png").stat().st_size > 1000
    before, after = _weights(tiny_model_dir), _weights(str(tmp_path / "run" / "checkpoint-000002" / "policy"))
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved, "no weight changed"


def test_resume_equals_an_uninterrupted_run(tmp_path, tiny_model_dir):
    full = train(_cfg(tmp_path / "a", tiny_model_dir, steps=3))
    train(_cfg(tmp_path / "b", tiny_model_dir, steps=2))
    run = tmp_path / "b" / "run"
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rollout/ret')  # the step in flight, cut by the kill
    (run / ".checkpoint-000003.tmp").mkdir()
    resumed = train(_cfg(tmp_path / "b", tiny_model_dir, steps=3, resume=True))
    assert resumed["rollout/return"] == pytest.approx(full["rollout/return"])
    assert resumed["losses/policy"] == pytest.approx(full["losses/policy"], rel=1e-4, abs=1e-6)
    a = _weights(str(tmp_path / "a" / "run" / "checkpoint-000003" / "policy"))
    b = _weights(str(run / "checkpoint-000003" / "policy"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    with pytest.raises(ValueError, match="--resume"):
        train(_cfg(tmp_path / "b", tiny_model_dir, steps=4))


def test_cli_sigkill_then_resume(tmp_path, tiny_model_dir):
    out = tmp_path / "cli"
    args = [sys.executable, "-m", "trainers.mtppo", "--env", ENV, "--model", tiny_model_dir, "--steps", "30",
            "--tasks-per-step", "1", "--group-size", "2", "--max-new-tokens", "4", "--max-context", "256",
            "--no-bf16", "--threads", "1", "--sft-episodes", "0", "--out-dir", str(out),
            "--engine", "transformers"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while not (out / "latest").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (out / "latest").exists(), proc.stdout.read().decode()[-2000:]
    done = int((out / "latest").read_text().split("-")[1])
    args[args.index("30")] = str(done + 1)
    res = subprocess.run([*args, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"steps {done}->{done + 1}" in res.stdout and "[rl] done" in res.stdout
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, done + 2))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env", "TurnRL/WikiTwoTurm-v0"], "Did you mean 'TurnRL/WikiTwoTurn-v0'"),
        (["--strategy", "mt_gpro"], "Did you mean 'mt_grpo'"),
        (["--strategy", "grpo_or", "--group-size", "1"], "--group-size=1"),
        (["--lr", "0"], "--lr=0.0 must be > 0"),
        (["--env-weights", "1", "2"], "one weight per --env"),
        (["--max-context", "64", "--max-new-tokens", "96"], "--max-context=64"),
        (["--engine", "openai"], "cannot receive"),
        (["--engine-kv-cache-gib", "0"], "--engine-kv-cache-gib=0"),
    ],
)
def test_config_errors_name_the_value_and_the_fix(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_config(RLConfig, argv, prog="t", description="")
    assert message in capsys.readouterr().err


def test_credit_flag_picks_the_family_strategy():
    cfg = parse_config(RLConfig, ["--algo", "grpo", "--credit", "mr"], prog="t", description="")
    assert cfg.strategy == "grpo_mr"
    assert parse_config(RLConfig, ["--credit", "or"], prog="t", description="").strategy == "ppo_or"


@pytest.mark.slow
def test_training_run_on_the_vllm_engine_pushes_weights_every_step(tmp_path, tokenizer):
    """The default engine end to end in the RL loop: vLLM samples, the update runs, the weights reach vLLM."""
    pytest.importorskip("vllm")
    model = tiny_llama(len(tokenizer), vllm_heads=True)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    cfg = _cfg(tmp_path, str(model_dir), strategy="mt_ppo", kl_coef=0.01, engine="vllm", engine_kv_cache_gib=1)
    train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["perf/weight_push_seconds"] > 0 and r["rollout/policy_tokens"] > 0 for r in rows)
    assert all(math.isfinite(v) for r in rows for v in r.values())
    before, after = _weights(str(model_dir)), _weights(str(tmp_path / "run" / "checkpoint-000002" / "policy"))
    assert any(not torch.equal(before[k], after[k]) for k in before), "no weight changed"
