"""Fixtures the leaderboards' tests share with the trainers' tests: SmolLM2's tokenizer and a saved tiny random Llama
(``tiny_model_dir``, which the experiment runner's end-to-end test trains and evaluates), and the tiny grid spec
those tests play."""

from pathlib import Path

from tests.trainers.conftest import tiny_model_dir, tokenizer  # noqa: F401


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
