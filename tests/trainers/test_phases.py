"""The RL step's phases one by one (``trainers.rl``: sample -> score -> assign_credit -> update -> record), driven
by hand on a tiny random Llama and the toy env: what each phase adds to the :class:`~trainers.rl.Batch`, and that
the hand-driven step is ``train``'s first step, metric for metric."""

from __future__ import annotations

import json
import math

import pytest

from tests.trainers.test_rl import _cfg

torch = pytest.importorskip("torch")


def _by_hand(cfg, run):
    """One step as ``train`` plays it (same seeding and set-up order), phase by phase, checking each."""
    from agentgym_turn.models import load_causal_lm
    from trainers import modeling as M
    from trainers import rl
    from trainers.credit import get_strategy
    from trainers.device import place_model, resolve_device, set_threads
    from trainers.engines import stop_token_ids
    from trainers.ray_rollout import make_env_pool
    from trainers.rollout import RolloutConfig, engine_actor

    M.seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    set_threads(device, cfg.threads)
    run.mkdir(parents=True)
    pool = make_env_pool(cfg.env, cfg.env_weights, cfg.env_kwargs())
    policy, tok = load_causal_lm(cfg.model)
    place_model(policy, device)
    learner = rl.build_learner(cfg, policy, cfg.model, cfg.model, {}, None, device)
    engine, _ = rl.build_engine(cfg, learner.policy, tok, run, cfg.model, device, None)
    stops = stop_token_ids(tok)
    rcfg = RolloutConfig(cfg.max_new_tokens, cfg.max_context, cfg.max_turns, cfg.temperature, cfg.top_p,
                         cfg.check_prefix)  # fmt: skip
    strategy, credit_cfg = get_strategy(cfg.strategy), cfg.credit_cfg
    actor = engine_actor(engine, rcfg, seed=cfg.seed * 1_000_003)
    before = {k: v.detach().clone() for k, v in learner.policy.state_dict().items()}

    batch = rl.sample(cfg, 0, pool, actor, tok, stops, rcfg, strategy, credit_cfg, device)  # (1)
    n = cfg.tasks_per_step * cfg.group_size
    assert len(batch.episodes) == len(batch.sampled) == n and batch.credit is None and not batch.old_lp
    assert sum(len(pack.split(torch.zeros(pack.num_tokens))) for mb in batch.minibatches for pack in mb) == n

    rl.score(
        learner, batch, credit_cfg, device, temperature=cfg.temperature, kl_coef=cfg.kl_coef, autocast=cfg.autocast
    )  # (2) fmt: skip
    assert len(batch.ref_lp) == n  # --kl-coef > 0: the reference's log-probs of every episode
    assert batch.values is not None and len(batch.values) == n  # mt_ppo's critic
    assert not batch.old_lp  # one minibatch: its old log-probs come from the update's own first forward

    rl.assign_credit(batch, strategy, credit_cfg)  # (3)
    assert [len(a) for a in batch.credit.advantages] == [len(ep.token_ids) for ep in batch.episodes]
    assert {"credit/turn1_reward_varies", "credit/adv_differs_from_grpo_or"} <= set(batch.signal)
    assert all(torch.equal(before[k], v) for k, v in learner.policy.state_dict().items())  # nothing trained yet

    rl.update(cfg, learner, batch)  # (4)
    assert {"losses/policy", "losses/kl", "losses/value", "losses/grad_norm"} <= set(batch.logs)
    assert len(batch.old_lp) == n and batch.trained_tokens > 0
    assert any(not torch.equal(before[k], v) for k, v in learner.policy.state_dict().items())

    row = rl.step_row(batch, stops, update_s=1.0)  # (5)
    engine.close()
    pool.close()
    return row


def test_the_phases_by_hand_are_trains_first_step(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, strategy="mt_ppo", kl_coef=0.01, steps=1)
    from trainers.rl import train

    train(cfg)
    (trained,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    hand = _by_hand(_cfg(tmp_path, tiny_model_dir, strategy="mt_ppo", kl_coef=0.01, steps=1,
                         out_dir=str(tmp_path / "hand")), tmp_path / "hand")  # fmt: skip
    timing = ("perf/", "rollout/seconds", "rollout/tokens_per_s")
    keys = [k for k in trained if not k.startswith(timing) and k != "step"]
    assert keys and set(keys) <= set(hand)
    for key in keys:
        assert math.isclose(hand[key], trained[key], rel_tol=1e-6, abs_tol=1e-7), key
