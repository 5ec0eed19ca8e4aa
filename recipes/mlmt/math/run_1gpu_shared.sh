#!/usr/bin/env bash
# MLMT-RL on one device with shared actor weights: both roles on one base model.
#   SHARE=lora     one base, one LoRA adapter per role (default; the original's rank 16, alpha 32,
#                  dropout 0.05)
#   SHARE=weights  the very same weights play both roles, told apart by their prompts
#
#   bash recipes/mlmt/math/run_1gpu_shared.sh [key=value ...]
#
# Knobs (MODEL_PATH, TRAIN_FILE, NUM_STAGES, ...): see _launch.sh next to this file.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/_launch.sh" "mlmt.share=${SHARE:-lora}" \
  model.lora.r=16 model.lora.alpha=32 model.lora.dropout=0.05 \
  "run_name=${RUN_NAME:-mlmt_1gpu_shared_${SHARE:-lora}}" "$@"
