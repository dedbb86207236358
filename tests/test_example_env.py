"""The copyable example env (examples/my_pkg): it keeps the contract, registers from outside the project, and the
trainer takes it by its module-prefixed id, cold start and held-out evaluation included."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym_turn import check_turn_env, held_out_kwargs
from agentgym_turn.error import InvalidArgument
from agentgym_turn.policies import get_scripted_policy, run_episode

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
ENV = "my_pkg:MyPkg/GuessNumber-v0"


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def test_the_example_keeps_the_contract_and_defines_held_out_tasks():
    check_turn_env(gym.make(ENV))
    assert held_out_kwargs(ENV) == {"split": "test"}
    from my_pkg.env import SPLITS, parse_guess

    assert set(SPLITS["train"]).isdisjoint(SPLITS["test"]) and len(SPLITS["train"]) + len(SPLITS["test"]) == 100
    assert parse_guess("<guess> 42 </guess> then <guess>7</guess>") == 7
    assert parse_guess("<guess>" + "9" * 5000 + "</guess>") is None and parse_guess("42") is None


def test_binary_search_solves_every_task_with_turn_rewards_for_progress():
    env = gym.make(ENV)
    policy = get_scripted_policy(env, "reference")
    for seed in range(5):
        log = run_episode(env, policy, seed=seed)
        assert log.metrics["env/solved"] == 1.0 and log.metrics["env/guesses"] <= 7
        assert log.infos[-1]["reward_components"]["solved"] == 1.0
        assert all(i["reward_components"]["progress"] == 0.1 for i in log.infos)
    env.reset(seed=0)
    secret = env.unwrapped.task["secret"]
    _, reward, terminated, _, info = env.step(f"<guess>{secret + 1}</guess>")  # training secrets are below 100
    assert (reward, terminated, info["reward_components"]) == (0.1, False, {"progress": 0.1})
    obs, reward, *_ = env.step(f"<guess>{secret + 1}</guess>")  # again: the hint ruled it out
    assert reward == 0.0 and obs[0]["content"] == "Lower."


def test_the_trainer_config_takes_the_example_and_names_what_a_user_env_lacks():
    from trainers.evaluation import held_out_kwargs as eval_held_out
    from trainers.rl import RLConfig

    cfg = RLConfig(env=[ENV], eval_every=1, sft_episodes=2, engine="transformers")
    assert cfg.sft_policy == "scripted:reference" and eval_held_out(ENV) == {"split": "test"}
    with pytest.raises(InvalidArgument, match=r"has no scripted policy 'oracle' \(it has \['reference'\]\)"):
        RLConfig(env=[ENV], sft_policy="scripted:oracle", engine="transformers")
    assert RLConfig(env=[ENV], sft_policy="scripted:oracle", sft_episodes=0, engine="transformers").sft_episodes == 0
    from my_pkg.env import GuessNumberEnv

    class NoHeldOut(GuessNumberEnv):
        held_out = None

    gym.register("MyPkgTest/NoHeldOut-v0", entry_point=NoHeldOut)
    with pytest.raises(InvalidArgument, match="defines no held-out tasks; give the class held_out"):
        RLConfig(env=["MyPkgTest/NoHeldOut-v0"], eval_every=1, engine="transformers")
    assert RLConfig(env=["MyPkgTest/NoHeldOut-v0"], eval_every=1, eval_env_kwarg=["split=test"],
                    engine="transformers").eval_every == 1  # fmt: skip


@pytest.mark.slow
def test_a_user_trains_the_example_with_two_strategies_from_its_folder(tmp_path):
    """As the README says: from examples/, ``python -m trainers.grpo --env my_pkg:MyPkg/GuessNumber-v0`` with a
    cold start and the held-out evaluation before and after (SmolLM2-135M, a step each): MT-GRPO (turn rewards)
    and GiGPO (the env's anchor states), one process a core (a third, GRPO-OR, made three on two cores: +25 s)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), str(REPO)])}  # REPO: as if pip-installed
    t0 = time.perf_counter()
    runs = {}
    for strategy in ("mt_grpo", "gigpo"):  # side by side, one thread each (model loading dominates)
        args = [sys.executable, "-m", "trainers.grpo", "--env", ENV, "--strategy", strategy, "--steps", "1",
                "--tasks-per-step", "1", "--group-size", "2", "--eval-every", "1", "--eval-tasks", "2",
                "--sft-episodes", "2", "--sft-batch-episodes", "2", "--sft-epochs", "1", "--max-new-tokens", "16",
                "--max-context", "512", "--max-turns", "3", "--engine", "transformers", "--trace-every", "0",
                "--threads", "1", "--out-dir", str(tmp_path / strategy)]  # fmt: skip
        runs[strategy] = subprocess.Popen(args, cwd=EXAMPLES, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    for strategy, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{strategy}: " + stdout[-2000:] + stderr[-3000:]
        assert "[rl] cold start: 2 scripted episodes (scripted:reference)" in stdout
        assert "held-out env/solved (2 tasks, greedy): step 0" in stdout and "-> step 1" in stdout
    print(f"two strategies: {time.perf_counter() - t0:.0f} s")
