#!/usr/bin/env bash
# Train a policy on a TurnRL env inside SkyRL with a TurnRL credit-assignment strategy.
#   ENV_ID=TurnRL/WikiTwoTurn-v2 ESTIMATOR=turnrl_mt_grpo bash examples/skyrl/run_turnrl.sh
#   ENV_ID=TurnRL/SearchR1-v2    ESTIMATOR=turnrl_mt_ppo  bash examples/skyrl/run_turnrl.sh   (adds a critic)
# Needs GPUs, Python 3.12 and `pip install "skyrl[fsdp]==0.3.0" "agentgym-turn[skyrl]"`; extra arguments are
# SkyRL config overrides (key=value) and win over the ones below. TurnRL envs end their episodes themselves:
# generator.max_turns only tells SkyRL the rollout is multi-turn (its generator never cuts turns by it).
set -euo pipefail
cd "$(dirname "$0")/../.."

ENV_ID="${ENV_ID:-TurnRL/WikiTwoTurn-v2}"
ESTIMATOR="${ESTIMATOR:-turnrl_mt_grpo}"         # turnrl_<strategy>: mt_grpo, mt_ppo, tarl, grpo_or, ...
MODEL="${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}"
NUM_GPUS="${NUM_GPUS:-1}"
DATA_DIR="${DATA_DIR:-$HOME/data/turnrl/$(basename "$ENV_ID")}"
LOGGER="${LOGGER:-console}"

python examples/skyrl/make_dataset.py --env "$ENV_ID" --seeds 0:1024 --out "$DATA_DIR/train.jsonl"
python examples/skyrl/make_dataset.py --env "$ENV_ID" --seeds 100000:100128 --held-out \
  --out "$DATA_DIR/validation.jsonl"

# The PPO family (turnrl_mt_ppo, turnrl_ppo_or, turnrl_ppo_mr, turnrl_tarl_ppo_*) needs a critic.
CRITIC=()
case "$ESTIMATOR" in
  *ppo*) CRITIC=(trainer.critic.model.path="$MODEL" trainer.placement.critic_num_gpus_per_node="$NUM_GPUS"
    trainer.critic_mini_batch_size=32) ;;
esac

python examples/skyrl/main_turnrl.py \
  data.train_data="['$DATA_DIR/train.jsonl']" \
  data.val_data="['$DATA_DIR/validation.jsonl']" \
  environment.env_class="$ENV_ID" \
  trainer.algorithm.advantage_estimator="$ESTIMATOR" \
  trainer.algorithm.use_kl_loss=true \
  trainer.algorithm.use_kl_in_reward=false \
  trainer.policy.model.path="$MODEL" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp \
  trainer.placement.policy_num_gpus_per_node="$NUM_GPUS" \
  trainer.placement.ref_num_gpus_per_node="$NUM_GPUS" \
  generator.inference_engine.num_engines="$NUM_GPUS" \
  generator.inference_engine.tensor_parallel_size=1 \
  generator.inference_engine.backend=vllm \
  generator.inference_engine.run_engines_locally=true \
  generator.inference_engine.weight_sync_backend=nccl \
  generator.inference_engine.gpu_memory_utilization=0.7 \
  generator.batched=false \
  generator.use_conversation_multi_turn=true \
  generator.step_wise_trajectories=false \
  generator.zero_reward_on_non_stop=false \
  generator.n_samples_per_prompt=8 \
  generator.max_turns=8 \
  generator.max_input_length=4096 \
  generator.sampling_params.max_generate_length=512 \
  trainer.max_prompt_length=2048 \
  trainer.train_batch_size=64 \
  trainer.policy_mini_batch_size=32 \
  trainer.micro_forward_batch_size_per_gpu=8 \
  trainer.micro_train_batch_size_per_gpu=8 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.epochs=10 \
  trainer.eval_before_train=true \
  trainer.eval_interval=5 \
  trainer.eval_batch_size=128 \
  trainer.update_epochs_per_batch=1 \
  trainer.ckpt_interval=-1 \
  trainer.logger="$LOGGER" \
  trainer.project_name=turnrl \
  trainer.run_name="$(basename "$ENV_ID")_$ESTIMATOR" \
  trainer.resume_mode=null \
  "${CRITIC[@]}" \
  "$@"
