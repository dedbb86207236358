"""``TurnRL/WikiTwoTurn-v2``: MT-GRPO's two-turn Wikipedia-search QA task (see :mod:`envs.wiki_two_turn.env`)."""
