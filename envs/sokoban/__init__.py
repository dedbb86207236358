"""TurnRL/Sokoban-v2: the extended MT-PPO paper's game task (Appendix E); see :class:`envs.sokoban.env.SokobanEnv`."""

from envs.sokoban.env import SokobanEnv

__all__ = ["SokobanEnv"]
