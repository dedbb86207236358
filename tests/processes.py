"""Process helpers for the tests that kill a parent and check its children went with it."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Running: a zombie (dead, not yet reaped by whoever adopted it) counts as gone, as does a pid not there."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` stops running (:func:`alive`) within ``seconds``."""
    deadline = time.time() + seconds
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    return not alive(pid)
