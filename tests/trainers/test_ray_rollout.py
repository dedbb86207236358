"""Rollouts on a real local Ray cluster: the same ``collect`` gives the same episodes with envs in Ray actors, a killed
env worker is replaced mid-batch without losing the batch, generation actors sample what the in-process engine
does and follow pushed weights, and bad arguments fail clearly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from agentgym_turn.error import InvalidArgument
from tests.trainers import toy_env
from trainers.engine_api import SamplingConfig
from trainers.engine_transformers import TransformersEngine
from trainers.engines import stop_token_ids
from trainers.rollout import EnvPool, RolloutConfig, collect, epoch_tasks, scripted_actor

ray = pytest.importorskip("ray")
from trainers.ray_rollout import RayEngine, RayEnvPool, RemoteEnv, ReplayMismatch, connect  # noqa: E402

TOY = f"tests.trainers.toy_env:{toy_env.ENV_ID}"  # the module-prefixed id makes Ray workers import the test env
NOISY = "tests.trainers.test_ray_rollout:TurnRLTest/NoisyArith-v0"
CFG = RolloutConfig(max_new_tokens=64, max_context=1024, max_turns=4)
MEMORY_MONITOR = "RAY_memory_monitor_refresh_ms"  # Ray's own (lower-case) config variable; 0 = off


class NoisyArithEnv(toy_env.ArithEnv):
    """The toy env, but its task ignores the seed: it cannot be replayed (fixture of the mismatch test)."""

    reward_levels: ClassVar[dict[str, Any]] = toy_env.ArithEnv.reward_levels

    def _sample_task(self) -> dict[str, Any]:
        a, b = (int(x) for x in np.random.default_rng().integers(0, 10**6, size=2))
        return {"id": f"{a}+{b}", "a": a, "b": b}


if "TurnRLTest/NoisyArith-v0" not in gym.registry:
    gym.register(id="TurnRLTest/NoisyArith-v0", entry_point=NoisyArithEnv)


@pytest.fixture(scope="module")
def cluster():
    """One small local Ray cluster for the whole module (2 CPUs, no dashboard). Ray's memory monitor is off: on a
    machine shared with other jobs it kills this cluster's newest worker whenever the node passes 95% memory use."""
    saved = os.environ.get(MEMORY_MONITOR)
    os.environ[MEMORY_MONITOR] = "0"  # read by the raylet that ray.init starts
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # a new cluster
    finally:
        if saved is None:
            os.environ.pop(MEMORY_MONITOR)
        else:
            os.environ[MEMORY_MONITOR] = saved
    yield ray
    ray.shutdown()


def _actor(tokenizer, names, weights=None):
    return scripted_actor(tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), list(names), weights)


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert (x.env_id, x.group, x.terminated, x.truncated) == (y.env_id, y.group, y.terminated, y.truncated)
        for name in ("token_ids", "loss_mask", "turn_index", "logprobs"):
            assert np.array_equal(getattr(x, name), getattr(y, name)), name
        assert x.turn_rewards == y.turn_rewards
        assert x.reward_levels == y.reward_levels
        assert (x.node_ids, x.state_keys, x.metrics) == (y.node_ids, y.state_keys, y.metrics)


def _both(pool, tokenizer, actor_factory, *, pipeline=False, **kw):
    stops = stop_token_ids(tokenizer)
    local, _ = collect(EnvPool(pool.env_ids, pool.weights), actor_factory(), tokenizer, stops, CFG, **kw)
    actor = actor_factory()
    if pipeline:
        actor = pool.pipeline(actor, tokenizer, stops)
    remote, stats = collect(pool, actor, tokenizer, stops, CFG, **kw)
    assert stats.episodes == len(remote)
    return local, remote


def test_episodes_from_env_workers_equal_in_process(cluster, tokenizer):
    pool = RayEnvPool([TOY], workers=2, worker_cpus=0.5)
    try:
        mix = lambda: _actor(tokenizer, ["reference", "direct"], [0.5, 0.5])  # noqa: E731  (direct uses the rng)
        for seed in (0, 1):  # the envs are made once and reused by the second batch
            local, remote = _both(pool, tokenizer, mix, num_tasks=3, group_size=2, seed=seed, group_offset=10)
            _same(local, remote)
            assert len({ep.group for ep in remote}) == 3
        envs = pool.get(TOY, 6)
        assert all(isinstance(e, RemoteEnv) for e in envs)
        assert {e.worker for e in envs} == {0, 1}  # spread over both workers
        assert len(set(pool.pids())) == 2 and os.getpid() not in pool.pids()
        with pytest.raises(InvalidArgument, match="unknown keys"):  # the env's own error, through Ray, not a retry
            envs[0].reset(seed=0, options={"bogus": 1})
        assert pool.replacements == 0
    finally:
        pool.close()


