"""The RL loop on a tiny random Llama: weights move, losses are finite, a killed run resumes, configs validate."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from agentgym_turn.error import DataNotFound, InvalidArgument
from tests.trainers import toy_env
from tests.trainers.conftest import tiny_llama
from trainers.checkpoint import ENGINE_WEIGHTS, drop_training_state, policy_folder
from trainers.config import from_flat, parse_config
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
        dtype="float32",  # exact fp32 where a test compares numbers; the bf16 default has its own cases
        threads=1,
        out_dir=str(tmp_path / "run"),
        seed=0,
        sft_episodes=0,
        engine="transformers",  # a tiny model with 8-wide heads, which vLLM's CPU attention does not take
    )
    base.update(kw)
    return from_flat(RLConfig, base)  # flat names, as the CLI's: loss_mask=False sets credit_cfg.use_loss_mask


def _weights(path: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


@pytest.mark.parametrize(
    ("strategy", "extra"),
    [
        ("mt_ppo", {"kl_coef": 0.01}),
        ("mt_grpo", {"kl_coef": 0.0, "tree": True}),
        ("grpo_mr", {"lora_rank": 2, "kl_coef": 0.01, "save_merged": True}),  # policy/: the adapter merged
        ("mt_ppo", {"kl_coef": 0.01, "dtype": "bfloat16"}),  # bf16 weights, fp32 masters (issue 11 item 4)
        ("mt_grpo", {"kl_coef": 0.01, "tree": True, "dtype": "bfloat16", "share_prefix": False}),
        ("grpo_mr", {"lora_rank": 2, "kl_coef": 0.01, "dtype": "bfloat16", "save_merged": True}),
        ("turn_ppo", {"kl_coef": 0.01}),  # Turn-PPO, with its turn-level ratio by default (issue 15)
    ],
)
def test_tiny_training_run_moves_weights_and_losses_are_finite(tmp_path, tiny_model_dir, strategy, extra):
    cfg = _cfg(tmp_path, tiny_model_dir, strategy=strategy, **extra)
    last = train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    losses = {k: v for r in rows for k, v in r.items() if k.startswith("losses/")}
    assert {"losses/policy", "losses/entropy", "losses/grad_norm"} <= set(losses)
    assert ("losses/value" in losses) == (strategy in ("mt_ppo", "turn_ppo"))
    assert ("losses/kl" in losses) == (extra["kl_coef"] > 0)
    assert all(math.isfinite(v) for r in rows for v in r.values())
    for r in rows:  # the credit signal's instruments, every step, every strategy (trainers.instruments)
        assert 0.0 <= r["credit/turn1_reward_varies"] <= 1.0 and r["credit/turn1_groups"] >= 1
        assert 0.0 < r["credit/turn1_distinct_actions"] <= 1.0
        assert 0.0 <= r["credit/adv_differs_from_grpo_or"] <= 1.0
    assert "reward/tool" in last and "reward/exact_match" in last and last["rollout/policy_tokens"] > 0
    assert (tmp_path / "run" / "rewards.png").stat().st_size > 1000
    before, after = _weights(tiny_model_dir), _weights(str(tmp_path / "run" / "checkpoint-000002" / "policy"))
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved, "no weight changed"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_resume_equals_an_uninterrupted_run(tmp_path, tiny_model_dir, dtype):
    # a warm-up longer than the first attempt: the resumed step continues the ramp (its rate comes from the step)
    full = train(_cfg(tmp_path / "a", tiny_model_dir, steps=3, dtype=dtype, lr_warmup_steps=3))
    train(_cfg(tmp_path / "b", tiny_model_dir, steps=2, dtype=dtype, lr_warmup_steps=3))
    run = tmp_path / "b" / "run"
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "rollout/ret')  # the step in flight, cut by the kill
    (run / ".checkpoint-000003.tmp").mkdir()
    resumed = train(_cfg(tmp_path / "b", tiny_model_dir, steps=3, resume=True, dtype=dtype, lr_warmup_steps=3))
    assert resumed["rollout/return"] == pytest.approx(full["rollout/return"])
    assert resumed["losses/policy"] == pytest.approx(full["losses/policy"], rel=1e-4, abs=1e-6)
    a = _weights(str(tmp_path / "a" / "run" / "checkpoint-000003" / "policy"))
    b = _weights(str(run / "checkpoint-000003" / "policy"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["losses/lr"] for r in rows] == pytest.approx([1e-2 / 3, 2e-2 / 3, 1e-2])
    with pytest.raises(ValueError, match="--resume"):
        train(_cfg(tmp_path / "b", tiny_model_dir, steps=4, dtype=dtype))
    (run / ENGINE_WEIGHTS).mkdir()
    (run / ENGINE_WEIGHTS / "model.safetensors").write_bytes(b"0" * 100)
    assert drop_training_state(run) > 100 and not (run / ENGINE_WEIGHTS).exists()
    assert policy_folder(str(run)) == str(run / "checkpoint-000003" / "policy")  # the final policy stays
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "latest").write_text("checkpoint-000009")
    with pytest.raises(DataNotFound, match="checkpoint-000009, which is not there"):
        policy_folder(str(tmp_path / "gone"))
    with pytest.raises(DataNotFound, match="no state\\.pt"):
        train(_cfg(tmp_path / "b", tiny_model_dir, steps=4, resume=True, dtype=dtype))
    with pytest.raises(ValueError, match="--resume"):  # still a run: a fresh start there is refused too
        train(_cfg(tmp_path / "b", tiny_model_dir, steps=4, dtype=dtype))


@pytest.mark.slow
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
        (["--env", "TurnRL/WikiTwoTurm-v1"], "Did you mean 'TurnRL/WikiTwoTurn-v1'"),
        (["--strategy", "mt_gpro"], "Did you mean 'mt_grpo'"),
        (["--strategy", "grpo_or", "--group-size", "1"], "--group-size=1"),
        (["--lr", "0"], "--lr=0.0 must be > 0"),
        (["--lr-warmup-steps", "-1"], "--lr-warmup-steps=-1 must be >= 0"),
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


def test_ratio_level_auto_is_turn_for_turn_ppo_only():
    def level(*argv: str) -> str:
        return parse_config(RLConfig, list(argv), prog="t", description="").ratio_level

    assert level("--strategy", "turn_ppo") == "turn" and level("--strategy", "mt_ppo") == "token"
    assert level("--strategy", "turn_ppo", "--ratio-level", "token") == "token"  # a flag given wins
    assert level("--strategy", "grpo_mr", "--ratio-level", "sequence") == "sequence"


@pytest.mark.slow
@pytest.mark.parametrize("own_engine", [False, True], ids=["shared-engine", "own-engine"])
def test_training_run_on_the_vllm_engine_pushes_weights_every_step(tmp_path, tokenizer, vllm_engine, own_engine):
    """The default engine end to end in the RL loop: vLLM samples, the update runs, the weights reach vLLM: on the
    session's shared engine (``conftest.vllm_engine``: ``train`` pushes the starting policy into it first), and once
    on the engine ``train`` builds itself as the CLI does (the policy saved for vLLM's start, closed at the end)."""
    model = tiny_llama(len(tokenizer), seed=3, vllm_heads=True)  # not the weights the shared engine started with
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    cfg = _cfg(tmp_path, str(model_dir), strategy="mt_ppo", kl_coef=0.01, engine="vllm", engine_kv_cache_gib=1)
    train(cfg) if own_engine else train(cfg, engine=vllm_engine)
    assert (tmp_path / "run" / ENGINE_WEIGHTS / "config.json").is_file() is own_engine  # the CLI's vLLM start
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["perf/weight_push_seconds"] > 0 and r["rollout/policy_tokens"] > 0 for r in rows)
    assert all(math.isfinite(v) for r in rows for v in r.values())
    # vLLM sampled from the pushed policy: its log-probs are the policy's own (fp32: measured 2e-6)
    assert all(r["rollout/logprob_diff_max"] < 1e-3 for r in rows), rows
    before, after = _weights(str(model_dir)), _weights(str(tmp_path / "run" / "checkpoint-000002" / "policy"))
    assert any(not torch.equal(before[k], after[k]) for k in before), "no weight changed"


