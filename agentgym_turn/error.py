"""Exception types of TurnRL.

Every error says what went wrong, the offending value, and how to fix it. Agent *actions* never raise (an env
answers them with an ``"Error: ..."`` observation); these are for bad *arguments* from the programmer: ``make``
kwargs, ``reset`` options, CLI flags, missing optional dependencies, and failures of external services that
must not be silently scored as zero.
"""

from __future__ import annotations


class TurnRLError(Exception):
    """Base class of every error raised by TurnRL."""


class InvalidArgument(TurnRLError, ValueError):
    """A value passed to ``make``, ``reset``, a config or a CLI is out of range or malformed."""


class InvalidTask(InvalidArgument):
    """A task given through ``reset(options={"task": ...})`` lacks a field the env needs."""


class ResetNeeded(TurnRLError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class TurnContractError(TurnRLError, AssertionError):
    """An env breaks a promise of the turn contract (:func:`agentgym_turn.check_turn_env`); the message names the
    promise, what the env did, and the fix."""


class DependencyNotInstalled(TurnRLError, ImportError):
    """An optional dependency is missing; the message names the ``pip install`` that provides it."""


class DataNotFound(TurnRLError, FileNotFoundError):
    """A data file or asset package is missing; the message names where it was looked for and how to get it."""


class ServiceError(TurnRLError, RuntimeError):
    """An external service (LLM judge, user simulator, retrieval server) failed after its retries."""


def require(module: str, extra: str, package: str | None = None):
    """Import ``module`` or raise :class:`DependencyNotInstalled` naming the extra that provides it.

    >>> json = require("json", "core")
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pkg = package or module.split(".")[0]
        raise DependencyNotInstalled(
            f"{module!r} is not installed ({exc}). It is needed here; install it with "
            f'`pip install "agentgym-turn[{extra}]"` (or `pip install {pkg}`), or run `bash scripts/setup.sh`.'
        ) from exc
