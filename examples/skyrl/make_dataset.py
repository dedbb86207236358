"""Write a SkyRL dataset (JSONL) of TurnRL tasks: one row per seed, the env's opening messages as the prompt.

    python examples/skyrl/make_dataset.py --env TurnRL/WikiTwoTurn-v2 --seeds 0:512 --out data/wiki/train.jsonl
    python examples/skyrl/make_dataset.py --env TurnRL/WikiTwoTurn-v2 --seeds 100000:100064 --held-out \
        --out data/wiki/validation.jsonl

Each row: ``prompt``, ``env_class`` (the TurnRL id, registered with skyrl_gym under the same name), ``seed`` and
``env_kwargs`` (JSON); see :mod:`trainers.integrations.skyrl_turnrl`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentgym_turn.error import InvalidArgument
from trainers.evaluation import held_out_kwargs, parse_env_kwargs
from trainers.integrations.skyrl_turnrl import dataset_rows


def parse_seeds(text: str) -> range:
    """``"0:512"`` -> ``range(0, 512)``."""
    start, sep, stop = text.partition(":")
    try:
        seeds = range(int(start), int(stop)) if sep else range(int(start), int(start) + 1)
    except ValueError:
        raise InvalidArgument(f"--seeds {text!r} must be START:STOP, e.g. 0:512.") from None
    if len(seeds) == 0:
        raise InvalidArgument(f"--seeds {text!r} is empty; STOP must exceed START.")
    return seeds


def main(argv: list[str] | None = None) -> Path:
    """Write the rows and return the file's path."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", required=True, help="a TurnRL id, e.g. TurnRL/WikiTwoTurn-v2")
    ap.add_argument("--seeds", default="0:256", help="START:STOP, one task per seed")
    ap.add_argument("--env-kwarg", action="append", default=[], help="gym.make keyword as key=value (repeatable)")
    ap.add_argument("--held-out", action="store_true", help="the env's held-out tasks (its leaderboard split)")
    ap.add_argument("--out", required=True, type=Path, help="the JSONL file to write")
    args = ap.parse_args(argv)
    kwargs = parse_env_kwargs(args.env_kwarg)
    if args.held_out:
        kwargs = held_out_kwargs(args.env, kwargs or None)
    rows = dataset_rows(args.env, parse_seeds(args.seeds), kwargs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} rows of {args.env} to {args.out}")
    return args.out


if __name__ == "__main__":
    main()
