"""The RL training loop (MT-PPO, GRPO and every other strategy of ``trainers.credit``), top to bottom in one file.

    python -m trainers.mtppo --env TurnRL/WikiTwoTurn-v2                  # MT-PPO (001), critic + GAE
    python -m trainers.grpo --env TurnRL/WikiTwoTurn-v2 --credit mt        # MT-GRPO (000); or / mr for GRPO-OR/MR
    python -m trainers.mtppo --strategy ppo_or --init runs/sft             # any strategy, from an SFT checkpoint
    bash scripts/serve.sh Qwen/Qwen2.5-7B-Instruct 8000 &                       # a local judge (vLLM's server)
    python -m trainers.mtppo --strategy tarl_ppo_turn --env TurnRL/TauRetail-v1 --max-context 8192 \
        --env-kwarg judge=http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct --group-std-ddof 0 \
        --sft-episodes 0                                                     # gym.make kwargs; τ has no cold start

One step is five phases over one :class:`Batch`, each a function of its own: (1) :func:`sample` rolls out
``tasks_per_step`` tasks x ``group_size`` episodes (token-in-token-out, ``trainers.rollout``; dynamic sampling
refills dropped groups here) and packs the minibatches; (2) :func:`score` computes without gradients the policy's
own log-probs (the old log-probs of every minibatch but the first), reference log-probs (only when ``kl_coef > 0``)
and critic values (only for strategies that need a critic); (3) :func:`assign_credit`, the one place a strategy
runs; (4) :func:`update`: ``ppo_epochs`` passes of clipped-surrogate updates over packed sequences (+ KL, - entropy
bonus), the critic with its own optimizer and clipped value loss; then the weights go to the engine; (5) record:
:func:`step_row`'s metrics to JSONL and the loggers, the held-out evaluation, traces, the plot, and :func:`save`'s
atomic checkpoint. :func:`build_learner` (policy, LoRA, critic, reference, optimizers, fp32 masters) and
:func:`build_engine` (vLLM, colocated or not, Ray actors, or a caller's engine) set a run up.

Choices where the papers are silent (as verl, the code base of 001 and 003, makes them):

- Old log-probs (the PPO ratio's denominator) are the policy's own, computed before the update on the tokens of
  the loss, not the sampler's: with ``--no-loss-mask`` env tokens enter the loss and have none, and a bf16 or vLLM
  sampler's differ from the trainer's. The gap is logged (``rollout/logprob_diff_mean`` / ``_max``, policy tokens),
  and so is ``losses/first_ratio_max_dev``, max |ratio - 1| on the first minibatch of the first epoch (0 exactly).
- Every loss term (policy, KL, entropy, value) is one mean over the whole minibatch (``--aggregation``), whatever
  ``--pack-tokens`` is: each pack is divided by the minibatch's count, not by its own.
- An episode cut by ``--max-context`` / ``--max-turns`` is ``truncated`` (``rollout/truncated``) and the env pays what
  a cut gets (``TurnEnv.truncate``): in a judge-scored env (τ-bench) the worst finished outcome, so running out of
  turns never pays better than failing. The default turn limit, 30 (TARL's), is at or above every env's own budget.
- A truncated episode does not bootstrap from the critic by default:
  the value after its last token is a head output that no value target ever trains (its state is never followed
  by a policy token). ``--bootstrap-truncated`` uses it (Gymnasium's meaning of truncation) for a trained critic.

Prefix sharing (``--share-prefix``, default): the episodes of a pack share their prompt (a task's group the system
prompt and question, a step's episodes the system prompt); every pass of the update (the policy's forward and
backward, old log-probs, reference, critic) computes those tokens once per pack and each episode's rest on their KV
(``modeling.pack_shared``), never past the position before an episode's first policy token.

Precision: ``--dtype bfloat16``: bf16 weights with fp32 master weights and optimizer state
(``modeling.MasterWeights``; checkpoints hold the masters, so a resume is exact), no autocast; measured 1.3x the
update of fp32 weights under autocast, with log-probs and gradients as close to exact fp32 as autocast's (both run
the matmuls on bf16-rounded weights). ``--dtype float32``: fp32 weights, under bf16 autocast with ``--bf16``.
``--dtype auto`` (default) and an unset ``--bf16`` pick bf16 where the device computes it natively (a CPU with
``avx512_bf16`` or ``amx_bf16`` that a timed probe confirms, a bf16 GPU) and fp32 without autocast elsewhere: where a
CPU emulates bf16 an update ran 4-20x slower than in fp32 (``agentgym_turn.hardware``); ``config.json`` records what
was picked. AdamW is torch's fused kernel (one pass over all tensors; the default for-loop took 5-25 s a step on
135M parameters).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentgym_turn.error import InvalidArgument
from agentgym_turn.logs import quiet_logs
from trainers.config import ENV_KWARG_HELP, arg, env_kwargs_by_id, nested, to_dict
from trainers.credit import STRATEGIES, CreditConfig, CreditOutput, get_strategy, needs
from trainers.credit import loss_mask as loss_tokens
from trainers.device import BF16_HELP, DEVICE_HELP, DTYPE_CHOICES, DTYPE_HELP, check_device_spec
from trainers.engine_api import Engine
from trainers.engines import ENGINES, default_engine
from trainers.episode import Episode
from trainers.provenance import record_command
from trainers.sft import SFTConfig

RATIO_LEVELS: tuple[str, ...] = ("token", "turn", "sequence")
#: How a run picks each step's tasks (``--task-order``): i.i.d. draws, or seeded epochs over a finite task list.
TASK_ORDERS: tuple[str, ...] = ("iid", "epoch")

CREDIT = {
    "ppo": {"or": "ppo_or", "mr": "ppo_mr", "mt": "mt_ppo"},
    "grpo": {"or": "grpo_or", "mr": "grpo_mr", "mt": "mt_grpo"},
}


@dataclass
class RLConfig:
    """Every knob of an RL run, one CLI flag each; the knobs of ``trainers.credit`` are held whole as
    :attr:`credit_cfg`, a :class:`~trainers.credit.CreditConfig`, whose fields are flags too (``--group-std-eps`` is
    ``credit_cfg.eps``; ``trainers.config.options``). Build one from flat values with ``trainers.config.from_flat``
    (what a saved ``config.json`` holds)."""

    env: list[str] = arg(["TurnRL/WikiTwoTurn-v2"], "env ids to train on (several = mixed-task training)")  # noqa: RUF009
    env_weights: list[float] | None = arg(None, "sampling weight per --env id (default: uniform)")  # noqa: RUF009
    env_kwarg: list[str] = arg([], ENV_KWARG_HELP)  # noqa: RUF009
    model: str = arg("smollm2", "policy to start from: 'smollm2', a Hugging Face id or a model folder")
    init: str | None = arg(None, "checkpoint or HF folder to start from (e.g. the output of trainers.sft)")
    sft_episodes: int = arg(
        SFTConfig.episodes, "cold start folded in: fine-tune on this many scripted episodes first (not with --init)"
    )
    sft_policy: str | None = arg(
        None, "scripted mixture of the cold start (default: the env family's, as trainers.sft: WikiTwoTurn reference)"
    )
    sft_epochs: int = arg(SFTConfig.epochs, "passes over the cold-start demonstrations")
    sft_batch_episodes: int = arg(SFTConfig.batch_episodes, "cold-start episodes per optimizer step")
    sft_lr: float = arg(SFTConfig.lr, "learning rate of the cold start")
    algo: str = arg("ppo", "family that --credit picks from", choices=("ppo", "grpo"))
    credit: str | None = arg(
        None, "or | mr | mt: outcome, merged or multi-turn reward of --algo", choices=("or", "mr", "mt")
    )
    strategy: str = arg("mt_ppo", f"credit-assignment strategy (overrides --algo/--credit): {', '.join(STRATEGIES)}")
    steps: int = arg(8, "RL steps (one batch of rollouts and one update each)")
    tasks_per_step: int = arg(4, "tasks (groups) per step")
    task_order: str = arg(
        "iid",
        "iid: each step draws its tasks at random, with replacement; epoch: visit every task of the envs' (finite) "
        "task lists once per epoch in a seeded shuffle, as a dataset loader does (--dynamic-sampling refills draw iid)",
        choices=TASK_ORDERS,
    )
    group_size: int = arg(4, "episodes per task (GRPO's G; MT-GRPO tree: children per state)")
    dynamic_sampling: bool = arg(
        False,
        "DAPO's dynamic sampling (strategies that compare a group's episodes): drop the groups whose every token gets "
        "advantage 0 (all episodes scored alike) and roll out fresh tasks until --tasks-per-step informative groups "
        "fill the batch, at most --sampling-rounds rounds a step",
    )
    sampling_rounds: int = arg(4, "with --dynamic-sampling: rollout rounds a step at most (the first included)")
    tree: bool = arg(False, "tree rollouts: fork the env into group_size children at each branching turn")
    branch_turns: int = arg(1, "tree rollouts branch at this many first turns (K-1 for a K-turn env)")
    max_new_tokens: int = arg(96, "max generated tokens per policy turn")
    max_context: int = arg(1024, "max tokens of a whole episode (longer episodes are cut, truncated=True)")
    max_turns: int = arg(
        30,
        "policy turns after which a running episode is cut (truncated; a judge-scored env scores it as its worst "
        "outcome); 30, TARL's budget (003), is at or above every env's own, which ends episodes first",
    )
    temperature: float = arg(1.0, "sampling temperature (the update scores tokens at the same temperature)")
    top_p: float = arg(1.0, "nucleus sampling mass")
    engine: str = arg("auto", "generation engine (auto: vllm where installed)", choices=("auto", *ENGINES))
    engine_url: str | None = arg(None, "for --engine openai: URL#MODEL of an OpenAI-compatible server")
    engine_compile: bool = arg(False, "vLLM: compile the model (minutes of start-up on CPU) instead of eager mode")
    engine_kv_cache_gib: int | None = arg(None, "vLLM: KV-cache size in GiB (default $VLLM_CPU_KVCACHE_SPACE, else 2)")
    vllm_gpu_memory: float = arg(
        0.3,
        "vLLM on CUDA (--device cuda --engine vllm, colocated with the update on the same GPU): the fraction of the "
        "GPU's memory vLLM takes for its weights and KV cache (its gpu_memory_utilization); vLLM sleeps during the "
        "update. trainers/device.py has the memory plan per model size",
    )
    ray: str | None = arg(
        None,
        "roll out on a Ray cluster (trainers.ray_rollout): auto | HOST:PORT | ray://HOST:PORT | local; the envs run "
        "in --ray-env-workers actors, the update stays here",
    )
    ray_env_workers: int = arg(2, "with --ray: env-worker actors (envs spread over them round-robin)")
    ray_gen_workers: int = arg(0, "with --ray: generation actors running --engine on shipped weights (0: here)")
    ray_gen_gpus: float = arg(0.0, "GPUs each --ray-gen-workers actor reserves (1 for vLLM on GPU nodes)")
    lr: float = arg(1e-5, "policy learning rate (001 uses 1e-6 on 3B; a 135M CPU run needs more)")
    lr_warmup_steps: int = arg(
        0,
        "linear warm-up of the policy learning rate over the first N steps (step k <= N trains at k/N x --lr; 0: "
        "constant). Adam's first updates move every weight by about the rate whatever its gradient's size, noise "
        "included; the warm-up keeps them small while its moment estimates form",
    )
    critic_lr: float = arg(1e-4, "critic learning rate (own optimizer; 001 uses 10x the policy's)")
    clip_eps: float = arg(0.2, "PPO clip epsilon")
    value_clip: float | None = arg(0.5, "critic value clipping around the old values (None = plain MSE)")
    kl_coef: float = arg(0.001, "beta of the KL to the frozen reference (0 = no reference model at all)")
    entropy_coef: float = arg(0.0, "entropy bonus coefficient (entropy is logged either way)")
    ppo_epochs: int = arg(1, "passes over each batch")
    minibatches: int = arg(1, "optimizer steps per pass (the batch is split by episodes)")
    max_grad_norm: float = arg(1.0, "gradient clipping norm")
    pack_tokens: int = arg(
        512, "with --no-share-prefix: tokens per packed row in the update (no padding; short episodes share a row)"
    )
    share_prefix: bool = arg(
        True,
        "compute the prompt tokens a pack's episodes share (system prompt, question) once per pack in every update "
        "pass, up to the position before the first policy token (--no-share-prefix: every episode whole)",
    )
    share_pack_tokens: int = arg(
        2048,
        "with --share-prefix: tokens one pack computes (its shared prefix once + each episode's rest); a prefix "
        "longer than this is still shared, with up to this many tokens of the episodes' rests",
    )
    aggregation: str = arg("seq_mean_token_mean", "loss reduction", choices=("seq_mean_token_mean", "token_mean"))
    ratio_level: str = arg(
        "auto",
        "importance ratio of the clipped loss: per token (PPO), per policy turn (Turn-PPO / ST-PPO: the geometric "
        "mean of the turn's token ratios, clipped as one), or per sequence (GSPO); auto: turn for turn_ppo, else token",
        choices=("auto", *RATIO_LEVELS),
    )
    credit_cfg: CreditConfig = nested(CreditConfig)  # noqa: RUF009  (flags --gamma ... --bootstrap-truncated)
    lora_rank: int = arg(0, "LoRA rank (0 = full fine-tuning); needs peft")
    lora_alpha: float = arg(16.0, "LoRA alpha")
    lora_targets: list[str] = arg(  # noqa: RUF009
        ["all-linear"],
        "LoRA target modules: all-linear (every linear layer but the LM head) or names, e.g. q_proj v_proj",
    )
    save_merged: bool = arg(
        False,
        "LoRA: checkpoints also hold policy/, the adapter merged into a plain HF folder (what --init, "
        "leaderboards.evaluate and vLLM load); adapter/ is always saved",
    )
    dtype: str = arg("auto", DTYPE_HELP, choices=DTYPE_CHOICES)
    bf16: bool | None = arg(None, BF16_HELP)
    threads: int = arg(0, "torch threads (0 = torch's default)")
    device: str = arg("auto", DEVICE_HELP)
    verbose: bool = arg(False, "vLLM's, transformers' and Java's INFO logs too (default: warnings and errors)")
    seed: int = arg(0, "seed of tasks, sampling and initialisation")
    out_dir: str = arg("runs/rl", "run directory: metrics.jsonl, rewards.png, checkpoints")
    resume: bool = arg(False, "continue the run in --out-dir from its latest checkpoint")
    save_every: int = arg(1, "checkpoint every N steps (1: a kill loses at most the step in flight)")
    check_prefix: bool = arg(True, "check the token/template prefix invariant every turn")
    log: str = arg(
        "jsonl",
        "metric loggers, comma-separated: jsonl (RUN/metrics.jsonl, always on), tensorboard (RUN/tensorboard), wandb "
        "(RUN/wandb, offline unless WANDB_MODE says otherwise); trainers.loggers",
    )
    trace_every: int = arg(
        5,
        "every N steps (and the first and last) write --trace-episodes episodes with each policy token's advantage "
        "to RUN/traces/step_NNNNNN.jsonl.gz for python -m leaderboards.view (0 = off); held-out evaluations always",
    )
    trace_episodes: int = arg(8, "episodes per training trace (whole groups first)")
    eval_every: int = arg(0, "held-out greedy evaluation every N steps (and at step 0), as eval/... (0 = off)")
    eval_tasks: int = arg(64, "held-out tasks per evaluation: a fixed subset, the same at every evaluation")
    eval_seed: int = arg(12_345, "seed of the held-out task draw (leaderboards.evaluate --seed draws the same)")
    eval_env_kwarg: list[str] = arg(  # noqa: RUF009
        [], "held-out gym.make kwargs key=value over the env family's (WikiTwoTurn: split=validation)"
    )

    def __post_init__(self) -> None:
        if not isinstance(self.credit_cfg, CreditConfig):  # e.g. a saved config's dict: from_flat reads those
            raise InvalidArgument(
                f"RLConfig.credit_cfg={self.credit_cfg!r} must be a trainers.credit.CreditConfig; build a config from "
                "flat values (gamma=..., group_std_eps=...) with trainers.config.from_flat(RLConfig, values)."
            )
        if self.credit is not None:
            self.strategy = CREDIT[self.algo][self.credit]
        declared = needs(self.strategy)  # unknown names raise with "did you mean"
        if self.ratio_level == "auto":  # the level the strategy is defined with (Turn-PPO: whole turns)
            self.ratio_level = declared.ratio_level
        import gymnasium as gym

        import agentgym_turn  # noqa: F401  (registers the TurnRL ids)

        for env_id in self.env:
            module, sep, name = env_id.partition(":")
            if sep:  # "pkg.module:Namespace/Id-v0" imports the module that registers the id, as gym.make does
                importlib.import_module(module)
                env_id = name
            if env_id not in gym.registry:
                close = difflib.get_close_matches(env_id, list(gym.registry), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise InvalidArgument(f"--env {env_id!r} is not a registered env id.{hint}")
        self.env_kwargs()  # the --env-kwarg syntax, checked before anything runs
        if self.env_weights is not None and len(self.env_weights) != len(self.env):
            raise InvalidArgument(f"--env-weights {self.env_weights} needs one weight per --env ({len(self.env)}).")
        if self.env_weights is not None and self.task_order == "epoch":
            raise InvalidArgument(
                "--task-order epoch visits every task of every --env once per epoch, so --env-weights cannot weigh "
                "them; drop --env-weights, or keep it with --task-order iid."
            )
        names = ("steps", "tasks_per_step", "group_size", "max_new_tokens", "ppo_epochs", "minibatches", "pack_tokens",
                 "share_pack_tokens")  # fmt: skip
        for name in names:
            if getattr(self, name) < 1:
                raise InvalidArgument(f"--{name.replace('_', '-')}={getattr(self, name)} must be >= 1.")
        if self.group_size < 2 and declared.groups:
            raise InvalidArgument(
                f"--group-size={self.group_size} gives {self.strategy} a group of one (advantage 0 everywhere): it "
                "compares the episodes of one task's group; use --group-size 2 or more, or a strategy that needs no "
                "groups such as mt_ppo."
            )
        if self.dynamic_sampling and not declared.groups:
            raise InvalidArgument(
                f"--dynamic-sampling drops groups whose episodes all get advantage 0; {self.strategy} compares no "
                "groups (a critic's advantages are rarely 0). Use a grouped strategy such as mt_grpo, or drop the flag."
            )
        if self.sampling_rounds < 1:
            raise InvalidArgument(f"--sampling-rounds={self.sampling_rounds} must be >= 1.")
        if self.minibatches > self.tasks_per_step * self.group_size:
            raise InvalidArgument(f"--minibatches={self.minibatches} exceeds the episodes per step; lower it.")
        if self.max_context <= self.max_new_tokens:
            raise InvalidArgument(f"--max-context={self.max_context} must exceed --max-new-tokens.")
        for name in ("lr", "critic_lr", "clip_eps", "max_grad_norm", "temperature"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"--{name.replace('_', '-')}={getattr(self, name)} must be > 0.")
        if self.lr_warmup_steps < 0:
            raise InvalidArgument(f"--lr-warmup-steps={self.lr_warmup_steps} must be >= 0 (0: a constant rate).")
        if self.sft_episodes < 0 or self.sft_epochs < 1 or self.sft_batch_episodes < 1 or self.sft_lr <= 0:
            raise InvalidArgument(
                f"--sft-episodes={self.sft_episodes} must be >= 0, --sft-epochs={self.sft_epochs} >= 1, "
                f"--sft-batch-episodes={self.sft_batch_episodes} >= 1 and --sft-lr={self.sft_lr} > 0."
            )
        if self.sft_policy is None:
            from trainers.sft import family_defaults

            self.sft_policy = family_defaults(self.env).get("policy", SFTConfig.policy)
        if self.sft_episodes:
            from trainers.sft import check_policy_mix, parse_policy_mix

            parse_policy_mix(self.sft_policy)
            if self.init is None:  # the cold start runs: every env must have the policies it imitates
                check_policy_mix(self.env, self.sft_policy, "--sft-policy", "--sft-episodes 0")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise InvalidArgument(f"--kl-coef={self.kl_coef} and --entropy-coef={self.entropy_coef} must be >= 0.")
        if self.engine == "auto":
            self.engine = default_engine()
        if self.engine == "openai":
            raise InvalidArgument(
                "--engine openai cannot receive the trainer's weights after an update; train with "
                "--engine transformers or vllm (use the HTTP engine for evaluation)."
            )
        if not 0 < self.vllm_gpu_memory < 1:
            raise InvalidArgument(
                f"--vllm-gpu-memory={self.vllm_gpu_memory} must be a fraction in (0, 1) of the GPU's memory, e.g. 0.3."
            )
        if self.engine_kv_cache_gib is not None and self.engine_kv_cache_gib < 1:
            raise InvalidArgument(f"--engine-kv-cache-gib={self.engine_kv_cache_gib} must be a whole number >= 1.")
        if self.eval_every < 0 or self.eval_tasks < 1:
            raise InvalidArgument(
                f"--eval-every={self.eval_every} must be >= 0 (0 = off) and --eval-tasks={self.eval_tasks} >= 1."
            )
        if self.eval_every:
            from trainers.evaluation import held_out_kwargs, parse_env_kwargs

            for env_id in self.env:  # an env without a held-out definition fails now, not at the first evaluation
                held_out_kwargs(env_id, parse_env_kwargs(self.eval_env_kwarg) if self.eval_env_kwarg else None)
        if self.tree and self.branch_turns < 1:
            raise InvalidArgument(f"--branch-turns={self.branch_turns} must be >= 1 with --tree.")
        if self.ray is not None:
            from trainers.ray_rollout import check_address

            check_address(self.ray)
        if self.ray_env_workers < 1 or self.ray_gen_workers < 0 or self.ray_gen_gpus < 0:
            raise InvalidArgument(
                f"--ray-env-workers={self.ray_env_workers} must be >= 1, --ray-gen-workers={self.ray_gen_workers} "
                f">= 0 (0 = generate in this process) and --ray-gen-gpus={self.ray_gen_gpus} >= 0."
            )
        if self.ray_gen_workers and (self.ray is None or self.lora_rank):
            raise InvalidArgument(
                f"--ray-gen-workers={self.ray_gen_workers} needs --ray ADDRESS and full weights (--lora-rank 0); "
                "use --ray-gen-workers 0 to generate in this process."
            )
        check_device_spec(self.device)
        from trainers.loggers import check_log_spec

        check_log_spec(self.log)  # an unknown logger or a missing package fails before the run
        if self.trace_every < 0 or self.trace_episodes < 1:
            raise InvalidArgument(
                f"--trace-every={self.trace_every} must be >= 0 (0 = off) and --trace-episodes={self.trace_episodes} "
                ">= 1."
            )

    @property
    def autocast(self) -> bool:
        """The update runs under bf16 autocast (fp32 weights and --bf16; bf16 weights need none)."""
        return bool(self.bf16) and self.dtype == "float32"

    def env_kwargs(self) -> dict[str, dict[str, Any]]:
        """``gym.make`` kwargs per --env id, from ``--env-kwarg``."""
        return env_kwargs_by_id(self.env, self.env_kwarg)


def zero_advantage_groups(episodes: Sequence[Episode], strategy: Any, credit_cfg: CreditConfig) -> set[int]:
    """The groups of ``episodes`` whose every token ``strategy`` gives advantage 0 (its episodes were scored alike,
    so they teach nothing): what DAPO's dynamic sampling drops. The strategy sees each group alone."""
    from trainers.credit import groups_of

    alike = set()
    for g, idx in groups_of(episodes).items():
        if not any(np.any(a) for a in strategy([episodes[i] for i in idx], None, credit_cfg).advantages):
            alike.add(g)
    return alike


