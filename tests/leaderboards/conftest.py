"""Fixtures the leaderboards' tests share with the trainers' tests: SmolLM2's tokenizer and a saved tiny random Llama
(``tiny_model_dir``, which the experiment runner's tests train and evaluate), the tiny grid spec those tests play,
and :func:`launch_in_process`, the runner's launcher that plays a command in the test's own process."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import random
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

from tests.trainers.conftest import tiny_model_dir, tokenizer  # noqa: F401

#: The seed of torch's default generator in a new interpreter (c10's ``default_rng_seed_val``): an in-process run
#: starts from it, as the subprocess it stands for would.
FRESH_TORCH_SEED = 67280421310721


def launch_in_process(cmd: list[str], log: Path) -> int:
    """The runner's launcher (:data:`leaderboards.runner.Launch`) for tests: ``python -m MODULE ARGS`` played in
    this process by calling ``MODULE``'s CLI ``main`` with ``ARGS`` the way its ``__main__`` block does, stdout and
    stderr (Python's and the file descriptors') appended to ``log``; returns the exit status (a ``SystemExit``'s
    code; 1, with the traceback in the log, for an exception). It saves each run the ~25 s a new interpreter spends
    importing torch and transformers. What a run changes process-wide is put back afterwards
    (:func:`restored_process_state`). The product keeps :func:`~leaderboards.runner.launch_subprocess`: a run
    played here that crashes the interpreter takes the test down with it."""
    if len(cmd) < 3 or cmd[1] != "-m":
        raise ValueError(f"launch_in_process plays `python -m MODULE ARGS`, not {cmd[:3]}")
    module, args = cmd[2], list(cmd[3:])
    mod = importlib.import_module(module)
    # trainers.grpo / mtppo / rl: main(argv, prog=..., defaults=DEFAULTS), as their __main__ blocks call it
    takes_defaults = "defaults" in inspect.signature(mod.main).parameters
    kwargs = {"prog": f"python -m {module}", "defaults": getattr(mod, "DEFAULTS", {})} if takes_defaults else {}
    repo = str(Path(__file__).resolve().parents[2])
    sys.stdout.flush()
    sys.stderr.flush()
    with restored_process_state(), open(log, "a", buffering=1) as f:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
        sys.argv = [mod.__file__ or module, *args]  # what `python -m` gives the module
        old_streams, saved_fds = (sys.stdout, sys.stderr), [os.dup(1), os.dup(2)]
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        sys.stdout = sys.stderr = f
        try:
            mod.main(args, **kwargs)
            rc = 0
        except SystemExit as exc:  # what the interpreter would exit with
            if exc.code is None or isinstance(exc.code, int):
                rc = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                rc = 1
        except Exception:
            traceback.print_exc()
            rc = 1
        finally:
            f.flush()
            sys.stdout, sys.stderr = old_streams
            for fd, saved in zip((1, 2), saved_fds, strict=True):
                os.dup2(saved, fd)
                os.close(saved)
    return rc


@contextlib.contextmanager
def restored_process_state() -> Iterator[None]:
    """Inside: torch's default generator at a new interpreter's seed. Afterwards, put back what a CLI's ``main``
    changes for its whole process: ``sys.argv`` and ``sys.path``, the environment (``quiet_logs`` sets variables),
    the working directory, warning filters, the levels, handlers and propagation of every logger that existed, the
    global generators of Python, NumPy and torch (``seed_everything``), torch's thread count (``--threads``),
    default dtype and grad mode, and any gymnasium registration it replaced (registrations it added stay: they come
    from modules it imported, which stay imported)."""
    import gymnasium
    import numpy as np
    import torch

    argv, path, environ, cwd = sys.argv[:], sys.path[:], dict(os.environ), os.getcwd()
    generators = random.getstate(), np.random.get_state(), torch.get_rng_state()
    threads, dtype, grad = torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()
    manager = logging.root.manager
    loggers = [logging.root, *(lg for lg in manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    logger_state = [(lg, lg.level, lg.handlers[:], lg.propagate, lg.disabled) for lg in loggers]
    logging_disabled = manager.disable
    registry = dict(gymnasium.registry)
    try:
        with warnings.catch_warnings():
            torch.manual_seed(FRESH_TORCH_SEED)
            yield
    finally:
        sys.argv, sys.path[:] = argv, path
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        random.setstate(generators[0])
        np.random.set_state(generators[1])
        torch.set_rng_state(generators[2])
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        for lg, level, handlers, propagate, disabled in logger_state:
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled
        logging.disable(logging_disabled)
        for env_id, env_spec in registry.items():
            if gymnasium.registry.get(env_id) is not env_spec:
                gymnasium.registry[env_id] = env_spec


def write_tiny_spec(path: Path, model_dir: str, *, steps: int, check_seeds: tuple[int, ...] = ()) -> Path:
    """A one-arm GRPO-OR grid on Arithmetic-v0 from a 2-demonstration warm start of the tiny Llama, ``steps`` steps
    of 1 x 2 episodes on the transformers engine, evaluated greedily on 2 held-out tasks; written to ``path``."""
    path.write_text(f"""
name = "tiny"
trainer = "grpo"
env = "TurnRL/Arithmetic-v0"
seeds = [0]
[warm_start]
check_seeds = {list(check_seeds)}
[warm_start.args]
model = "{model_dir}"
policy = "scripted:oracle,scripted:wrong"
episodes = 2
batch_episodes = 2
eval_tasks = 0
max_context = 512
bf16 = false
threads = 1
[budget]
steps = {steps}
tasks_per_step = 1
group_size = 2
max_new_tokens = 4
max_context = 256
max_turns = 1
bf16 = false
threads = 1
engine = "transformers"
[eval]
tasks = 2
seed = 3
paired = "env/success"
[arms.or]
strategy = "grpo_or"
""")
    return path
