"""``tests.clean_exit``: a crash in CPython's native teardown no longer turns a passing suite into a failed one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# A native crash at the very end of interpreter finalization (C's abort() handed to Py_AtExit), as a library's
# static destructor crashing after the summary line.
CRASHING_TEARDOWN = """
import ctypes

libc = ctypes.CDLL(None)
ctypes.pythonapi.Py_AtExit(ctypes.cast(libc.abort, ctypes.c_void_p))


def test_passes():
    assert True


def test_{name}():
    assert {outcome}
"""


def _pytest(tmp_path: Path, outcome: str, *plugin: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / f"test_teardown_{outcome.lower()}.py"
    test.write_text(CRASHING_TEARDOWN.format(name=outcome.lower(), outcome=outcome))
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, str(test)]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("outcome", "status", "summary"), [("True", 0, "2 passed"), ("False", 1, "1 failed, 1 passed")]
)
def test_the_exit_status_is_pytests_own_despite_a_teardown_crash(tmp_path, outcome, status, summary):
    crashed = _pytest(tmp_path, outcome)
    assert crashed.returncode < 0 and summary in crashed.stdout  # without the plugin: killed by SIGABRT after it
    done = _pytest(tmp_path, outcome, "-p", "tests.clean_exit")
    assert done.returncode == status, done.stdout + done.stderr
    assert summary in done.stdout