def pack_minibatch(episodes: Sequence[Episode], indices: Sequence[int], pack_tokens: int,
                   share_pack_tokens: int | None, device: Any = None) -> list[Any]:  # fmt: skip
    """One minibatch's packs on ``device``: sharing their common prompt, ``share_pack_tokens`` a pack
    (``--share-prefix``), or rows of whole episodes, ``pack_tokens`` a row (``share_pack_tokens`` None)."""
    from trainers import modeling as M

    if share_pack_tokens is not None:
        return M.pack_shared(episodes, indices, share_pack_tokens, device=device)
    return M.pack_episodes(episodes, indices, pack_tokens, device=device)


def ratio_segments(ep: Episode, level: str) -> np.ndarray:
    """One ratio-segment id per token of ``ep`` for ``--ratio-level turn`` (its policy turn; prompt/env tokens -1)
    or ``sequence`` (0 for every token); the token-level ratio needs none."""
    if level not in ("turn", "sequence"):
        raise InvalidArgument(f"ratio level {level!r} has no segments; use 'turn' or 'sequence'.")
    return ep.turn_index.astype(np.int64) if level == "turn" else np.zeros(len(ep.token_ids), dtype=np.int64)


def policy_minibatch(
    policy: Any,
    packs: Sequence[Any],
    old_lp: Mapping[int, np.ndarray] | None,
    credit: CreditOutput,
    ref_lp: Mapping[int, np.ndarray],
    cfg: RLConfig,
    segments: Sequence[np.ndarray] | None = None,
) -> tuple[dict[str, float], dict[int, np.ndarray]]:
    """Forward and backward of the policy loss (+ KL, - entropy) over one minibatch's packs; gradients accumulate,
    no optimizer step. Each pack's terms are divided by the whole minibatch's count (``aggregate_denominator``),
    so loss and gradients do not depend on how the minibatch is packed.

    ``old_lp`` None: the first minibatch of the first epoch, whose old log-probs are its own log-probs, detached
    (the policy has not moved yet: every ratio is exactly 1). ``segments`` (per episode, from
    :func:`ratio_segments`): tokens of one episode with equal ids share one ratio. Returns the minibatch's
    ``losses/...`` (sums over packs, i.e. the minibatch's value; ``losses/ratio_max_dev`` = max |token ratio - 1|)
    and the log-probs it computed.
    """
    import torch

    from trainers import modeling as M
    from trainers.losses import aggregate, aggregate_denominator, kl_penalty, policy_loss

    den = aggregate_denominator([credit.loss_masks[i] for p in packs for i in p.members], cfg.aggregation)
    tokens = max(aggregate_denominator([credit.loss_masks[i] for p in packs for i in p.members], "token_mean"), 1.0)
    logs = dict.fromkeys(("losses/policy", "losses/entropy", "losses/clip_fraction", "losses/approx_kl"), 0.0)
    logs["losses/ratio_max_dev"] = 0.0
    computed: dict[int, np.ndarray] = {}
    for pack in packs:
        mask = pack.gather(credit.loss_masks)
        with M.autocast(cfg.autocast, mask.device):
            stats = M.pack_logprobs(policy, pack, temperature=cfg.temperature, entropy_mask=mask, positions=mask)
        lp = stats.logprobs
        computed.update(pack.split(lp))
        old = lp.detach() if old_lp is None else pack.gather(old_lp)
        segs = None
        if segments is not None:  # episode-local ids made unique across the pack's members
            local = pack.gather(segments, dtype=torch.int64)
            segs = pack.seq_ids.long() * (int(local.max()) + 2) + local + 1
        loss, pstats = policy_loss(lp, old, pack.gather(credit.advantages), mask, clip_eps=cfg.clip_eps,
                                   seq_ids=pack.seq_ids, aggregation=cfg.aggregation, denominator=den,
                                   ratio_segments=segs)  # fmt: skip
        entropy = aggregate(stats.entropy, mask, pack.seq_ids, cfg.aggregation, den)
        total = loss - cfg.entropy_coef * entropy
        if cfg.kl_coef > 0:
            kl = aggregate(kl_penalty(lp, pack.gather(ref_lp)), mask, pack.seq_ids, cfg.aggregation, den)
            total = total + cfg.kl_coef * kl
            logs["losses/kl"] = logs.get("losses/kl", 0.0) + float(kl.detach())
        total.backward()
        share = float(mask.sum()) / tokens  # the stats are means over the pack's masked tokens
        logs["losses/policy"] += float(loss.detach())
        logs["losses/entropy"] += float(entropy.detach())
        logs["losses/clip_fraction"] += pstats.clip_fraction * share
        logs["losses/approx_kl"] += pstats.approx_kl * share
        with torch.no_grad():
            dev = float(((lp - old).exp() - 1.0).abs().mul(mask).max()) if mask.any() else 0.0
        logs["losses/ratio_max_dev"] = max(logs["losses/ratio_max_dev"], dev)
    return logs, computed


