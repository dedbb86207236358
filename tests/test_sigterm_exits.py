"""``agentgym_turn.serve.sigterm_exits``: a CLI killed with SIGTERM leaves through its finally blocks and exit
finalizers, so the engine processes it started go with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from agentgym_turn.serve import sigterm_exits
from tests.processes import gone_within

REPO = Path(__file__).resolve().parents[1]
SIGTERMED = """
import multiprocessing
import time

from agentgym_turn.serve import sigterm_exits


def sleep():  # an engine's worker process: a daemon child of the CLI's process
    time.sleep(600)


if __name__ == "__main__":
    child = multiprocessing.get_context("fork").Process(target=sleep, daemon=True)
    child.start()
    with sigterm_exits():
        print(child.pid, flush=True)
        try:
            time.sleep(600)
        finally:
            print("finally ran", flush=True)
"""


def test_sigterm_ends_the_cli_through_its_finally_blocks_and_takes_its_children_along(tmp_path):
    script = tmp_path / "cli.py"
    script.write_text(SIGTERMED)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    child = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "finally ran" in out  # SystemExit(128 + 15), not death by signal (-15)
    assert gone_within(child, 10)  # the child went with it


def test_sigterm_exits_restores_the_previous_handler():
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_exits():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
