"""Experiment specs, the grid runner (kill, resume, skip) and the aggregation's bootstrap over seeds.

One test plays the runner as the product does, each run a subprocess, killed and resumed
(:func:`test_runner_end_to_end_kill_resume_skip_and_aggregate`); the others that play runs use the in-process launcher
(:func:`~tests.leaderboards.conftest.launch_in_process`), which the same test checks against the subprocess's
results."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from agentgym_turn.error import DataNotFound, InvalidArgument
from envs.credit_chain import build_tasks as build_credit_chain_tasks
from envs.sokoban.env import LONG_HORIZON_KWARGS
from leaderboards.evaluate import git_dirty
from leaderboards.experiments import main
from leaderboards.report import (
    aggregate,
    arm_metric,
    curves,
    paired_delta,
    paper_name,
    render_table,
    seed_band,
    stage_figures,
)
from leaderboards.runner import (
    DONE,
    _start_record,
    build_check_seeds,
    call_logged,
    eval_budget,
    eval_commands,
    precision_warning,
    select_runs,
    status,
    train_command,
)
from leaderboards.spec import _config_of, load_spec
from leaderboards.tables import ResultRow, append_row
from tests.leaderboards.conftest import launch_in_process, write_tiny_spec
from tests.processes import gone_within
from trainers.checkpoint import latest_checkpoint, policy_folder
from trainers.config import render_flags
from trainers.metrics import peak_memory_gib

REPO = Path(__file__).resolve().parents[2]
ENV = "TurnRL/Arithmetic-v0"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_flags_render_toml_values_as_cli_options():
    assert render_flags({"tasks_per_step": 4, "tree": True, "bf16": False, "env": ["a", "b"], "value_clip": None}) == [
        "--tasks-per-step", "4", "--tree", "--no-bf16", "--env", "a", "b", "--value-clip", "none",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[arms.a]\nstrategy = "mt_gpro"\n',
         "Did you mean 'mt_grpo'"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[budget]\ntask_per_step = 2\n'
         '[arms.a]\nstrategy = "grpo_or"\n', "Did you mean 'tasks_per_step'"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[budget]\nseed = 2\n'
         '[arms.a]\nstrategy = "grpo_or"\n', "set by the runner"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0, 0]\n[arms.a]\nstrategy = "grpo_or"\n',
         "distinct ints"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[arms.a]\nstrategy = "grpo_or"\n'
         "group_size = 1\n", "--group-size=1"),
        ('name = "x"\ntrainer = "ppo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[arms.a]\nstrategy = "ppo_or"\n',
         "must be one of"),
        ('name = "x"\ntrainer = "mtppo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[arms.a]\nstrategy = "gigpo"\n'
         'trainer = "grpo_trainer"\n', "trainer='grpo_trainer' must be one of"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[arms.a]\nstrategy = "gigpo"\n'
         'stage = 0\n', "stage=0 must be an int >= 1"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[warm_start]\ncheck_seeds = [0]\n'
         '[arms.a]\nstrategy = "grpo_or"\n', r"check_seeds=\[0\] must be distinct ints other than the warm"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[eval]\npaired = "env/success"\n'
         'versus = "recipe"\n[arms.a]\nstrategy = "grpo_or"\n', r"versus='recipe' names no arm; the arms: \['a'\]"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[eval]\nversus = "a"\n'
         '[arms.a]\nstrategy = "grpo_or"\n', "set paired = 'env/...'"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[eval]\ntrials = 4\n'
         '[arms.a]\nstrategy = "grpo_or"\n', "greedy episodes of a task are one episode repeated"),
        ('name = "x"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0]\n[eval]\ntemperature = "hot"\n'
         '[arms.a]\nstrategy = "grpo_or"\n', r"temperature='hot' a number in \[0, 2\]"),
    ],
)  # fmt: skip
def test_spec_errors_name_the_key_and_the_fix(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_spec(_write(tmp_path / "bad.toml", text))


def test_a_sampled_evaluation_passes_temperature_and_trials_to_every_final_evaluation(tmp_path):
    text = (f'name = "s"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0]\n[budget]\nsft_episodes = 0\n[eval]\ntasks = 4\n'
            '[arms.a]\nstrategy = "grpo_or"\n')  # fmt: skip
    greedy = load_spec(_write(tmp_path / "g.toml", text))
    sampled = load_spec(
        _write(tmp_path / "s.toml", text.replace("tasks = 4", "tasks = 4\ntemperature = 1.0\ntrials = 8"))
    )
    (g,) = eval_commands(greedy, tmp_path / "p", tmp_path / "e", {})
    (s,) = eval_commands(sampled, tmp_path / "p", tmp_path / "e", {})
    assert g[g.index("--temperature") + 1] == "0" and "--trials" not in g
    assert s[s.index("--temperature") + 1] == "1.0" and s[s.index("--trials") + 1] == "8"
    assert s[s.index("--episodes") + 1] == "4"  # tasks, each played `trials` times


def test_extends_takes_the_other_specs_keys_and_merges_budget_eval_and_arms(tmp_path):
    _write(tmp_path / "base.toml", 'name = "base"\ntrainer = "grpo"\nenv = "TurnRL/Arithmetic-v0"\nseeds = [0, 1]\n'
           '[warm_start.args]\nepisodes = 8\nepochs = 2\n[budget]\nsteps = 3\nlr = 1e-5\n[eval]\ntasks = 8\n'
           '[arms.a]\nstrategy = "grpo_or"\n')  # fmt: skip
    child = _write(tmp_path / "child.toml", 'extends = "base.toml"\nname = "child"\n[warm_start.args]\nepisodes = 4\n'
                   '[budget]\nsteps = 5\n[arms.b]\nstrategy = "mt_grpo"\nstage = 2\n')  # fmt: skip
    child = load_spec(child)
    assert (child.name, child.trainer, child.seeds, child.eval.tasks) == ("child", "grpo", (0, 1), 8)
    assert dict(child.budget) == {"steps": 5, "lr": 1e-5}  # merged key by key, the child's value wins
    assert dict(child.warm_start.args) == {"episodes": 4}  # replaced whole: a warm start is one recipe
    assert [(a.name, a.stage) for a in child.arms] == [("a", 1), ("b", 2)]
    _write(tmp_path / "loop.toml", 'extends = "loop.toml"\nname = "x"\n')
    with pytest.raises(ValueError, match="extends itself"):
        load_spec(tmp_path / "loop.toml")
    with pytest.raises(ValueError, match=r"missing\.toml' does not exist"):
        load_spec(_write(tmp_path / "orphan.toml", 'extends = "missing.toml"\nname = "x"\n'))


# issue 49: the four strategies, per-seed warm starts
CREDIT_GRIDS = ("credit_chain", "credit_chain_map", "credit_chain_map_bf16", "credit_chain_map_epoch",
                "credit_chain_map_epoch_h2", "credit_chain_map_epoch_h8", "credit_chain_map_h2", "credit_chain_map_h8",
                "credit_chain_map_balanced", "wiki_credit", "searchr1_hops_credit", "sokoban_long_credit")  # fmt: skip


def test_committed_specs_load_and_compare_the_papers_strategies():
    specs = {p.stem: load_spec(p) for p in sorted((REPO / "experiments").glob("*.toml"))}
    credit = ["grpo_or", "grpo_mr", "mt_grpo", "gigpo"]  # issue 49: the credit comparison, per-seed warm starts
    assert {s: [a.strategy for a in spec.arms if a.stage == 1] for s, spec in specs.items()} == {
        **{key: credit for key in CREDIT_GRIDS},
        "searchr1_recipe": ["mt_grpo"],
        "sokoban_mtppo": ["ppo_or", "ppo_mr", "mt_ppo"],
        "sokoban_mtppo_bfs64": ["ppo_or", "ppo_mr", "mt_ppo"],
        "sokoban_recipe": ["mt_grpo"],
        "wiki_mtgrpo": ["grpo_or", "grpo_mr", "mt_grpo"],
        "wiki_mtppo": ["ppo_or", "ppo_mr", "mt_ppo"],
        "wiki_recipe_sweep": ["mt_grpo"],  # issue 26: the recipe (lr 1e-5) at three seeds
    }
    assert {s: [a.strategy for a in spec.arms if a.stage == 2] for s, spec in specs.items()} == {
        **{key: [] for key in CREDIT_GRIDS},
        "searchr1_recipe": ["mt_grpo"] * 5,  # refill8 (8 rounds, 12 steps), its lr sweep, refill8_1epoch, refill8_g8
        "sokoban_mtppo": [],  # its warm start never succeeds: stage 2 is played from the stronger one below
        "sokoban_mtppo_bfs64": ["turn_ppo", "gigpo"],  # issue 15: newer credit assignment, after the papers' arms
        "sokoban_recipe": ["mt_grpo"] * 2,
        "wiki_mtgrpo": ["gigpo", "mt_grpo_rtg", "mt_grpo"],  # the last: MT-GRPO with discounted turn returns
        "wiki_mtppo": ["turn_ppo"],
        "wiki_recipe_sweep": ["mt_grpo"] * 7,  # two other learning rates and five ablations, at seed 0
    }
    recipe = specs["wiki_recipe_sweep"]
    assert [f"{r.arm.name}/seed{r.seed}" for r in recipe.runs(Path("runs"))][:4] == [
        "lr1e-5/seed0", "lr1e-5/seed1", "lr1e-5/seed2", "lr2e-5/seed0"]  # fmt: skip
    ablated = {a.name: dict(a.overrides) for a in recipe.arms if a.stage == 2 and a.overrides["lr"] == 1e-5}
    assert ablated == {"no_dynamic_sampling": {"lr": 1e-5, "dynamic_sampling": False},
                       "one_epoch": {"lr": 1e-5, "ppo_epochs": 1}, "std_scaling": {"lr": 1e-5, "scale_by_std": True},
                       "seq_mean": {"lr": 1e-5, "aggregation": "seq_mean_token_mean"},
                       "small_batch": {"lr": 1e-5, "tasks_per_step": 2}}  # fmt: skip
    for name, off in ablated.items():  # each ablation turns one of the recipe's ingredients off
        assert all(recipe.budget.get(k) != v for k, v in off.items() if k != "lr"), name
    for spec in (recipe, specs["sokoban_recipe"]):  # item 4: the papers' comparison at the recipe's budget
        compared = {a.name: _config_of(spec, next(r for r in spec.runs(Path("runs")) if r.arm == a), None)
                    for a in spec.arms if a.stage == 3}  # fmt: skip
        assert sorted(compared) == sorted(["grpo_or", "grpo_mr", "mt_grpo_disc", "gigpo", "ppo_or", "ppo_mr",
                                           "mt_ppo", "turn_ppo"])  # beside lr1e-5, the recipe's MT-GRPO  # fmt: skip
        for name, cfg in compared.items():  # same episodes a step, steps, epochs, learning rate
            assert (cfg.steps, cfg.tasks_per_step * cfg.group_size, cfg.ppo_epochs, cfg.lr) == (10, 32, 2, 1e-5), name
            assert cfg.algo == ("ppo" if "ppo" in name else "grpo") and cfg.kl_coef == 0.0
            assert cfg.dynamic_sampling == (cfg.algo == "grpo") and not cfg.credit_cfg.scale_by_std  # GiGPO
    disc = _config_of(specs["wiki_mtgrpo"], next(r for r in specs["wiki_mtgrpo"].runs(Path("runs"))
                                                 if r.arm.name == "mt_grpo_disc"), None)  # fmt: skip
    assert disc.strategy == "mt_grpo" and disc.credit_cfg.turn_gamma == 0.5
    assert [len(specs[s].seeds) for s in ("sokoban_mtppo", "sokoban_mtppo_bfs64", "wiki_mtgrpo", "wiki_mtppo")] == [
        2, 2, 3, 3]  # fmt: skip
    for name, spec in specs.items():  # one budget for every arm: the papers' arms override nothing but their strategy
        sweep = "recipe" in name  # its arms are learning rates
        assert (sweep or all(not arm.overrides for arm in spec.arms if arm.stage == 1)) and spec.warm_start is not None
        runs = spec.runs(Path("runs"))  # every seed of stage 1 is played before any stage-2 run
        assert [r.arm.stage for r in runs] == sorted(r.arm.stage for r in runs)
    sokoban = specs["sokoban_mtppo_bfs64"]
    gigpo = next(a for a in sokoban.arms if a.name == "gigpo")
    sokoban_runs = {r.arm.name: r for r in sokoban.runs(Path("runs")) if r.seed == 0}
    assert train_command(sokoban, sokoban_runs["gigpo"], None)[2] == "trainers.grpo"
    cfg = _config_of(sokoban, sokoban_runs["gigpo"], None)
    ppo = _config_of(sokoban, sokoban_runs["mt_ppo"], None)
    assert cfg.algo == "grpo" and ppo.algo == "ppo" and gigpo.overrides == {"tasks_per_step": 1, "group_size": 4}
    assert cfg.tasks_per_step * cfg.group_size == ppo.tasks_per_step * ppo.group_size  # same episodes a step

    spec = specs["credit_chain"]  # issue 49: the first budget, over all four option pairs (its runs are committed)
    cfg = _config_of(spec, spec.runs(Path("runs"))[0], None)
    assert spec.warm_start.per_seed and spec.eval.tasks == 48 and cfg.max_turns == 4 and cfg.steps == 20
    assert spec.eval.env_kwargs == {"preset": "noisy_outcome", "horizon": 4}
    assert cfg.env_kwarg == spec.warm_start.args["env_kwarg"] == ["preset=noisy_outcome", "horizon=4"]
    held_out_map = len(build_credit_chain_tasks("test", "Map"))
    for name, horizon in (("credit_chain_map", 4), ("credit_chain_map_h2", 2), ("credit_chain_map_h8", 8)):
        spec = specs[name]  # the diagnostic at three horizons: one option pair, the same budget and evaluation
        cfg = _config_of(spec, spec.runs(Path("runs"))[0], None)
        assert spec.warm_start.per_seed and cfg.max_turns == horizon and (cfg.steps, cfg.lr) == (30, 1e-5)
        assert spec.eval.tasks == held_out_map == 12 and (spec.eval.temperature, spec.eval.trials) == (1.0, 8)
        assert spec.eval.env_kwargs == {"preset": "noisy_outcome", "horizon": horizon, "pairs": "Map"}
        assert spec.warm_start.args["env_kwarg"] == ["preset=noisy_outcome", f"horizon={horizon}"]  # all four pairs
        assert cfg.env_kwarg == [*spec.warm_start.args["env_kwarg"], "pairs=Map"]
        # one precision on every host kind: fp32 in the warm start, the update, the rollouts and the evaluations
        assert (cfg.dtype, cfg.bf16, spec.warm_start.args["bf16"]) == ("float32", False, False)
        evaluation = eval_commands(spec, Path("p"), Path("o"), eval_budget(cfg))[0]
        at = evaluation.index("--engine-dtype") if "--engine-dtype" in evaluation else None  # vLLM's precision
        assert (evaluation[at + 1] if at else None) == ("float32" if cfg.engine == "vllm" else None)
    bf16 = specs["credit_chain_map_bf16"]  # the record of the first seeds, as they ran: bf16 updates, warm starts
    cfg = _config_of(bf16, bf16.runs(Path("runs"))[0], None)  # with bf16 left to the host, the same budget
    assert cfg.dtype == "bfloat16" and cfg.bf16 is None and "bf16" not in bf16.warm_start.args
    fp32 = _config_of(specs["credit_chain_map"], specs["credit_chain_map"].runs(Path("runs"))[0], None)
    same = {"dtype": "bfloat16", "bf16": None, "init": cfg.init, "out_dir": cfg.out_dir}  # the rest is the budget
    assert dataclasses.replace(fp32, **same) == cfg
    for horizon, suffix in ((4, ""), (2, "_h2"), (8, "_h8")):  # each grid again with its tasks taken in epochs
        iid_spec, epoch_spec = specs[f"credit_chain_map{suffix}"], specs[f"credit_chain_map_epoch{suffix}"]
        iid_cfg = _config_of(iid_spec, iid_spec.runs(Path("runs"))[0], None)
        epoch_cfg = _config_of(epoch_spec, epoch_spec.runs(Path("runs"))[0], None)
        assert (iid_cfg.task_order, epoch_cfg.task_order, epoch_cfg.max_turns) == ("iid", "epoch", horizon)
        assert dataclasses.replace(epoch_cfg, task_order="iid", init=iid_cfg.init, out_dir=iid_cfg.out_dir) == iid_cfg
        assert (epoch_spec.eval, epoch_spec.warm_start, epoch_spec.seeds) == (iid_spec.eval, iid_spec.warm_start,
                                                                              (0, 1, 2))  # fmt: skip
    balanced, epoch = specs["credit_chain_map_balanced"], specs["credit_chain_map_epoch"]  # only the cold start differs
    assert balanced.warm_start.per_seed and balanced.warm_start.args == {**epoch.warm_start.args,
                                                                         "warm_start": "balanced"}  # fmt: skip
    assert (balanced.budget, balanced.eval, balanced.seeds, balanced.arms) == (epoch.budget, epoch.eval, epoch.seeds,
                                                                               epoch.arms)  # fmt: skip
    wiki = specs["wiki_credit"]  # the recipe's budget, from per-seed exploring cold starts
    assert wiki.warm_start.per_seed and wiki.env == ("TurnRL/WikiTwoTurn-v2",) and "policy" not in wiki.warm_start.args
    assert wiki.budget == {**specs["wiki_recipe_sweep"].budget, "lr": 1e-5} and wiki.eval.tasks == 64
    # item 4's harder tasks: the recipe's budget of each family, the harder kwargs in cold start, training and eval
    for name, recipe, kwargs in (("searchr1_hops_credit", "searchr1_recipe", {"hops": 2}),
                                 ("sokoban_long_credit", "sokoban_recipe", LONG_HORIZON_KWARGS)):  # fmt: skip
        spec, base = specs[name], specs[recipe]
        cfg = _config_of(spec, spec.runs(Path("runs"))[0], None)
        flags = [f"{k}={v}" for k, v in kwargs.items()]
        assert spec.warm_start.per_seed and spec.eval.env_kwargs == kwargs and len(spec.seeds) == 3
        assert cfg.env_kwarg == spec.warm_start.args["env_kwarg"] == flags and cfg.max_turns == (
            4 if "hops" in kwargs else 6
        )
        assert (cfg.steps, cfg.tasks_per_step, cfg.group_size, cfg.lr) == (
            base.budget["steps"], 8, 4, 1e-5)  # fmt: skip


def test_tables_show_the_papers_reported_rows_beside_the_arms_that_ran():
    spec = load_spec(REPO / "experiments" / "wiki_mtgrpo.toml")
    metric = {"estimate": 0.2, "low": 0.1, "high": 0.3}
    text = render_table(
        spec, {"warm start": {"runs": 1, "exact_match": metric}, "mt_grpo": {"runs": 2, "exact_match": metric}}
    )
    lines = text.splitlines()
    assert "| mt_grpo | 2 | 0.200 [0.100, 0.300] |" in text
    assert "| mt_grpo: Qwen2.5-7B-Base + MT-GRPO | **reported** (000 Table 2) | 0.501 |" in lines  # 000 Table 2's EM
    assert "| warm start: Qwen2.5-7B-Base | **reported** (000 Table 2) | 0.047 |" in lines
    reported = [line for line in lines if "**reported**" in line]
    assert len(reported) == 3 and not any("GRPO-OR" in r or "GRPO-MR" in r for r in reported)  # arms not run: none
    # a stage-2 variant of MT-GRPO (discounted turn returns; the paper ran none) gets no copy of MT-GRPO's row
    both = render_table(spec, {"mt_grpo": {"runs": 1, "exact_match": metric},
                               "mt_grpo_disc": {"runs": 1, "exact_match": metric}})  # fmt: skip
    assert "| mt_grpo: Qwen2.5-7B-Base + MT-GRPO |" in both and "| mt_grpo_disc: Qwen2.5" not in both
    assert [paper_name(s) for s in ("ppo_mr", "mt_grpo_rtg", "gigpo", "turn_ppo")] == [
        "PPO-MR", "MT-GRPO-RTG", "GiGPO", "Turn-PPO"
    ]  # fmt: skip


def test_paired_delta_by_hand_and_its_bootstrap_over_seeds_and_tasks():
    base = {0: 0.0, 1: 1.0, 2: 0.0, 3: 0.0}
    one = paired_delta([{0: 1.0, 1: 1.0, 2: 0.0, 3: 0.0}], base)
    assert one["estimate"] == 0.25 and 0.0 <= one["low"] <= 0.25 <= one["high"] <= 0.75  # one task gained
    same = paired_delta([dict(base), dict(base)], base)  # no change on any task: no width at all
    assert (same["estimate"], same["low"], same["high"]) == (0.0, 0.0, 0.0)
    # every task gains 1 in one seed and 0 in the other: a task bootstrap alone would give no width
    split = paired_delta([{t: v + 1 for t, v in base.items()}, dict(base)], base)
    assert split["estimate"] == 0.5 and split["low"] == 0.0 and split["high"] == 1.0
    with pytest.raises(InvalidArgument, match="same tasks as its base"):
        paired_delta([{0: 1.0}], base)
    # one base per run (another arm's run of the same seed): seed 0 loses task 0, seed 1 gains tasks 2 and 3
    per_run = paired_delta([{0: 0.0, 1: 1.0}, {0: 1.0, 1: 1.0}], [{0: 1.0, 1: 1.0}, {0: 0.0, 1: 0.0}])
    assert per_run["estimate"] == pytest.approx((-0.5 + 1.0) / 2) and per_run["seeds"] == 2
    with pytest.raises(InvalidArgument, match="2 runs against 1 base runs"):
        paired_delta([base, base], [base])


def test_arm_seeds_and_only_pick_runs_and_name_the_grid_on_a_typo(tmp_path, capsys):
    spec = load_spec(_write(tmp_path / "s.toml", f'name = "g"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0, 1, 2]\n'
                            '[budget]\nsft_episodes = 0\n[arms.main]\nstrategy = "grpo_or"\n[arms.sweep]\n'
                            'strategy = "grpo_or"\nlr = 2e-5\nstage = 2\nseeds = [1]\n'))  # fmt: skip
    names = [f"{r.arm.name}/seed{r.seed}" for r in spec.runs(tmp_path)]
    assert names == ["main/seed0", "main/seed1", "main/seed2", "sweep/seed1"]
    assert [r.seed for r in select_runs(spec, tmp_path, ["main"])] == [0, 1, 2]
    assert [r.arm.name for r in select_runs(spec, tmp_path, ["main/seed2", "sweep"])] == ["main", "sweep"]
    with pytest.raises(InvalidArgument, match=r"--only \['sweep/seed0'\]: not in .*'main/seed0'"):
        select_runs(spec, tmp_path, ["sweep/seed0"])
    with pytest.raises(SystemExit):  # the CLI refuses before building anything
        main(["run", str(tmp_path / "s.toml"), "--only", "mian", "--runs-dir", str(tmp_path / "runs")])
    assert "--only ['mian']" in capsys.readouterr().err and not (tmp_path / "runs").exists()
    with pytest.raises(ValueError, match=r"seeds=\[3\] must be a non-empty subset of the spec's seeds \[0, 1\]"):
        load_spec(_write(tmp_path / "bad.toml", f'name = "g"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0, 1]\n'
                         '[arms.a]\nstrategy = "grpo_or"\nseeds = [3]\n'))  # fmt: skip
    # a warm start's check seed is named like a run: it selects no run, and only it is built
    checked = load_spec(_write(tmp_path / "c.toml", f'name = "c"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0]\n'
                               '[warm_start]\ncheck_seeds = [1, 2]\n[arms.a]\nstrategy = "grpo_or"\n'))  # fmt: skip
    assert select_runs(checked, tmp_path, ["warm_start_seed2"]) == []
    with pytest.raises(InvalidArgument, match=r"--only \['warm_start_seed3'\]: .*'warm_start_seed1'"):
        select_runs(checked, tmp_path, ["warm_start_seed3"])
    build_check_seeds(checked, tmp_path, ["a/seed0"])  # names no check seed: builds none
    assert not (tmp_path / "c").exists()


def _transcripts(run_dir: Path, values: list[float]) -> None:
    folder = run_dir / "final-eval" / "transcripts"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"task": t, "metrics": {"env/success": v}} for t, v in enumerate(values)]
    (folder / "Arithmetic-v0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_aggregate_gives_each_seeds_paired_change_beside_the_arms(tmp_path):
    text = (f'name = "cmp"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0, 1]\n[warm_start.args]\nepisodes = 4\n'
            '[eval]\ntasks = 4\npaired = "env/success"\nversus = "a"\n[arms.a]\nstrategy = "grpo_or"\n[arms.b]\n'
            'strategy = "grpo_or"\nseeds = [0]\n[arms.c]\nstrategy = "grpo_mr"\n')  # fmt: skip
    spec = load_spec(_write(tmp_path / "s.toml", text))
    root = tmp_path / "runs"
    _fake_run(root / "cmp" / "warm_start", 0, 0.25, [{"step": 1}])
    _transcripts(root / "cmp" / "warm_start", [0.0, 1.0, 0.0, 0.0])
    for seed, values in enumerate([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]]):  # seed 0 gains 3 tasks, seed 1 none
        _fake_run(root / "cmp" / "a" / f"seed{seed}", seed, float(np.mean(values)), [{"step": 1}])
        _transcripts(root / "cmp" / "a" / f"seed{seed}", values)
    _fake_run(root / "cmp" / "b" / "seed0", 0, 0.5, [{"step": 1}])
    _transcripts(root / "cmp" / "b" / "seed0", [1.0, 1.0, 0.0, 0.0])
    for seed, values in enumerate([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]]):  # vs a: -2 tasks, then +1
        _fake_run(root / "cmp" / "c" / f"seed{seed}", seed, float(np.mean(values)), [{"step": 1}])
        _transcripts(root / "cmp" / "c" / f"seed{seed}", values)
    table = aggregate(spec, root, tmp_path / "agg")
    assert table["a"]["paired_delta"]["estimate"] == 0.375  # (0.75 + 0) / 2
    per_seed = dict(table["a"]["paired_per_seed"])
    assert per_seed[0]["estimate"] == 0.75 and (per_seed[1]["estimate"], per_seed[1]["high"]) == (0.0, 0.0)
    md = (tmp_path / "agg" / "table.md").read_text()
    assert "| a | 1 | +0.000 [+0.000, +0.000] |" in md and "| a | 0 | +0.750 [" in md
    assert "| b | 0 |" not in md  # one run: the arm's row already is that run's
    rows = {(r["arm"], r["seed"]): r for r in map(json.loads, (tmp_path / "agg" / "runs.jsonl").open())}
    assert rows[("a", 1)]["paired_delta"]["estimate"] == 0.0 and rows[("b", 0)]["paired_delta"]["estimate"] == 0.25
    # versus = "a": b's seed 0 against a's seed 0 (tasks 2 and 3 lost), on the one seed both played; a has none
    assert table["b"]["paired_versus"]["estimate"] == -0.5 and table["b"]["paired_versus"]["seeds"] == 1
    assert "paired_versus" not in table["a"] and "paired_versus" not in rows[("a", 0)]
    assert rows[("b", 0)]["paired_versus"]["a"]["estimate"] == -0.5
    assert "Against a: each arm's Δ env/success" in md and "| b | 1 | -0.500 [" in md
    # per run, each seed's change from the warm start and from a's run of that seed (a itself: no such column value)
    assert "| arm | seed | Δ (paired) | Δ vs a (paired) |" in md and "| a | 1 | +0.000 [+0.000, +0.000] |  |" in md
    assert "| c | 0 | +0.250 [" in md and "] | -0.500 [" in md.split("| c | 0 |")[1].splitlines()[0]
    assert "] | +0.250 [" in md.split("| c | 1 |")[1].splitlines()[0]
    assert table["c"]["paired_versus"]["estimate"] == pytest.approx((-0.5 + 0.25) / 2)


def test_the_held_out_interval_resamples_seeds_then_tasks():
    # two seeds that both score 0.5: a bootstrap over the seed means alone gives no width at all
    assert seed_band([0.5, 0.5]) == (0.5, 0.5, 0.5)
    rows = [{"estimate": 0.5, "low": 0.0, "high": 1.0}] * 2
    tasks = [{0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}, {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0}]
    m = arm_metric(rows, tasks)
    # by hand: seeds drawn, then one task draw for the drawn seeds (the seeds share the held-out tasks)
    rng, values, boots = np.random.default_rng(0), np.array([[tasks[s][t] for t in range(4)] for s in (0, 1)]), []
    for _ in range(2000):
        seeds, picked = rng.integers(0, 2, 2), rng.integers(0, 4, 4)
        boots.append(np.mean([values[s, t] for s in seeds for t in picked]))
    low, high = np.quantile(boots, [0.025, 0.975])
    assert m == {"estimate": 0.5, "low": pytest.approx(low), "high": pytest.approx(high), "seeds": 2,
                 "ci": "seeds+tasks"}  # fmt: skip
    assert m["low"] < 0.3 and m["high"] == 1.0  # one seed drawn twice: its tasks decide
    assert arm_metric(rows[:1]) == {**rows[0], "seeds": 1, "ci": "tasks"}  # a single run: its CI over tasks
    none = arm_metric(rows)  # several seeds without transcripts: the mean, and no interval claimed
    assert (none["estimate"], none["low"], none["high"], none["ci"]) == (0.5, None, None, "none")
    spec = load_spec(REPO / "experiments" / "wiki_mtgrpo.toml")
    assert "| a | 2 | 0.500 [no CI] |" in render_table(spec, {"a": {"runs": 2, "exact_match": none}})
    with pytest.raises(InvalidArgument, match="the same tasks"):
        arm_metric(rows, [tasks[0], {0: 1.0}])
    with pytest.raises(InvalidArgument, match=r"row says 0\.25 but its transcripts give 0\.5"):
        arm_metric([{"estimate": 0.25, "low": 0.0, "high": 1.0}, rows[1]], tasks)


def test_aggregate_shows_the_credit_signal_beside_each_arm(tmp_path):
    spec = load_spec(_write(tmp_path / "s.toml", f'name = "cr"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0, 1]\n'
                            '[budget]\nsft_episodes = 0\n[arms.a]\nstrategy = "mt_grpo"\n[arms.b]\n'
                            'strategy = "grpo_or"\n'))  # fmt: skip
    root = tmp_path / "runs"
    logged = [  # per seed: (step 1, step 2) of turn-1 reward varies, turn-1 distinct actions, adv differs
        [(0.5, 0.25, 0.1), (1.0, 0.5, 0.3)],
        [(0.0, 0.75, 0.0), (0.0, 0.5, 0.0)],
    ]
    for seed, steps in enumerate(logged):
        rows = [{"step": 0, "eval/env/success": 0.5}] + [
            {"step": k + 1, "credit/turn1_reward_varies": v, "credit/turn1_distinct_actions": d,
             "credit/adv_differs_from_grpo_or": a, "credit/turn1_groups": 2} for k, (v, d, a) in enumerate(steps)
        ]  # fmt: skip
        _fake_run(root / "cr" / "a" / f"seed{seed}", seed, 0.5, rows)
        _fake_run(root / "cr" / "b" / f"seed{seed}", seed, 0.5, [{"step": 1}])  # logged before the instruments
    table = aggregate(spec, root, tmp_path / "agg")
    assert table["a"]["credit"] == pytest.approx({
        "turn-1 reward varies, step 1": 0.25,  # (0.5 + 0.0) / 2
        "turn-1 reward varies, run mean": 0.375,  # (0.75 + 0.0) / 2
        "turn-1 distinct actions, step 1": 0.5,  # (0.25 + 0.75) / 2
        "adv differs from GRPO-OR, run mean": 0.1,  # (0.2 + 0.0) / 2
    })  # fmt: skip
    assert table["b"]["credit"] == {}
    md = (tmp_path / "agg" / "table.md").read_text()
    assert "| arm | turn-1 reward varies, step 1 | turn-1 reward varies, run mean |" in md
    assert "| a | 0.250 | 0.375 | 0.500 | 0.100 |" in md and "| b | - | - | - | - |" in md
    rows = {(r["arm"], r["seed"]): r for r in map(json.loads, (tmp_path / "agg" / "runs.jsonl").open())}
    assert rows[("a", 0)]["credit"]["turn-1 reward varies, run mean"] == 0.75 and rows[("b", 1)]["credit"] == {}


def test_per_seed_warm_starts_start_each_seed_and_pair_with_it(tmp_path):
    text = (f'name = "ps"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0, 1]\n[warm_start]\nper_seed = true\n'
            'check_seeds = [2]\n[warm_start.args]\nepisodes = 4\n[budget]\nsft_episodes = 0\n[eval]\ntasks = 4\n'
            'paired = "env/success"\n[arms.a]\nstrategy = "grpo_or"\n')  # fmt: skip
    spec = load_spec(_write(tmp_path / "s.toml", text))
    root = tmp_path / "runs"
    assert [(k, p.name) for k, p in spec.check_dirs(root)] == [(1, "warm_start_seed1"), (2, "warm_start_seed2")]
    runs = spec.runs(root)
    assert [spec.start_dir(r, root).name for r in runs] == ["warm_start", "warm_start_seed1"]
    cmd = train_command(spec, runs[1], spec.start_dir(runs[1], root))
    assert cmd[cmd.index("--init") + 1] == str(root / "ps" / "warm_start_seed1")
    assert [name for name, _state, _steps in status(spec, root)] == [
        "warm_start", "warm_start_seed1", "warm_start_seed2", "a/seed0", "a/seed1"
    ]  # fmt: skip
    assert select_runs(spec, root, ["warm_start_seed1"]) == []  # --only can name it
    assert select_runs(spec, root, ["warm_start"]) == []  # and the seed-0 warm start alone

    built: list[str] = []

    def refuse(command: list[str], log: Path) -> int:  # records what would be built, builds nothing
        built.append(Path(command[command.index("--out-dir") + 1]).name)
        return 1

    with pytest.raises(RuntimeError):
        build_check_seeds(spec, root, launch=refuse)  # the check seed now; seed 1's before its first run
    with pytest.raises(RuntimeError):
        build_check_seeds(spec, root, ["warm_start_seed1"], launch=refuse)
    assert built == ["warm_start_seed2", "warm_start_seed1"]
    shutil.rmtree(root)
    with pytest.raises(InvalidArgument, match="per_seed='yes' must be true"):
        load_spec(_write(tmp_path / "bad.toml", text.replace("per_seed = true", 'per_seed = "yes"')))

    # each run's paired change is from its own warm start; the per-seed warm starts get a row of their own
    for k, (warm, run) in enumerate([([0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]), ([1.0] * 4, [1.0] * 4)]):
        _fake_run(spec.warm_dir(root, k), k, float(np.mean(warm)), [{"step": 1}])
        _transcripts(spec.warm_dir(root, k), warm)
        _fake_run(runs[k].out_dir, k, float(np.mean(run)), [{"step": 1}])
        _transcripts(runs[k].out_dir, run)
    table = aggregate(spec, root, tmp_path / "agg")
    assert dict(table["a"]["paired_per_seed"])[1]["estimate"] == 0.0  # not +0.75: seed 1 started at 1.0
    assert table["a"]["paired_delta"]["estimate"] == 0.125 and table["a"]["paired_delta"]["seeds"] == 2
    ws = table["warm start, per seed"]
    assert ws["runs"] == 2 and ws["success"]["estimate"] == 0.625 and ws["success"]["ci"] == "seeds+tasks"
    rows = [(r["arm"], r["seed"]) for r in map(json.loads, (tmp_path / "agg" / "runs.jsonl").open())]
    assert rows == [("warm start", 0), ("warm start, seed 1", 1), ("a", 0), ("a", 1)]  # each run once
    assert "the mean change from the warm start each seed started from" in (tmp_path / "agg" / "table.md").read_text()


@pytest.mark.slow
def test_per_seed_warm_starts_played_in_process(tmp_path, tiny_model_dir):
    """A two-seed grid with per-seed warm starts, played by the runner: seed 1's warm start is built (at seed 1)
    right before seed 1's run, which starts from it; a second ``run`` plays nothing."""
    text = write_tiny_spec(tmp_path / "tiny.toml", tiny_model_dir, steps=1).read_text()
    text = text.replace("seeds = [0]", "seeds = [0, 1]").replace("[warm_start]\n", "[warm_start]\nper_seed = true\n")
    spec = _write(tmp_path / "ps.toml", text.replace("[budget]\n", "[budget]\nsft_episodes = 0\n"))
    runs = tmp_path / "runs"
    launched: list[tuple[str, str]] = []

    def recorded(command: list[str], log: Path) -> int:
        out = (
            command[command.index("--out-dir") + 1] if "--out-dir" in command else command[command.index("--model") + 1]
        )
        launched.append((command[2], Path(out).relative_to(runs / "tiny").parts[0]))
        return launch_in_process(command, log)

    assert main(["run", str(spec), "--runs-dir", str(runs)], launch=recorded) == 0
    assert launched == [("trainers.sft", "warm_start"), ("leaderboards.evaluate", "warm_start"),
                        ("trainers.grpo", "or"), ("leaderboards.evaluate", "or"),
                        ("trainers.sft", "warm_start_seed1"), ("leaderboards.evaluate", "warm_start_seed1"),
                        ("trainers.grpo", "or"), ("leaderboards.evaluate", "or")]  # fmt: skip
    warm1 = json.loads((runs / "tiny" / "warm_start_seed1" / "run.json").read_text())["command"]
    assert warm1[warm1.index("--seed") + 1] == "1"
    seed1 = json.loads((runs / "tiny" / "or" / "seed1" / "config.json").read_text())
    assert seed1["init"] == str(runs / "tiny" / "warm_start_seed1")
    launched.clear()
    assert main(["run", str(spec), "--runs-dir", str(runs)], launch=recorded) == 0 and launched == []
    table = aggregate(load_spec(spec), runs, tmp_path / "agg")
    assert table["warm start, per seed"]["runs"] == 2 and table["or"]["success"]["ci"] == "seeds+tasks"
    assert [seed for seed, _m in table["or"]["paired_per_seed"]] == [0, 1]


