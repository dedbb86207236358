"""Cold start on scripted trajectories: the policy mix, the NLL falls, the saved folder reloads, RL folds it in."""

from __future__ import annotations

import json

import pytest

from agentgym_turn.error import InvalidArgument
from tests.trainers import toy_env
from trainers.rl import RLConfig, train
from trainers.sft import (
    FAMILY_DEFAULTS,
    WEAKENED,
    SFTConfig,
    main,
    parse_policy_mix,
    parse_sft_config,
    sft_batches,
)

ENV = "tests.trainers.toy_env:" + toy_env.ENV_ID


def test_parse_policy_mix():
    assert parse_policy_mix("scripted:reference=0.7,scripted:direct=0.3") == (["reference", "direct"], [0.7, 0.3])
    assert parse_policy_mix("scripted:reference") == (["reference"], [1.0])
    for bad, msg in [("reference", "scripted:NAME"), ("scripted:a=x", "not a number"), ("scripted:a=0", "sum to 0")]:
        with pytest.raises(ValueError, match=msg):
            parse_policy_mix(bad)


def test_family_defaults_apply_per_env_family_and_flags_win():
    search = parse_sft_config(["--env", "TurnRL/SearchR1-v2"])
    assert (search.policy, search.episodes) == ("scripted:oracle", 256)  # enough two-hop cases to learn when to hop
    assert parse_sft_config(["--env", "TurnRL/SearchR1-v2", "--warm-start", "weakened"]).episodes == 64
    sokoban = parse_sft_config(["--env", "TurnRL/Sokoban-v2"])
    assert (sokoban.policy, sokoban.episodes, sokoban.epochs) == ("scripted:bfs", 512, 3)
    assert parse_sft_config(["--env", "TurnRL/Sokoban-v2", "--episodes", "64"]).episodes == 64
    assert parse_sft_config(["--env", "TurnRL/Sokoban-v2", "--policy", "scripted:random"]).policy == "scripted:random"
    # WikiTwoTurn-v1 keeps SFTConfig's own defaults (the ones the RL fold-in reads), and so does a mix of families
    for argv in (["--env", "TurnRL/WikiTwoTurn-v1"], ["--env", "TurnRL/Sokoban-v2", "TurnRL/SearchR1-v2"]):
        cfg = parse_sft_config(argv)
        base = (SFTConfig.policy, 64, 3, 4, 2048)
        assert (cfg.policy, cfg.episodes, cfg.epochs, cfg.batch_episodes, cfg.max_context) == base


def test_wiki_v2_defaults_to_the_explore_cold_start_and_v1_replays_the_reference():
    assert parse_sft_config(["--env", "TurnRL/WikiTwoTurn-v2"]).policy == "scripted:explore"
    assert parse_sft_config([]).env == ["TurnRL/WikiTwoTurn-v2"] and parse_sft_config([]).policy == "scripted:explore"
    assert parse_sft_config(["--env", "TurnRL/WikiTwoTurn-v1"]).policy == "scripted:reference"  # as it ran
    assert parse_sft_config(["--env", "TurnRL/WikiTwoTurn-v0"]).policy == "scripted:reference"
    verbatim = parse_sft_config(["--env", "TurnRL/WikiTwoTurn-v2", "--warm-start", "verbatim"])
    assert verbatim.policy == "scripted:reference"  # the old default, by name
    with pytest.raises(InvalidArgument, match="verbatim is defined for"):
        parse_sft_config(["--env", "TurnRL/Sokoban-v2", "--warm-start", "verbatim"])


def test_wiki_default_imitates_the_reference_alone_and_weakened_is_a_named_option():
    assert SFTConfig.policy == "scripted:reference"  # one answer at the deciding token (issue 26)
    weak = parse_sft_config(["--warm-start", "weakened"])
    assert (weak.policy, weak.episodes, weak.epochs) == ("scripted:reference=0.3,scripted:direct=0.7", 64, 2)
    assert parse_sft_config(["--warm-start", "weakened", "--epochs", "3"]).epochs == 3  # a flag given wins
    sokoban = parse_sft_config(["--env", "TurnRL/Sokoban-v2", "--warm-start", "weakened"])
    assert (sokoban.policy, sokoban.episodes) == ("scripted:bfs", 64)  # the bfs64 warm start
    with pytest.raises(InvalidArgument, match="weakened is defined for"):
        parse_sft_config(["--env", "TurnRL/Sokoban-v2", "TurnRL/SearchR1-v2", "--warm-start", "weakened"])
    with pytest.raises(InvalidArgument, match="--warm-start 'strong'"):
        SFTConfig(warm_start="strong")


