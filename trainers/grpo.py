"""GRPO family: ``python -m trainers.grpo --env TurnRL/WikiTwoTurn-v2 --credit or|mr|mt`` (GRPO-OR, GRPO-MR,
MT-GRPO of 000/001) or ``--strategy NAME`` for any critic-free strategy of ``trainers.credit`` (rloo, mt_rloo,
reinforce, tarl, ...). No critic; KL off by default (000 trains with beta = 0). The loop is ``trainers/rl.py``.
"""

from __future__ import annotations

import sys

from trainers.rl import main

DEFAULTS = {"algo": "grpo", "strategy": "mt_grpo", "kl_coef": 0.0, "out_dir": "runs/grpo"}

if __name__ == "__main__":
    main(sys.argv[1:], prog="python -m trainers.grpo", defaults=DEFAULTS)
