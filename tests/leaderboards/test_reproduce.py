"""Every committed number regenerates from its row: rows record the commands that produced them (the training that
made an evaluated folder included, with placeholders for the folders), and ``leaderboards.reproduce`` replays them
and says whether the new value lies inside the row's CI. The replays run in this process
(:func:`~tests.leaderboards.conftest.launch_in_process`); ``tests/leaderboards/test_experiments.py`` plays the
subprocess launcher."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from leaderboards import evaluate as E
from leaderboards import reproduce as R
from leaderboards.experiments import main as experiments_main
from tests.leaderboards.conftest import launch_in_process, write_tiny_spec

ENV = "TurnRL/Arithmetic-v0"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(REPO)  # the commands a row records run from the repository root
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def replay(argv: list[str]) -> int:
    """``python -m leaderboards.reproduce ARGV``, the commands it replays played in this process."""
    return R.main(argv, launch=launch_in_process)


def rows(results: Path) -> list[dict]:
    return [json.loads(line) for line in (results / "Arithmetic-v0.jsonl").read_text().splitlines()]


def test_a_scripted_row_records_its_command_reproduces_and_a_moved_ci_does_not(tmp_path, capsys):
    results = tmp_path / "results"
    E.main(["--env", ENV, "--model", "scripted:oracle", "--episodes", "6", "--seed", "3", "--no-tables",
            "--results-dir", str(results), "--show", "1"])  # fmt: skip
    row = rows(results)[-1]
    # where the output went and what was printed are not part of the command
    assert row["commands"] == [["python", "-m", "leaderboards.evaluate", "--env", ENV, "--model", "scripted:oracle",
                                "--episodes", "6", "--seed", "3"]]  # fmt: skip
    capsys.readouterr()
    assert replay([f"{results}/Arithmetic-v0.jsonl:1", "--work-dir", str(tmp_path / "w1")]) == 0
    out = capsys.readouterr().out
    assert "REPRODUCED" in out and "NOT" not in out
    record = json.loads((tmp_path / "w1" / "reproduce.json").read_text())
    assert record["reproduced"] and record["checks"][0]["reproduced"] == row["metrics"]["success"]["estimate"]

    moved = dict(
        row, metrics={k: dict(m, low=m["high"] + 0.1, high=m["high"] + 0.2) for k, m in row["metrics"].items()}
    )
    (results / "Arithmetic-v0.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(moved) + "\n")
    assert replay([str(results / "Arithmetic-v0.jsonl"), "--model", "scripted:oracle",  # the last row of it
                   "--work-dir", str(tmp_path / "w2")]) == 1  # fmt: skip
    assert "NOT REPRODUCED: outside the CI: ['success']" in capsys.readouterr().out


def test_a_trained_folder_carries_its_chain_into_the_row_and_the_replay_matches(tmp_path, tiny_model_dir, capsys):
    from trainers import grpo, rl, sft
    from trainers.checkpoint import policy_folder

    small = ["--env", ENV, "--model", tiny_model_dir, "--max-context", "512", "--no-bf16", "--threads", "1"]
    sft.main([*small, "--policy", "scripted:oracle", "--episodes", "2", "--batch-episodes", "2", "--eval-tasks", "0",
              "--out-dir", str(tmp_path / "sft")])  # fmt: skip
    rl.main(["--env", ENV, "--init", str(tmp_path / "sft"), "--strategy", "grpo_or", "--steps", "1",
             "--tasks-per-step", "1", "--group-size", "2", "--max-new-tokens", "4", "--max-context", "256",
             "--no-bf16", "--threads", "1", "--engine", "transformers", "--out-dir", str(tmp_path / "rl")],
            prog="python -m trainers.grpo", defaults=grpo.DEFAULTS)  # fmt: skip
    results = tmp_path / "results"
    final = Path(policy_folder(str(tmp_path / "rl")))  # rl/checkpoint-000001/policy
    E.main(["--env", ENV, "--model", str(final), "--label", "tiny+sft+grpo", "--engine",
            "transformers", "--episodes", "3", "--max-new-tokens", "4", "--threads", "1", "--no-tables",
            "--results-dir", str(results)])  # fmt: skip
    row = rows(results)[-1]
    assert row["model"] == "tiny+sft+grpo"
    trained, tuned, evaluated = row["commands"]
    assert trained[:3] == ["python", "-m", "trainers.sft"] and trained[-2:] == ["--out-dir", "{work}/0"]
    assert tuned[:3] == ["python", "-m", "trainers.grpo"] and tuned[tuned.index("--init") + 1] == "{work}/0"
    assert evaluated[evaluated.index("--model") + 1] == f"{{work}}/1/{final.relative_to(tmp_path / 'rl').as_posix()}"
    assert str(tmp_path) not in json.dumps(row["commands"])  # no folder of this machine's run in the row

    capsys.readouterr()
    R.main([f"{results}/Arithmetic-v0.jsonl:1", "--dry-run", "--work-dir", str(tmp_path / "w")])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("python -m trainers.sft") and f"--out-dir {tmp_path / 'w'}/0" in printed[0]
    assert not (tmp_path / "w").exists()
    assert replay([f"{results}/Arithmetic-v0.jsonl:1", "--work-dir", str(tmp_path / "w")]) == 0
    record = json.loads((tmp_path / "w" / "reproduce.json").read_text())
    assert record["reproduced"]
    assert all(c["reproduced"] == c["committed"] for c in record["checks"])  # same seeds, same CPU: the same numbers
    assert (tmp_path / "w" / "1" / final.relative_to(tmp_path / "rl") / "config.json").is_file()


def test_an_experiment_run_replays_through_the_grid_runner(tmp_path, tiny_model_dir, capsys):
    spec = write_tiny_spec(tmp_path / "tiny.toml", tiny_model_dir, steps=1, check_seeds=(1,))
    committed = tmp_path / "committed"
    assert experiments_main(["run", str(spec), "--runs-dir", str(committed)], launch=launch_in_process) == 0
    code = replay([str(spec), "--run", "or/seed0", "--runs-dir", str(committed), "--work-dir", str(tmp_path / "w")])
    assert code == 0, capsys.readouterr().out
    assert (tmp_path / "w" / "tiny" / "or" / "seed0" / "DONE.json").is_file()
    code = replay([str(spec), "--run", "warm_start_seed1", "--runs-dir", str(committed), "--work-dir",
                   str(tmp_path / "w2")])  # fmt: skip
    assert code == 0 and "REPRODUCED" in capsys.readouterr().out
    replayed = json.loads((tmp_path / "w2" / "tiny" / "warm_start_seed1" / "run.json").read_text())["command"]
    assert replayed[replayed.index("--seed") + 1] == "1"
    assert not (tmp_path / "w2" / "tiny" / "warm_start").exists()  # a check seed is built alone
    with pytest.raises(SystemExit):
        R.main([str(spec), "--run", "and/seed0", "--runs-dir", str(committed)])
    assert "is not a run of tiny; its runs: warm_start, warm_start_seed1, or/seed0" in capsys.readouterr().err


def test_an_older_row_of_a_scripted_policy_is_replayed_from_its_own_fields(tmp_path, capsys):
    results = tmp_path / "results"
    E.main(["--env", ENV, "--model", "scripted:wrong", "--episodes", "5", "--seed", "4", "--trials", "2",
            "--no-tables", "--results-dir", str(results)])  # fmt: skip
    row = rows(results)[-1]
    row.pop("commands")  # as the rows written before commands were recorded
    (results / "Arithmetic-v0.jsonl").write_text(json.dumps(row) + "\n")
    rebuilt = R.rebuilt_command(R.load_row(results / "Arithmetic-v0.jsonl", 1))
    assert rebuilt[:7] == ["python", "-m", "leaderboards.evaluate", "--env", ENV, "--model", "scripted:wrong"]
    assert rebuilt[rebuilt.index("--trials") + 1] == "2" and rebuilt[rebuilt.index("--seed") + 1] == "4"
    capsys.readouterr()
    assert replay([f"{results}/Arithmetic-v0.jsonl:1", "--work-dir", str(tmp_path / "w")]) == 0
    out = capsys.readouterr().out
    assert "rebuilt from the row's fields" in out and "REPRODUCED" in out and "NOT" not in out
    new = json.loads((tmp_path / "w" / "reproduce.json").read_text())["reproduced_row"]
    assert (new["episodes"], new["trials"], new["seed"], new["metrics"]) == (5, 2, 4, row["metrics"])


def test_rows_without_commands_and_bad_references_fail_with_the_fix(tmp_path, capsys):
    old = json.loads((REPO / "leaderboards/results/WikiTwoTurn-v0.jsonl").read_text().splitlines()[0])
    old.pop("commands", None)
    old["model"] = "smollm2+sft"  # trained, and its training was not recorded: nothing to rebuild
    (tmp_path / "WikiTwoTurn-v0.jsonl").write_text(json.dumps(old) + "\n")
    for argv, message in [
        ([f"{tmp_path}/WikiTwoTurn-v0.jsonl:1"], "records no command"),
        ([f"{tmp_path}/WikiTwoTurn-v0.jsonl:7"], "has no row at line 7 (it has 1 lines)"),
        ([f"{tmp_path}/WikiTwoTurn-v0.jsonl", "--model", "gpt"], "--model 'gpt' has no row"),
        ([f"{tmp_path}/WikiTwoTurn-v0.jsonl"], "name the row"),
        (["experiments/wiki_mtgrpo.toml"], "name the run with --run"),
        ([f"{tmp_path}/none.jsonl:1"], "is not a results file"),
    ]:
        with pytest.raises(SystemExit) as exc:
            R.main([*argv, "--work-dir", str(tmp_path / "w")])
        assert exc.value.code == 2 and message in capsys.readouterr().err, argv
    assert not os.path.exists(tmp_path / "w")
