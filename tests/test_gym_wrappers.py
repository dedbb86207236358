"""Gymnasium's own wrappers on every registered TurnRL id (issue 48): ``RecordEpisodeStatistics(TimeLimit(env, N))``
to the episode's natural end and to a ``TimeLimit`` cut, and the vector ``RecordEpisodeStatistics`` over sync and
async vector envs. Gymnasium owns ``info["episode"]`` (``{r, l, t}``); TurnRL's metrics are in
``info["episode_metrics"]`` (``EPISODE_METRICS_KEY``), so both arrive side by side."""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit
from gymnasium.wrappers.vector import RecordEpisodeStatistics as VectorRecordEpisodeStatistics

import agentgym_turn
from agentgym_turn import ENV_SPECS, EPISODE_METRICS_KEY

ALL_IDS = sorted(ENV_SPECS)

_TRANSFER = '<tool_call>{"name": "transfer_to_human_agents", "arguments": {"summary": "Needs a human."}}</tool_call>'
_CALCULATE = '<tool_call>{"name": "calculate", "arguments": {"expression": "1 + 1"}}</tool_call>'

#: env class -> (a turn that ends the episode at once or, repeated, within 5 turns; a turn that does not end it)
ACTIONS: dict[str, tuple[str, str]] = {
    "WikiTwoTurnEnv": (
        "<reasoning>r</reasoning><answer>Paris</answer>",
        '<reasoning>r</reasoning><tool>{"name": "wiki_search", "args": {"query": "opera"}}</tool>',
    ),
    "SearchR1Env": ("<think>t</think><answer>Paris</answer>", "<think>t</think><search>opera</search>"),
    "SokobanEnv": ("<think>t</think><answer>Up</answer>",) * 2,  # max_turns=3 ends it; one move solves no room
    "ArithmeticEnv": ("I do not know.",) * 2,  # max_attempts=1 ends it (the cut makes it with max_attempts=2)
    "TauEnv": (_TRANSFER, _CALCULATE),  # a transfer ends the call; a tool call gets its result back
    "TauSpeechEnv": (_TRANSFER, _CALCULATE),
    "CreditChainEnv": ("<choice>umbrella</choice>",) * 2,  # every turn is played; horizon=4 ends it
}

#: env class -> gym.make kwargs that keep the test cheap without changing rewards or tasks
CHEAP: dict[str, dict[str, Any]] = {"TauSpeechEnv": {"voice": "espeak"}}  # espeak-ng: ~10x faster than piper


def _class(env_id: str) -> str:
    return ENV_SPECS[env_id].entry_point.rpartition(":")[2]


def _make(env_id: str, **kwargs: Any) -> gym.Env:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # older ids warn when made; they must still work
        return gym.make(env_id, **CHEAP.get(_class(env_id), {}), **kwargs)


def _check_stats(stats: dict[str, Any], rewards: list[float]) -> None:
    assert set(stats) == {"r", "l", "t"}
    assert float(stats["r"]) == pytest.approx(sum(rewards)) and int(stats["l"]) == len(rewards)
    assert float(stats["t"]) >= 0.0


def test_every_id_is_covered():
    missing = {_class(i) for i in ALL_IDS} - set(ACTIONS)
    assert not missing, f"add an ending and a non-ending turn for {sorted(missing)} to ACTIONS"
    assert EPISODE_METRICS_KEY == agentgym_turn.core.EPISODE_METRICS_KEY == "episode_metrics"


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_record_episode_statistics_over_time_limit(env_id: str):
    """The natural end: Gymnasium's statistics and TurnRL's metrics in one ``info``; then a ``TimeLimit`` cut."""
    end, go_on = ACTIONS[_class(env_id)]
    env = RecordEpisodeStatistics(TimeLimit(_make(env_id), 5))
    env.reset(seed=0)
    rewards, terminated, truncated, info = [], False, False, {}
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(end)
        rewards.append(float(reward))
    assert terminated and not truncated and len(rewards) <= 5
    _check_stats(info["episode"], rewards)
    metrics = info[EPISODE_METRICS_KEY]
    assert metrics["env/return"] == pytest.approx(sum(rewards)) and metrics["env/turns"] == len(rewards)
    env.reset(seed=1)  # the wrapper starts a new count
    assert env.episode_returns == 0.0 and env.episode_lengths == 0
    env.close()

    extra = {"max_attempts": 2} if _class(env_id) == "ArithmeticEnv" else {}
    env = RecordEpisodeStatistics(TimeLimit(_make(env_id, **extra), 1))
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(go_on)
    assert truncated and not terminated
    _check_stats(info["episode"], [float(reward)])
    # The cut came from outside the env: no TurnRL metrics yet; truncate() ends the episode the TurnRL way.
    assert EPISODE_METRICS_KEY not in info
    assert env.unwrapped.truncate()[EPISODE_METRICS_KEY]["env/turns"] == 1.0
    env.close()


def _play_vector(vec: gym.vector.VectorEnv, action: str) -> None:
    """Step every sub-env with ``action`` until each ended one episode; check the vector statistics on each end."""
    vec = VectorRecordEpisodeStatistics(vec)
    try:
        vec.reset(seed=0)
        n = vec.num_envs
        returns, lengths, ended = np.zeros(n), np.zeros(n, dtype=int), np.zeros(n, dtype=bool)
        for _ in range(10):
            _, reward, terminated, truncated, infos = vec.step([action] * n)
            playing = ~ended
            returns[playing] += reward[playing]
            lengths[playing] += 1
            done = (terminated | truncated) & playing
            for i in np.flatnonzero(done):
                assert infos["_episode"][i] and infos[f"_{EPISODE_METRICS_KEY}"][i]
                assert set(infos["episode"]) == {"r", "l", "t"}
                assert infos["episode"]["r"][i] == pytest.approx(returns[i]) and infos["episode"]["l"][i] == lengths[i]
                assert infos[EPISODE_METRICS_KEY]["env/return"][i] == pytest.approx(returns[i])
            ended |= done
            if ended.all():
                break
        assert ended.all(), f"not every sub-env ended within 10 steps: {ended}"
        assert len(vec.return_queue) == n
    finally:
        vec.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_vector_record_episode_statistics_sync(env_id: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", **CHEAP.get(_class(env_id), {}))
    _play_vector(vec, ACTIONS[_class(env_id)][0])


#: The current id of each env class: an older id differs by ``gym.make`` kwargs only, which the sync test covers.
CURRENT_IDS = [i for i in ALL_IDS if not ENV_SPECS[i].outdated]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", CURRENT_IDS)
def test_vector_record_episode_statistics_async(env_id: str):
    """One process per sub-env (``agentgym_turn.make_vec``: ``shared_memory=False``, spawn): every env class, its
    resources (Lucene index, SQLite database, TTS voice) and its infos cross the process boundary."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        vec = agentgym_turn.make_vec(env_id, 2, vectorization_mode="async", **CHEAP.get(_class(env_id), {}))
    _play_vector(vec, ACTIONS[_class(env_id)][0])