def critic_minibatch(critic: Any, packs: Sequence[Any], values: Sequence[np.ndarray], credit: CreditOutput, *,
                     value_clip: float | None, autocast: bool = False) -> float:  # fmt: skip
    """Forward and backward of the value loss clipped to ``value_clip`` around the old values (``--value-clip``;
    token mean over the whole minibatch) over its packs, under bf16 ``autocast`` (:attr:`RLConfig.autocast`);
    returns the minibatch's value loss."""
    import torch

    from trainers import modeling as M
    from trainers.losses import aggregate_denominator, value_loss

    den = aggregate_denominator([credit.value_masks[i] for p in packs for i in p.members], "token_mean")
    total = 0.0
    for pack in packs:
        with M.autocast(autocast, pack.input_ids.device):
            head = critic.pack_values(pack)
        pred = torch.cat([head.new_zeros(1), head[:-1]])  # V(s_t) is the head at t - 1
        old_v = pack.gather([v[:-1] for v in values])
        vloss = value_loss(pred, old_v, pack.gather(credit.returns), pack.gather(credit.value_masks),
                           clip_eps=value_clip, seq_ids=pack.seq_ids, denominator=den)  # fmt: skip
        vloss.backward()
        total += float(vloss.detach())
    return total


def sampler_mismatch(episodes: Sequence[Episode], policy_lp: Mapping[int, np.ndarray]) -> dict[str, list[float]]:
    """|log-prob of the sampler - the policy's own| over the policy's tokens: ``rollout/logprob_diff_mean`` and
    ``rollout/logprob_diff_max`` (a bf16 or vLLM sampler drifts from the trainer; large values = off-policy)."""
    diffs = [np.abs(ep.logprobs - policy_lp[i])[ep.loss_mask.astype(bool)] for i, ep in enumerate(episodes)]
    flat = np.concatenate([*diffs, np.zeros(0)])
    if not len(flat):
        return {}
    return {"rollout/logprob_diff_mean": [float(flat.mean())], "rollout/logprob_diff_max": [float(flat.max())]}


