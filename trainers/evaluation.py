"""Held-out greedy evaluation on a fixed validation subset, callable from inside the training loop.

The papers' curves are validation curves: every ``eval_every`` steps the current policy plays the same ``tasks``
held-out tasks greedily (temperature 0), through the same rollout code as training (``trainers.rollout.collect``,
token-in-token-out), and the means of the env's episode metrics are logged as ``eval/...`` with 95% CI half-widths
as ``eval_ci95/...``::

    held_out = HeldOut(("TurnRL/WikiTwoTurn-v2",), tasks=64, seed=12345, max_new_tokens=96, max_turns=4)
    pools = held_out.pools()                      # made once: gym.make of a retrieval env is not free
    row.update(evaluate_policy(engine, tokenizer, held_out, pools))
    # {"eval/env/exact_match": 0.31, "eval_ci95/env/exact_match": 0.11, "eval/env/tool_called": 0.94, ...}

**Which tasks.** Each env is made with its id's held-out kwargs, kept in the registry beside the id
(:func:`agentgym_turn.registration.held_out_kwargs`, which the leaderboard families read too: WikiTwoTurn
``split="validation"``, SearchR1 ``split="test"``; Sokoban rooms are procedural, held out by seed), updated by
``env_kwargs``. Task seeds are drawn from ``numpy.random.default_rng(seed)`` exactly as
``leaderboards.evaluate`` draws them (:func:`trainers.rollout.task_seeds`), so an in-training evaluation with
seed S and N tasks poses the same tasks as ``python -m leaderboards.evaluate --seed S --episodes N`` and its numbers
are comparable with the leaderboard's.

**Keys.** ``eval/<key>`` is the mean over tasks of every key :func:`trainers.metrics.episode_summary` reports
(``env/...`` and ``reward/...`` episode metrics, ``rollout/turns``, ``rollout/format_rate``, ``rollout/return``);
``eval_ci95/<key>`` is the half-width of the normal-approximation 95% interval of the mean over tasks
(:func:`agentgym_turn.metrics.normal_ci`; 0 when every task scored the same); ``eval/seconds`` and
``eval/tokens_per_s`` time the evaluation. With several env ids each is evaluated on its own ``tasks`` tasks and
its keys carry the env's name: ``eval/WikiTwoTurn-v2/env/exact_match``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym_turn.error import InvalidArgument
from agentgym_turn.metrics import normal_ci

DEFAULT_SEED = 12_345
"""Seed of the fixed held-out subset (apart from the training seeds 0, 1, 2, ...)."""

CONFIDENCE = 0.95


def held_out_kwargs(env_id: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``gym.make`` kwargs of ``env_id``'s held-out tasks: the registry's (e.g. ``split="validation"``,
    :func:`agentgym_turn.registration.held_out_kwargs`), updated by ``overrides``. An env that is not a TurnRL id
    takes its env class's ``held_out`` attribute (a user's env: ``held_out = {"split": "test"}``), or else needs
    explicit ``overrides`` (``{}`` when its tasks are held out by seed alone), so an evaluation never falls back to
    the training split unnoticed."""
    from agentgym_turn.registration import held_out_kwargs as registered

    try:
        base = registered(env_id)  # "pkg.module:NS/Name-v0" imports pkg.module first, as gym.make does
    except InvalidArgument as exc:
        if overrides is None:
            raise InvalidArgument(
                f"{exc} Without a held-out definition there is no leaderboard family to evaluate on either; or pass "
                "env_kwargs (--eval-env-kwarg key=value), e.g. {'split': 'validation'}, or {} when its tasks are "
                "held out by seed alone."
            ) from None
        base = {}
    return {**base, **dict(overrides or {})}


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``["split=validation", "top_k=3"]`` -> ``{"split": "validation", "top_k": 3}`` (values parsed as JSON when
    they are JSON, else kept as text): the ``--env-kwarg`` / ``--eval-env-kwarg`` flags."""
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--env-kwarg {item!r} must be key=value, e.g. split=validation or top_k=3.")
        try:
            out[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            out[key.strip()] = text
    return out


@dataclass(frozen=True)
class HeldOut:
    """A fixed held-out evaluation: which envs, how many tasks, which seed, and the generation budgets.

    Attributes:
        env_ids: env ids to evaluate on (each on its own ``tasks`` tasks).
        tasks: held-out tasks per env id, one greedy episode each.
        seed: seed of the task draw (the same tasks at every evaluation of a run, and across runs).
        env_kwargs: ``gym.make`` kwargs over the family's held-out kwargs (:func:`held_out_kwargs`); required
            (``{}`` at least) for an env without a leaderboard family.
        max_new_tokens, max_turns, max_context: the rollout budgets (use the training run's, so the evaluation
            measures the policy under the conditions it is trained in).
    """

    env_ids: tuple[str, ...]
    tasks: int = 64
    seed: int = DEFAULT_SEED
    env_kwargs: Mapping[str, Any] | None = None
    max_new_tokens: int = 128
    max_turns: int = 8
    max_context: int = 2048

    def __post_init__(self) -> None:
        if not self.env_ids:
            raise InvalidArgument("HeldOut needs at least one env id, e.g. ('TurnRL/WikiTwoTurn-v2',).")
        if self.tasks < 1:
            raise InvalidArgument(f"eval tasks={self.tasks} must be >= 1 (e.g. 64 for a CI of about +-0.1).")

    def pools(self) -> dict[str, Any]:
        """One :class:`~trainers.rollout.EnvPool` per env id, made with the held-out kwargs (reuse them across
        evaluations; close them with :func:`close_pools`)."""
        from trainers.rollout import EnvPool

        return {e: EnvPool([e], make_kwargs=held_out_kwargs(e, self.env_kwargs)) for e in self.env_ids}


def close_pools(pools: Mapping[str, Any]) -> None:
    """Close the envs of :meth:`HeldOut.pools`."""
    for pool in pools.values():
        pool.close()


def play_greedy(
    engine: Any, tokenizer: Any, pool: Any, rcfg: Any, *, tasks: int, seed: int, trials: int = 1
) -> tuple[list[Any], Any]:
    """Play ``tasks`` tasks of ``pool`` (``trials`` episodes each, group ``g`` = task ``g``) with ``engine`` under
    ``rcfg`` (set ``temperature=0`` for greedy); the task draw of ``leaderboards.evaluate`` for the same seed:
    ``tasks`` distinct tasks (:func:`trainers.rollout.distinct_task_seeds`) where the pool holds one env id."""
    from trainers.engines import stop_token_ids
    from trainers.rollout import collect, distinct_task_seeds, engine_actor

    seeds = None
    if len(pool.env_ids) == 1:
        seeds = distinct_task_seeds(pool.get(pool.env_ids[0], 1)[0], seed, tasks)
    actor = engine_actor(engine, rcfg, seed=seed)
    return collect(pool, actor, tokenizer, stop_token_ids(tokenizer), rcfg, num_tasks=tasks, group_size=trials,
                   seed=seed, seeds=seeds)  # fmt: skip


def summarize(episodes: Sequence[Any], stop_ids: Sequence[int], prefix: str = "eval/") -> dict[str, float]:
    """``{prefix}<key>`` means (:func:`trainers.metrics.episode_summary`) and ``eval_ci95/<key>`` normal-approx
    95% CI half-widths over episodes of every per-episode key (env metrics, ``rollout/return``, ``rollout/turns``)."""
    import numpy as np

    from trainers.metrics import episode_summary

    ci_prefix = prefix.replace("eval/", "eval_ci95/", 1)
    out = {f"{prefix}{k}": v for k, v in episode_summary(episodes, stop_ids).items() if not k.endswith("_tokens")}
    per_episode: dict[str, list[float]] = {
        "rollout/return": [float(ep.total_reward) for ep in episodes],
        "rollout/turns": [float(ep.num_turns) for ep in episodes],
    }
    for ep in episodes:
        for key, value in ep.metrics.items():
            if isinstance(value, int | float):
                per_episode.setdefault(key if "/" in key else f"env/{key}", []).append(float(value))
    for key, values in per_episode.items():
        ci = normal_ci(np.asarray(values), confidence=CONFIDENCE)
        out[f"{ci_prefix}{key}"] = (ci.high - ci.low) / 2
    return out


def evaluate_policy(
    engine: Any,
    tokenizer: Any,
    held_out: HeldOut,
    pools: Mapping[str, Any] | None = None,
    record: dict[str, list[Any]] | None = None,
) -> dict[str, float]:
    """Greedy episodes of the engine's current policy on the fixed held-out tasks; ``eval/...`` means and
    ``eval_ci95/...`` half-widths (see the module docstring). ``pools`` from :meth:`HeldOut.pools` (made and
    closed here when ``None``). ``record``: each env id's episodes are put there too (the trainer's traces)."""
    import time

    from trainers.engines import stop_token_ids
    from trainers.rollout import RolloutConfig

    rcfg = RolloutConfig(max_new_tokens=held_out.max_new_tokens, max_context=held_out.max_context,
                         max_turns=held_out.max_turns, temperature=0.0)  # fmt: skip
    own = pools is None
    pools = held_out.pools() if own else pools
    t0, tokens = time.perf_counter(), 0
    out: dict[str, float] = {}
    try:
        for env_id in held_out.env_ids:
            episodes, stats = play_greedy(engine, tokenizer, pools[env_id], rcfg, tasks=held_out.tasks,
                                          seed=held_out.seed)  # fmt: skip
            tokens += stats.policy_tokens
            if record is not None:
                record[env_id] = episodes
            name = env_id.rsplit("/", 1)[-1]
            prefix = "eval/" if len(held_out.env_ids) == 1 else f"eval/{name}/"
            out.update(summarize(episodes, stop_token_ids(tokenizer), prefix))
    finally:
        if own:
            close_pools(pools)
    seconds = time.perf_counter() - t0
    out["eval/seconds"] = seconds
    out["eval/tokens_per_s"] = tokens / max(seconds, 1e-9)
    return out
