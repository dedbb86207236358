"""Every TurnRL env id, registered with Gymnasium when ``agentgym_turn`` is imported.

Gymnasium 1.x no longer loads ``gymnasium.envs`` entry-point plugins, so registration happens on import:
``import agentgym_turn`` (or ``gym.register_envs(agentgym_turn)``, the documented idiom that keeps linters from
dropping the import), or the module-prefixed id ``gym.make("agentgym_turn:TurnRL/WikiTwoTurn-v1")``.
Entry points are strings, so importing this module imports no env code (and no torch, Java or data).

Bump the ``-vN`` suffix whenever an env's rewards or dynamics change.

Each id also carries its held-out tasks (:attr:`TurnRLSpec.held_out`, read with :func:`held_out_kwargs`), the way
Gymnasium's ``EnvSpec`` carries ``reward_threshold``: evaluations and leaderboards take them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

NAMESPACE = "TurnRL"


@dataclass(frozen=True)
class TurnRLSpec:
    """One registered id.

    Attributes:
        entry_point: ``"module:Class"`` of the env (a string, so registering imports no env code).
        kwargs: the id's default ``gym.make`` kwargs.
        held_out: the ``gym.make`` kwargs that pose the held-out tasks evaluations score (``{}``: procedural tasks,
            held out by seed alone).
    """

    entry_point: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    held_out: Mapping[str, Any] = field(default_factory=dict)


_WIKI = "envs.wiki_two_turn.env:WikiTwoTurnEnv"
_SEARCH = "envs.search_r1.env:SearchR1Env"
_SOKOBAN = "envs.sokoban.env:SokobanEnv"
_TAU = "envs.tau.env:TauEnv"
_SPEECH = "envs.speech.env:TauSpeechEnv"
_TAU_HELD_OUT = {"split": "test", "output_check": False}

#: id -> :class:`TurnRLSpec`.
ENV_SPECS: dict[str, TurnRLSpec] = {
    "TurnRL/WikiTwoTurn-v1": TurnRLSpec(_WIKI, held_out={"split": "validation"}),
    "TurnRL/SearchR1-v1": TurnRLSpec(_SEARCH, held_out={"dataset": "wiki", "split": "test"}),
    "TurnRL/Sokoban-v1": TurnRLSpec(_SOKOBAN),
    "TurnRL/TauRetail-v1": TurnRLSpec(_TAU, {"domain": "retail"}, _TAU_HELD_OUT),
    "TurnRL/TauAirline-v1": TurnRLSpec(_TAU, {"domain": "airline"}, _TAU_HELD_OUT),
    "TurnRL/TauRetailSpeech-v1": TurnRLSpec(_SPEECH, {"domain": "retail"}, {"split": "test"}),
    "TurnRL/TauAirlineSpeech-v1": TurnRLSpec(_SPEECH, {"domain": "airline"}, {"split": "test"}),
    "TurnRL/Arithmetic-v0": TurnRLSpec("envs.arithmetic:ArithmeticEnv"),
}


def _bare(env_id: str) -> str:
    """``"agentgym_turn:TurnRL/Name-v0"`` -> ``"TurnRL/Name-v0"`` (the module prefix ``gym.make`` accepts)."""
    return env_id.rpartition(":")[2]


def _spec(env_id: str) -> TurnRLSpec:
    from agentgym_turn.error import InvalidArgument

    spec = ENV_SPECS.get(_bare(env_id))
    if spec is None:
        raise InvalidArgument(f"{env_id!r} is not a TurnRL id; registered: {sorted(ENV_SPECS)}.")
    return spec


def held_out_kwargs(env_id: str) -> dict[str, Any]:
    """The ``gym.make`` kwargs that pose ``env_id``'s held-out tasks (``{}`` when its tasks are procedural and held
    out by seed alone): ``held_out_kwargs("TurnRL/WikiTwoTurn-v1")`` -> ``{"split": "validation"}``. A
    module-prefixed id (``"agentgym_turn:TurnRL/..."``) is accepted; an unknown one raises ``InvalidArgument``."""
    return dict(_spec(env_id).held_out)


def register_envs() -> None:
    """Register every id in :data:`ENV_SPECS` that is not registered yet (idempotent)."""
    for env_id, spec in ENV_SPECS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=spec.entry_point, kwargs=dict(spec.kwargs), disable_env_checker=False)


def make_vec(env_id: str, num_envs: int, *, vectorization_mode: str = "async", **kwargs: Any) -> gym.vector.VectorEnv:
    """``gym.make_vec`` for chat envs: sets ``shared_memory=False``, which list-of-message observations need.

    ``vectorization_mode`` is ``"async"`` (one process per env) or ``"sync"``; ``kwargs`` go to every env.
    """
    from agentgym_turn.error import InvalidArgument

    if vectorization_mode not in ("async", "sync"):
        raise InvalidArgument(f"vectorization_mode={vectorization_mode!r}; use 'async' or 'sync'.")
    # spawn, not fork: the parent may run torch's thread pools, which do not survive fork()
    vector_kwargs = {"shared_memory": False, "context": "spawn"} if vectorization_mode == "async" else {}
    return gym.make_vec(
        env_id, num_envs=num_envs, vectorization_mode=vectorization_mode, vector_kwargs=vector_kwargs, **kwargs
    )
