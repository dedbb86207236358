"""TurnRL: Gymnasium environments for multi-turn LLM agents that pay a reward every turn.

Importing this package registers every ``TurnRL/...`` id with Gymnasium::

    import gymnasium as gym
    import agentgym_turn

    gym.register_envs(agentgym_turn)
    env = gym.make("TurnRL/WikiTwoTurn-v2")

Older ids stay registered (``TurnRL/WikiTwoTurn-v1`` is v2 with v1's kwargs) and warn when made; see
:mod:`agentgym_turn.registration`, which also keeps each id's held-out tasks (:func:`held_out_kwargs`).

This package is the contract (:class:`TurnEnv`) and the shared building blocks (parsing, answers, tools,
retrieval, chat clients, errors). It never imports torch.
"""

from agentgym_turn.checker import check_turn_env
from agentgym_turn.core import EPISODE_METRICS_KEY, Message, RewardLevel, TurnEnv, TurnResult
from agentgym_turn.registration import ENV_SPECS, TurnRLSpec, held_out_kwargs, make_vec, register_envs

__version__ = "0.1.0"

__all__ = [
    "ENV_SPECS",
    "EPISODE_METRICS_KEY",
    "Message",
    "RewardLevel",
    "TurnEnv",
    "TurnRLSpec",
    "TurnResult",
    "check_turn_env",
    "held_out_kwargs",
    "make_vec",
    "register_envs",
]

register_envs()
