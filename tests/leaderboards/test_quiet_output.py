"""The command-line programs are quiet by default: no INFO lines from vLLM, no Java log lines, no traceback at
exit; ``--verbose`` brings vLLM's INFO lines back. Run as a user runs them, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym_turn.logs import QUIET_ENV

REPO = Path(__file__).resolve().parents[2]


def run_cli(tmp_path: Path, *args: str) -> str:
    # A CLI's main() run in this pytest process by an earlier test (quiet_logs) leaves its quiet settings in
    # os.environ; a user's shell has none of them.
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENV}
    done = subprocess.run([sys.executable, "-m", "leaderboards.evaluate", "--env", "TurnRL/WikiTwoTurn-v1",
                           "--episodes", "2", "--no-tables", "--results-dir", str(tmp_path / "results"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


@pytest.mark.slow
def test_a_vllm_evaluation_prints_no_info_logs_no_java_logs_and_no_exit_traceback(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    out = run_cli(tmp_path, "--model", "smollm2", "--engine", "vllm")
    lines = out.splitlines()
    assert not [line for line in lines if " INFO " in line], "vLLM INFO lines in the default output"
    assert "MMapDirectory" not in out and "org.apache.lucene" not in out  # the JVM's logging
    assert "Traceback" not in out and "Logging error" not in out
    assert "exact_match" in out  # the program's own result table is still there
    assert len(lines) < 60, f"{len(lines)} lines:\n" + "\n".join(lines)


@pytest.mark.slow
def test_verbose_brings_vllm_info_back(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    out = run_cli(tmp_path, "--model", "smollm2", "--engine", "vllm", "--verbose")
    assert any(" INFO " in line for line in out.splitlines())