@dataclass
class Learner:
    """What the update trains: the policy (optionally LoRA-wrapped), the critic (strategies that need one), the
    frozen reference (``--kl-coef`` > 0 without LoRA), their optimizers, and the fp32 master weights that the
    optimizers step under ``--dtype bfloat16`` (``None`` in fp32)."""

    policy: Any
    critic: Any | None
    reference: Any | None
    opt: Any
    critic_opt: Any | None
    params: list[Any]
    critic_params: list[Any]
    master: Any | None = None
    critic_master: Any | None = None


@dataclass
class Batch:
    """One step's episodes as they pass through the phases. :func:`sample` fills the episodes, the rollout's
    statistics and the packed minibatches; :func:`score` the no-gradient log-probs and values; :func:`assign_credit`
    the strategy's advantages and the credit signal's instruments (``signal``); :func:`update` the losses.
    ``sampled`` is every episode rolled out (dynamic sampling included), ``episodes`` those trained on."""

    step: int
    episodes: list[Episode]
    sampled: list[Episode]
    rollout: Any
    sampling: dict[str, float] = field(default_factory=dict)
    minibatches: list[list[Any]] = field(default_factory=list)
    old_lp: dict[int, np.ndarray] = field(default_factory=dict)
    ref_lp: dict[int, np.ndarray] = field(default_factory=dict)
    values: list[np.ndarray] | None = None
    credit: CreditOutput | None = None
    logs: dict[str, list[float]] = field(default_factory=dict)
    signal: dict[str, float] = field(default_factory=dict)
    trained_tokens: int = 0


