"""Benchmark TurnRL/Sokoban-v2 (6x6 rooms) against gym-sokoban's own env, side by side in one run; and room generation.

    python bench/bench_sokoban.py                 # ~1 minute (the first run also builds the reference venv)
    python bench/bench_sokoban.py --steps 500 --no-reference

What is timed (6x6 rooms, one box):

* **env steps/s**: ``step()`` calls only (resets excluded). Ours: one turn of three random actions as
  ``<think>..</think><answer>A || B || C</answer>`` text (parsing, dynamics, rewards, text observation). gym-sokoban:
  one action per ``step()`` with its default ``rgb_array`` observation (and with ``tiny_rgb_array``). Both are also
  reported per *action*, since one of our steps plays up to three.
* **room generation**: gym-sokoban's ``generate_room`` alone, our filtered sampler (generation + BFS, retrying seeds
  until the shortest solution is 5..9 actions) cold, and the same seeds again from the per-seed cache.

gym-sokoban's env needs the old ``gym`` and ``pkg_resources`` (setuptools < 82), which the project environment does
not have, so it runs in a small virtualenv under the TurnRL cache dir (built once with pip; needs PyPI) in a
subprocess of this script, interleaved with our measurement so both share the machine's state.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import venv
from pathlib import Path

import numpy as np

REFERENCE_PACKAGES = ["gym==0.26.2", "setuptools<82", "numpy<2", "imageio", "requests", "tqdm"]

REFERENCE_SCRIPT = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
import numpy as np
from gym_sokoban.envs.sokoban_env import SokobanEnv
steps, seed = int(sys.argv[1]), int(sys.argv[2])
out = {}
for mode in ("rgb_array", "tiny_rgb_array"):
    np.random.seed(seed)
    env = SokobanEnv(dim_room=(6, 6), num_boxes=1, max_steps=10**9)
    rng = np.random.default_rng(seed)
    actions = rng.integers(1, 9, size=steps)  # 1-4 push, 5-8 move (0 is a no-op)
    spent = 0.0
    for a in actions:
        t = time.perf_counter()
        _, _, done, _ = env.step(int(a), observation_mode=mode)
        spent += time.perf_counter() - t
        if done:
            env.reset()
    out[mode] = steps / spent
t = time.perf_counter()
n = 0
while time.perf_counter() - t < 2.0:
    env.reset(render_mode="tiny_rgb_array"); n += 1
out["reset_per_s"] = n / (time.perf_counter() - t)
print(json.dumps(out))
"""


REFERENCE_DYNAMICS = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np
from gym_sokoban.envs.sokoban_env import SokobanEnv
env = SokobanEnv(dim_room=(6, 6), num_boxes=1, reset=False)
out = []
for case in json.load(sys.stdin):
    env.room_fixed = np.array(case["fixed"])
    env.room_state = np.array(case["state"])
    env.player_position = np.argwhere(env.room_state == 5)[0]
    env.num_boxes = int(((env.room_state == 3) | (env.room_state == 4)).sum())
    env.boxes_on_target = int((env.room_state == 3).sum())
    env.num_env_steps = 0
    states = []
    for a in case["actions"]:
        _, _, done, info = env.step(a, observation_mode="tiny_rgb_array")
        states.append([env.room_state.tolist(), bool(info["action.moved_player"]), bool(done)])
    out.append(states)
print(json.dumps(out))
"""


def to_gym_sokoban(board) -> tuple[list[list[int]], list[list[int]]]:
    """A board as gym-sokoban's (fixed, state) codes: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player."""
    fixed = [[0 if (r, c) in board.walls else 2 if (r, c) in board.targets else 1 for c in range(board.width)]
             for r in range(board.height)]  # fmt: skip
    state = [row[:] for row in fixed]
    for r, c in board.boxes:
        state[r][c] = 3 if (r, c) in board.targets else 4
    state[board.player[0]][board.player[1]] = 5
    return fixed, state


def check_dynamics(n_rooms: int, n_actions: int, seed: int) -> tuple[int, int]:
    """Play the same random actions in gym-sokoban's env and with our ``apply_move``; count identical states."""
    from envs.sokoban import rooms
    from envs.sokoban.board import DIRECTIONS, apply_move

    rng = np.random.default_rng(seed)
    names = list(DIRECTIONS)  # Up, Down, Left, Right = gym-sokoban's "push" actions 1..4 (push, else move)
    cases, ours = [], []
    for k in range(n_rooms):
        board = rooms.find_room(seed + 1000 * k, rooms.RoomConfig(min_solution_length=1)).board
        actions = [int(a) for a in rng.integers(1, 5, size=n_actions)]
        fixed, state = to_gym_sokoban(board)
        cases.append({"fixed": fixed, "state": state, "actions": actions})
        trajectory = []
        for a in actions:
            result = apply_move(board, names[a - 1])
            board = result.board
            trajectory.append([to_gym_sokoban(board)[1], result.moved, board.solved])
        ours.append(trajectory)
    proc = subprocess.run([str(reference_python()), "-c", REFERENCE_DYNAMICS], input=json.dumps(cases),
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"gym-sokoban dynamics check failed:\n{proc.stderr[-2000:]}")
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    same = total = 0
    for mine, ref in zip(ours, theirs, strict=True):
        for a, b in zip(mine, ref, strict=True):
            if a[1] and a[2]:  # gym-sokoban's env is "done" once solved; compare up to there
                same, total = same + (a == b), total + 1
                break
            same, total = same + (a == b), total + 1
    return same, total


