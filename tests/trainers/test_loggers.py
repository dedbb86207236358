"""Loggers and traces (trainers.loggers): TensorBoard event files read back with TensorBoard's own reader, the
offline W&B run's transaction log read with W&B's protobuf records, and per-token advantage traces of real
rollouts (the toy env's scripted policies) and of a tiny RL run."""

from __future__ import annotations

import glob
import json
import math
import struct
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from agentgym_turn.error import DependencyNotInstalled, InvalidArgument
from tests.trainers import toy_env
from trainers import loggers as L

ENV = "tests.trainers.toy_env:" + toy_env.ENV_ID


# ------------------------------------------------------------------------------------------------ readers
def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar of the event files in ``log_dir``, read by TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def wandb_records(run_file: Path) -> list:
    """The records of an offline W&B run file (``run-*.wandb``): W&B's LevelDB-style log (a 7-byte ``:W&B``
    header, 32 KiB blocks of chunks with a 7-byte header each) of ``wandb_internal_pb2.Record`` messages."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, out = run_file.read_bytes(), 32 * 1024, 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:  # zero padding to the block's end
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # full / first, else middle / last
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
    return out


def wandb_history(run_dir: Path, steps: Sequence[int] = (), wait_s: float = 60.0) -> dict[int, dict[str, str]]:
    """``{step: {key: value_json}}`` of the offline W&B run under ``run_dir/wandb``, read again until ``steps`` are
    all there or ``wait_s`` has passed: W&B's service process may still be writing the file after ``finish()``
    returns (the full suite on a loaded machine once read it without step 0)."""
    deadline = time.monotonic() + wait_s
    while True:
        (run_file,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
        rows: dict[int, dict[str, str]] = {}
        for rec in wandb_records(Path(run_file)):
            if rec.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): i.value_json for i in rec.history.item}
                rows.setdefault(int(items["_step"]), {}).update(items)
        if set(steps) <= set(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------------ loggers
def test_log_spec_names_the_unknown_logger_and_the_missing_package(monkeypatch):
    assert L.parse_log_spec("tensorboard, wandb") == ("jsonl", "tensorboard", "wandb")
    assert L.parse_log_spec("") == ("jsonl",)
    with pytest.raises(InvalidArgument, match=r"unknown logger 'tensorbord'\. Did you mean 'tensorboard'"):
        L.parse_log_spec("jsonl,tensorbord")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(DependencyNotInstalled, match=r'pip install "agentgym-turn\[wandb\]"'):
        L.check_log_spec("wandb")
    from trainers.rl import RLConfig

    with pytest.raises(DependencyNotInstalled, match="--log wandb needs"):
        RLConfig(env=[ENV], log="wandb")


def test_tensorboard_event_files_hold_the_metrics_rows(tmp_path):
    pytest.importorskip("tensorboard")
    loggers = L.make_loggers("tensorboard", tmp_path, config={"lr": 0.1})
    rows = [{"step": s, "rollout/return": s / 2, "losses/policy": -s / 4, "note": "text is skipped"} for s in (1, 2)]
    for row in rows:
        loggers.log(row["step"], row)
    loggers.log_table("eval/transcripts", ["task", "text"], [["t|1", "<b>a</b>\nb"]], 2)
    loggers.close()
    scalars = tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars == {"rollout/return": {1: 0.5, 2: 1.0}, "losses/policy": {1: -0.25, 2: -0.5}}
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert written == rows
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    (text,) = acc.Tensors("eval/transcripts/text_summary")
    assert "t\\|1" in text.tensor_proto.string_val[0].decode()


def test_wandb_offline_run_holds_the_metrics_and_the_transcript_table(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline by default
    monkeypatch.setenv("WANDB_SILENT", "true")
    loggers = L.make_loggers("wandb", tmp_path, config={"strategy": "mt_grpo"}, name="tiny")
    for s in (0, 1, 2):
        loggers.log(s, {"step": s, "rollout/return": s / 4, "eval/env/exact_match": 0.5})
    loggers.log_table("eval/transcripts", ["task", "return", "text"], [["q1", 1.0, "<answer>7</answer>"]], 3)
    loggers.close()
    history = wandb_history(tmp_path, steps=(0, 1, 2, 3))
    assert [float(history[s]["rollout/return"]) for s in (0, 1, 2)] == [0.0, 0.25, 0.5]
    assert json.loads(history[3]["eval/transcripts/_type"]) == "table-file"
    (table,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "table" / "eval" / "*.json"))
    assert json.loads(Path(table).read_text()) == {
        "columns": ["task", "return", "text"],
        "data": [["q1", 1.0, "<answer>7</answer>"]],
    }
    assert (tmp_path / "wandb" / "run-id").read_text() in Path(table).parts[-6]


# ------------------------------------------------------------------------------------------------- traces
def test_token_texts_concatenate_to_the_decoded_text(tokenizer):
    from trainers.rollout import decode, encode

    text = "<answer>Zoë → 東京 🙂 42</answer><|im_end|>"
    ids = encode(tokenizer, text)
    pieces = L.token_texts(tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == decode(tokenizer, ids) == text
    assert all("\ufffd" not in p for p in pieces)


class WordTokenizer:
    """Decodes ids as space-joined words, the first without its space (as SentencePiece strips a leading one)."""

    words = ("alpha", "beta", "gamma", "delta")

    def decode(self, ids, **kwargs):
        return " ".join(self.words[i] for i in ids)


def test_token_texts_of_a_word_level_decoder_add_up_past_the_context_window():
    ids = [0, 1, 2, 3, 1] * 4
    pieces = L.token_texts(WordTokenizer(), ids)
    assert "".join(pieces) == WordTokenizer().decode(ids) and pieces[:3] == ["alpha", " beta", " gamma"]


def _scripted_episodes(tokenizer, tasks: int = 2, group: int = 3):
    from trainers.engines import stop_token_ids
    from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor

    pool = EnvPool([ENV])
    stops = stop_token_ids(tokenizer)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    actor = scripted_actor(tokenizer, eos, ["reference", "direct"], [0.5, 0.5])
    try:
        episodes, _ = collect(pool, actor, tokenizer, stops, RolloutConfig(32, 512, 2), num_tasks=tasks,
                              group_size=group, seed=3)  # fmt: skip
    finally:
        pool.close()
    return episodes


@pytest.mark.parametrize("strategy", ["grpo_or", "mt_grpo"])
def test_trace_records_each_policy_tokens_advantage(tmp_path, tokenizer, strategy):
    from trainers.credit import CreditConfig, get_strategy
    from trainers.rollout import decode

    episodes = _scripted_episodes(tokenizer)
    credit = get_strategy(strategy)(episodes, None, CreditConfig())
    path = L.write_trace(tmp_path / "t.jsonl.gz", [
        L.episode_record(ep, tokenizer, step=3, strategy=strategy, advantages=credit.advantages[i])
        for i, ep in enumerate(episodes)
    ])  # fmt: skip
    records = L.read_trace(path)
    assert len(records) == len(episodes)
    for ep, adv, rec in zip(episodes, credit.advantages, records, strict=True):
        assert (rec["step"], rec["strategy"], rec["env_id"], rec["group"]) == (3, strategy, ENV, ep.group)
        assert rec["task"].startswith("What is ") and rec["prompt"].endswith("<|im_start|>assistant\n")
        assert rec["return"] == pytest.approx(ep.total_reward) and len(rec["turns"]) == ep.num_turns
        for k, turn in enumerate(rec["turns"]):
            where = np.flatnonzero(ep.turn_index == k)
            assert "".join(turn["tokens"]) == decode(tokenizer, ep.token_ids[where].tolist())
            assert turn["adv"] == [round(float(a), 4) for a in adv[where]]
            assert turn["rewards"] == pytest.approx(ep.turn_rewards[k])
        assert ("<result>" in rec["turns"][0]["env"]) == (ep.num_turns == 2)
        # the whole episode is the prompt + each turn's tokens and env text, in order
        whole = rec["prompt"] + "".join("".join(t["tokens"]) + t["env"] for t in rec["turns"])
        assert whole == decode(tokenizer, ep.token_ids.tolist())
    by_group: dict[int, list[float]] = {}
    for rec in records:  # GRPO-OR: one advantage per episode (its last turn's tokens), centred in each group
        by_group.setdefault(rec["group"], []).append(rec["turns"][-1]["adv"][0])
    if strategy == "grpo_or":
        assert all(abs(sum(v)) < 1e-3 for v in by_group.values())
        assert any(len({a for t in r["turns"] for a in t["adv"]}) == 1 for r in records)


def test_trace_due_and_sampling_keep_whole_groups(tokenizer):
    assert [s for s in range(1, 13) if L.trace_due(s, 5, 12)] == [1, 5, 10, 12]
    assert not any(L.trace_due(s, 0, 12) for s in range(1, 13))
    episodes = _scripted_episodes(tokenizer, tasks=3, group=2)
    picked = L.sample_episodes(episodes[::-1], 3)
    assert sorted(episodes[::-1][i].group for i in picked) == [0, 0, 1]


def test_tiny_rl_run_logs_everywhere_and_writes_traces(tmp_path, tiny_model_dir, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    from tests.trainers.test_rl import _cfg
    from trainers.rl import train

    cfg = _cfg(tmp_path, tiny_model_dir, strategy="mt_grpo", kl_coef=0.0, log="jsonl,tensorboard,wandb",
               trace_every=1, trace_episodes=3, eval_every=1, eval_tasks=2,
               eval_env_kwarg=["max_action_chars=100000"])  # fmt: skip
    train(cfg)
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    scalars = tensorboard_scalars(run / "tensorboard")
    history = wandb_history(run, steps=(0, 1, 2))
    for row in rows:
        for key, value in L.scalars(row).items():
            assert scalars[key][row["step"]] == pytest.approx(value, rel=1e-6, abs=1e-6), key
            logged = float(history[row["step"]][key])
            assert logged == pytest.approx(value) or (math.isnan(value) and math.isnan(logged)), key
    tables = glob.glob(str(run / "wandb" / "offline-run-*" / "files" / "media" / "table" / "eval" / "*.json"))
    assert len(tables) == 3  # the held-out transcripts of steps 0, 1 and 2
    for step in (1, 2):
        records = L.read_trace(run / "traces" / f"step_{step:06d}.jsonl.gz")
        assert [r["group"] for r in records] == [2 * (step - 1)] * 2 + [2 * (step - 1) + 1]
        for rec in records:
            assert rec["kind"] == "train" and rec["strategy"] == "mt_grpo" and rec["step"] == step
            for turn in rec["turns"]:  # MT-GRPO: one advantage per turn
                assert len(turn["adv"]) == len(turn["tokens"]) and len(set(turn["adv"])) <= 1
    for step in (0, 1, 2):
        held = L.read_trace(run / "traces" / f"eval_step_{step:06d}.jsonl.gz")
        assert len(held) == 2 and all(r["kind"] == "eval" and t["adv"] is None for r in held for t in r["turns"])
    from leaderboards import view

    page = view.main([str(run), "--out", str(tmp_path / "view.html")]).read_text()
    data = json.loads(page.split('id="data">', 1)[1].split("</script>", 1)[0])
    assert sorted((e["kind"], e["step"]) for e in data["episodes"]) == sorted(
        [("train", 1)] * 3 + [("train", 2)] * 3 + [("eval", s) for s in (0, 1, 2) for _ in range(2)]
    )