def sample(cfg: RLConfig, step: int, pool: Any, actor: Any, tok: Any, stops: Sequence[int], rcfg: Any,
           strategy: Any, credit_cfg: CreditConfig, device: Any) -> Batch:  # fmt: skip
    """Phase 1: roll out ``tasks_per_step`` tasks x ``group_size`` episodes with ``actor``; under
    ``--dynamic-sampling`` (DAPO) drop the groups the strategy scores alike and refill from fresh tasks, up to
    ``--sampling-rounds`` rounds; then split the episodes into ``--minibatches`` (seeded by step) and pack each once
    on ``device`` (every later pass uses the same packs)."""
    from trainers.rollout import RolloutStats, collect, epoch_tasks

    posed = None
    if cfg.task_order == "epoch":  # the step's slice of the seeded epoch order (a function of the step: resumable)
        posed = epoch_tasks(pool, cfg.seed, step * cfg.tasks_per_step, cfg.tasks_per_step)
    episodes, rstats = collect(pool, actor, tok, stops, rcfg, num_tasks=cfg.tasks_per_step,
                               group_size=cfg.group_size, seed=cfg.seed * 7_919 + step, tree=cfg.tree,
                               branch_turns=cfg.branch_turns, group_offset=step * cfg.tasks_per_step,
                               tasks=posed)  # fmt: skip
    sampled, sampling = episodes, {}
    if cfg.dynamic_sampling:  # DAPO: keep the informative groups, refill the batch with fresh tasks
        dropped = zero_advantage_groups(episodes, strategy, credit_cfg)
        kept, rounds, n_dropped = [ep for ep in episodes if ep.group not in dropped], 1, len(dropped)
        while len({ep.group for ep in kept}) < cfg.tasks_per_step and rounds < cfg.sampling_rounds:
            more, more_stats = collect(pool, actor, tok, stops, rcfg, num_tasks=cfg.tasks_per_step,
                                       group_size=cfg.group_size, seed=cfg.seed * 7_919 + step + 104_729 * rounds,
                                       tree=cfg.tree, branch_turns=cfg.branch_turns,
                                       group_offset=(cfg.steps + step * cfg.sampling_rounds + rounds)
                                       * cfg.tasks_per_step)  # fmt: skip
            rstats = RolloutStats(rstats.policy_tokens + more_stats.policy_tokens,
                                  rstats.total_tokens + more_stats.total_tokens,
                                  rstats.seconds + more_stats.seconds,
                                  rstats.episodes + more_stats.episodes)  # fmt: skip
            dropped = zero_advantage_groups(more, strategy, credit_cfg)
            kept += [ep for ep in more if ep.group not in dropped]
            sampled, rounds, n_dropped = sampled + more, rounds + 1, n_dropped + len(dropped)
        chosen = sorted({ep.group for ep in kept})[: cfg.tasks_per_step]
        if chosen:  # else every group was alike: train on the first round (advantage 0, nothing moves)
            episodes = [ep for ep in kept if ep.group in set(chosen)]
        sampling = {"rollout/sampling_rounds": float(rounds), "rollout/groups_dropped": float(n_dropped),
                    "rollout/groups_trained": float(len(chosen))}  # fmt: skip
    # the minibatches of every epoch (split by episodes), packed once; score() and update() use the same packs
    order = np.random.default_rng(cfg.seed + step).permutation(len(episodes))
    share = cfg.share_pack_tokens if cfg.share_prefix else None
    minibatches = [pack_minibatch(episodes, mb.tolist(), cfg.pack_tokens, share, device)
                   for mb in np.array_split(order, cfg.minibatches)]  # fmt: skip
    return Batch(step, episodes, sampled, rstats, sampling, minibatches)


def score(learner: Learner, batch: Batch, credit_cfg: CreditConfig, device: Any, *, temperature: float,
          kl_coef: float, autocast: bool) -> None:  # fmt: skip
    """Phase 2, no gradients: the policy's own log-probs at ``temperature`` (the old log-probs of every minibatch
    but the first, which takes them from its own first forward: the policy has not moved yet), the reference's
    (``kl_coef`` > 0) and the critic's values (strategies with a critic), on the loss tokens of ``credit_cfg``,
    under bf16 ``autocast`` (:attr:`RLConfig.autocast`).

    Old log-probs are the policy's own before the update (as verl), not the sampler's: env tokens in the loss
    (``--no-loss-mask``) have none from the sampler, and a bf16 sampler's differ from the trainer's."""
    import torch

    from trainers import modeling as M

    in_loss = [loss_tokens(ep, credit_cfg) for ep in batch.episodes]  # log-probs and the KL count there only
    heads: dict[int, np.ndarray] = {}
    with torch.no_grad(), M.autocast(autocast, device):
        for k, packs in enumerate(batch.minibatches):
            for pack in packs:
                positions = pack.gather(in_loss)
                if k > 0:
                    lp = M.pack_logprobs(learner.policy, pack, temperature=temperature, positions=positions)
                    batch.old_lp.update(pack.split(lp.logprobs))
                if kl_coef > 0:
                    ref_model, ctx = M.reference_context(learner.policy, learner.reference)
                    with ctx:
                        ref = M.pack_logprobs(ref_model, pack, temperature=temperature, positions=positions)
                        batch.ref_lp.update(pack.split(ref.logprobs))
                if learner.critic is not None:
                    heads.update(pack.split(learner.critic.pack_values(pack)))
    if learner.critic is not None:
        batch.values = [M.critic_values(heads[i]) for i in range(len(batch.episodes))]


