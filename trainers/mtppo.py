"""MT-PPO (001 eq. 9): ``python -m trainers.mtppo --env TurnRL/WikiTwoTurn-v2 [--credit or|mr|mt] [--init CKPT]``.

Turn-level rewards on each turn's last policy token, the outcome on the trajectory's last, GAE over policy tokens,
a critic on a copy of the backbone. Flags: ``python -m trainers.mtppo --help``; the loop is ``trainers/rl.py``.
"""

from __future__ import annotations

import sys

from trainers.rl import main

DEFAULTS = {"algo": "ppo", "strategy": "mt_ppo", "out_dir": "runs/mtppo"}

if __name__ == "__main__":
    main(sys.argv[1:], prog="python -m trainers.mtppo", defaults=DEFAULTS)