def test_sft_batches_keep_a_tasks_group_in_one_step_and_group_size_1_is_the_plain_shuffle():
    import numpy as np

    rng = np.random.default_rng(3)  # what sft_train drew before groups existed: one permutation per epoch
    before = [order[i : i + 4] for _ in range(2) for order in [rng.permutation(12)] for i in range(0, 12, 4)]
    assert [b.tolist() for b in sft_batches(12, 4, 2, seed=3)] == [b.tolist() for b in before]
    paired = sft_batches(12, 4, 2, seed=3, group_size=2)
    assert len(paired) == 6
    for epoch in (paired[:3], paired[3:]):  # every episode once per epoch
        assert sorted(np.concatenate(epoch).tolist()) == list(range(12))
    for batch in paired:  # episodes 2g and 2g + 1 (one task's group) always share a step
        assert all(batch[i] % 2 == 0 and batch[i + 1] == batch[i] + 1 for i in (0, 2))
    assert [b.tolist() for b in paired[:3]] != [b.tolist() for b in paired[3:]]  # a fresh order each epoch
    with pytest.raises(InvalidArgument, match="make both multiples of 2"):
        sft_batches(12, 3, 1, 0, group_size=2)


def test_group_size_and_cycled_policies_are_checked_before_anything_runs():
    with pytest.raises(InvalidArgument, match="--episodes=9 is not a multiple of --group-size=2"):
        SFTConfig(episodes=9, group_size=2)
    with pytest.raises(InvalidArgument, match="--batch-episodes=3 is not a multiple of --group-size=2"):
        SFTConfig(episodes=8, batch_episodes=3, group_size=2)
    with pytest.raises(InvalidArgument, match="--group-size=3 must be a multiple of that"):
        SFTConfig(policy="scripted:reference,scripted:direct", assign="cycle", group_size=3, episodes=6,
                  batch_episodes=3)  # fmt: skip
    with pytest.raises(InvalidArgument, match="--assign 'round'"):
        SFTConfig(assign="round")
    with pytest.raises(InvalidArgument, match="--warm-start balanced is defined for \\['CreditChain'\\]"):
        parse_sft_config(["--env", "TurnRL/WikiTwoTurn-v2", "--warm-start", "balanced"])


@pytest.mark.parametrize("family", sorted(WEAKENED))
def test_weakened_policies_exist_in_their_envs(family):
    import gymnasium as gym

    from agentgym_turn.policies import get_scripted_policy

    env = gym.make(f"TurnRL/{family}-v2")
    policy = {**FAMILY_DEFAULTS.get(family, {}), **WEAKENED[family]}.get("policy", SFTConfig.policy)
    for name in parse_policy_mix(policy)[0]:
        assert callable(get_scripted_policy(env, name))
    env.close()


@pytest.mark.parametrize("family", sorted(FAMILY_DEFAULTS))
def test_family_default_policies_exist_in_their_envs(family):
    import gymnasium as gym

    from agentgym_turn.policies import get_scripted_policy
    from agentgym_turn.registration import versions

    env = gym.make(versions(f"TurnRL/{family}-v0")[0])  # the family's newest version
    for name in parse_policy_mix(FAMILY_DEFAULTS[family]["policy"])[0]:
        assert callable(get_scripted_policy(env, name))
    env.close()


def test_sft_cli_lowers_the_nll_saves_a_reloadable_policy_and_evaluates(tmp_path, tiny_model_dir):
    out = tmp_path / "sft"
    result = main(["--env", ENV, "--model", tiny_model_dir, "--policy", "scripted:reference=3,scripted:direct=1",
                   "--episodes", "8", "--epochs", "3", "--batch-episodes", "4", "--lr", "3e-2", "--eval-tasks", "2",
                   "--eval-max-new-tokens", "4", "--max-context", "512", "--no-bf16", "--threads", "1",
                   "--out-dir", str(out)])  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses, (held_out,) = rows[:-1], rows[-1:]
    assert len(losses) == 6 and losses[-1]["losses/sft"] < 0.7 * losses[0]["losses/sft"]
    assert json.loads((out / "eval.json").read_text())["rollout/turns"] >= 1
    assert held_out["step"] == 6 and held_out["eval/env/exact_match"] == result["env/exact_match"]  # to every logger
    assert "env/exact_match" in result and "reward/tool" in result
    cfg = RLConfig(env=[ENV], init=str(out), steps=1, tasks_per_step=1, group_size=2, max_new_tokens=4,
                   max_context=256, bf16=False, threads=1, kl_coef=0.0, out_dir=str(tmp_path / "rl"),
                   engine="transformers")  # fmt: skip
    assert train(cfg)["rollout/policy_tokens"] > 0


