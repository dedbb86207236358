"""Write verl RL datasets (parquet) whose rows are TurnRL episodes for the ``turnrl_agent`` loop.

Each row names its episode in ``extra_info`` (env id, seed, the task as JSON text, env kwargs as JSON text) and
carries the env's opening messages as ``prompt`` (verl's dataset reads it to filter over-long prompts and logs it;
the agent loop plays from the env's own ``reset``)::

    python examples/verl/make_dataset.py --env TurnRL/WikiTwoTurn-v2 --out data/verl/wiki --train 2048 --val 128
    python examples/verl/make_dataset.py --env TurnRL/SearchR1-v2 --out data/verl/search_r1 --train 2048 --val 128

writes ``train.parquet`` (tasks of the env's ``train`` split) and ``val.parquet`` (``validation`` split).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pandas as pd

import agentgym_turn  # noqa: F401  (registers the TurnRL/ ids)
from agentgym_turn.error import InvalidArgument

AGENT_NAME = "turnrl_agent"  # trainers.integrations.verl_agent_loop.AGENT_NAME (that module imports verl)


def rows(env_id: str, split: str, count: int, seed: int, env_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """``count`` rows of ``env_id``'s ``split``: task ``i`` is the one ``reset(seed=seed + i)`` draws."""
    env = gym.make(env_id, split=split, **env_kwargs)
    out = []
    for i in range(count):
        messages, _ = env.reset(seed=seed + i)
        out.append(
            {
                "data_source": env_id,
                "agent_name": AGENT_NAME,
                "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
                "extra_info": {
                    "env_id": env_id,
                    "seed": seed + i,
                    "task": json.dumps(env.unwrapped.task),
                    "env_kwargs": json.dumps({"split": split, **env_kwargs}),
                    "split": split,
                    "index": i,
                },
            }
        )
    env.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True, help="a TurnRL id, e.g. TurnRL/WikiTwoTurn-v2")
    parser.add_argument("--out", required=True, help="folder for train.parquet and val.parquet")
    parser.add_argument("--train", type=int, default=2048, help="training rows (tasks of the 'train' split)")
    parser.add_argument("--val", type=int, default=128, help="validation rows (tasks of the 'validation' split)")
    parser.add_argument("--seed", type=int, default=0, help="row i uses reset(seed=SEED + i)")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of extra gym.make arguments")
    args = parser.parse_args(argv)
    env_kwargs = json.loads(args.env_kwargs)
    if not isinstance(env_kwargs, dict) or "split" in env_kwargs:
        raise InvalidArgument(f"--env-kwargs {args.env_kwargs!r} must be a JSON object without 'split'.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, split, count in (("train", "train", args.train), ("val", "validation", args.val)):
        pd.DataFrame(rows(args.env, split, count, args.seed, env_kwargs)).to_parquet(out / f"{name}.parquet")
        print(f"{out / name}.parquet: {count} rows of {args.env} ({split})")


if __name__ == "__main__":
    main()
