"""Held-out greedy evaluation: the fixed subset is the leaderboard's, metrics and CIs are right, a model runs it."""

from __future__ import annotations

import math
import re

import gymnasium as gym
import numpy as np
import pytest

import agentgym_turn  # noqa: F401  (registers the TurnRL ids)
from leaderboards.families import FAMILIES
from trainers.engine_api import Generation, SamplingConfig
from trainers.engines import stop_token_ids
from trainers.episode import Episode
from trainers.evaluation import HeldOut, evaluate_policy, held_out_kwargs, parse_env_kwargs, summarize
from trainers.rollout import task_seeds

ENV = "TurnRL/Arithmetic-v0"


class CalculatorEngine:
    """A scripted stand-in for a policy: reads the expression of the last user turn from the prompt ids and boxes
    its value, off by one when the value is odd (so the success rate is the share of even answers)."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.temperatures: list[float] = []

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        self.temperatures.append(sampling.temperature)
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            expr = re.findall(r"Compute the value of ([-+*() 0-9]+)\.", text)[-1]
            value = eval(expr)  # digits, spaces, + - * and parentheses only (the regex above)
            answer = value + (value % 2)
            gen = [*self.tok(f"So \\boxed{{{answer}}}.", add_special_tokens=False)["input_ids"], self.stop]
            out.append(Generation(gen, [0.0] * len(gen), finished=True))
        return out


def test_held_out_kwargs_take_the_family_split_and_overrides():
    wiki = FAMILIES["wiki_two_turn"].env_ids[0]
    assert held_out_kwargs(wiki) == {"split": "validation"}
    assert held_out_kwargs(f"agentgym_turn:{wiki}", {"top_k": 2}) == {"split": "validation", "top_k": 2}
    assert held_out_kwargs("TurnRL/Sokoban-v1") == {"split": "test"}  # a no-op there: v1 draws rooms by seed alone
    assert held_out_kwargs("TurnRLTest/Unknown-v0", {"a": 1}) == {"a": 1}
    with pytest.raises(ValueError, match="no leaderboard family"):
        held_out_kwargs("TurnRLTest/Unknown-v0")


def test_parse_env_kwargs_reads_json_values_and_names_bad_items():
    assert parse_env_kwargs(["split=validation", "top_k=3", "dim=[5, 5]", "flag=true"]) == {
        "split": "validation", "top_k": 3, "dim": [5, 5], "flag": True,
    }  # fmt: skip
    with pytest.raises(ValueError, match="key=value"):
        parse_env_kwargs(["split"])


def test_scripted_engine_scores_the_leaderboards_tasks_greedily(tokenizer):
    held_out = HeldOut((ENV,), tasks=12, seed=7, max_new_tokens=32, max_turns=2, max_context=512)
    pools = held_out.pools()
    engine = CalculatorEngine(tokenizer)
    row = evaluate_policy(engine, tokenizer, held_out, pools)
    assert set(engine.temperatures) == {0.0}  # greedy
    # the same tasks leaderboards.evaluate poses for --seed 7 --episodes 12
    env = gym.make(ENV)
    answers = []
    for task_seed in task_seeds(7, 12):
        env.reset(seed=task_seed)
        answers.append(env.unwrapped.task["answer"])
    played = [e.unwrapped.task["answer"] for e in pools[ENV].get(ENV, 12)]
    assert played == answers
    even = np.array([a % 2 == 0 for a in answers], dtype=float)
    assert 0 < even.mean() < 1
    assert row["eval/env/success"] == pytest.approx(even.mean())
    assert row["eval_ci95/env/success"] == pytest.approx(1.959964 * even.std(ddof=1) / math.sqrt(12), rel=1e-5)
    assert row["eval/rollout/turns"] == 1.0 and row["eval_ci95/rollout/turns"] == 0.0
    assert row["eval/rollout/format_rate"] == 1.0 and row["eval/seconds"] > 0
    assert evaluate_policy(engine, tokenizer, held_out, pools) | {"eval/seconds": 0, "eval/tokens_per_s": 0} == row | {
        "eval/seconds": 0,
        "eval/tokens_per_s": 0,
    }  # a fixed subset: the same numbers every time


def test_summarize_means_and_half_widths_by_hand(tokenizer):
    def episode(success: float, turns: int) -> Episode:
        ids = [1, 2, *([5] * turns)]
        return Episode(env_id=ENV, group=0, token_ids=ids, loss_mask=[0, 0, *[1] * turns],
                       turn_index=[-1, -1, *range(turns)], logprobs=[0.0] * len(ids),
                       turn_rewards=[{"answer": success}] + [{}] * (turns - 1), reward_levels={"answer": "outcome"},
                       terminated=True, metrics={"env/success": success})  # fmt: skip

    row = summarize([episode(1.0, 1), episode(0.0, 2), episode(1.0, 1), episode(1.0, 1)], stop_token_ids(tokenizer))
    assert row["eval/env/success"] == 0.75 and row["eval/rollout/turns"] == 1.25
    # sd of [1, 0, 1, 1] is 0.5: half-width 1.96 * 0.5 / sqrt(4)
    assert row["eval_ci95/env/success"] == pytest.approx(0.4899910, rel=1e-6)
    assert row["eval_ci95/rollout/return"] == pytest.approx(0.4899910, rel=1e-6)
    assert not any(k.endswith("_tokens") for k in row)


def test_tiny_model_evaluates_on_two_envs_with_prefixed_keys(tokenizer, tiny_model):
    from trainers.engines import make_engine

    engine = make_engine("transformers", model=tiny_model, tokenizer=tokenizer, autocast_bf16=False)
    held_out = HeldOut((ENV, "TurnRL/Sokoban-v2"), tasks=2, seed=0, max_new_tokens=4, max_turns=2,
                       max_context=1024)  # fmt: skip
    row = evaluate_policy(engine, tokenizer, held_out)
    assert row["eval/Arithmetic-v0/env/success"] == 0.0  # 4 random tokens never box the answer
    assert "eval/Sokoban-v2/env/success" in row and "eval_ci95/Sokoban-v2/env/effective_action_rate" in row
    assert all(math.isfinite(v) for v in row.values())