def test_epoch_order_reads_the_task_lists_of_remote_envs(cluster, tokenizer):
    """``--task-order epoch`` with envs in Ray actors: the same order and the same episodes as in process."""
    pool = RayEnvPool(["TurnRL/CreditChain-v0"], make_kwargs={"pairs": "Map"}, workers=1, worker_cpus=0.5)
    local = EnvPool(["TurnRL/CreditChain-v0"], make_kwargs={"pairs": "Map"})
    generated = RayEnvPool([TOY], workers=1, worker_cpus=0.5)
    try:
        posed = epoch_tasks(pool, 1, 30, 4)  # across the first epoch's end
        assert posed == epoch_tasks(local, 1, 30, 4) and len(pool.get("TurnRL/CreditChain-v0", 1)[0].task_list()) == 36
        stops, actor = stop_token_ids(tokenizer), lambda: _actor(tokenizer, ["random_choice"])
        kw = dict(num_tasks=4, group_size=2, seed=3, tasks=posed)
        _same(
            collect(local, actor(), tokenizer, stops, CFG, **kw)[0],
            collect(pool, actor(), tokenizer, stops, CFG, **kw)[0],
        )
        with pytest.raises(InvalidArgument, match="generates its tasks"):
            epoch_tasks(generated, 0, 0, 2)
    finally:
        pool.close()
        local.close()
        generated.close()


def test_tree_rollouts_fork_remote_envs_and_pipeline_gives_the_same_episodes(cluster, tokenizer):
    pool = RayEnvPool(["TurnRL/Sokoban-v2"], workers=2, worker_cpus=0.5)
    try:
        rand = lambda: _actor(tokenizer, ["random"])  # noqa: E731
        kw = dict(num_tasks=2, group_size=2, seed=3, tree=True, branch_turns=2)
        local, remote = _both(pool, tokenizer, rand, pipeline=True, **kw)
        _same(local, remote)
        assert len(remote) == 2 * 2**2 and remote[0].state_keys is not None and remote[0].node_ids is not None
        assert len(pool.forks) > 0
        pool.get("TurnRL/Sokoban-v2", 1)  # a new batch frees the last batch's forks
        assert pool.forks == []
    finally:
        pool.close()


def test_killed_env_worker_is_replaced_and_the_batch_completes_equal(cluster, tokenizer):
    pool = RayEnvPool([TOY], workers=2, worker_cpus=0.5)
    try:
        before = pool.pids()
        calls = [0]

        def killing():
            inner = _actor(tokenizer, ["reference", "direct"], [0.5, 0.5])

            def act(slots, budgets):
                if isinstance(slots[0].env, RemoteEnv):
                    calls[0] += 1
                    if calls[0] == 2:  # mid-batch: every env has been reset and stepped once
                        os.kill(before[0], signal.SIGKILL)
                return inner(slots, budgets)

            return act

        local, remote = _both(pool, tokenizer, killing, pipeline=True, num_tasks=4, group_size=2, seed=5)
        _same(local, remote)
        assert calls[0] == 2  # two turns
        after = pool.pids()
        assert pool.replacements == 1 and after[0] != before[0] and after[1] == before[1]
        assert pool.incarnations == [1, 0]
        local, remote = _both(pool, tokenizer, lambda: _actor(tokenizer, ["reference"]), num_tasks=2, group_size=2,
                              seed=6)  # fmt: skip
        _same(local, remote)  # the replacement keeps serving later batches
    finally:
        pool.close()


def test_an_env_that_replays_differently_raises(cluster, tokenizer):
    pool = RayEnvPool([NOISY], workers=1, worker_cpus=0.5)
    try:
        [env] = pool.get(NOISY, 1)
        env.reset(seed=0)
        os.kill(pool.pids()[0], signal.SIGKILL)
        with pytest.raises(ReplayMismatch, match="not deterministic"):
            env.step("<tool>1+1</tool>")
        assert pool.replacements == 1
    finally:
        pool.close()


def test_bad_arguments_raise_clear_errors(cluster):
    with pytest.raises(InvalidArgument, match="workers=0 must be an int >= 1"):
        RayEnvPool([TOY], workers=0)
    with pytest.raises(InvalidArgument, match="needs at least one env id"):
        RayEnvPool([], workers=1)
    for bad in ("nohost", "http://10.0.0.1:6379", "10.0.0.1:99999", ""):
        with pytest.raises(InvalidArgument, match="Ray address"):
            connect(bad)
    with pytest.raises(InvalidArgument, match="workers=0"):
        RayEngine("transformers", model=None, tokenizer=None, workers=0)
    with pytest.raises(InvalidArgument, match="'openai'"):
        RayEngine("openai", model=None, tokenizer=None)