def test_a_changed_spec_refuses_to_resume_a_started_run(tmp_path):
    _start_record(tmp_path, {"arm": "a"}, ["python", "-m", "trainers.grpo", "--steps", "4"])
    _start_record(tmp_path, {"arm": "a"}, ["python", "-m", "trainers.grpo", "--steps", "4"])
    assert len(json.loads((tmp_path / "run.json").read_text())["attempts"]) == 2
    with pytest.raises(ValueError, match="different command"):
        _start_record(tmp_path, {"arm": "a"}, ["python", "-m", "trainers.grpo", "--steps", "5"])


def test_an_attempt_from_uncommitted_code_names_the_changed_files(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "rl.py").write_text("x = 1\n")
    (repo / "notes.md").write_text("a\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    assert git_dirty(repo) == []
    (repo / "rl.py").write_text("x = 2\n")
    (repo / "notes.md").write_text("b\n")
    (repo / "new.py").write_text("")  # untracked: not part of what a run imports from the commit
    assert git_dirty(repo) == ["notes.md", "rl.py"]
    assert git_dirty(tmp_path / "nowhere") == []
    monkeypatch.setattr("leaderboards.runner.git_dirty", lambda: git_dirty(repo))
    _start_record(tmp_path / "run", {"arm": "a"}, ["python", "-m", "trainers.grpo"])
    attempt = json.loads((tmp_path / "run" / "run.json").read_text())["attempts"][0]
    assert attempt["uncommitted_code"] == ["rl.py"]  # docs and results left out
    assert attempt["host"]["cores"] >= 1 and attempt["host"]["cpu"]  # which runs shared a machine
    assert isinstance(attempt["host"]["bf16_kernels"], bool)  # how fast bf16 ran there


def test_seed_band_is_the_percentile_bootstrap_by_hand():
    # means of 4 draws from [0, 0, 0, 1]: P(0) = 0.316 > 2.5%, P(>= 0.75) = 0.051 > 2.5% > P(1) = 0.004
    assert seed_band([0.0, 0.0, 0.0, 1.0]) == (0.25, 0.0, 0.75)
    # 3 draws from [0.2, 0.4, 0.6]: P(all 0.2) = P(all 0.6) = 1/27 = 3.7% > 2.5%
    assert seed_band([0.2, 0.4, 0.6]) == pytest.approx((0.4, 0.2, 0.6))
    assert seed_band([0.5]) == (0.5, 0.5, 0.5)


def _fake_run(run_dir: Path, seed: int, em: float, steps: list[dict]) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (run_dir / "config.json").write_text(json.dumps({"seed": seed, "lr": 1e-5}))
    (run_dir / "run.json").write_text(json.dumps({"strategy": "grpo_or", "command": ["-m", "x"], "attempts": []}))
    (run_dir / DONE).write_text(json.dumps({"git_sha": f"sha{seed}"}))
    metric = {"estimate": em, "low": em - 0.1, "high": em + 0.1, "confidence": 0.95, "n_tasks": 8, "sd": None}
    append_row(run_dir / "final-eval", ResultRow(env_id=ENV, env_version=0, env_kwargs={}, family="arithmetic",
                                                 model="m", engine="transformers", seed=12345, git_sha="s",
                                                 date="d", episodes=8, trials=1, temperature=0.0, max_new_tokens=4,
                                                 max_turns=1, metrics={"success": metric}, seconds=1.0))  # fmt: skip


def test_aggregate_bands_tables_and_rows_from_written_metric_files(tmp_path):
    spec = load_spec(_write(tmp_path / "s.toml", f'name = "cmp"\ntrainer = "grpo"\nenv = "{ENV}"\n'
                            'seeds = [0, 1, 2, 3]\n[budget]\nsft_episodes = 0\n[arms.a]\nstrategy = "grpo_or"\n'
                            '[arms.b]\nstrategy = "mt_grpo"\n'))  # fmt: skip
    root = tmp_path / "runs"
    for seed, em in enumerate([0.0, 0.0, 0.0, 1.0]):
        steps = [{"step": s, "reward/answer": em * s, "rollout/seconds": 2.0, "perf/step_seconds": 3.0,
                  "rollout/tokens_per_s": 100.0 + seed, "perf/peak_memory_gib": 1.0 + s} for s in (1, 2)]  # fmt: skip
        _fake_run(root / "cmp" / "a" / f"seed{seed}", seed, em, steps)
        _transcripts(root / "cmp" / "a" / f"seed{seed}", [em] * 4)  # 4 tasks alike: only the seeds vary
    _fake_run(root / "cmp" / "b" / "seed0", 0, 0.5, [{"step": 1, "reward/answer": 0.5}])
    (root / "cmp" / "b" / "seed1").mkdir(parents=True)
    (root / "cmp" / "b" / "seed1" / "run.json").write_text("{}")  # started, not done: left out
    table = aggregate(spec, root, tmp_path / "agg")
    assert table["a"]["success"] == {"estimate": 0.25, "low": 0.0, "high": 0.75, "seeds": 4, "ci": "seeds+tasks"}
    assert table["b"]["success"] == {"estimate": 0.5, "low": 0.4, "high": 0.6, "seeds": 1, "ci": "tasks"}
    assert table["a"]["rollout s"] == 4.0 and table["a"]["wall s"] == 6.0
    assert table["a"]["rollout tok/s"] == pytest.approx(101.5) and table["a"]["peak mem GiB"] == 3.0
    assert table["a"]["runs"] == 4 and table["b"]["runs"] == 1
    md = (tmp_path / "agg" / "table.md").read_text()
    assert "| a | 4 | 0.250 [0.000, 0.750] | 6.0 | 4.0 |" in md
    rows = [json.loads(line) for line in (tmp_path / "agg" / "runs.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["seed"], r["git_sha"]) for r in rows] == [("a", s, f"sha{s}") for s in range(4)] + [
        ("b", 0, "sha0")
    ]
    assert rows[0]["config"]["lr"] == 1e-5 and rows[3]["final_eval"]["success"]["estimate"] == 1.0
    assert (tmp_path / "agg" / "curves_train.png").stat().st_size > 1000
    assert not (tmp_path / "agg" / "curves_eval.png").exists()  # no eval/ keys logged
    band = curves({("a", s): [{"step": 2, "k": v}] for s, v in enumerate([0.0, 0.0, 0.0, 1.0])}, "k")
    assert band == {"a": [(2, 0.25, 0.0, 0.75)]}
    assert np.isclose(table["a"]["success"]["estimate"], np.mean([0, 0, 0, 1]))


def test_a_host_without_bf16_kernels_is_warned_before_runs_that_ask_for_bf16(tmp_path, tiny_model_dir):
    """On an AVX2-only CPU a bf16 run is 10-20x slower and a warm start rebuilt with bf16 unset trains in fp32: the
    runner says so before it starts (and says nothing where the kernels exist or nothing asks for bf16)."""
    plain = load_spec(write_tiny_spec(tmp_path / "plain.toml", tiny_model_dir, steps=1))
    root = tmp_path / "runs"
    assert precision_warning(plain, root, select_runs(plain, root), native=False) is None  # bf16 = false throughout
    text = (tmp_path / "plain.toml").read_text()
    budget_bf16 = text.replace("engine = ", 'dtype = "bfloat16"\nengine = ')
    warm_unset = budget_bf16.replace("max_context = 512\nbf16 = false\n", "max_context = 512\n")
    (tmp_path / "bf16.toml").write_text(warm_unset.replace('name = "tiny"', 'name = "tinybf"'))
    spec = load_spec(tmp_path / "bf16.toml")
    runs = select_runs(spec, root)
    assert precision_warning(spec, root, runs, native=True) is None
    warning = precision_warning(spec, root, runs, native=False)
    assert warning is not None and "1 run(s) of tinybf ask for bf16 (or/seed0)" in warning
    assert "its rebuild trains in fp32 here" in warning and 'set dtype = "auto"' in warning
    done = runs[0].out_dir
    done.mkdir(parents=True)
    (done / DONE).write_text("{}")  # a finished run asks for nothing
    warning = precision_warning(spec, root, runs, native=False)
    assert warning is not None and "ask for bf16" not in warning and "rebuild trains in fp32" in warning


def test_launchers_append_the_output_to_the_log_and_a_failure_raises_with_its_tail(tmp_path, tiny_model_dir):
    """The runner's default launcher runs a child process; the tests' in-process one calls the CLI's ``main`` with
    the same argv. Both append the command's output to its log, a failure raises with the log's tail, and the
    in-process one puts back what the run changed for the whole process."""
    import torch

    log = tmp_path / "log.txt"
    call_logged([sys.executable, "-c", "print('from the child')"], log)
    with pytest.raises(RuntimeError, match=r"(?s)exited with 3; its log .* ends with:.*dying"):
        call_logged([sys.executable, "-c", "import sys; print('dying'); sys.exit(3)"], log)
    assert "from the child" in log.read_text() and "dying" in log.read_text()

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the run below sets 1 (--threads 1) and seeds every generator
    try:
        before = (dict(os.environ), sys.argv[:], os.getcwd(), sys.stdout, torch.get_num_threads(),
                  torch.get_rng_state(), np.random.get_state()[1].copy(), warnings.filters[:],
                  logging.getLogger("transformers").level)  # fmt: skip
        sft = [sys.executable, "-m", "trainers.sft", "--env", ENV, "--model", tiny_model_dir, "--policy",
               "scripted:oracle", "--episodes", "2", "--batch-episodes", "2", "--eval-tasks", "0", "--max-context",
               "512", "--no-bf16", "--threads", "1", "--out-dir", str(tmp_path / "sft")]  # fmt: skip
        call_logged(sft, tmp_path / "sft.txt", launch_in_process)
        assert "[sft] 2 demonstrations" in (tmp_path / "sft.txt").read_text()
        assert (tmp_path / "sft" / "policy" / "config.json").is_file()
        evaluate = [sys.executable, "-m", "leaderboards.evaluate", "--env", ENV, "--no-tables", "--results-dir",
                    str(tmp_path / "results")]  # fmt: skip
        with pytest.raises(RuntimeError, match=r"(?s)exited with 2.*--episodes: invalid int value: 'x'"):
            call_logged([*evaluate, "--episodes", "x"], tmp_path / "eval.txt", launch_in_process)  # SystemExit(2)
        with pytest.raises(RuntimeError, match=r"(?s)exited with 1.*Traceback.*no scripted policy 'nope'"):
            call_logged([*evaluate, "--model", "scripted:nope"], tmp_path / "eval.txt", launch_in_process)
        after = (dict(os.environ), sys.argv[:], os.getcwd(), sys.stdout, torch.get_num_threads(),
                 torch.get_rng_state(), np.random.get_state()[1].copy(), warnings.filters[:],
                 logging.getLogger("transformers").level)  # fmt: skip
        assert after[:5] == before[:5] and torch.equal(after[5], before[5]) and np.array_equal(after[6], before[6])
        assert after[7:] == before[7:]
    finally:
        torch.set_num_threads(threads)


RUNNER = """
import sys
from pathlib import Path
from leaderboards.runner import launch_subprocess

child = "import os, pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(600)"
launch_subprocess([sys.executable, "-c", child, sys.argv[1]], Path(sys.argv[2]))
"""


def test_a_killed_runner_takes_its_run_along(tmp_path):
    """SIGKILL the runner (a session's end, a ``kill -9``): its trainer child gets SIGTERM, not a life of its own."""
    (tmp_path / "runner.py").write_text(RUNNER)
    pid_file = tmp_path / "child.pid"
    runner = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(pid_file), str(tmp_path / "log.txt")],
                              env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    deadline = time.time() + 60
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.time() < deadline and runner.poll() is None, "the runner did not start its child"
        time.sleep(0.05)
    child = int(pid_file.read_text())
    runner.kill()
    runner.wait()
    assert gone_within(child, 10), "the run outlived its runner"


@pytest.mark.slow
def test_runner_end_to_end_kill_resume_skip_and_aggregate(tmp_path, tiny_model_dir, capsys):
    """The runner as the product plays it, each run a subprocess: runner and trainer killed mid-run, then resumed.
    The check seed is built first in this process (the runner skips it); the warm start, built by the runner's
    subprocesses, is later rebuilt in this process, and the two must agree: the in-process launcher that the other
    tests use gives the numbers a subprocess gives."""
    spec = write_tiny_spec(tmp_path / "tiny.toml", tiny_model_dir, steps=12, check_seeds=(1,))
    runs = tmp_path / "runs"
    build_check_seeds(load_spec(spec), runs, launch=launch_in_process)
    cmd = [sys.executable, "-m", "leaderboards.experiments", "run", str(spec), "--runs-dir", str(runs)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = runs / "tiny" / "or" / "seed0"
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    deadline = time.time() + 240
    while not (first / "latest").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the machine goes down: runner and trainer die mid-run
    proc.wait()
    assert (first / "latest").exists(), proc.stdout.read().decode()[-3000:]
    assert not (first / DONE).exists()
    main(["status", str(spec), "--runs-dir", str(runs)])
    shown = capsys.readouterr().out
    assert "warm_start" in shown and "done" in shown and "or/seed0" in shown and "partial" in shown
    assert "warm_start_seed1" in shown and "2 done, 1 partial, 0 pending" in shown  # the check seed before the runs

    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resuming at step" in res.stdout and "building the warm start" not in res.stdout
    record = json.loads((first / "run.json").read_text())
    assert len(record["attempts"]) == 2 and record["attempts"][1]["from_step"] >= 1
    assert record["seed"] == 0 and len(record["attempts"][0]["git_sha"]) >= 7
    steps = [json.loads(line)["step"] for line in (first / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s > 0] == list(range(1, 13))  # step 0: the warm start's eval, when logged
    assert all((runs / "tiny" / d / DONE).is_file() for d in ("warm_start", "warm_start_seed1", "or/seed0"))
    check = json.loads((runs / "tiny" / "warm_start_seed1" / "run.json").read_text())["command"]
    assert check[check.index("--seed") + 1] == "1" and "warm_start_seed1" in check[check.index("--out-dir") + 1]
    row = json.loads((first / "final-eval" / "Arithmetic-v0.jsonl").read_text().splitlines()[-1])
    assert row["episodes"] == 2 and row["seed"] == 3 and row["temperature"] == 0.0 and row["engine"] == "transformers"
    told = [json.loads(line) for line in (first / "final-eval" / "transcripts" / "Arithmetic-v0.jsonl").open()]
    assert [t["task"] for t in told] == [0, 1] and all("text" in t and "turn_rewards" in t for t in told)

    launched: list[list[str]] = []

    def recorded(command: list[str], log: Path) -> int:
        launched.append(command)
        return launch_in_process(command, log)

    capsys.readouterr()
    assert main(["run", str(spec), "--runs-dir", str(runs)], launch=recorded) == 0
    assert capsys.readouterr().out.count("done, skipped") == 1 and launched == []  # all done: nothing runs
    assert not list(first.glob("checkpoint-*/state.pt"))  # a done run keeps its policy, not its training state
    assert (first / "checkpoint-000012" / "policy" / "config.json").is_file()
    assert policy_folder(str(first)) == str(first / "checkpoint-000012" / "policy")
    with pytest.raises(DataNotFound, match="no state\\.pt"):
        latest_checkpoint(first)  # continuing it is refused with the fix, not a torch.load traceback

    table = aggregate(load_spec(spec), runs, tmp_path / "agg")
    assert set(table) == {"warm start", "warm start, seed 1", "or"} and table["or"]["success"]["ci"] == "tasks"
    assert "paired_delta" not in table["warm start, seed 1"] and "success" in table["warm start, seed 1"]
    warm = [json.loads(line) for line in (runs / "tiny" / "warm_start" / "final-eval" / "transcripts" /
                                          "Arithmetic-v0.jsonl").open()]  # fmt: skip
    gain = np.mean([t["metrics"]["env/success"] for t in told]) - np.mean([t["metrics"]["env/success"] for t in warm])
    assert table["or"]["paired_delta"]["estimate"] == pytest.approx(gain)
    assert "Δ env/success vs warm start (paired)" in (tmp_path / "agg" / "table.md").read_text()
    rows = [json.loads(line) for line in (tmp_path / "agg" / "runs.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["seed"]) for r in rows] == [("warm start", 0), ("warm start, seed 1", 1), ("or", 0)]
    assert rows[2]["config"]["strategy"] == "grpo_or" and rows[2]["config"]["steps"] == 12

    # A committed grid on a fresh clone: results without weights (.gitignore drops checkpoints and policy/).
    for path in [runs / "tiny" / "warm_start" / "policy", *first.glob("checkpoint-*"), first / "latest"]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    main(["status", str(spec), "--runs-dir", str(runs)])
    shown = capsys.readouterr().out
    committed_log = (runs / "tiny" / "warm_start" / "metrics.jsonl").read_text()
    assert "3 done, 0 partial, 0 pending" in shown and "step 12" in shown  # DONE.json tells the steps
    assert main(["run", str(spec), "--runs-dir", str(runs)], launch=recorded) == 0  # in this process
    out = capsys.readouterr().out
    assert "rebuilding the warm start's weights" in out and out.count("done, skipped") == 1
    assert [c[2] for c in launched] == ["trainers.sft", "leaderboards.evaluate"]
    rebuilt = json.loads((runs / "tiny" / "warm_start" / "run.json").read_text())["attempts"][-1]
    compared = rebuilt["rebuilt_vs_committed"]
    # deterministic, and the in-process rebuild gives what the runner's subprocesses gave
    assert compared and all(v["committed"] == v["rebuilt"] for v in compared.values()), compared
    assert rebuilt["rebuilt_training_log"]["rows"] > 0 and rebuilt["rebuilt_training_log"]["rows_differing"] == 0
    assert (runs / "tiny" / "warm_start" / "metrics.jsonl").read_text() == committed_log  # the record is kept
    assert (runs / "tiny" / "warm_start" / "policy" / "config.json").is_file()
    assert aggregate(load_spec(spec), runs, tmp_path / "agg2") == table  # the committed results are untouched


def test_peak_memory_counts_this_process_and_its_children():
    alone = peak_memory_gib()  # this process's high-water mark (a long test session may have set it earlier)
    code = "b = b'x' * (200 * 2**20); print('ready', flush=True); import time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with_child = peak_memory_gib()
    finally:
        child.kill()
        child.wait()
    assert alone > 0.01 and with_child > alone + 0.18  # the child's 200 MiB (written, so resident) are added


def test_a_grid_with_stages_draws_each_stage_beside_the_versus_arm(tmp_path):
    text = (f'name = "st"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0, 1]\n[budget]\nsft_episodes = 0\n'
            '[eval]\ntasks = 4\npaired = "env/success"\nversus = "a"\n[arms.a]\nstrategy = "mt_grpo"\n[arms.b]\n'
            'strategy = "grpo_or"\nstage = 2\n[arms.c]\nstrategy = "grpo_mr"\nstage = 3\n')  # fmt: skip
    spec = load_spec(_write(tmp_path / "s.toml", text))
    runs = {(arm, seed): [{"step": 1, "eval/env/success": 0.5}] for arm in "abc" for seed in (0, 1)}
    figures = stage_figures(spec, runs)
    assert [(suffix, label, sorted({a for a, _ in r})) for suffix, label, r in figures] == [
        ("", " (stage 1)", ["a"]), ("_stage2", " (stage 2)", ["a", "b"]), ("_stage3", " (stage 3)", ["a", "c"])
    ]  # fmt: skip
    no_stage3 = {k: v for k, v in runs.items() if k[0] != "c"}
    assert [suffix for suffix, _label, _runs in stage_figures(spec, no_stage3)] == ["", "_stage2"]
    root = tmp_path / "runs"
    for arm in "abc":
        _fake_run(root / "st" / arm / "seed0", 0, 0.5, [{"step": 1, "eval/env/success": 0.5}])
    aggregate(spec, root, tmp_path / "agg")
    assert {p.name for p in (tmp_path / "agg").glob("curves_eval*.png")} == {
        "curves_eval.png", "curves_eval_stage2.png", "curves_eval_stage3.png"
    }  # fmt: skip
    one = (
        f'name = "o"\ntrainer = "grpo"\nenv = "{ENV}"\nseeds = [0]\n[budget]\nsft_episodes = 0\n'
        '[arms.a]\nstrategy = "mt_grpo"\n'
    )
    one_stage = load_spec(_write(tmp_path / "one.toml", one + '[arms.b]\nstrategy = "grpo_or"\n'))
    assert [(s, t, len(r)) for s, t, r in stage_figures(one_stage, runs)] == [("", "", 6)]
