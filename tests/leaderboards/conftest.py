"""Fixtures the leaderboards' tests share with the trainers' tests: SmolLM2's tokenizer and a saved tiny random Llama
(``tiny_model_dir``, which the experiment runner's end-to-end test trains and evaluates)."""

from tests.trainers.conftest import tiny_model_dir, tokenizer  # noqa: F401