def assign_credit(batch: Batch, strategy: Any, credit_cfg: CreditConfig) -> None:
    """Phase 3: the strategy's per-token advantages (and returns for a critic): the one place a strategy runs.
    Beside it, not trained on, the instruments of the credit signal (:mod:`trainers.instruments`): whether the
    sampled groups' turns differ in what they did and were paid, and how far the advantages are from GRPO-OR's."""
    from trainers.instruments import advantage_difference, turn_signal

    batch.credit = strategy(batch.episodes, batch.values, credit_cfg)
    batch.signal = {**turn_signal(batch.sampled), **advantage_difference(batch.episodes, batch.credit, credit_cfg)}


def warmup_lr(lr: float, warmup_steps: int, step: int) -> float:
    """The policy's learning rate at (0-based) RL ``step`` under ``--lr-warmup-steps``: linear from ``lr / N`` at
    step 0 to ``lr`` at step ``N - 1`` and after; ``lr`` throughout when ``warmup_steps`` is 0.

    >>> [round(warmup_lr(1e-5, 4, k), 12) for k in range(5)]
    [2.5e-06, 5e-06, 7.5e-06, 1e-05, 1e-05]
    """
    return lr if warmup_steps <= 0 else lr * min(1.0, (step + 1) / warmup_steps)


def update(cfg: RLConfig, learner: Learner, batch: Batch) -> None:
    """Phase 4: ``--ppo-epochs`` passes over the minibatches, each a clipped-surrogate step of the policy (+ KL,
    - entropy) and, with a critic, a clipped value-loss step of the critic; gradients clipped to
    ``--max-grad-norm``; bf16 weights pulled from their stepped fp32 masters. Losses go to ``batch.logs``; the
    policy's rate (:func:`warmup_lr`, from the step alone, so a resumed run continues the ramp) to ``losses/lr``."""
    import torch

    if batch.credit is None:
        raise InvalidArgument("update() needs the batch's credit; call assign_credit() first.")
    segments = None
    if cfg.ratio_level != "token":
        segments = [ratio_segments(ep, cfg.ratio_level) for ep in batch.episodes]
    logs = batch.logs
    lr = warmup_lr(cfg.lr, cfg.lr_warmup_steps, batch.step)
    for group in learner.opt.param_groups:
        group["lr"] = lr
    logs["losses/lr"] = [lr]
    learner.policy.train()
    for epoch in range(cfg.ppo_epochs):
        for k, packs in enumerate(batch.minibatches):
            learner.opt.zero_grad(set_to_none=True)
            first = epoch == 0 and k == 0
            mb_logs, lp = policy_minibatch(learner.policy, packs, None if first else batch.old_lp, batch.credit,
                                           batch.ref_lp, cfg, segments=segments)  # fmt: skip
            if first:
                batch.old_lp.update(lp)
                logs["losses/first_ratio_max_dev"] = [mb_logs.pop("losses/ratio_max_dev")]
            for key, v in mb_logs.items():
                logs.setdefault(key, []).append(v)
            if learner.critic_opt is not None:
                learner.critic_opt.zero_grad(set_to_none=True)
                vloss = critic_minibatch(learner.critic, packs, batch.values, batch.credit,
                                         value_clip=cfg.value_clip, autocast=cfg.autocast)  # fmt: skip
                logs.setdefault("losses/value", []).append(vloss)
            batch.trained_tokens += sum(pack.num_tokens for pack in packs)
            logs.setdefault("losses/grad_norm", []).append(
                float(torch.nn.utils.clip_grad_norm_(learner.params, cfg.max_grad_norm))
            )
            learner.opt.step()
            if learner.master is not None:
                learner.master.push()
            if learner.critic_opt is not None:
                torch.nn.utils.clip_grad_norm_(learner.critic_params, cfg.max_grad_norm)
                learner.critic_opt.step()
                if learner.critic_master is not None:
                    learner.critic_master.push()
    logs.update(sampler_mismatch(batch.episodes, batch.old_lp))


def step_row(batch: Batch, stops: Sequence[int], update_s: float) -> dict[str, float]:
    """Phase 5's metrics of one step: every sampled episode's summary, dynamic sampling's counters, the credit
    signal's instruments (``credit/...``), the mean of each loss over its minibatches and epochs, rollout and
    update speed."""
    from trainers.metrics import episode_summary

    row = {"step": batch.step + 1, **episode_summary(batch.sampled, stops), **batch.sampling, **batch.signal}
    row.update({k: float(np.mean(v)) for k, v in batch.logs.items()})
    row["rollout/seconds"] = batch.rollout.seconds
    row["rollout/tokens_per_s"] = batch.rollout.policy_tokens / max(batch.rollout.seconds, 1e-9)
    row["perf/train_tokens_per_s"] = batch.trained_tokens / max(update_s, 1e-9)
    row["perf/update_seconds"] = update_s
    return row


def save(cfg: RLConfig, run: Path, step: int, learner: Learner, tok: Any) -> None:
    """An atomic checkpoint at ``step`` (``trainers.checkpoint``): the fp32 masters' weights (or the LoRA adapter,
    and the merged policy with ``--save-merged``), the optimizers' states, the critic."""
    from trainers import checkpoint as ckpt
    from trainers import modeling as M

    policy, critic = learner.policy, learner.critic
    with M.full_precision(learner.master, learner.critic_master):  # checkpoints hold the fp32 masters
        state = {"step": step, "opt": learner.opt.state_dict(), "config": to_dict(cfg)}
        if critic is not None:
            state["critic"], state["critic_opt"] = critic.state_dict(), learner.critic_opt.state_dict()
        merged = None if cfg.lora_rank and not cfg.save_merged else (lambda d: M.save_policy(policy, tok, d))
        adapter = (lambda d: M.save_adapter(policy, d)) if cfg.lora_rank else None
        ckpt.save_checkpoint(run, step, merged, state, write_adapter=adapter)


def build_learner(cfg: RLConfig, policy: Any, init_spec: str, spec: str, state: Mapping[str, Any],
                  resume_from: Path | None, device: Any) -> Learner:  # fmt: skip
    """The models and optimizers of a run, from ``policy`` (loaded from ``spec``; ``init_spec`` is the run's start,
    the reference's weights): the critic as a copy of the backbone (before LoRA wraps the policy's linears), the
    LoRA adapter, the frozen reference, fp32 masters under ``--dtype bfloat16``, fused AdamW; with ``resume_from``,
    their states from the checkpoint ``state``."""
    import torch

    from agentgym_turn.models import load_causal_lm
    from trainers import checkpoint as ckpt
    from trainers import modeling as M
    from trainers.device import place_model

    critic = None
    if needs(cfg.strategy).critic:  # a full copy of the backbone (before LoRA wraps the policy's linears)
        critic = M.ValueModel.from_policy(policy)
        if resume_from:
            critic.load_state_dict(state["critic"])
    if cfg.lora_rank:
        policy = M.add_lora(policy, cfg.lora_rank, cfg.lora_alpha, targets=cfg.lora_targets)
        if resume_from:  # the checkpoint's adapter/ (a checkpoint from before adapter folders: state.pt's "lora")
            adapter = ckpt.adapter_folder(resume_from)
            if adapter is not None:
                M.load_adapter(policy, str(adapter))
            else:
                policy.load_state_dict(state["lora"], strict=False)
    reference = None
    if cfg.kl_coef > 0 and not cfg.lora_rank:  # the reference is the initial policy, also after a resume
        initial = place_model(load_causal_lm(init_spec, dtype=cfg.dtype)[0], device) if spec != init_spec else policy
        reference = M.frozen_copy(initial)
        reference.to(getattr(torch, cfg.dtype))
    # bf16 weights: the optimizers step fp32 masters; fused AdamW (one kernel over all tensors)
    master = M.MasterWeights(policy) if cfg.dtype == "bfloat16" else None
    critic_master = M.MasterWeights(critic) if cfg.dtype == "bfloat16" and critic is not None else None
    params = master.params if master else [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, fused=True)
    critic_params = (critic_master.params if critic_master else list(critic.parameters())) if critic else []
    critic_opt = torch.optim.AdamW(critic_params, lr=cfg.critic_lr, fused=True) if critic is not None else None
    if resume_from:
        opt.load_state_dict(state["opt"])
        if critic_opt is not None:
            critic_opt.load_state_dict(state["critic_opt"])
    return Learner(policy, critic, reference, opt, critic_opt, params, critic_params, master, critic_master)


