"""Rollouts on a Ray cluster: env workers and generation workers as Ray actors, behind the same ``collect`` API.

``trainers.rollout.collect`` takes a pool of envs and an actor; this module supplies drop-in replacements for both,
so the same ``collect`` call produces the same :class:`~trainers.episode.Episode` objects while the envs (and,
optionally, the generation engines) live in Ray actors on any node of a cluster:

* :class:`RayEnvPool` is an :class:`~trainers.rollout.EnvPool` whose envs live in ``workers`` env-worker actors
  (each holds many envs, made once with ``gym.make`` and reused across batches). ``get`` returns
  :class:`RemoteEnv` stand-ins that speak the part of the Gymnasium API the rollout uses (``reset``, ``step``,
  ``unwrapped.task`` / ``reward_levels`` / ``episode_metrics()`` / ``fork()``, and the env class's scripted
  policies, which run beside the env with the slot's random generator shipped both ways).
* :meth:`RayEnvPool.pipeline` wraps an actor so that, as soon as a turn is generated, every env's step is sent to
  its worker at once: the workers step their envs in parallel while ``collect`` reads the results one by one.
* :class:`RayEngine` has the :class:`~trainers.engine_api.Engine` interface; it splits each batch of prompts over
  ``workers`` generation actors, each running this repo's own engine (``make_engine``: vLLM or transformers) on a
  copy of the policy. ``update_weights(model)`` ships the state dict once through the object store, and every actor
  loads it and calls its engine's own ``update_weights`` (vLLM: the reload-from-folder push).
* :func:`make_env_pool` builds the pool a run plays from its flags: a :class:`RayEnvPool` with ``--ray``, else a
  plain :class:`~trainers.rollout.EnvPool` in this process (the trainers and SFT build theirs with it).

Fault tolerance: each :class:`RemoteEnv` records what it was asked (``reset`` seed and options, every action) and a
digest of each answer. When an env worker dies (``ray.exceptions.RayActorError``: the process was killed or its
node left; ``OutOfMemoryError``: Ray's memory monitor killed it), the pool starts a replacement actor, and every env
of the dead worker is rebuilt there on its next call by replaying its record (envs are deterministic given seed and
actions); an answer that differs from the recorded one raises :class:`ReplayMismatch` instead of training on a
different episode. The batch goes on; nothing is lost.

Example (the envs in two local workers, generation in this process)::

    >>> pool = RayEnvPool(["TurnRL/WikiTwoTurn-v2"], address="local", workers=2)     # doctest: +SKIP
    >>> actor = pool.pipeline(engine_actor(engine, cfg, seed=0), tokenizer, stops)   # doctest: +SKIP
    >>> episodes, _ = collect(pool, actor, tokenizer, stops, cfg, num_tasks=4, group_size=4, seed=0)  # doctest: +SKIP

Multi-node launch recipe. Every node: the same Python and repo checkout, ``pip install "agentgym-turn[ray]"`` plus
the extras and data of the envs it will run (``bash scripts/setup.sh``). Ray 2.59+ authenticates a cluster started
with ``ray start --head`` with a token: every node and the trainer's shell need the same ``RAY_AUTH_MODE=token`` and
``RAY_AUTH_TOKEN`` (without them, an explicit ``HOST:PORT`` is refused: "Authentication token is missing")::

    # head node (the trainer runs here; 6379 is Ray's default GCS port)
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=$(ray get-auth-token --generate)
    ray start --head --port 6379 --num-cpus 8
    # every other node: the same two variables (copy the token over a private channel), then
    ray start --address HEAD_IP:6379 --num-cpus 16
    # on the head: the envs spread over the cluster's env workers, generation and update in this process
    python -m trainers.mtppo --env TurnRL/WikiTwoTurn-v2 --ray HEAD_IP:6379 --ray-env-workers 8
    # ... or generation in Ray actors too (GPU nodes: vLLM per actor)
    python -m trainers.mtppo --env TurnRL/WikiTwoTurn-v2 --ray HEAD_IP:6379 --ray-env-workers 8 \
        --ray-gen-workers 2 --ray-gen-gpus 1
    ray stop            # on every node, when done

``address``: ``"auto"`` (the cluster started on this node by ``ray start``), ``"HOST:PORT"`` (a head's GCS),
``"ray://HOST:10001"`` (Ray Client, from outside the cluster), or ``"local"`` (start a throwaway single-node cluster
in this process). When Ray is already initialised in the process, that connection is used.

The core never imports Ray: this module imports it lazily (``pip install "agentgym-turn[ray]"``, tested with
ray 2.60.0).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from agentgym_turn.core import EPISODE_METRICS_KEY, state_digest
from agentgym_turn.error import InvalidArgument, ServiceError, require
from trainers.engine_api import Generation, SamplingConfig
from trainers.rollout import Actor, EnvPool, Slot, turn_text

log = logging.getLogger(__name__)
RAY_PIN = "ray==2.60.0"
ADDRESS_FORMS = "'auto', 'local', 'HOST:PORT' or 'ray://HOST:PORT'"
_ADDRESS = re.compile(r"^(ray://)?(?P<host>[A-Za-z0-9._\-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")
_SHARD_SEED_STRIDE = 104_729  # generation shard k samples with seed + k * stride (shard 0: the caller's seed)


class ReplayMismatch(RuntimeError):
    """An env rebuilt on a replacement worker answered its recorded actions differently (it is not deterministic
    given its seed and actions), so its episode cannot be recovered."""


# ---------------------------------------------------------------------------------------------------- connection
def _ray() -> Any:
    return require("ray", "ray", package=RAY_PIN)


def check_address(address: str | None) -> tuple[str, int] | None:
    """Validate a Ray address without importing Ray (a config's ``__post_init__`` can call it): ``None``,
    ``"auto"`` and ``"local"`` give ``None``; ``"HOST:PORT"`` / ``"ray://HOST:PORT"`` give ``(host, port)``.
    Anything else raises :class:`InvalidArgument` naming the accepted forms."""
    if address is None or address in ("auto", "local"):
        return None
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if match is None or not 0 < int(match["port"]) < 65536:
        raise InvalidArgument(
            f"Ray address {address!r} is not {ADDRESS_FORMS}; e.g. --ray 10.0.0.1:6379 for a head started with "
            "`ray start --head --port 6379`."
        )
    return match["host"].strip("[]"), int(match["port"])


def connect(address: str | None) -> Any:
    """The ``ray`` module, connected: to ``address`` (see the module docstring), or the connection this process
    already has. Raises :class:`InvalidArgument` for a malformed address and :class:`ServiceError` when no cluster
    answers there (checked with a plain TCP connect first: Ray itself waits minutes on a dead address)."""
    host_port = check_address(address)
    ray = _ray()
    if ray.is_initialized():
        return ray
    if address is None:
        raise InvalidArgument(
            f"Ray is not initialised in this process and no address was given; pass address={ADDRESS_FORMS} "
            "(e.g. 'local' for a single-machine cluster) or call ray.init() first."
        )
    if host_port is not None:
        host, port = host_port
        try:
            socket.create_connection((host, port), timeout=5).close()
        except OSError as exc:
            raise ServiceError(
                f"no Ray cluster answers at {address!r} ({type(exc).__name__}: {exc}); start its head with "
                f"`ray start --head --port {port}` (and the other nodes with `ray start --address {host}:{port}`), "
                "or pass --ray auto on a node that runs `ray start`."
            ) from exc
    try:
        if address == "local":
            ray.init(address="local", include_dashboard=False)  # a new cluster, even if this node runs one
        else:
            ray.init(address=address)
    except ConnectionError as exc:
        raise ServiceError(
            f"could not connect to Ray at {address!r}: {exc}. Start a cluster with `ray start --head` on this node "
            "(then --ray auto), pass the head's HOST:PORT, or use --ray local for a throwaway local cluster. A "
            "cluster that authenticates (Ray >= 2.59 by default) needs RAY_AUTH_MODE=token and its RAY_AUTH_TOKEN "
            "(`ray get-auth-token` on the head) in this shell."
        ) from exc
    return ray


def _is_actor_death(exc: BaseException) -> bool:
    """The worker process is gone: it died or was killed (a signal, its node left, Ray's memory monitor)."""
    errors = _ray().exceptions
    return isinstance(exc, errors.RayActorError | errors.OutOfMemoryError)


# ---------------------------------------------------------------------------------------------------- env workers
def _answer_digest(method: str, answer: Any) -> str:
    """What must repeat when an env is replayed: the messages of a ``reset``; messages, reward and end flags of a
    ``step`` (``info`` may carry timings, so it is left out)."""
    if method == "reset":
        return state_digest(answer[0])
    messages, reward, terminated, truncated, _info = answer
    return state_digest(messages, float(reward), bool(terminated), bool(truncated))


class EnvWorker:
    """Holds envs by key and plays them (run as a Ray actor by :class:`RayEnvPool`; plain Python otherwise)."""

    def __init__(self, env_ids: Sequence[str], make_kwargs: dict[str, Any], kwargs_by_id: dict[str, dict]) -> None:
        import agentgym_turn  # noqa: F401  (registers the TurnRL ids in this process)

        self.pool = EnvPool(list(env_ids), make_kwargs=make_kwargs, kwargs_by_id=kwargs_by_id)
        self.envs: dict[str, Any] = {}
        self.made: dict[str, int] = {}

    def ready(self) -> int:
        """The worker's process id (also: the actor is up)."""
        return os.getpid()

    def make(self, key: str, env_id: str) -> tuple[str, list[str]]:
        """Make a new env of ``env_id`` under ``key`` (unless there is one); returns its class name and its
        scripted policies' names."""
        if key not in self.envs:
            n = self.made.get(env_id, 0) + 1
            self.envs[key] = self.pool.get(env_id, n)[-1]
            self.made[env_id] = n
        base = type(self.envs[key].unwrapped)
        return base.__name__, sorted(getattr(base, "scripted_policies", {}))

    def reset(self, key: str, seed: int | None, options: dict | None) -> tuple[list, dict, dict | None, dict]:
        env = self.envs[key]
        messages, info = env.reset(seed=seed, options=options)
        return messages, info, env.unwrapped.task, dict(getattr(env.unwrapped, "reward_levels", {}))

    def step(self, key: str, action: str) -> tuple[list, float, bool, bool, dict]:
        return self.envs[key].step(action)

    def episode_metrics(self, key: str) -> dict[str, float]:
        return self.envs[key].unwrapped.episode_metrics()

    def task_list(self, key: str) -> list[dict] | None:
        """The env's finite task list (``TurnEnv.task_list``), or ``None`` when it generates its tasks."""
        listed = getattr(self.envs[key].unwrapped, "task_list", lambda: None)()
        return None if listed is None else [dict(task) for task in listed]

    def truncate(self, key: str) -> dict[str, Any]:
        return self.envs[key].unwrapped.truncate()

    def fork(self, key: str, child: str) -> None:
        self.envs[child] = self.envs[key].unwrapped.fork()

    def policy(self, key: str, name: str, rng: np.random.Generator) -> tuple[str, dict]:
        """Scripted policy ``name``'s next turn, and the state of ``rng`` after it."""
        from agentgym_turn.policies import get_scripted_policy

        env = self.envs[key]
        text = get_scripted_policy(env, name)(env.unwrapped, rng)
        return text, rng.bit_generator.state

    def restore(self, key: str, env_id: str, record: list[tuple]) -> list[str]:
        """Make ``key`` anew and replay ``record`` (``("reset", seed, options)`` / ``("step", action)`` entries);
        returns the digest of each answer."""
        self.make(key, env_id)
        digests = []
        for method, *args in record:
            answer = self.reset(key, *args) if method == "reset" else self.step(key, *args)
            digests.append(_answer_digest(method, answer))
        return digests

    def drop(self, keys: Sequence[str]) -> None:
        """Forget forked envs (a batch's tree rollouts are over)."""
        for key in keys:
            self.envs.pop(key, None)

    def close(self) -> None:
        self.pool.close()
        self.envs.clear()


class RemoteEnv:
    """Stand-in, on the driver, for an env living in an env worker: the part of ``gym.Env`` the rollout uses.

    ``unwrapped`` is the stand-in itself (``task``, ``reward_levels``, ``episode_metrics()``, ``fork()``); the
    pool gives each env class its own subclass whose ``scripted_policies`` run on the worker, so
    ``trainers.rollout.scripted_actor`` plays remote envs unchanged.
    """

    scripted_policies: ClassVar[dict[str, Any]] = {}

    def __init__(self, pool: RayEnvPool, worker: int, env_id: str, key: str) -> None:
        self.pool, self.worker, self.env_id, self.key = pool, worker, env_id, key
        self.incarnation = pool.incarnations[worker]
        self.record: list[tuple] = []  # what was asked since the last reset (replayed on a new worker)
        self.digests: list[str] = []  # a digest of each answer
        self.task: dict | None = None
        self.reward_levels: dict[str, str] = {}
        self.pending: tuple[str, Any, int] | None = None  # (action, step ref, incarnation) sent ahead
        self.final_metrics: dict[str, float] | None = None  # info["episode_metrics"] of the step that ended it

    @property
    def unwrapped(self) -> RemoteEnv:
        return self

    def __repr__(self) -> str:
        return f"RemoteEnv({self.env_id!r}, worker={self.worker}, key={self.key!r})"

    # ---- calls with recovery ---------------------------------------------------------------------------------
    def _sync(self) -> None:
        """Rebuild this env on its worker's replacement (if the worker was replaced since it last answered)."""
        current = self.pool.incarnations[self.worker]
        if self.incarnation == current:
            return
        ray = _ray()
        self.pending = None
        try:
            digests = ray.get(self.pool.handles[self.worker].restore.remote(self.key, self.env_id, self.record))
        except Exception as exc:
            if _is_actor_death(exc):
                self.pool.replace(self.worker, current, exc)
            raise
        if digests != self.digests:
            turn = next(i for i, (a, b) in enumerate(zip(digests, self.digests, strict=True)) if a != b)
            raise ReplayMismatch(
                f"{self.env_id} rebuilt on a replacement worker answered entry {turn} of its record "
                f"{self.record[turn]!r:.120} differently: the env is not deterministic given its seed and actions, "
                "so its episode cannot be replayed; make its randomness follow reset(seed=...) or run it without Ray."
            )
        self.incarnation = current

    def _call(self, method: str, *args: Any, sent: Any = None) -> Any:
        """``worker.method(key, *args)``, replacing a dead worker and replaying this env as needed (at most
        ``pool.max_retries`` times); ``sent``: the ref of the same call already sent ahead."""
        ray = _ray()
        last: BaseException | None = None
        for _ in range(self.pool.max_retries + 1):
            try:
                if sent is None:
                    self._sync()
                    sent = getattr(self.pool.handles[self.worker], method).remote(self.key, *args)
                return ray.get(sent)
            except Exception as exc:
                if not _is_actor_death(exc):
                    raise
                last, sent = exc, None
                self.pool.replace(self.worker, self.incarnation, exc)
        raise ServiceError(
            f"env worker {self.worker} of {self.env_id} died {self.pool.max_retries + 1} times in a row while "
            f"running {method}; last error: {last}. Does the env crash its process (check the worker's log)?"
        ) from last

    # ---- the gym.Env surface -----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[list, dict]:
        self.record, self.digests, self.final_metrics = [], [], None
        answer = self._call("reset", seed, options)
        messages, info, self.task, self.reward_levels = answer
        self.record, self.digests = [("reset", seed, options)], [_answer_digest("reset", answer)]
        return messages, info

    def task_list(self) -> list[dict] | None:
        """The remote env's :meth:`agentgym_turn.core.TurnEnv.task_list` (``--task-order epoch`` reads it)."""
        return self._call("task_list")

    def send_step(self, action: str) -> None:
        """Send ``step(action)`` to the worker now; the next :meth:`step` with the same action collects it."""
        if self.incarnation == self.pool.incarnations[self.worker]:
            ref = self.pool.handles[self.worker].step.remote(self.key, action)
            self.pending = (action, ref, self.incarnation)

    def step(self, action: str) -> tuple[list, float, bool, bool, dict]:
        sent = None
        if self.pending is not None:
            pending_action, ref, incarnation = self.pending
            self.pending = None
            if pending_action != action:
                raise RuntimeError(
                    f"{self!r} was sent step({pending_action!r:.60}) ahead but is asked step({action!r:.60}); the "
                    "pipelined actor and trainers.rollout disagree on the turn's text."
                )
            if incarnation == self.pool.incarnations[self.worker]:
                sent = ref
        answer = self._call("step", action, sent=sent)
        self.record.append(("step", action))
        self.digests.append(_answer_digest("step", answer))
        self.final_metrics = answer[4].get(EPISODE_METRICS_KEY) if answer[2] or answer[3] else None
        return answer

    def episode_metrics(self) -> dict[str, float]:
        """The env's episode metrics (no round trip once a step ended the episode: its ``info["episode_metrics"]``)."""
        if self.final_metrics is not None:
            return dict(self.final_metrics)
        return self._call("episode_metrics")

    def truncate(self) -> dict[str, Any]:
        """``TurnEnv.truncate`` on the worker: the episode is cut at a rollout limit (its metrics kept here)."""
        info = self._call("truncate")
        self.final_metrics = dict(info[EPISODE_METRICS_KEY])
        return info

    def fork(self) -> RemoteEnv:
        child = type(self)(self.pool, self.worker, self.env_id, self.pool.new_key())
        self._call("fork", child.key)
        child.incarnation = self.incarnation
        child.record, child.digests = list(self.record), list(self.digests)
        child.task, child.reward_levels, child.final_metrics = self.task, dict(self.reward_levels), self.final_metrics
        self.pool.forks.append(child)
        return child

    def close(self) -> None:
        """Envs are closed with their pool (:meth:`RayEnvPool.close`)."""


@dataclass(frozen=True)
class _RemotePolicy:
    """A scripted policy of a remote env's class: runs on the env's worker with the slot's rng."""

    name: str

    def __call__(self, env: RemoteEnv, rng: np.random.Generator) -> str:
        text, state = env._call("policy", self.name, rng)
        rng.bit_generator.state = state
        return text


@dataclass
class RayEnvPool(EnvPool):
    """An :class:`~trainers.rollout.EnvPool` whose envs live in ``workers`` Ray actors (see the module docstring).

    Extra fields: ``address`` (``None``: the connection this process already has), ``workers`` (env-worker
    actors, >= 1), ``worker_cpus`` (CPUs each reserves: Ray places an actor only where that many are free),
    ``max_retries`` (replacements of a dead worker in a row per call), ``start_timeout`` (seconds to wait for an
    actor to be placed and start).
    """

    address: str | None = None
    workers: int = 2
    worker_cpus: float = 1.0
    max_retries: int = 3
    start_timeout: float = 300.0
    handles: list[Any] = field(default_factory=list, init=False)
    incarnations: list[int] = field(default_factory=list, init=False)
    replacements: int = field(default=0, init=False)
    forks: list[RemoteEnv] = field(default_factory=list, init=False)
    _remote: dict[str, list[RemoteEnv]] = field(default_factory=dict, init=False)
    _classes: dict[str, type[RemoteEnv]] = field(default_factory=dict, init=False)
    _keys: Any = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.workers, int) or self.workers < 1:
            raise InvalidArgument(f"RayEnvPool workers={self.workers!r} must be an int >= 1 (--ray-env-workers).")
        if self.worker_cpus < 0 or self.max_retries < 0 or self.start_timeout <= 0:
            raise InvalidArgument(
                f"worker_cpus={self.worker_cpus} and max_retries={self.max_retries} must be >= 0 and "
                f"start_timeout={self.start_timeout} > 0."
            )
        connect(self.address)
        self.handles = [self._start() for _ in range(self.workers)]
        self._wait(self.handles)
        self.incarnations = [0] * self.workers

    def _start(self) -> Any:
        ray = _ray()
        remote = ray.remote(num_cpus=self.worker_cpus, max_restarts=0)(EnvWorker)
        return remote.remote(list(self.env_ids), dict(self.make_kwargs), dict(self.kwargs_by_id))

    def _wait(self, handles: Sequence[Any]) -> list[int]:
        return _wait_ready(handles, self.start_timeout, f"{self.worker_cpus}-CPU env")

    def new_key(self) -> str:
        return f"e{next(self._keys)}"

    def pids(self) -> list[int]:
        """The process id of every env worker (in worker order)."""
        return self._wait(self.handles)

    def replace(self, worker: int, seen: int, cause: BaseException) -> None:
        """Replace env worker ``worker`` if it is still incarnation ``seen`` (another env may already have)."""
        if self.incarnations[worker] != seen:
            return
        ray = _ray()
        log.warning("env worker %d died (%s); starting a replacement", worker, type(cause).__name__)
        try:
            ray.kill(self.handles[worker], no_restart=True)
        except Exception as exc:  # already gone; nothing to clean up
            log.debug("ray.kill of dead env worker %d: %s", worker, exc)
        handle = self._start()
        self._wait([handle])
        self.handles[worker] = handle
        self.incarnations[worker] += 1
        self.replacements += 1

    def get(self, env_id: str, n: int) -> list[RemoteEnv]:  # type: ignore[override]
        """``n`` remote envs of ``env_id`` (made on first need, spread round-robin over the workers)."""
        if self.forks:  # the previous batch's tree forks are over: free them on their workers
            by_worker: dict[int, list[str]] = {}
            for env in self.forks:
                by_worker.setdefault(env.worker, []).append(env.key)
            for worker, keys in by_worker.items():
                self.handles[worker].drop.remote(keys)
            self.forks.clear()
        envs = self._remote.setdefault(env_id, [])
        new = []
        total = sum(len(v) for v in self._remote.values())
        while len(envs) < n:
            worker = (total + len(new)) % self.workers
            new.append((worker, self.new_key()))
            envs.append(None)  # type: ignore[arg-type]
        if new:  # made in parallel; a worker that dies meanwhile is replaced (its new envs are made there)
            sent = [(RemoteEnv(self, w, env_id, k), self.handles[w].make.remote(k, env_id)) for w, k in new]
            described = [env._call("make", env_id, sent=ref) for env, ref in sent]
            cls = self._proxy_class(env_id, *described[0])
            for i, (worker, key) in enumerate(new):
                envs[len(envs) - len(new) + i] = cls(self, worker, env_id, key)
        return envs[:n]

    def _proxy_class(self, env_id: str, class_name: str, policies: list[str]) -> type[RemoteEnv]:
        if env_id not in self._classes:
            attrs = {"scripted_policies": {name: _RemotePolicy(name) for name in policies}}
            self._classes[env_id] = type(class_name, (RemoteEnv,), attrs)
        return self._classes[env_id]

    def pipeline(self, actor: Actor, tokenizer: Any, stop_ids: Sequence[int]) -> Actor:
        """``actor``, with every remote env's step sent to its worker as soon as the turn is generated (the
        workers step in parallel; ``collect`` then collects the answers in order). Same episodes either way."""
        stops = {int(s) for s in stop_ids}

        def act(slots: list[Slot], budgets: list[int]) -> list[Generation]:
            gens = actor(slots, budgets)
            for slot, gen in zip(slots, gens, strict=True):
                if isinstance(slot.env, RemoteEnv):
                    slot.env.send_step(turn_text(tokenizer, gen, stops))
            return gens

        return act

    def close(self) -> None:
        """Close every env and end the worker actors."""
        ray = _ray()
        for handle in self.handles:
            try:
                ray.get(handle.close.remote(), timeout=60)
                ray.kill(handle, no_restart=True)
            except Exception as exc:  # a dead worker has nothing left to close
                log.debug("closing an env worker: %s", exc)
        self.handles, self._remote, self.forks = [], {}, []


def make_env_pool(
    env_ids: Sequence[str],
    weights: Sequence[float] | None,
    kwargs_by_id: Mapping[str, Mapping[str, Any]],
    *,
    ray: str | None = None,
    ray_env_workers: int = 2,
) -> EnvPool:
    """The envs a run plays: ``env_ids`` drawn by ``weights``, each made with its ``--env-kwarg`` kwargs; with
    ``ray`` (a cluster address) they live in ``ray_env_workers`` Ray actors (:class:`RayEnvPool`), else in this
    process (:class:`~trainers.rollout.EnvPool`). Ray is imported only for a Ray pool."""
    kwargs = {k: dict(v) for k, v in kwargs_by_id.items()}
    if ray is not None:
        return RayEnvPool(list(env_ids), weights, kwargs_by_id=kwargs, address=ray, workers=ray_env_workers)
    return EnvPool(list(env_ids), weights, kwargs_by_id=kwargs)


# ---------------------------------------------------------------------------------------------------- generation
class GenerationWorker:
    """A copy of the policy and one of this repo's engines on it (run as a Ray actor by :class:`RayEngine`).

    The policy arrives as its config, state dict (its dtype kept) and tokenizer: nothing is read from the driver's
    disk. For vLLM it is written to a local folder first, as the trainer does for its in-process vLLM engine.
    """

    def __init__(self, engine: str, config: Any, state: dict, tokenizer: Any, engine_kwargs: dict,
                 cpu_shared: bool = False) -> None:  # fmt: skip
        import tempfile

        import torch
        import transformers

        from trainers import modeling as M
        from trainers.engines import make_engine

        # Built in fp32 and cast to the shipped weights' dtype as the trainer casts its policy (--dtype bfloat16),
        # so buffers outside the state dict (rotary frequencies) are rounded alike and the actor samples the same.
        self.model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        self.model.to(next((v.dtype for v in state.values() if v.is_floating_point()), torch.float32))
        self.model.load_state_dict(state)
        self.model.eval()
        folder = None
        if cpu_shared:  # several actors generate at once: vLLM's own CPU binding, not every core for each
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
        if engine == "vllm":
            folder = tempfile.mkdtemp(prefix="turnrl-ray-vllm-")
            M.save_policy(self.model, tokenizer, folder)
        self.engine = make_engine(engine, model=self.model, tokenizer=tokenizer, model_dir=folder, **engine_kwargs)

    def ready(self) -> int:
        return os.getpid()

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        import torch

        with torch.no_grad():
            return self.engine.generate(prompts, sampling)

    def update_weights(self, state: dict) -> None:
        self.model.load_state_dict(state)
        self.engine.update_weights(self.model)


class RayEngine:
    """The :class:`~trainers.engine_api.Engine` interface over ``workers`` generation actors (see the module docstring).

    A batch is split into ``workers`` contiguous shards; shard k samples with ``seed + k * 104729`` (shard 0 with
    the caller's seed, so one worker samples exactly what the same engine does in-process, and equal prompts on
    different shards do not share random numbers). ``engine``: ``"transformers"`` or ``"vllm"``
    (``make_engine``'s names; ``engine_kwargs`` go to it). ``gpus`` per worker: for vLLM on GPU nodes.

    A generation actor that dies is replaced from the last weights shipped (kept in the object store) and its
    shard is generated again, with the same seed (``replacements`` counts them; ``max_retries`` in a row per call).
    """

    def __init__(
        self,
        engine: str,
        model: Any,
        tokenizer: Any,
        *,
        workers: int = 1,
        address: str | None = None,
        worker_cpus: float = 1.0,
        gpus: float = 0.0,
        max_retries: int = 3,
        start_timeout: float = 600.0,
        **engine_kwargs: Any,
    ) -> None:
        if engine not in ("transformers", "vllm"):
            raise InvalidArgument(
                f"RayEngine engine={engine!r}: generation actors run 'transformers' or 'vllm' (an OpenAI-compatible "
                "server is already remote: use --engine openai without Ray)."
            )
        if not isinstance(workers, int) or workers < 1:
            raise InvalidArgument(f"RayEngine workers={workers!r} must be an int >= 1 (--ray-gen-workers).")
        _check_no_lora(model)
        ray = connect(address)
        self._remote = ray.remote(num_cpus=worker_cpus, num_gpus=gpus, max_restarts=0)(GenerationWorker)
        self._args = (engine, model.config, tokenizer, dict(engine_kwargs))
        self._cpu_shared = workers > 1
        self._state = ray.put(_cpu_state(model))  # the weights every (re)started actor loads
        self.max_retries, self.start_timeout = max_retries, start_timeout
        self.workers = [self._start() for _ in range(workers)]
        _wait_ready(self.workers, start_timeout, f"{worker_cpus} CPU / {gpus} GPU generation")
        self.replacements = 0
        self.last_push_seconds: float | None = None

    def _start(self) -> Any:
        engine, config, tokenizer, kwargs = self._args
        return self._remote.remote(engine, config, self._state, tokenizer, kwargs, self._cpu_shared)

    def _get(self, k: int, submit: Any, ref: Any) -> Any:
        """``ray.get(ref)`` of worker ``k``'s call; if the worker died, replace it and ``submit(worker)`` again."""
        ray = _ray()
        for _ in range(self.max_retries):
            try:
                return ray.get(ref)
            except Exception as exc:
                if not _is_actor_death(exc):
                    raise
                log.warning("generation worker %d died (%s); starting a replacement", k, type(exc).__name__)
                self.workers[k] = self._start()
                _wait_ready([self.workers[k]], self.start_timeout, "generation")
                self.replacements += 1
                ref = submit(self.workers[k])
        return ray.get(ref)

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig) -> list[Generation]:
        shards = [s for s in np.array_split(np.arange(len(prompts)), len(self.workers)) if len(s)]
        calls = []
        for k, idx in enumerate(shards):
            seed = None if sampling.seed is None else sampling.seed + k * _SHARD_SEED_STRIDE
            shard = ([list(prompts[i]) for i in idx], SamplingConfig(sampling.max_new_tokens, sampling.temperature,
                                                                     sampling.top_p, seed))  # fmt: skip
            submit = lambda worker, shard=shard: worker.generate.remote(*shard)  # noqa: E731
            calls.append((k, submit, submit(self.workers[k])))
        return [g for k, submit, ref in calls for g in self._get(k, submit, ref)]

    def update_weights(self, model: Any) -> None:
        """Ship ``model``'s weights to every generation actor (one object-store copy) and push them into its
        engine."""
        _check_no_lora(model)
        ray = _ray()
        t0 = time.perf_counter()
        self._state = ray.put(_cpu_state(model))
        submit = lambda worker: worker.update_weights.remote(self._state)  # noqa: E731
        for k, ref in [(k, submit(w)) for k, w in enumerate(self.workers)]:
            self._get(k, submit, ref)
        self.last_push_seconds = time.perf_counter() - t0

    def pids(self) -> list[int]:
        """The process id of every generation actor."""
        return _wait_ready(self.workers, self.start_timeout, "generation")

    def close(self) -> None:
        ray = _ray()
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []


def _wait_ready(handles: Sequence[Any], timeout: float, what: str) -> list[int]:
    """Wait until every actor of ``handles`` is up; their process ids. A clear error when Ray cannot place them."""
    ray = _ray()
    try:
        return ray.get([h.ready.remote() for h in handles], timeout=timeout)
    except ray.exceptions.GetTimeoutError as exc:
        raise ServiceError(
            f"{len(handles)} {what} worker(s) were not placed within {timeout:.0f} s; the cluster has "
            f"{ray.available_resources()} free. Ask for fewer workers or resources per worker, or add nodes."
        ) from exc


def _check_no_lora(model: Any) -> None:
    if hasattr(model, "peft_config"):
        raise InvalidArgument(
            "Ray generation actors take full weights, not LoRA adapters; train with --lora-rank 0, or generate in "
            "the trainer's process (--ray-gen-workers 0)."
        )


def _cpu_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
