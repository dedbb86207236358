"""``--env-kwarg`` reaches ``gym.make`` from the RL and SFT CLIs (issue 12 item 2), per --env when several; the
credit knobs of ``trainers.credit`` are RLConfig flags: RLConfig holds a ``CreditConfig`` whose fields are flags
under their old flat names, and saved configs stay flat (issue 48)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

from agentgym_turn.error import InvalidArgument
from tests.trainers import toy_env
from trainers.config import config_argv, env_kwargs_by_id, from_flat, parse_config, to_dict
from trainers.credit import CreditConfig
from trainers.ray_rollout import make_env_pool
from trainers.rl import RLConfig

pytest.importorskip("torch")


class LabelledArith(toy_env.ArithEnv):
    """The toy env with two make-time arguments it reports in its episode metrics."""

    def __init__(self, *, bonus: float = 0.0, label: str = "", render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        self.bonus, self.label = bonus, label

    def _episode_metrics(self) -> dict[str, float]:
        return {**super()._episode_metrics(), "env/bonus": float(self.bonus), "env/label_len": float(len(self.label))}


IDS = ("TurnRLTest/LabelledArith-v0", "TurnRLTest/LabelledArithB-v0")
for _id in IDS:
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=LabelledArith)
A, B = (f"{__name__}:{i}" for i in IDS)


def test_env_kwargs_apply_to_every_env_or_to_the_one_named():
    items = ["bonus=1.5", "label=plain text", f"{IDS[1]}:bonus=2", 'label={"not": "a str"}', f'{A}:label="x=1"']
    got = env_kwargs_by_id([A, B], items)
    assert got[A] == {"bonus": 1.5, "label": "x=1"}
    assert got[B] == {"bonus": 2, "label": {"not": "a str"}}
    assert env_kwargs_by_id([A], []) == {A: {}}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("bonus", "--env-kwarg 'bonus' must be key=value"),
        ("=3", "--env-kwarg '=3' must be key=value"),
        ("TurnRL/Other-v0:bonus=1", "names 'TurnRL/Other-v0', which is not an --env"),
        ("2x=1", "--env-kwarg '2x=1' must be key=value"),
    ],
)
def test_bad_env_kwargs_name_the_value_and_the_fix(item, message, capsys):
    with pytest.raises(ValueError, match=r"e\.g\."):
        env_kwargs_by_id([A], [item])
    with pytest.raises(SystemExit):
        parse_config(RLConfig, ["--env", A, "--env-kwarg", item], prog="t", description="")
    assert message in capsys.readouterr().err


def test_the_cli_parses_env_kwargs_and_credit_knobs():
    argv = ["--env", A, B, "--env-kwarg", "bonus=1", f"{B}:bonus=2", "--env-kwarg", "label=x", "--group-std-ddof",
            "0", "--group-std-eps", "1e-6", "--no-whiten-advantages", "--bootstrap-truncated",
            "--mt-final-turn-advantage", "--no-scale-by-std"]  # fmt: skip
    cfg = parse_config(RLConfig, argv, prog="t", description="")
    assert cfg.env_kwargs() == {A: {"bonus": 1, "label": "x"}, B: {"bonus": 2, "label": "x"}}  # repeated: extended
    c = cfg.credit_cfg
    assert (c.std_ddof, c.eps, c.whiten_advantages, c.bootstrap_truncated) == (0, 1e-6, False, True)
    assert c.mt_final_turn_advantage and not c.scale_by_std
    default = parse_config(RLConfig, ["--env", A], prog="t", description="").credit_cfg
    assert (default.std_ddof, default.whiten_advantages, default.bootstrap_truncated) == (1, True, False)
    with pytest.raises(SystemExit):
        parse_config(RLConfig, ["--group-std-eps", "0"], prog="t", description="")
    pool = make_env_pool(cfg.env, None, cfg.env_kwargs())
    try:
        assert [(e.unwrapped.bonus, e.unwrapped.label) for e in pool.get(A, 2)] == [(1, "x")] * 2
        assert pool.get(B, 1)[0].unwrapped.bonus == 2
    finally:
        pool.close()


def test_env_kwargs_reach_the_envs_of_a_grpo_run_and_an_sft_run(tmp_path, tiny_model_dir):
    from trainers import grpo, rl, sft

    common = ["--env", A, "--model", tiny_model_dir, "--max-new-tokens", "4", "--max-context", "256", "--no-bf16",
              "--threads", "1", "--env-kwarg", "bonus=3", 'label="four"']  # fmt: skip
    last = rl.main([*common, "--steps", "1", "--tasks-per-step", "1", "--group-size", "2", "--sft-episodes", "0",
                    "--engine", "transformers", "--out-dir", str(tmp_path / "rl")],
                   prog="python -m trainers.grpo", defaults=grpo.DEFAULTS)  # fmt: skip
    assert last["env/bonus"] == 3.0 and last["env/label_len"] == 4.0
    out = sft.main([*common, "--episodes", "2", "--batch-episodes", "2", "--eval-tasks", "1",
                    "--out-dir", str(tmp_path / "sft")])  # fmt: skip
    assert out["env/bonus"] == 3.0 and out["env/label_len"] == 4.0


CREDIT_ARGV = ["--gamma", "0.9", "--gae-lambda", "0.8", "--no-loss-mask", "--no-advantage-mask", "--group-std-ddof",
               "0", "--group-std-eps", "0.01", "--turn-gamma", "0.7", "--gigpo-omega", "0.5"]  # fmt: skip
CREDIT_SET = CreditConfig(gamma=0.9, gae_lambda=0.8, use_loss_mask=False, use_advantage_mask=False, std_ddof=0,
                          eps=0.01, turn_gamma=0.7, gigpo_omega=0.5)  # fmt: skip


def test_the_credit_flags_fill_the_held_credit_config_and_round_trip():
    cfg = parse_config(RLConfig, ["--env", A, *CREDIT_ARGV], prog="t", description="")
    assert cfg.credit_cfg == CREDIT_SET
    argv = config_argv(cfg)
    assert argv[argv.index("--gamma") :][: len(CREDIT_ARGV)] == CREDIT_ARGV  # the nested fields' flags, in place
    assert parse_config(RLConfig, argv, prog="t", description="") == cfg
    flat = to_dict(cfg)  # saved flat, under the flag names, as before configs nested
    assert "credit_cfg" not in flat and (flat["group_std_eps"], flat["loss_mask"], flat["gamma"]) == (0.01, False, 0.9)
    assert "tarl_turn_scale" not in flat  # a plain CreditConfig field is no flag
    assert from_flat(RLConfig, json.loads(json.dumps(flat))) == cfg
    assert from_flat(RLConfig, {"env": [A], "credit_cfg": CREDIT_SET}) == cfg  # or the sub-config whole
    with pytest.raises(TypeError, match="not both"):
        from_flat(RLConfig, {"env": [A], "credit_cfg": CREDIT_SET, "gamma": 0.5})
    with pytest.raises(TypeError, match="'credit_gamma'"):
        from_flat(RLConfig, {"env": [A], "credit_gamma": 0.5})
    with pytest.raises(InvalidArgument, match="from_flat"):  # a saved dict is no CreditConfig
        RLConfig(env=[A], credit_cfg={"gamma": 0.5})


def test_a_bad_credit_flag_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        parse_config(RLConfig, ["--env", A, "--group-std-eps", "-1"], prog="t", description="")
    assert "CreditConfig.eps (--group-std-eps)=-1.0 must be > 0" in capsys.readouterr().err


def test_a_committed_flat_config_json_loads():
    """A run folder's config.json from before RLConfig nested its credit knobs (flat gamma, loss_mask, ...)."""
    path = Path(__file__).resolve().parents[2] / "experiments/runs/sokoban_mtppo/mt_ppo/seed0/config.json"
    saved = json.loads(path.read_text())
    saved.update(gamma=0.95, loss_mask=False, group_std_eps=0.001)  # non-default credit values must land too
    cfg = from_flat(RLConfig, saved)
    c = cfg.credit_cfg
    assert (c.gamma, c.use_loss_mask, c.eps, c.std_ddof, c.gigpo_gamma) == (0.95, False, 0.001, 1, 0.95)
    again = to_dict(cfg)
    assert {k: again[k] for k in saved} == saved  # written back as it was read