def build_engine(cfg: RLConfig, policy: Any, tok: Any, run: Path, init_spec: str, device: Any,
                 engine: Engine | None = None) -> tuple[Engine, bool]:  # fmt: skip
    """The rollout engine, holding ``policy``'s weights, and whether it is colocated (vLLM in this process on the
    GPU that trains, asleep during the update): the caller's ``engine`` (pushed to), Ray generation actors, or
    ``--engine`` built here (vLLM from a saved folder; with LoRA, the base folder and the adapter pushed)."""
    from agentgym_turn.models import load_causal_lm, resolve_model_path
    from trainers import checkpoint as ckpt
    from trainers import modeling as M
    from trainers.engines import make_engine

    # vLLM on the GPU that trains: in this process (weights pushed in memory), asleep during the update
    colocated = cfg.engine == "vllm" and device.type == "cuda" and not cfg.ray_gen_workers
    if engine is not None:
        if cfg.ray_gen_workers:
            raise InvalidArgument(f"--ray-gen-workers={cfg.ray_gen_workers} builds its own engines; pass no engine.")
        if cfg.lora_rank:  # the engine serves the base; each push is the adapter
            engine.update_weights(load_causal_lm(init_spec)[0])
        engine.update_weights(policy)
        return engine, bool(getattr(engine, "colocate", False))
    engine_kwargs = dict(autocast_bf16=cfg.bf16, max_model_len=cfg.max_context, kv_cache_gib=cfg.engine_kv_cache_gib,
                         compile_model=cfg.engine_compile, dtype="bfloat16" if cfg.bf16 else "float32")  # fmt: skip
    if cfg.ray_gen_workers:  # generation actors on the cluster, each with a copy of the policy
        from trainers.ray_rollout import RayEngine

        engine = RayEngine(cfg.engine, policy, tok, workers=cfg.ray_gen_workers, address=cfg.ray, gpus=cfg.ray_gen_gpus,
                           **engine_kwargs)  # fmt: skip
        return engine, colocated
    engine_dir = None
    if cfg.engine == "vllm" and cfg.lora_rank:  # vLLM serves the base; each push is the adapter
        engine_dir = resolve_model_path(init_spec)
    elif cfg.engine == "vllm":
        engine_dir = str(run / ckpt.ENGINE_WEIGHTS)
        M.save_policy(policy, tok, engine_dir)
    engine = make_engine(cfg.engine, model=policy, tokenizer=tok, model_dir=engine_dir, colocate=colocated,
                         gpu_memory_utilization=cfg.vllm_gpu_memory if colocated else None,
                         lora_rank=cfg.lora_rank if cfg.engine == "vllm" else 0, **engine_kwargs)  # fmt: skip
    if cfg.engine == "vllm" and cfg.lora_rank:
        engine.update_weights(policy)  # the adapter (trained, after a resume)
    return engine, colocated


