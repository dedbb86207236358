"""The turn contract, checked over every registered id, plus registration and vector-env behaviour."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest

import agentgym_turn
from agentgym_turn import ENV_SPECS, TurnEnv, check_turn_env, make_vec
from agentgym_turn.core import RewardLevel, TurnResult, state_digest, with_late_components
from agentgym_turn.error import InvalidArgument, ResetNeeded
from agentgym_turn.spaces import UnicodeText

ALL_IDS = sorted(ENV_SPECS)


#: Speech ids synthesise every user turn: checking one takes 3-60 s on 2 cores, so they are in the slow tier.
_PARAMS = [pytest.param(i, marks=pytest.mark.slow) if "Speech" in i else i for i in ALL_IDS]


@pytest.fixture(scope="module", params=_PARAMS)
def env(request):
    e = gym.make(request.param)
    yield e
    e.close()


def test_every_id_is_namespaced_and_versioned():
    for env_id in ALL_IDS:
        assert env_id.startswith("TurnRL/")
        assert gym.spec(env_id).version is not None


#: Registered ids whose held-out kwargs pose their training tasks for the same seed, and why (check_turn_env's
#: held-out check is skipped for them; every other promise is checked).
HELD_OUT_OVERLAPS = {
    **dict.fromkeys(("TurnRL/Sokoban-v0", "TurnRL/Sokoban-v1"), "older rooms: split='test' draws every room"),
    **{
        i: "older tau ids: the default split is 'test', the held-out split too (v2 trains on 'train')"
        for i in ALL_IDS
        if i.startswith("TurnRL/Tau") and ENV_SPECS[i].outdated
    },
}


def test_check_turn_env(env):
    """Every registered id keeps the whole turn contract (agentgym_turn.check_turn_env), hostile actions included.
    An older speech id is checked without the hostile actions (each costs a synthesised user turn): its current
    id, the same class, replays them."""
    older_speech = "Speech" in env.spec.id and bool(ENV_SPECS[env.spec.id].outdated)
    check_turn_env(env, episodes=1, held_out=env.spec.id not in HELD_OUT_OVERLAPS, hostile=not older_speech)


def test_anchor_state_keys(env):
    """Every registered env reports ``info["state_key"]`` from reset and step: a short str, the same for the same
    state (same seed, or a fork), different once the task differs."""
    _, info = env.reset(seed=3)
    key0 = info["state_key"]
    assert isinstance(key0, str) and 0 < len(key0) <= 80
    assert env.reset(seed=3)[1]["state_key"] == key0
    keys = set()
    for seed in range(6):
        keys.add(env.reset(seed=seed)[1]["state_key"])
    assert len(keys) > 1  # different tasks are different states
    env.reset(seed=3)
    _, _, terminated, _, info = env.step("hello")
    assert isinstance(info["state_key"], str) and info["state_key"]
    if not terminated:
        fork = env.unwrapped.fork()
        assert fork._state_key() == info["state_key"]
        assert fork.step("bye")[-1]["state_key"] == env.step("bye")[-1]["state_key"]  # same state, same action


def test_state_key_is_optional_and_checked():
    env = LateJudgeEnv()
    assert "state_key" not in env.reset(seed=0)[1] and "state_key" not in env.step("x")[-1]
    env._state_key = lambda: 7  # type: ignore[method-assign]
    with pytest.raises(TypeError, match="non-empty str"):
        env.reset(seed=0)
    assert state_digest("a", [1, 2]) == state_digest("a", [1, 2]) != state_digest("a", [2, 1])
    assert state_digest(["ab"]) != state_digest(["a", "b"]) and len(state_digest({"k": 1.5})) == 16
    audio = np.zeros(3, dtype=np.float32)
    assert state_digest(audio) != state_digest(np.ones(3, dtype=np.float32))


def test_step_before_reset_and_after_end_raises():
    e = gym.make("TurnRL/WikiTwoTurn-v2").unwrapped
    with pytest.raises(ResetNeeded, match="before reset"):
        e.step("x")
    e.reset(seed=0)
    e.step("<reasoning>r</reasoning><answer>x</answer>")
    with pytest.raises(ResetNeeded, match="after the episode ended"):
        e.step("x")


def test_bad_reset_options_raise_with_the_fix():
    e = gym.make("TurnRL/WikiTwoTurn-v2")
    with pytest.raises(InvalidArgument, match="unknown keys"):
        e.reset(options={"tsk": {}})
    with pytest.raises(InvalidArgument, match="needs a dict"):
        e.reset(options={"task": "What?"})
    with pytest.raises(InvalidArgument, match="step\\(\\) takes"):
        e.reset(seed=0)
        e.unwrapped.step(123)


def test_fork_is_independent_and_shares_read_only_resources():
    e = gym.make("TurnRL/WikiTwoTurn-v2").unwrapped
    e.reset(seed=3)
    e.step('<reasoning>r</reasoning><tool>{"name": "wiki_search", "args": {"query": "opera"}}</tool>')
    child = e.fork()
    assert child.history == e.history and child.task == e.task
    assert child._retriever is e._retriever
    _, r_child, term_child, _, _ = child.step("<reasoning>r</reasoning><answer>nothing</answer>")
    assert term_child and len(child.history) == len(e.history) + 1
    _, r_parent, term_parent, _, _ = e.step(f"<reasoning>r</reasoning><answer>{e.task['answers'][0]}</answer>")
    assert term_parent and r_parent > r_child
    assert child.np_random is not e.np_random


def test_mistyped_id_suggests_the_right_one():
    with pytest.raises(gym.error.Error, match="WikiTwoTurn"):
        gym.make("TurnRL/WikiTwoTurns-v0")


def test_register_envs_idiom_and_module_prefixed_id_in_a_fresh_process():
    gym.register_envs(agentgym_turn)
    code = (
        "import gymnasium as gym\n"
        "env = gym.make('agentgym_turn:TurnRL/WikiTwoTurn-v2')\n"
        "obs, info = env.reset(seed=0)\n"
        "print(type(env.unwrapped).__name__, len(obs))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("WikiTwoTurnEnv 2")


def test_unicode_text_space_accepts_any_str():
    space = UnicodeText(max_length=10)
    assert space.contains("日本語 <x/> é")
    assert not space.contains("x" * 11) and not space.contains(b"bytes")
    assert all(space.contains(space.sample()) for _ in range(20))


def test_vector_env_needs_and_gets_shared_memory_false():
    vec = make_vec("TurnRL/WikiTwoTurn-v2", 2)
    try:
        obs, _ = vec.reset(seed=[1, 2])
        assert len(obs) == 2 and obs[0][0]["role"] == "system" and obs[0][1]["content"] != obs[1][1]["content"]
        query = '{"name": "wiki_search", "args": {"query": "theory of relativity physicist"}}'
        call = f"<reasoning>r</reasoning><tool>{query}</tool>"
        obs, reward, term, trunc, info = vec.step([call, "<reasoning>r</reasoning><answer>x</answer>"])
        assert obs[0][0]["content"].startswith("<result>\nAlbert Einstein")
        assert reward[0] >= 0.2 and bool(term[1]) and not bool(term[0])
    finally:
        vec.close()
    with pytest.raises(ValueError, match="shared_memory=False"):
        gym.make_vec("TurnRL/WikiTwoTurn-v2", 2, vectorization_mode="async")


def test_sync_vector_env():
    vec = make_vec("TurnRL/WikiTwoTurn-v2", 2, vectorization_mode="sync")
    obs, _ = vec.reset(seed=0)
    assert len(obs) == 2
    vec.close()


class LateJudgeEnv(TurnEnv):
    """Three turns; the last reports a judge's per-turn scores as late turn rewards (``late`` set by the test)."""

    reward_levels: ClassVar[dict[str, RewardLevel]] = {"task": "outcome", "judge": "turn", "fmt": "turn"}

    def __init__(self, late=None, *, late_on_turn=3):
        super().__init__()
        self.late, self.late_on_turn = late, late_on_turn

    def _sample_task(self):
        return {"id": "t"}

    def _begin(self, task):
        return [{"role": "user", "content": "go"}]

    def _turn(self, text):
        done = self.turn == 3
        late = self.late if self.turn == self.late_on_turn else None
        return TurnResult([] if done else [{"role": "user", "content": "more"}], {"fmt": 0.5}, done, {}, late)


