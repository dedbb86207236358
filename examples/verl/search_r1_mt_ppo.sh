#!/usr/bin/env bash
# MT-PPO on TurnRL/SearchR1-v2 with verl 0.9.1: v1 trainer with a critic, vLLM rollout through TurnRL's agent loop,
# FSDP. Each turn's turn-level reward sits on its last token, the outcome on the last one (001 eq. 9); GAE with
# gamma = lambda = 1 (001 D.1.3). One node (NGPUS GPUs). Not run on the CPU-only CI machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
DATA=${DATA:-data/verl/search_r1}
NGPUS=${NGPUS:-8}
PLUGIN=trainers.integrations.verl_plugin  # registers turnrl_* estimators and the turnrl_sync trainer
export VERL_USE_EXTERNAL_MODULES=$PLUGIN

[ -f "$DATA/train.parquet" ] || python "$HERE/make_dataset.py" --env TurnRL/SearchR1-v2 --out "$DATA"

python -m verl.trainer.main_ppo \
  algorithm.adv_estimator=turnrl_mt_ppo \
  algorithm.gamma=1.0 \
  algorithm.lam=1.0 \
  algorithm.use_kl_in_reward=false \
  trainer.v1.trainer_mode=turnrl_sync \
  +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=$PLUGIN \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/val.parquet" \
  data.train_batch_size=64 \
  data.max_prompt_length=1024 \
  data.max_response_length=4096 \
  data.return_raw_chat=true \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=64 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
  actor_rollout_ref.actor.use_kl_loss=true \
  actor_rollout_ref.actor.kl_loss_coef=0.001 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.n=1 \
  actor_rollout_ref.rollout.calculate_log_probs=true \
  actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.multi_turn.max_assistant_turns=4 \
  actor_rollout_ref.rollout.agent.default_agent_loop=turnrl_agent \
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loop.yaml" \
  critic.enable=true \
  critic.model.path="$MODEL" \
  critic.optim.lr=1e-5 \
  critic.ppo_micro_batch_size_per_gpu=2 \
  trainer.n_gpus_per_node="$NGPUS" \
  trainer.nnodes=1 \
  trainer.project_name=turnrl \
  trainer.experiment_name=search_r1_mt_ppo \
  trainer.logger='["console"]' \
  trainer.total_epochs=1 \
  trainer.test_freq=20 \
  trainer.save_freq=-1 \
  "$@"
