#!/usr/bin/env bash
# The gpu code path on one CUDA GPU without a model hub, in a few minutes (budget: under 8):
#   1. a Qwen2 with Qwen2.5-0.5B's shape and random weights + a chat-template tokenizer
#      (scale/random_qwen.py, written to a temporary folder);
#   2. the gpu profile's configuration on it (chat prompts, bf16, gradient checkpointing, LoRA r=16):
#      one warm-up step and 5 timed GRPO steps of 16 prompts x 8 samples x 256 new tokens;
#   3. prints seconds per step, generated tokens/s and peak GPU memory (and one JSON line).
# Needs: the project installed (`make install`, or torch with CUDA + `pip install -e .`). Usage:
#   bash benchmarks/gpu_check.sh [extra args for benchmarks/gpu_check.py, e.g. --steps 3 --preset dapo]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_check: no CUDA device visible')"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
"$PY" scale/random_qwen.py --shape qwen2.5-0.5b --out "$WORK/qwen2.5-0.5b-random" >/dev/null
echo "model built in $(( $(date +%s) - start )) s"
timeout 420 "$PY" benchmarks/gpu_check.py --model "$WORK/qwen2.5-0.5b-random" "$@"
echo "total $(( $(date +%s) - start )) s"