def test_late_turn_rewards_reach_the_final_step_its_reward_and_the_metrics():
    env = LateJudgeEnv([{"judge": 1}, {"judge": -1}, {"judge": 0}])
    env.reset(seed=0)
    steps = [env.step("x") for _ in range(3)]
    assert [r for _, r, *_ in steps] == [0.5, 0.5, 0.5 + 1 - 1 + 0]
    info = steps[-1][-1]
    assert info["reward_components"] == {"fmt": 0.5}
    assert info["late_reward_components"] == [{"judge": 1.0}, {"judge": -1.0}, {"judge": 0.0}]
    assert "late_reward_components" not in steps[0][-1]
    assert info["episode_metrics"]["reward/judge"] == 0.0 and info["episode_metrics"]["env/return"] == 1.5
    per_turn = with_late_components([i["reward_components"] for *_, i in steps], info["late_reward_components"])
    assert per_turn == [{"fmt": 0.5, "judge": 1.0}, {"fmt": 0.5, "judge": -1.0}, {"fmt": 0.5, "judge": 0.0}]


@pytest.mark.parametrize(
    ("late", "on_turn", "error", "match"),
    [
        ([{"judge": 1}] * 2, 2, ValueError, "does not end the episode"),
        ([{"judge": 1}] * 2, 3, ValueError, "2 late_components for an episode of 3 turns"),
        ([{"task": 1}, {}, {}], 3, KeyError, "must be declared 'turn'"),
        ([{"nope": 1}, {}, {}], 3, KeyError, "must be declared 'turn'"),
        ([{"judge": float("nan")}, {}, {}], 3, ValueError, "non-finite late reward"),
    ],
)
def test_late_turn_rewards_are_checked(late, on_turn, error, match):
    env = LateJudgeEnv(late, late_on_turn=on_turn)
    env.reset(seed=0)
    with pytest.raises(error, match=match):
        for _ in range(3):
            env.step("x")


def test_with_late_components_sums_and_checks_length():
    assert with_late_components([{"a": 1.0}], None) == [{"a": 1.0}]
    assert with_late_components([{"a": 1.0}], [{"a": 2.0, "b": 1.0}]) == [{"a": 3.0, "b": 1.0}]
    with pytest.raises(ValueError, match="1 entries for 2 turns"):
        with_late_components([{}, {}], [{}])
