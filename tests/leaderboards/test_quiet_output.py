"""The command-line programs are quiet by default: no INFO lines from vLLM, no Java log lines, no traceback at
exit; ``--verbose`` brings vLLM's INFO lines back. Run as a user runs them, in a fresh process.

The two vLLM evaluations (about a minute each, mostly the engine's start, much of it on one core) run side by side,
each in its own process as a user runs it; each test reads its own output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentgym_turn.hardware import VLLM_CPU_THREAD_VARS, vllm_cpu_threads
from agentgym_turn.logs import QUIET_ENV

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    """One ``python -m leaderboards.evaluate`` in a fresh process, its stdout and stderr together in ``log``."""

    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        """The run's output, once it has exited 0 (within 900 s)."""
        try:
            self.process.wait(timeout=900)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        out = self.log.read_text(errors="replace")
        assert self.process.returncode == 0, out[-3000:]
        return out


def start_cli(tmp: Path, *args: str, cpu: int) -> Run:
    # A CLI's main() run in this pytest process by an earlier test (quiet_logs) leaves its quiet settings in
    # os.environ; a user's shell has none of them. Two engines run at once: a 1 GiB KV cache each
    # (VLLM_CPU_KVCACHE_SPACE) and a core each (VLLM_CPU_OMP_THREADS_BIND; unset, each would take every core and
    # the two would spin-wait on each other), variables a user may set too.
    cpus = sorted(os.sched_getaffinity(0))
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENV and k not in VLLM_CPU_THREAD_VARS}
    env |= {"VLLM_CPU_KVCACHE_SPACE": "1"} | vllm_cpu_threads({}, cpus=[cpus[cpu % len(cpus)]])
    tmp.mkdir()
    with open(tmp / "output.txt", "wb") as log:  # a file, not a pipe: neither process waits for a reader
        process = subprocess.Popen([sys.executable, "-m", "leaderboards.evaluate", "--model", "smollm2", "--engine",
                                    "vllm", "--no-tables", "--results-dir", str(tmp / "results"), *args], cwd=REPO,
                                   env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    return Run(process, tmp / "output.txt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """A default (quiet) evaluation of SmolLM2 on vLLM on Wikipedia search (whose Lucene JVM logs too), and a
    ``--verbose`` one on one arithmetic task, one short turn (vLLM's start is what logs), started at the same time."""
    pytest.importorskip("vllm")
    tmp = tmp_path_factory.mktemp("cli")
    quiet = ["--env", "TurnRL/WikiTwoTurn-v2", "--episodes", "2"]
    # --engine-dtype: one precision whatever the host, what a grid pinning bf16 asks for
    verbose = ["--env", "TurnRL/Arithmetic-v0", "--episodes", "1", "--max-turns", "1", "--max-new-tokens", "16",
               "--engine-dtype", "bfloat16"]  # fmt: skip
    started = {
        "quiet": start_cli(tmp / "quiet", *quiet, cpu=0),
        "verbose": start_cli(tmp / "verbose", *verbose, "--verbose", cpu=1),
    }
    try:
        yield started
    finally:
        for run in started.values():
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()


@pytest.mark.slow
def test_a_vllm_evaluation_prints_no_info_logs_no_java_logs_and_no_exit_traceback(runs: dict[str, Run]) -> None:
    out = runs["quiet"].output()
    lines = out.splitlines()
    assert not [line for line in lines if " INFO " in line], "vLLM INFO lines in the default output"
    assert "MMapDirectory" not in out and "org.apache.lucene" not in out  # the JVM's logging
    assert "Traceback" not in out and "Logging error" not in out
    assert "exact_match" in out  # the program's own result table is still there
    assert len(lines) < 60, f"{len(lines)} lines:\n" + "\n".join(lines)


@pytest.mark.slow
def test_verbose_brings_vllm_info_back(runs: dict[str, Run]) -> None:
    out = runs["verbose"].output()
    assert any(" INFO " in line for line in out.splitlines())
    assert "dtype=torch.bfloat16" in out and ", bfloat16, eager=" in out  # --engine-dtype reached vLLM's config
