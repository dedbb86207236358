"""TurnRL's trainer: rollouts from ``gym.make`` envs -> credit assignment -> policy/critic update.

Modules (the loop reads top to bottom in :mod:`trainers.rl`):

- :mod:`trainers.engine_api`: the engine interface (token ids in and out); :mod:`trainers.engines`: vLLM,
  OpenAI-compatible HTTP and :func:`~trainers.engines.make_engine`; :mod:`trainers.engine_transformers` (+ its
  fast Llama decode loop, :mod:`trainers.llama_decode`).
- :mod:`trainers.rollout`: token-in-token-out episodes, chat-template deltas with a checked prefix invariant,
  group and tree rollouts.
- :mod:`trainers.episode`: the :class:`~trainers.episode.Episode` record.
- :mod:`trainers.credit`: every credit-assignment strategy, by name; :mod:`trainers.losses`: the loss math.
- :mod:`trainers.modeling`: packing, per-token log-probs, the critic, the reference, LoRA.
- :mod:`trainers.rl` (+ the ``mtppo`` / ``grpo`` CLIs), :mod:`trainers.sft` (cold start),
  :mod:`trainers.checkpoint`, :mod:`trainers.metrics`, :mod:`trainers.config`.

    python -m trainers.sft --env TurnRL/WikiTwoTurn-v2
    python -m trainers.mtppo --env TurnRL/WikiTwoTurn-v2 --init runs/sft
    python -m trainers.grpo --env TurnRL/WikiTwoTurn-v2 --credit mt
"""