def test_unreachable_address_fails_fast_with_the_fix():
    """In a fresh process (this one is connected): no cluster at the address -> ServiceError naming `ray start`."""
    code = "from trainers.ray_rollout import connect; connect('127.0.0.1:1')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "ServiceError: no Ray cluster answers at '127.0.0.1:1'" in out.stderr
    assert "ray start --head --port 1" in out.stderr


def test_generation_actor_samples_like_the_local_engine_follows_pushed_weights_and_is_replaced(cluster, tokenizer):
    from tests.trainers.conftest import tiny_llama

    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    first, second = tiny_llama(len(tokenizer), seed=0), tiny_llama(len(tokenizer), seed=1)
    stops = stop_token_ids(tokenizer)
    prompts = [[1, 2, 3, 4], [5, 6, 7], [1, 2, 3, 4]]
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0, seed=11)

    def local(model):
        engine = TransformersEngine(model, stops, pad_token_id=tokenizer.pad_token_id)
        return engine.generate(prompts, sampling)

    def same(got, want):
        assert [g.token_ids for g in got] == [g.token_ids for g in want]
        assert [g.finished for g in got] == [g.finished for g in want]
        np.testing.assert_allclose([g.logprobs for g in got], [g.logprobs for g in want], atol=1e-5)

    engine = RayEngine("transformers", first, tokenizer, workers=1, worker_cpus=0.5)
    try:
        same(engine.generate(prompts, sampling), local(first))
        os.kill(engine.pids()[0], signal.SIGKILL)  # dies before the push: its replacement starts from the new weights
        engine.update_weights(second)
        assert engine.last_push_seconds is not None and engine.replacements == 1
        same(engine.generate(prompts, sampling), local(second))
        os.kill(engine.pids()[0], signal.SIGKILL)  # dies before a batch: replaced, the batch sampled again
        same(engine.generate(prompts, sampling), local(second))
        assert engine.replacements == 2
        assert [g.token_ids for g in local(first)] != [g.token_ids for g in local(second)]
    finally:
        engine.close()


@pytest.mark.slow
def test_smollm2_generates_through_a_generation_actor_as_in_process(cluster, tokenizer):
    """The real SmolLM2-135M-Instruct, shipped to a generation actor: the same greedy ids as in this process."""
    from agentgym_turn.models import load_causal_lm
    from trainers.rollout import encode, render

    pytest.importorskip("torch").set_num_threads(1)
    model, tok = load_causal_lm("smollm2")
    model.eval()
    question = [{"role": "user", "content": "What is the capital of France?"}]
    prompts = [encode(tok, render(tok, question, generation_prompt=True))]
    greedy = SamplingConfig(max_new_tokens=12, temperature=0)
    engine = RayEngine("transformers", model, tok, workers=1, worker_cpus=0.5)
    try:
        [got] = engine.generate(prompts, greedy)
    finally:
        engine.close()
    [want] = TransformersEngine(model, stop_token_ids(tok), pad_token_id=tok.pad_token_id).generate(prompts, greedy)
    assert got.token_ids == want.token_ids and got.finished
    assert "Paris" in tok.decode(got.token_ids)


@pytest.mark.slow
@pytest.mark.skipif("ray" not in getattr(__import__("trainers.rl").rl.RLConfig, "__dataclass_fields__", {}),
                    reason="trainers.rl has no --ray yet (the patch in the issue 14 report)")  # fmt: skip
def test_rl_with_ray_env_and_generation_workers_trains_like_in_process(cluster, tmp_path, tiny_model_dir):
    """``--ray`` (the envs in 2 env workers; then generation in 1 actor too): the same metrics step by step as the
    in-process run, since the episodes are the same and the pushed weights sample the same."""
    import json

    from trainers.rl import RLConfig, train

    def run(name, **kw):
        cfg = RLConfig(env=[TOY], model=tiny_model_dir, steps=2, tasks_per_step=2, group_size=2, max_new_tokens=8,
                       max_context=256, max_turns=2, lr=1e-2, critic_lr=1e-2, bf16=False, threads=1, seed=0,
                       sft_episodes=0, engine="transformers", out_dir=str(tmp_path / name), **kw)  # fmt: skip
        train(cfg)
        rows = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("perf/") and "seconds" not in k and "per_s" not in k}
                for r in rows]  # fmt: skip

    local = run("local")
    assert len(local) == 2 and "losses/policy" in local[-1]
    assert run("ray-envs", ray="auto", ray_env_workers=2) == local
    assert run("ray-gen", ray="auto", ray_env_workers=1, ray_gen_workers=1) == local
