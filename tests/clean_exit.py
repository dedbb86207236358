"""End the test process with pytest's exit status before CPython tears down native extensions.

The suite loads torch, vLLM, Ray, ZeroMQ and tokenizers into one process. After the last test, CPython's finalization
destroys their C++ and Rust state in whatever order module teardown reaches it, and once in a while that order crashes:
CI saw ``1634 passed`` followed by a segmentation fault (exit 139) that no test caused. This plugin records the finished
session, re-arms ``faulthandler`` (pytest's own handler is gone by then) so a crash in an exit handler still prints
every thread's stack, and registers an exit handler that runs after every handler the tests' libraries registered (exit
handlers run last-registered first, and this module is imported before any test) and then calls ``os._exit`` with
pytest's status: logging, pytest's own clean-up, Ray's and multiprocessing's shutdown all still run; only the native
teardown after them is skipped. The status is pytest's own, so a failing test still fails.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import sys

import pytest

_finished: tuple[pytest.Session, int] | None = None  # the finished session and the process that ran it


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remember the finished session: its ``exitstatus`` is what ``python -m pytest`` returns."""
    global _finished
    _finished = (session, os.getpid())


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's faulthandler plugin disarms its handler: re-arm one for the exit handlers that follow."""
    faulthandler.enable(file=sys.__stderr__, all_threads=True)


def _exit_with_pytest_status() -> None:
    if _finished is None or _finished[1] != os.getpid():
        return  # no finished session in this process (a forked child, an early exit): Python exits as usual
    session = _finished[0]
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    os._exit(int(session.exitstatus))


atexit.register(_exit_with_pytest_status)
