"""``TurnRL/SearchR1-v2``: multi-turn search QA with turn-level verifiable and LLM-judge rewards (MT-PPO)."""