def test_rl_folds_in_the_cold_start_and_anchors_the_reference_there(tmp_path, tiny_model_dir, capsys):
    cfg = RLConfig(env=[ENV], model=tiny_model_dir, sft_episodes=4, sft_lr=1e-2, steps=1, tasks_per_step=1,
                   group_size=2, max_new_tokens=4, max_context=256, bf16=False, threads=1, kl_coef=0.01,
                   out_dir=str(tmp_path / "rl"), engine="transformers")  # fmt: skip
    last = train(cfg)
    assert "cold start: 4 scripted episodes" in capsys.readouterr().out
    assert (tmp_path / "rl" / "sft-policy" / "config.json").is_file()
    assert last["losses/kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == warm-started reference


def test_sft_step_with_a_shared_prompt_equals_whole_episodes(tiny_model, tokenizer):
    """Prefix sharing is an execution detail: the SFT loss and the updated weights equal those of whole-episode rows
    (fp32, one optimizer step on demonstrations sharing the system prompt)."""
    import copy

    import torch

    from trainers.rollout import EnvPool, RolloutConfig
    from trainers.sft import demonstrations, sft_train

    pool = EnvPool(["TurnRL/WikiTwoTurn-v2"])
    mix = "scripted:reference=0.5,scripted:direct=0.5"
    demos = demonstrations(pool, tokenizer, mix, 4, 0, RolloutConfig(64, 1024, 2))
    models = [copy.deepcopy(tiny_model).float() for _ in range(2)]
    kw = {"epochs": 1, "batch_episodes": 4, "lr": 1e-3, "pack_tokens": 4096, "bf16": False, "seed": 0}
    whole = sft_train(models[0], demos, **kw)
    shared = sft_train(models[1], demos, share_pack_tokens=4096, **kw)
    assert shared == pytest.approx(whole, rel=1e-5)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-5)  # 2% of one AdamW step (lr 1e-3): float noise
    from trainers import modeling as M

    packs = M.pack_shared(demos, range(4), 4096)
    assert len(packs) == 1 and packs[0].shared and packs[0].shared > 100  # the system prompt, computed once


def test_linear_lr_schedule_decays_over_the_steps_and_constant_keeps_the_rate():
    from trainers.sft import scheduled_lr

    assert [scheduled_lr(1e-4, "linear", b, 4) for b in range(4)] == pytest.approx([1e-4, 7.5e-5, 5e-5, 2.5e-5])
    assert {scheduled_lr(1e-4, "constant", b, 4) for b in range(4)} == {1e-4}
    with pytest.raises(InvalidArgument, match="lr_schedule='cosine'"):
        scheduled_lr(1e-4, "cosine", 0, 4)
    with pytest.raises(InvalidArgument, match="--lr-schedule 'cosine'"):
        SFTConfig(lr_schedule="cosine")


def test_sft_train_steps_at_the_scheduled_rate(tiny_model, tokenizer):
    """Each optimizer step uses (and logs as ``perf/lr``) its scheduled rate: under ``linear`` a step at rate 0
    would leave the weights as they were, so the last of 2 steps (rate lr / 2) moves them less than under
    ``constant``."""
    import copy

    from trainers.rollout import EnvPool, RolloutConfig
    from trainers.sft import demonstrations, sft_train

    demos = demonstrations(EnvPool([ENV]), tokenizer, "scripted:reference", 4, 0, RolloutConfig(64, 1024, 2))
    kw = {"epochs": 1, "batch_episodes": 2, "lr": 1e-3, "pack_tokens": 4096, "bf16": False, "seed": 0}
    rows: dict[str, list[dict]] = {"constant": [], "linear": []}
    moved = {}
    for schedule, log in rows.items():
        model = copy.deepcopy(tiny_model).float()
        first = {}

        def keep(row, log=log, model=model, first=first):
            log.append(row)
            if row["step"] == 1:
                first.update({n: p.detach().clone() for n, p in model.named_parameters()})

        sft_train(model, demos, lr_schedule=schedule, log=keep, **kw)
        moved[schedule] = sum(float((p.detach() - first[n]).abs().sum()) for n, p in model.named_parameters())
    assert [r["perf/lr"] for r in rows["constant"]] == [1e-3, 1e-3]
    assert [r["perf/lr"] for r in rows["linear"]] == [1e-3, 5e-4]
    assert 0 < moved["linear"] < moved["constant"]
