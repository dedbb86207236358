"""Benchmark of TurnRL/TauRetail-v1 and TurnRL/TauAirline-v1 (run: ``python bench/bench_tau.py``).

Measures, in one run on this machine (medians over repeats; the machine is shared, so compare the ratios):
  * step latency: a read tool call, a write tool call (one transaction), a reply answered by the scripted user;
    reset (private copy of the database by SQLite's backup API) and fork (the same plus a deep copy of the env);
  * reward computation on the same final database, four ways:
      - ``dirty``: our state hash (only the tables the episode wrote are re-read; the verifier's default),
      - ``rows``: sha256 of every table's sorted rows (the same hash recomputed from scratch),
      - ``json``: export to db.json's shape, then sha256 of ``json.dumps(..., sort_keys=True)``,
      - ``tau``: export, then τ-bench's ``sha256(str(to_hashable(...)))`` (sorted tuples of the whole state);
    timed on the gold end state of the first task with a write, and checks that all four agree (equal for the gold
    replay vs the oracle's end state, different after one changed value) on a sample of tasks with a write.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from agentgym_turn.policies import run_episode
from envs.tau.data import load_domain
from envs.tau.db import Database, state_hash
from envs.tau.env import TauEnv, oracle_policy
from envs.tau.verifier import replay_gold, write_tool_names


def to_hashable(item: Any) -> Any:
    """τ-bench's canonical form: dicts become sorted (key, value) tuples, lists become tuples."""
    if isinstance(item, dict):
        return tuple((key, to_hashable(value)) for key, value in sorted(item.items()))
    if isinstance(item, list):
        return tuple(to_hashable(x) for x in item)
    if isinstance(item, set):
        return tuple(sorted(to_hashable(x) for x in item))
    return item


def tau_hash(db: Database) -> str:
    return hashlib.sha256(str(to_hashable(db.export())).encode()).hexdigest()


def json_hash(db: Database) -> str:
    return hashlib.sha256(json.dumps(db.export(), sort_keys=True).encode()).hexdigest()


HASHES: dict[str, Callable[[Database], str]] = {
    "dirty": lambda db: db.state_hash(),
    "rows": lambda db: state_hash(db.conn),
    "json": json_hash,
    "tau": tau_hash,
}


def timeit(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def bench_steps(domain: str, repeats: int) -> dict[str, float]:
    env = TauEnv(domain, split="all")
    task = {"id": "0"}
    read, write = (
        (call("get_order_details", order_id="#W2378156"), call("modify_user_address", user_id="yusuf_rossi_9620",
         address1="1 A St", address2="", city="X", state="CA", country="USA", zip="12345"))
        if domain == "retail"
        else (call("get_reservation_details", reservation_id="4WQ150"),
              call("update_reservation_baggages", reservation_id="4WQ150", total_baggages=5, nonfree_baggages=0,
                   payment_id="gift_card_3576581"))
    )  # fmt: skip
    out = {}
    out["reset_ms"] = 1e3 * timeit(lambda: env.reset(seed=0, options={"task": task}), repeats)
    env.reset(seed=0, options={"task": task})

    def step(action: str) -> None:
        env.step(action)
        if env._done:
            env.reset(seed=0, options={"task": task})

    out["step_read_ms"] = 1e3 * timeit(lambda: step(read), repeats)
    out["step_write_ms"] = 1e3 * timeit(lambda: step(write), repeats)
    out["step_user_reply_ms"] = 1e3 * timeit(lambda: step("Could you tell me your order id?"), repeats)
    out["fork_ms"] = 1e3 * timeit(env.fork, repeats)
    return out


def bench_hashes(domain: str, repeats: int, sample: int) -> tuple[dict[str, float], dict[str, int]]:
    data = load_domain(domain)
    writes = write_tool_names(domain) - {"transfer_to_human_agents"}
    tasks = [t for t in data.tasks if any(a["name"] in writes for a in t["evaluation_criteria"]["actions"])]
    db, _ = replay_gold(data, tasks[0])
    times = {name: 1e3 * timeit(lambda fn=fn: fn(db), repeats if name in ("dirty", "rows") else max(3, repeats // 5))
             for name, fn in HASHES.items()}  # fmt: skip
    agree = {"tasks": 0, "all_equal_on_gold": 0, "all_differ_after_change": 0}
    env = TauEnv(domain, split="all")
    for task in tasks[:sample]:
        gold, _ = replay_gold(data, task)
        run_episode(env, oracle_policy, seed=0, options={"task": {"id": task["id"]}})
        mine = env.database
        assert mine is not None
        agree["tasks"] += 1
        agree["all_equal_on_gold"] += all(fn(gold) == fn(mine) for fn in HASHES.values())
        changed = copy.deepcopy(mine)
        changed.conn.execute("UPDATE users SET zip = zip || '9' WHERE user_id = (SELECT MIN(user_id) FROM users)")
        agree["all_differ_after_change"] += all(fn(gold) != fn(changed) for fn in HASHES.values())
    return times, agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=50, help="timing repeats per measurement (median reported)")
    parser.add_argument("--sample", type=int, default=20, help="tasks per domain for the hash agreement check")
    args = parser.parse_args()
    for domain in ("retail", "airline"):
        t0 = time.perf_counter()
        load_domain(domain)
        Database.fresh(load_domain(domain))
        print(f"== {domain}: load db.json + build SQLite template {1e3 * (time.perf_counter() - t0):.0f} ms")
        for key, value in bench_steps(domain, args.repeats).items():
            print(f"  {key:<22} {value:8.2f}")
        times, agree = bench_hashes(domain, args.repeats, args.sample)
        print("  reward hash (ms)       " + "  ".join(f"{k}={v:.2f}" for k, v in times.items()))
        print("  ratio vs tau           " + "  ".join(f"{k}={times['tau'] / v:.1f}x" for k, v in times.items()))
        print(f"  agreement              {agree}")


if __name__ == "__main__":
    main()