def _random_episodes(n: int, vocab: int, seed: int = 0) -> list:
    """Two-turn episodes of random tokens (prompt, policy turn, env tokens, policy turn), half of them truncated."""
    from trainers.episode import Episode

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        parts = [int(rng.integers(3, 9)) for _ in range(4)]  # prompt, turn 0, env, turn 1
        mask = np.concatenate([np.zeros(parts[0]), np.ones(parts[1]), np.zeros(parts[2]), np.ones(parts[3])])
        turns = np.concatenate([-np.ones(parts[0]), np.zeros(parts[1]), -np.ones(parts[2]), np.ones(parts[3])])
        out.append(Episode(env_id="toy", group=i // 2, token_ids=rng.integers(0, vocab, sum(parts)),
                           loss_mask=mask, turn_index=turns, logprobs=-rng.random(sum(parts)) * mask,
                           turn_rewards=[{"t": float(rng.random())}, {"o": float(rng.integers(0, 2))}],
                           reward_levels={"t": "turn", "o": "outcome"}, terminated=i % 2 == 0,
                           truncated=i % 2 == 1))  # fmt: skip
    return out


@pytest.mark.parametrize(
    ("aggregation", "ratio_level"),
    [
        ("token_mean", "token"),
        ("seq_mean_token_mean", "token"),
        ("token_mean", "turn"),
        ("seq_mean_token_mean", "sequence"),
    ],
)
def test_minibatch_loss_and_grads_do_not_depend_on_packing(tmp_path, tiny_model_dir, aggregation, ratio_level):
    """Issue 12 item 8: one mean over the minibatch (policy, KL, entropy and value losses), whatever --pack-tokens;
    turn- and sequence-level ratios stay within their episode whoever shares its row."""
    from trainers import modeling as M
    from trainers.credit import get_strategy
    from trainers.rl import critic_minibatch, policy_minibatch, ratio_segments

    cfg = _cfg(tmp_path, tiny_model_dir, aggregation=aggregation, kl_coef=0.1, entropy_coef=0.01, loss_mask=False)
    model = tiny_llama(97)
    critic, reference = M.ValueModel.from_policy(model), M.frozen_copy(tiny_llama(97, seed=1))
    eps = _random_episodes(6, 97)
    with torch.no_grad():
        for p in critic.head.parameters():
            p.normal_()
    rng = np.random.default_rng(1)
    values = [rng.normal(size=len(e.token_ids) + 1) for e in eps]
    credit = get_strategy("mt_ppo")(eps, values, cfg.credit_cfg)
    rng_old = np.random.default_rng(2)
    old = {i: e.logprobs - rng_old.uniform(0.0, 0.4, size=len(e.logprobs)) for i, e in enumerate(eps)}
    segments = None if ratio_level == "token" else [ratio_segments(e, ratio_level) for e in eps]
    ref = {}
    for pack in M.pack_episodes(eps, range(6), 1000):
        with torch.no_grad():
            ref.update(pack.split(M.pack_logprobs(reference, pack).logprobs))
    results = []
    for pack_tokens in (10, 60, 1000):  # one episode per row, a few per row, all in one row
        packs = M.pack_episodes(eps, range(6), pack_tokens)
        model.zero_grad(), critic.zero_grad()
        logs, _ = policy_minibatch(model, packs, old, credit, ref, cfg, segments=segments)
        vloss = critic_minibatch(critic, packs, values, credit, value_clip=cfg.value_clip, autocast=cfg.autocast)
        grads = [p.grad.clone() for p in [*model.parameters(), *critic.parameters()] if p.grad is not None]
        results.append((len(packs), logs, vloss, grads))
    assert [r[0] for r in results] == [6, results[1][0], 1] and 1 < results[1][0] < 6
    for _, logs, vloss, grads in results[1:]:
        for key in ("losses/policy", "losses/kl", "losses/entropy", "losses/clip_fraction"):
            assert logs[key] == pytest.approx(results[0][1][key], rel=1e-4, abs=1e-6), key
        assert vloss == pytest.approx(results[0][2], rel=1e-4)
        for a, b in zip(grads, results[0][3], strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-3)


