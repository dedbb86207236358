"""Every TurnRL env id, registered with Gymnasium when ``agentgym_turn`` is imported.

Gymnasium 1.x no longer loads ``gymnasium.envs`` entry-point plugins, so registration happens on import:
``import agentgym_turn`` (or ``gym.register_envs(agentgym_turn)``, the documented idiom that keeps linters from
dropping the import), or the module-prefixed id ``gym.make("agentgym_turn:TurnRL/WikiTwoTurn-v1")``.
Entry points are strings, so importing this module imports no env code (and no torch, Java or data).

Bump the ``-vN`` suffix whenever an env's rewards or dynamics change.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

NAMESPACE = "TurnRL"

#: id -> (entry point, default kwargs)
ENV_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "TurnRL/WikiTwoTurn-v1": ("envs.wiki_two_turn.env:WikiTwoTurnEnv", {}),
    "TurnRL/SearchR1-v1": ("envs.search_r1.env:SearchR1Env", {}),
    "TurnRL/Sokoban-v1": ("envs.sokoban.env:SokobanEnv", {}),
    "TurnRL/TauRetail-v1": ("envs.tau.env:TauEnv", {"domain": "retail"}),
    "TurnRL/TauAirline-v1": ("envs.tau.env:TauEnv", {"domain": "airline"}),
    "TurnRL/TauRetailSpeech-v1": ("envs.speech.env:TauSpeechEnv", {"domain": "retail"}),
    "TurnRL/TauAirlineSpeech-v1": ("envs.speech.env:TauSpeechEnv", {"domain": "airline"}),
    "TurnRL/Arithmetic-v0": ("envs.arithmetic:ArithmeticEnv", {}),
}


def register_envs() -> None:
    """Register every id in :data:`ENV_SPECS` that is not registered yet (idempotent)."""
    for env_id, (entry_point, kwargs) in ENV_SPECS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, kwargs=dict(kwargs), disable_env_checker=False)


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
