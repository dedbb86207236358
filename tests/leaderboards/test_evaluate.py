"""CLI smoke runs of ``python -m leaderboards.evaluate`` into a temporary results dir, and its argument errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentgym_turn.error import InvalidArgument
from leaderboards import evaluate as E
from leaderboards.families import FAMILIES
from leaderboards.tables import BEGIN, END, read_rows

SPEECH_ID = FAMILIES["speech"].env_ids[0]


def run(tmp_path: Path, *args: str) -> E.ResultRow:
    return E.main([*args, "--results-dir", str(tmp_path / "results")])


def test_scripted_run_writes_a_row_the_readme_table_and_a_plot(tmp_path: Path) -> None:
    row = run(tmp_path, "--env", "TurnRL/Sokoban-v2", "--model", "scripted:bfs", "--episodes", "4", "--seed", "3")
    line = json.loads((tmp_path / "results" / "Sokoban-v2.jsonl").read_text().strip())
    for key in ("env_id", "env_version", "model", "engine", "seed", "git_sha", "date", "episodes", "metrics"):
        assert key in line
    assert (line["env_id"], line["env_version"], line["engine"], line["seed"]) == (
        "TurnRL/Sokoban-v2",
        2,
        "scripted",
        3,
    )
    assert row.metrics["success"]["estimate"] == 1.0  # the BFS oracle solves every room: the ceiling
    assert set(row.metrics["success"]) >= {"low", "high", "confidence"}
    readme = (tmp_path / "README.md").read_text()
    assert BEGIN in readme and END in readme
    assert "| `scripted:bfs` | scripted | v2 | 1.000 [1.000, 1.000]" in readme
    assert "**reported** (001 Table 5)" in readme
    assert (tmp_path / "plots" / "Sokoban-v2.png").stat().st_size > 1000


def test_same_config_replaces_its_table_row_and_keeps_the_header(tmp_path: Path) -> None:
    args = ("--env", "TurnRL/Arithmetic-v0", "--model", "scripted:wrong", "--episodes", "3")
    run(tmp_path, *args)
    readme = tmp_path / "README.md"
    readme.write_text("# My header\n\n" + readme.read_text().split(BEGIN, 1)[1].join([BEGIN, ""]) + "\n")
    run(tmp_path, *args)
    run(tmp_path, "--env", "TurnRL/Arithmetic-v0", "--model", "scripted:oracle", "--episodes", "3")
    assert len(read_rows(tmp_path / "results")) == 3
    text = readme.read_text()
    assert text.startswith("# My header")
    assert text.count("| `scripted:wrong` |") == 1 and text.count("| `scripted:oracle` |") == 1


def test_tau_pass_k_over_trials_of_the_same_task(tmp_path: Path) -> None:
    row = run(tmp_path, "--env", "TurnRL/TauRetail-v1", "--model", "scripted:no_tools", "--episodes", "2",
              "--trials", "2", "--no-tables")  # fmt: skip
    assert set(row.metrics) == {"pass^1", "pass^2", "success"}
    assert row.metrics["pass^1"]["estimate"] == 0.0 and row.trials == 2
    assert not (tmp_path / "README.md").exists()


def test_task_draw_matches_the_trainer_rollouts() -> None:
    import numpy as np

    from trainers.rollout import draw_task_seeds, task_seeds

    rng = np.random.default_rng(7)
    assert task_seeds(7, 3) == [int(rng.integers(1 << 31)) for _ in range(3)]
    assert draw_task_seeds(np.random.default_rng(7), 3) == task_seeds(7, 3)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--env", "TurnRL/WikiTwoTurn-v9", "--model", "scripted:reference"], "Did you mean 'TurnRL/WikiTwoTurn-v2'"),
        (["--env", "TurnRL/Sokoban-v2"], "--model is required"),
        (["--env", "TurnRL/Sokoban-v2", "--model", "http://127.0.0.1:8000/v1"], "URL#MODEL"),
        (["--env", "TurnRL/Sokoban-v2", "--model", "scripted:bfs", "--episodes", "0"], "--episodes 0 must be >= 1"),
        (["--env", "TurnRL/Sokoban-v2", "--model", "scripted:bfs", "--env-kwarg", "dim"], "key=value"),
        (["--env", "TurnRL/Sokoban-v2", "--model", "scripted:nope"], "no scripted policy 'nope'"),
        (["--env", "TurnRL/Sokoban-v2", "--model", "scripted:bfs", "--temperature", "-1"], "--temperature"),
    ],
)
def test_bad_arguments_raise_invalid_argument(tmp_path: Path, args: list[str], match: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(match)):
        run(tmp_path, *args)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_env_kwargs_are_json_values_merged_over_the_family_defaults() -> None:
    cfg = E.EvalConfig(env="TurnRL/WikiTwoTurn-v2", model="scripted:reference", env_kwarg=["top_k=2", "split=test"])
    assert cfg.resolved()["env_kwargs"] == {"split": "test", "top_k": 2}


def test_speech_table_shows_text_runs_as_eval_mode_text(tmp_path: Path) -> None:
    from leaderboards.tables import ResultRow, append_row, render_sections

    def row(env_id: str) -> ResultRow:
        metric = {"estimate": 0.5, "low": 0.25, "high": 0.75, "confidence": 0.95, "n_tasks": 4, "sd": None}
        version = int(env_id.rsplit("-v", 1)[1])
        return ResultRow(env_id, version, {"split": "test"}, "tau", "scripted:oracle", "scripted", 0, "abc1234",
                         "2026-01-01", 4, 1, 0.0, 0, 0, {"pass^1": metric}, 1.0)  # fmt: skip

    text_id, speech_id = FAMILIES["speech"].also_show[SPEECH_ID][0], SPEECH_ID
    results = tmp_path / "results"
    append_row(results, row(text_id))
    append_row(results, row(speech_id))
    text = render_sections(results, [text_id, speech_id])
    speech = text.split(f"### `{speech_id}`", 1)[1]
    v_text, v_speech = text_id.rsplit("-", 1)[1], speech_id.rsplit("-", 1)[1]
    assert f"| `scripted:oracle` | scripted | {v_text} | text | 50.0 [25.0, 75.0]" in speech
    assert f"| `scripted:oracle` | scripted | {v_speech} | speech | 50.0 [25.0, 75.0]" in speech
    assert "| Qwen2.5-Omni-7B | — | — | speech | 14.8 | 8.7 | 5.2 | 5.2 | — |" in speech


def test_tables_keep_older_version_rows_of_models_not_rerun_and_mark_them(tmp_path: Path) -> None:
    from leaderboards.tables import ResultRow, append_row, render_sections

    def row(version: int, model: str, estimate: float) -> ResultRow:
        metric = {"estimate": estimate, "low": estimate, "high": estimate, "confidence": 0.95, "n_tasks": 4, "sd": None}
        return ResultRow(f"TurnRL/Sokoban-v{version}", version, {}, "sokoban", model, "scripted", 0, "abc1234",
                         "2026-01-01", 4, 1, 0.0, 0, 0, {"success": metric}, 1.0)  # fmt: skip

    results = tmp_path / "results"
    append_row(results, row(1, "scripted:bfs", 0.25))  # re-run on v2 below: left out
    append_row(results, row(1, "smollm2", 0.125))  # not re-run: kept, marked as older
    append_row(results, row(2, "scripted:bfs", 0.75))
    text = render_sections(results, ["TurnRL/Sokoban-v2"])
    assert "| `scripted:bfs` | scripted | v2 | 0.750 [0.750, 0.750]" in text
    assert "| `smollm2` | scripted | v1 (older) | 0.125 [0.125, 0.125]" in text
    assert "0.250" not in text


def test_show_prints_the_scripted_conversation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(tmp_path, "--env", "TurnRL/Arithmetic-v0", "--model", "scripted:oracle", "--episodes", "2", "--show", "1",
        "--no-tables")  # fmt: skip
    out = capsys.readouterr().out
    assert out.count("=== episode") == 1
    assert "[assistant] The value is \\boxed{" in out and "-> reward +1.000" in out


def test_transcripts_write_every_scripted_episode(tmp_path: Path) -> None:
    path = tmp_path / "t" / "arith.jsonl"
    path.parent.mkdir()
    path.write_text("stale\n")  # replaced, not appended to
    run(tmp_path, "--env", "TurnRL/Arithmetic-v0", "--model", "scripted:oracle", "--episodes", "3", "--trials", "2",
        "--no-tables", "--transcripts", str(path))  # fmt: skip
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["task"], r["trial"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    for r in rows:
        assert "[assistant] The value is \\boxed{" in r["text"]
        assert r["metrics"]["env/success"] == 1.0 and len(r["turn_rewards"]) >= 1


@pytest.fixture(scope="module")
def random_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 1-layer randomly initialised Llama saved with SmolLM2's tokenizer (exercises the HF path, not language)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from agentgym_turn.models import load_tokenizer

    tok = load_tokenizer("smollm2")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
    )
    path = tmp_path_factory.mktemp("random-llama")
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_local_model_path_plays_through_the_trainer_rollouts(tmp_path: Path, random_model_dir: str) -> None:
    row = run(tmp_path, "--env", "TurnRL/Arithmetic-v0", "--model", random_model_dir, "--episodes", "3", "--trials",
              "2", "--max-new-tokens", "6", "--max-turns", "1", "--threads", "1", "--no-tables",
              "--engine", "transformers")  # fmt: skip
    assert (row.engine, row.trials, row.max_new_tokens, row.temperature) == ("transformers", 2, 6, 0.0)
    assert 0 < row.policy_tokens <= 3 * 2 * 6
    assert row.metrics["success"]["estimate"] == 0.0  # random weights do not box the right integer
    assert row.metrics["success"]["n_tasks"] == 3


def test_model_transcripts_start_at_the_first_model_turn(tmp_path: Path, random_model_dir: str) -> None:
    from agentgym_turn.models import load_tokenizer

    path = tmp_path / "transcripts.jsonl"
    row = run(tmp_path, "--env", "TurnRL/Arithmetic-v0", "--model", random_model_dir, "--episodes", "2",
              "--max-new-tokens", "5", "--max-turns", "1", "--threads", "1", "--no-tables", "--engine",
              "transformers", "--transcripts", str(path))  # fmt: skip
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2 and {r["task"] for r in rows} == {0, 1}
    tok = load_tokenizer("smollm2")
    generated = sum(len(tok(r["text"], add_special_tokens=False)["input_ids"]) for r in rows)
    assert 0 < generated <= row.policy_tokens + 2  # the model's tokens only: no system prompt, no question
    assert all("<|im_start|>system" not in r["text"] for r in rows)


def test_tables_cli_redraws_from_rows_alone(tmp_path: Path) -> None:
    from leaderboards import tables

    run(tmp_path, "--env", "TurnRL/Arithmetic-v0", "--model", "scripted:oracle", "--episodes", "2", "--no-tables")
    assert not (tmp_path / "README.md").exists()
    tables.main(["--results-dir", str(tmp_path / "results")])
    assert "| `scripted:oracle` | scripted | v0 | 1.000 [1.000, 1.000]" in (tmp_path / "README.md").read_text()
    assert (tmp_path / "plots" / "Arithmetic-v0.png").is_file()