def reference_python() -> Path:
    """The python of a virtualenv holding gym-sokoban 0.0.6 and its old dependencies (built on first use)."""
    from agentgym_turn.paths import cache_dir

    root = cache_dir("bench", "gym-sokoban-venv", create=False)
    python = root / "bin" / "python"
    marker = root / ".complete"
    if not marker.exists():
        print(f"building the reference virtualenv in {root} (pip, ~20 s) ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(root)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *REFERENCE_PACKAGES], check=True)
        subprocess.run([*pip, "--no-deps", "gym-sokoban==0.0.6"], check=True)
        marker.write_text("ok\n")
    return python


def run_reference(steps: int, seed: int) -> dict[str, float]:
    python = reference_python()
    proc = subprocess.run(
        [str(python), "-c", REFERENCE_SCRIPT, str(steps), str(seed)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"gym-sokoban reference failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_ours(steps: int, seed: int) -> dict[str, float]:
    import gymnasium as gym

    import agentgym_turn

    gym.register_envs(agentgym_turn)
    env = gym.make("TurnRL/Sokoban-v2", dim=(6, 6), max_turns=10**9)  # gym-sokoban's room size; no budget end
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    texts = []
    names = ["Up", "Down", "Left", "Right"]
    for _ in range(steps):
        acts = [names[i] for i in rng.integers(0, 4, size=3)]
        texts.append(f"<think>random</think><answer>{' || '.join(acts)}</answer>")
    spent, played = 0.0, 0
    for text in texts:
        t = time.perf_counter()
        _, _, terminated, _, info = env.step(text)
        spent += time.perf_counter() - t
        played += len(info["actions_played"])
        if terminated:
            env.reset(seed=int(rng.integers(1 << 30)))
    return {"steps_per_s": steps / spent, "actions_per_s": played / spent, "actions_per_step": played / steps}


def bench_rooms(n: int, seed: int) -> dict[str, float]:
    from envs.sokoban import rooms

    config = rooms.RoomConfig()
    seeds = [seed + 7919 * i for i in range(n)]
    failed = 0
    t = time.perf_counter()
    for s in seeds:
        try:
            rooms.generate_board(s)
        except (RuntimeError, RuntimeWarning):  # the generator rejects some seeds; the sampler tries the next
            failed += 1
    generate = (time.perf_counter() - t) / n
    rooms.room_for_seed.cache_clear()
    t = time.perf_counter()
    found = [rooms.find_room(s, config) for s in seeds]
    cold = (time.perf_counter() - t) / n
    t = time.perf_counter()
    for s in seeds:
        rooms.find_room(s, config)
    warm = (time.perf_counter() - t) / n
    tries = np.mean([r.seed - s + 1 for r, s in zip(found, seeds, strict=True)])
    return {"generate_ms": 1e3 * generate, "filtered_cold_ms": 1e3 * cold, "filtered_cached_ms": 1e3 * warm,
            "seeds_tried_per_room": float(tries), "generator_failures": failed}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="env steps timed per measurement")
    parser.add_argument("--rooms", type=int, default=100, help="rooms generated for the generation timing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-reference", action="store_true", help="skip gym-sokoban's own env")
    args = parser.parse_args()

    ours_a = bench_ours(args.steps, args.seed)
    ref = None if args.no_reference else run_reference(args.steps, args.seed)
    ours_b = bench_ours(args.steps, args.seed + 1)
    rooms_stats = bench_rooms(args.rooms, args.seed)
    agreement = None if args.no_reference else check_dynamics(200, 30, args.seed)

    ours_steps = float(np.mean([ours_a["steps_per_s"], ours_b["steps_per_s"]]))
    ours_actions = float(np.mean([ours_a["actions_per_s"], ours_b["actions_per_s"]]))
    print(f"TurnRL/Sokoban-v2 step (3-action turn as text): {ours_a['steps_per_s']:9.0f} / "
          f"{ours_b['steps_per_s']:9.0f} steps/s (two runs), {ours_actions:9.0f} actions/s")  # fmt: skip
    if ref is not None:
        for mode in ("rgb_array", "tiny_rgb_array"):
            print(f"gym-sokoban SokobanEnv.step ({mode:>14}):  {ref[mode]:9.0f} steps/s (1 action each)"
                  f"  -> ours/theirs: {ours_steps / ref[mode]:6.1f}x per step, "
                  f"{ours_actions / ref[mode]:6.1f}x per action")  # fmt: skip
        print(f"gym-sokoban SokobanEnv.reset (generate + render): {ref['reset_per_s']:7.0f} resets/s")
    if agreement is not None:
        print(f"dynamics vs gym-sokoban's env (same rooms, same random actions): {agreement[0]}/{agreement[1]} "
              "states identical")  # fmt: skip
    print(f"room generation (6x6, 1 box, {args.rooms} seeds): gym-sokoban generate_room "
          f"{rooms_stats['generate_ms']:.2f} ms/room ({rooms_stats['generator_failures']} seeds failed);\n"
          f"  filtered to 5..9 actions (generate + BFS) "
          f"{rooms_stats['filtered_cold_ms']:.2f} ms/room cold ({rooms_stats['seeds_tried_per_room']:.2f} seeds "
          f"tried per room), {1e3 * rooms_stats['filtered_cached_ms']:.1f} us/room cached")  # fmt: skip


if __name__ == "__main__":
    main()