def test_old_logprobs_are_the_policys_own_and_the_first_ratio_is_one(tmp_path, tiny_model_dir):
    """Issue 12 item 8: with the loss mask off, env tokens enter the ratio; their old log-prob must be the policy's
    (not the sampler's 0.0). Several minibatches and epochs; the sampler-vs-policy gap is logged."""
    cfg = _cfg(tmp_path, tiny_model_dir, strategy="grpo_mr", loss_mask=False, minibatches=2, ppo_epochs=2,
               kl_coef=0.0, lr=1e-4)  # fmt: skip
    train(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        assert r["losses/first_ratio_max_dev"] == 0.0
        assert r["losses/approx_kl"] < 1e-2  # env tokens with old log-prob 0 gave ratios of e^(log p) here
        # fp32 sampler and trainer on the same weights: the same log-probs up to float noise
        assert 0.0 <= r["rollout/logprob_diff_mean"] <= r["rollout/logprob_diff_max"] < 1e-3


def test_prepass_logprobs_equal_the_update_forward(tiny_model_dir, tmp_path):
    """The no-grad pass that scores later minibatches gives the very numbers the update's forward gives (ratio 1
    exactly before any step), in fp32 and under bf16 autocast."""
    from trainers import modeling as M
    from trainers.credit import get_strategy, loss_mask
    from trainers.rl import policy_minibatch

    eps = _random_episodes(4, 97)
    model = tiny_llama(97)
    for bf16 in (False, True):
        cfg = _cfg(tmp_path, tiny_model_dir, strategy="grpo_mr", loss_mask=False, kl_coef=0.0, bf16=bf16)
        credit = get_strategy("grpo_mr")(eps, None, cfg.credit_cfg)
        packs = M.pack_episodes(eps, range(4), 30)
        old = {}
        with torch.no_grad(), M.autocast(bf16):
            for pack in packs:
                positions = pack.gather([loss_mask(e, cfg.credit_cfg) for e in eps])
                old.update(pack.split(M.pack_logprobs(model, pack, positions=positions).logprobs))
        logs, computed = policy_minibatch(model, packs, old, credit, {}, cfg)
        assert logs["losses/ratio_max_dev"] == 0.0
        assert all(np.array_equal(old[i], computed[i]) for i in old)


def test_truncated_episodes_do_not_bootstrap_by_default(tmp_path, tiny_model_dir):
    """Issue 12 item 8: the value after a truncated episode's last token is a head output never trained as a
    target; by default it is not used (as verl), --bootstrap-truncated opts in."""
    from trainers.credit import get_strategy

    eps = _random_episodes(2, 97)
    assert eps[1].truncated and not eps[0].truncated
    values = [np.full(len(e.token_ids) + 1, 0.5) for e in eps]
    values[1][-1] = 7.0
    last = np.flatnonzero(eps[1].loss_mask)[-1]
    default = _cfg(tmp_path, tiny_model_dir)
    out = get_strategy("mt_ppo")(eps, values, default.credit_cfg)
    assert out.returns[1][last] == pytest.approx(out.token_rewards[1][last])  # gamma = lambda = 1: R, no V
    opted = _cfg(tmp_path, tiny_model_dir, bootstrap_truncated=True)
    out = get_strategy("mt_ppo")(eps, values, opted.credit_cfg)
    assert out.returns[1][last] == pytest.approx(out.token_rewards[1][last] + 7.0)


def test_zero_advantage_groups_are_those_scored_alike():
    from trainers.credit import CreditConfig, get_strategy
    from trainers.episode import Episode
    from trainers.rl import zero_advantage_groups

    def ep(group: int, em: float) -> Episode:
        return Episode(env_id="toy", group=group, token_ids=np.arange(4), loss_mask=np.array([0, 1, 1, 1], np.int8),
                       turn_index=np.array([-1, 0, 0, 0], np.int32), logprobs=np.zeros(4),
                       turn_rewards=[{"exact_match": em}], reward_levels={"exact_match": "outcome"},
                       terminated=True, truncated=False)  # fmt: skip

    batch = [ep(0, 1.0), ep(0, 1.0), ep(1, 0.0), ep(1, 1.0), ep(2, 0.0), ep(2, 0.0)]
    assert zero_advantage_groups(batch, get_strategy("grpo_or"), CreditConfig()) == {0, 2}


def test_dynamic_sampling_refills_the_batch_with_informative_groups(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, strategy="grpo_mr", kl_coef=0.0, dynamic_sampling=True, sampling_rounds=3,
               steps=1, group_size=3, temperature=1.5)  # fmt: skip
    train(cfg)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rounds, dropped = row["rollout/sampling_rounds"], row["rollout/groups_dropped"]
    trained = row["rollout/groups_trained"]
    assert 1 <= rounds <= 3 and trained <= cfg.tasks_per_step
    assert dropped + trained <= rounds * cfg.tasks_per_step  # every sampled group is either dropped or a candidate
    assert trained == cfg.tasks_per_step or rounds == 3  # it stops early only with a full batch
    # the instruments count every sampled group, the dropped ones included
    assert row["credit/turn1_groups"] == rounds * cfg.tasks_per_step
    with pytest.raises(InvalidArgument, match="--dynamic-sampling"):
        _cfg(tmp_path, tiny_model_dir, strategy="mt_ppo", dynamic_sampling=True)


def test_task_order_epoch_poses_each_training_task_once_per_epoch(tmp_path, tiny_model_dir, tokenizer):
    """``--task-order epoch``: step ``s`` plays positions ``s * T ..`` of the seeded epoch order (no model needed to
    see which tasks a step poses: a scripted actor plays them through the trainer's own sampling phase)."""
    from trainers import rl
    from trainers.credit import get_strategy
    from trainers.engines import stop_token_ids
    from trainers.ray_rollout import make_env_pool
    from trainers.rollout import RolloutConfig, decode, epoch_tasks, scripted_actor

    cfg = _cfg(tmp_path, tiny_model_dir, env=["TurnRL/CreditChain-v0"], env_kwarg=["pairs=Map"], strategy="grpo_or",
               task_order="epoch", tasks_per_step=6, group_size=2, max_new_tokens=32, max_context=512,
               max_turns=4)  # fmt: skip
    pool = make_env_pool(cfg.env, cfg.env_weights, cfg.env_kwargs())
    stops = stop_token_ids(tokenizer)
    actor = scripted_actor(tokenizer, stops[0], ["random_choice"], None)
    rcfg = RolloutConfig(cfg.max_new_tokens, cfg.max_context, cfg.max_turns)
    cues = []
    for step in range(6):  # 6 steps x 6 tasks = one epoch of the Map pair's 36 training tasks
        batch = rl.sample(cfg, step, pool, actor, tokenizer, stops, rcfg, get_strategy("grpo_or"), cfg.credit_cfg,
                          torch.device("cpu"))  # fmt: skip
        for ep in batch.episodes[:: cfg.group_size]:
            cues.append(re.search(r"Map: (\w+)\. Take (\w+) or (\w+)\?", decode(tokenizer, ep.token_ids)).groups())
    expected = [(t["cue"], *t["options"]) for _, t in epoch_tasks(pool, cfg.seed, 0, 36)]
    assert cues == expected and len(set(cues)) == 36
    pool.close()
    with pytest.raises(InvalidArgument, match="--env-weights cannot weigh"):
        _cfg(tmp_path, tiny_model_dir, task_order="epoch", env_weights=[1.0])