def train(
    cfg: RLConfig, command: tuple[str, Sequence[str]] | None = None, *, engine: Engine | None = None
) -> dict[str, float]:
    """Run (or resume) an RL run; returns the last step's metrics. ``command``: the CLI's ``(prog, argv)``,
    recorded in the run folder with the chain of the folder it starts from (:mod:`trainers.provenance`).

    ``engine``: an engine already running, for this run's tokenizer (its stop ids) and ``--max-context``, to sample
    with instead of building ``--engine`` (the tests share one vLLM engine across runs). The starting policy is
    pushed into it first (with ``--lora-rank``: the base model's weights, then the adapter), and it is left open for
    its owner to close. Unset (the CLI), the run builds its own engine and closes it at the end.

    Each step is ``sample -> score -> assign_credit -> update -> record`` over one :class:`Batch`.
    """
    from tqdm import tqdm

    from agentgym_turn.models import load_causal_lm
    from trainers import checkpoint as ckpt
    from trainers import modeling as M
    from trainers.device import peak_device_memory_gib, place_model, resolve_device, resolve_precision, set_threads
    from trainers.engines import stop_token_ids
    from trainers.evaluation import HeldOut, close_pools, evaluate_policy, parse_env_kwargs
    from trainers.loggers import RunRecorder
    from trainers.metrics import peak_memory_gib, plot_rewards, read_jsonl
    from trainers.ray_rollout import make_env_pool
    from trainers.rollout import RolloutConfig, engine_actor

    # ---- seeding: the one place ----------------------------------------------------------------------------
    M.seed_everything(cfg.seed)
    device = resolve_device(cfg.device)  # the policy, critic, reference and every batch of the update live there
    set_threads(device, cfg.threads)
    dtype, bf16 = resolve_precision(cfg.dtype, cfg.bf16, device)  # --dtype auto, --bf16 unset: per the device
    cfg = dataclasses.replace(cfg, dtype=dtype, bf16=bf16)  # config.json records what ran

    # ---- run directory, resume point ------------------------------------------------------------------------
    run = Path(cfg.out_dir)
    resume_from = ckpt.latest_checkpoint(run) if cfg.resume else None
    if not cfg.resume and ckpt.latest_name(run) is not None:
        raise InvalidArgument(f"--out-dir {run} already holds a run; pass --resume to continue it or a new --out-dir.")
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
    if command is not None:
        record_command(run, *command, inputs=[cfg.init or cfg.model])
    metrics_path = run / "metrics.jsonl"
    state = ckpt.load_state(resume_from) if resume_from else {}
    if resume_from:
        ckpt.truncate_metrics(metrics_path, state["step"])
    elif metrics_path.exists():
        metrics_path.unlink()

    # ---- models: the start (a checkpoint, --init, or a folded-in cold start), then the learner ---------------
    init_spec = ckpt.policy_folder(cfg.init) if cfg.init else cfg.model
    pool = make_env_pool(cfg.env, cfg.env_weights, cfg.env_kwargs(), ray=cfg.ray, ray_env_workers=cfg.ray_env_workers)
    warm = run / "sft-policy"  # the folded-in cold start's result: the start (and KL reference) of RL
    if resume_from and (warm / "config.json").is_file():
        init_spec = str(warm)
    spec = str(resume_from / "policy") if resume_from and not cfg.lora_rank else init_spec
    policy, tok = load_causal_lm(spec)  # fp32 (with --dtype bfloat16: the master weights' start)
    place_model(policy, device)
    if cfg.sft_episodes and not resume_from and cfg.init is None:
        from trainers.sft import demonstrations, sft_train

        demo_cfg = RolloutConfig(min(256, cfg.max_context - 1), cfg.max_context, cfg.max_turns)
        demos = demonstrations(pool, tok, cfg.sft_policy, cfg.sft_episodes, cfg.seed + 1_000_003, demo_cfg)
        nll = sft_train(policy, demos, epochs=cfg.sft_epochs, batch_episodes=cfg.sft_batch_episodes, lr=cfg.sft_lr,
                        pack_tokens=cfg.pack_tokens, bf16=cfg.bf16, seed=cfg.seed,
                        share_pack_tokens=cfg.share_pack_tokens if cfg.share_prefix else None)  # fmt: skip
        print(f"[rl] cold start: {len(demos)} scripted episodes ({cfg.sft_policy}), NLL {nll[0]:.3f} -> {nll[-1]:.3f}")
        M.save_policy(policy, tok, str(warm))
        init_spec = spec = str(warm)
    learner = build_learner(cfg, policy, init_spec, spec, state, resume_from, device)
    start = state.get("step", 0)

    stops = stop_token_ids(tok)
    given = engine is not None  # the caller's engine: pushed to here, closed by the caller
    engine, colocated = build_engine(cfg, learner.policy, tok, run, init_spec, device, engine)
    rcfg = RolloutConfig(cfg.max_new_tokens, cfg.max_context, cfg.max_turns, cfg.temperature, cfg.top_p,
                         cfg.check_prefix)  # fmt: skip
    strategy, credit_cfg = get_strategy(cfg.strategy), cfg.credit_cfg
    ref = learner.reference
    ref_kind = "lora-base" if cfg.kl_coef > 0 and cfg.lora_rank else ("copy" if ref is not None else "none")
    print(f"[rl] {cfg.strategy} on {cfg.env} from {spec}: steps {start}->{cfg.steps}, "
          f"{cfg.tasks_per_step}x{cfg.group_size} episodes/step, critic={learner.critic is not None}, "
          f"reference={ref_kind}", flush=True)  # fmt: skip

    recorder = RunRecorder.open(run, cfg.log, config=to_dict(cfg), tokenizer=tok, strategy=cfg.strategy,
                                trace_every=cfg.trace_every, trace_episodes=cfg.trace_episodes,
                                last_step=cfg.steps)  # fmt: skip
    held_out = eval_pools = None
    if cfg.eval_every:  # the validation curve: a fixed held-out subset, greedy, the training budgets
        held_out = HeldOut(tuple(cfg.env), tasks=cfg.eval_tasks, seed=cfg.eval_seed,
                           env_kwargs=parse_env_kwargs(cfg.eval_env_kwarg) if cfg.eval_env_kwarg else None,
                           max_new_tokens=cfg.max_new_tokens, max_turns=cfg.max_turns,
                           max_context=cfg.max_context)  # fmt: skip
        eval_pools = held_out.pools()
        if start == 0:  # step 0: the starting policy (the warm start)
            t_eval = time.perf_counter()
            held: dict[str, list[Episode]] = {}
            row0 = {"step": 0, **evaluate_policy(engine, tok, held_out, eval_pools, record=held)}
            row0["perf/eval_seconds"] = time.perf_counter() - t_eval
            recorder.record_eval(0, held)
            recorder.log(row0)

    row: dict[str, float] = {}
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=cfg.strategy, file=sys.stderr)
    for step in bar:
        t_step = time.perf_counter()
        # ---- (1) sample: rollouts, dynamic sampling, packed minibatches ---------------------------------------
        actor = engine_actor(engine, rcfg, seed=cfg.seed * 1_000_003 + step)
        if cfg.ray is not None:  # each turn's env steps go to the Ray env workers at once
            actor = pool.pipeline(actor, tok, stops)
        batch = sample(cfg, step, pool, actor, tok, stops, rcfg, strategy, credit_cfg, device)
        if colocated:
            engine.sleep()  # vLLM's weights to CPU memory, its KV cache freed: the update's activations use the room
        t_update = time.perf_counter()
        # ---- (2) score, (3) credit, (4) update; then the new weights to the engine ----------------------------
        score(learner, batch, credit_cfg, device, temperature=cfg.temperature, kl_coef=cfg.kl_coef,
              autocast=cfg.autocast)  # fmt: skip
        assign_credit(batch, strategy, credit_cfg)
        update(cfg, learner, batch)
        if colocated:
            engine.wake_up()
        engine.update_weights(learner.policy)
        push_s = getattr(engine, "last_push_seconds", None)
        update_s = time.perf_counter() - t_update

        # ---- (5) record: metrics, held-out evaluation, traces, plot, checkpoint --------------------------------
        row = step_row(batch, stops, update_s)
        if held_out is not None and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps):
            t_eval = time.perf_counter()
            held = {}
            row.update(evaluate_policy(engine, tok, held_out, eval_pools, record=held))
            row["perf/eval_seconds"] = time.perf_counter() - t_eval
            recorder.record_eval(step + 1, held)
        row["perf/peak_memory_gib"] = peak_memory_gib()
        if device.type == "cuda":
            row["perf/peak_gpu_memory_gib"] = peak_device_memory_gib(device)
        row["perf/step_seconds"] = time.perf_counter() - t_step
        if push_s is not None:
            row["perf/weight_push_seconds"] = push_s
        recorder.log(row)  # metrics.jsonl and the --log loggers
        recorder.record_step(step + 1, batch.episodes, batch.credit)  # RUN/traces/step_NNNNNN.jsonl.gz when due
        plot_rewards(read_jsonl(metrics_path), run / "rewards.png", f"{cfg.strategy} on {', '.join(cfg.env)}")
        bar.set_postfix(ret=f"{row['rollout/return']:.2f}", tok_s=f"{row['rollout/tokens_per_s']:.0f}")
        if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
            save(cfg, run, step + 1, learner, tok)
    pool.close()
    recorder.close()
    if eval_pools is not None:
        close_pools(eval_pools)
    if not given:  # vLLM's engine process, stopped now (left to the interpreter's exit it logged into closed streams)
        engine.close()
    return row


def main(argv: list[str] | None, *, prog: str, defaults: dict) -> dict[str, float]:
    """Parse flags (``defaults`` per CLI), train, and print what the run did."""
    from agentgym_turn.serve import sigterm_exits
    from trainers.config import parse_config

    cfg = parse_config(RLConfig, argv, prog=prog, description=__doc__.split("\n\n")[0], defaults=defaults)
    quiet_logs(cfg.verbose)
    t0 = time.perf_counter()
    with sigterm_exits():  # a kill ends the run with its engine processes (a checkpoint is written atomically)
        last = train(cfg, command=(prog, sys.argv[1:] if argv is None else argv))
    every = [json.loads(line) for line in (Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in every if r["step"] > 0]  # step 0 holds only the starting policy's held-out evaluation
    keys = [k for k in ("rollout/return", "env/tool_called", "env/exact_match", "rollout/format_rate") if k in last]
    print(f"[rl] done in {time.perf_counter() - t0:.0f} s: {len(rows)} steps of {cfg.strategy} on {cfg.env}")
    for k in keys:
        print(f"[rl]   {k}: first step {rows[0].get(k, float('nan')):.3f} -> last step {last[k]:.3f}")
    evals = [r for r in every if any(k.startswith("eval/") for k in r)]
    if evals:  # the held-out curve's ends: the starting policy (step 0) and the last evaluation, with 95% CIs
        first, final = evals[0], evals[-1]
        for k in sorted(k for k in final if k.startswith("eval/env/")):
            ci = [r.get(k.replace("eval/", "eval_ci95/", 1), float("nan")) for r in (first, final)]
            print(
                f"[rl]   held-out {k.removeprefix('eval/')} ({cfg.eval_tasks} tasks, greedy): step {first['step']} "
                f"{first.get(k, float('nan')):.3f} ± {ci[0]:.3f} -> step {final['step']} {final[k]:.3f} ± {ci[1]:.3f}"
            )
    print(f"[rl] metrics {cfg.out_dir}/metrics.jsonl, plot {cfg.out_dir}/rewards.png, checkpoint {cfg.out_dir}/latest")
    return last


if __name__ == "__main__":
    main(sys.argv[1:], prog="python -m trainers.rl", defaults={})
