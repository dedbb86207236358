"""Rollout throughput with the envs in Ray actors vs in this process (run: ``python bench/bench_ray.py [--quick]``).

One local Ray cluster (this machine); the same ``trainers.rollout.collect`` call plays ``--tasks`` tasks x
``--group`` episodes of ``--env`` (default ``TurnRL/WikiTwoTurn-v2``: its first turn is a BM25 search, tens of ms
of env work per step; its training tasks are v1's, on which the committed numbers were measured) with a scripted
policy, three ways:

* ``in-process``: :class:`~trainers.rollout.EnvPool`, the envs in this process (what ``trainers.rl`` does today);
* ``ray-1`` / ``ray-2``: :class:`~trainers.ray_rollout.RayEnvPool` with 1 and 2 env-worker actors, the actor
  wrapped by :meth:`~trainers.ray_rollout.RayEnvPool.pipeline` (each turn's steps go to the workers at once).

Two actors, each a table: ``scripted`` runs the env's scripted policy where the env is (for Ray: one more round
trip per episode and turn); ``recorded`` replays the turns the scripted policy played in-process for that seed, call
by call, like an engine that costs nothing and never reads the env (the trainer's case: the engine's ids in, the
env's answers out). So the numbers are the env-side cost of a rollout: what Ray adds (serialisation, round trips)
and what a second worker takes off (steps in parallel). With an engine, its generation time comes on top.

Every pool is made (and its envs built by a warm-up batch) before timing. Each round plays one seed in every mode,
the order alternating round by round (A B C, C B A, ...), and checks that the three modes produced identical
episodes. Columns: median wall seconds of a batch over rounds, episodes/s, env steps/s, and the ratio of the
median wall to the in-process one (> 1: slower than in-process).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x.token_ids, y.token_ids)
        and np.array_equal(x.loss_mask, y.loss_mask)
        and x.turn_rewards == y.turn_rewards
        and x.metrics == y.metrics
        for x, y in zip(a, b, strict=True)
    )


def recording(actor: Any, calls: list) -> Any:
    """``actor``, keeping every call's generations."""

    def act(slots: list, budgets: list[int]) -> list:
        calls.append(actor(slots, budgets))
        return calls[-1]

    return act


def replaying(calls: list) -> Any:
    """An actor that returns the recorded generations call by call (an engine that costs nothing and never reads
    the env: the env-side cost of a rollout alone)."""
    it = iter(calls)

    def act(slots: list, budgets: list[int]) -> list:
        gens = next(it)
        if len(gens) != len(slots):
            raise RuntimeError(f"recorded {len(gens)} generations for {len(slots)} active episodes")
        return gens

    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 tasks x 4 episodes, one round")
    parser.add_argument("--env", default="TurnRL/WikiTwoTurn-v2")
    parser.add_argument("--policy", default="reference", help="the env's scripted policy")
    parser.add_argument("--actors", default="scripted,recorded", help="scripted and/or recorded, comma-separated")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="env-worker counts to compare, comma-separated")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster (this machine: 2)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.group, args.rounds = 2, 4, 1

    import ray

    from agentgym_turn.models import load_tokenizer
    from trainers.engines import stop_token_ids
    from trainers.ray_rollout import RayEnvPool
    from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor

    tok = load_tokenizer("smollm2")
    stops = stop_token_ids(tok)
    cfg = RolloutConfig(max_new_tokens=256, max_context=2048, max_turns=4)
    counts = [int(w) for w in args.workers.split(",")]
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    print(f"[bench_ray] ray {ray.__version__} local cluster ({args.cpus} CPUs) up in {time.perf_counter() - t0:.1f} s")
    pools: dict[str, EnvPool] = {"in-process": EnvPool([args.env])}
    for n in counts:
        t0 = time.perf_counter()
        pools[f"ray-{n}"] = RayEnvPool([args.env], workers=n, worker_cpus=args.cpus / (2 * sum(counts)))
        print(f"[bench_ray] ray-{n}: {n} env worker(s) up in {time.perf_counter() - t0:.1f} s")

    def batch(mode: str, seed: int, kind: str, recorded: list | None = None) -> tuple[list, float]:
        pool = pools[mode]
        actor = scripted_actor(tok, stops[-1], [args.policy], None) if kind == "scripted" else replaying(recorded)
        if isinstance(pool, RayEnvPool):
            actor = pool.pipeline(actor, tok, stops)
        t = time.perf_counter()
        episodes, _ = collect(pool, actor, tok, stops, cfg, num_tasks=args.tasks, group_size=args.group, seed=seed)
        return episodes, time.perf_counter() - t

    for mode in pools:  # warm-up: every env made, JVMs and indexes loaded
        t0 = time.perf_counter()
        batch(mode, args.seed + 10_000, "scripted")
        print(f"[bench_ray] {mode}: warm-up batch (envs made) {time.perf_counter() - t0:.1f} s")

    modes = list(pools)
    for kind in args.actors.split(","):
        walls: dict[str, list[float]] = {m: [] for m in modes}
        steps = episodes_n = 0
        for rnd in range(args.rounds):
            seed = args.seed + rnd
            recorded: list = []
            if kind == "recorded":  # the scripted turns of this seed, recorded in-process (not timed)
                actor = recording(scripted_actor(tok, stops[-1], [args.policy], None), recorded)
                collect(pools["in-process"], actor, tok, stops, cfg, num_tasks=args.tasks, group_size=args.group,
                        seed=seed)  # fmt: skip
            order = modes if rnd % 2 == 0 else modes[::-1]
            got = {}
            for mode in order:
                got[mode], wall = batch(mode, seed, kind, recorded)
                walls[mode].append(wall)
            ref = got["in-process"]
            same = all(_same(ref, got[m]) for m in modes)
            times = ", ".join(f"{m} {walls[m][-1]:.2f} s" for m in modes)
            print(f"[bench_ray] {kind} round {rnd} ({' '.join(order)}): {times}; identical episodes: {same}")
            if not same:
                raise SystemExit("the Ray pools produced different episodes than the in-process pool")
            steps, episodes_n = sum(ep.num_turns for ep in ref), len(ref)
        base = statistics.median(walls["in-process"])
        print(f"\n{args.env}, {kind} {args.policy!r} turns: {args.tasks} tasks x {args.group} = {episodes_n} "
              f"episodes, {steps} env steps a batch, median of {args.rounds} round(s)")  # fmt: skip
        print(f"{'mode':<12}{'wall s':>9}{'episodes/s':>12}{'steps/s':>10}{'vs in-process':>15}")
        for mode in modes:
            wall = statistics.median(walls[mode])
            print(f"{mode:<12}{wall:>9.3f}{episodes_n / wall:>12.1f}{steps / wall:>10.1f}{wall / base:>14.2f}x")
        print()
    for pool in pools.values():
        pool.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
