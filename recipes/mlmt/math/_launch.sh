#!/usr/bin/env bash
# Shared body of the MLMT launchers (not called directly): satseq train with the MLMT preset.
#
# Environment knobs (defaults run on a fresh CPU machine with the embedded tiny model):
#   MODEL_PATH        base model for both roles: HF dir, hub id, smollm2, or embedded (default)
#   SOLVER_PATH, COACH_PATH   per-role starting models (default MODEL_PATH)
#   TRAIN_FILE        training problems: a file or a dataset name (default: the embedded task)
#   EVAL_FILE         held-out problems for eval_every (default: the embedded held-out split)
#   NUM_STAGES        training steps (default: the preset's 60)
#   TRAIN_BATCH_SIZE  prompts per step (default: the preset's 8)
#   OUTPUT_DIR        parent of the run directory (default outputs)
#   RAY_ADDRESS       a running Ray cluster (set by submit_mlmt.sbatch) -> trainer.ray_address
#   CONFIG            YAML preset (default recipes/mlmt/math/config/mlmt.yaml)
# Arguments are config overrides (key=value); later ones win.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
satseq="$root/.venv/bin/satseq"
[ -x "$satseq" ] || satseq="satseq"

args=("model.path=${MODEL_PATH:-embedded}")
[ -n "${SOLVER_PATH:-}" ] && args+=("mlmt.solver.path=${SOLVER_PATH}")
[ -n "${COACH_PATH:-}" ] && args+=("mlmt.coach.path=${COACH_PATH}")
[ -n "${TRAIN_FILE:-}" ] && args+=("data.train=${TRAIN_FILE}")
[ -n "${EVAL_FILE:-}" ] && args+=("data.eval=${EVAL_FILE}")
[ -n "${NUM_STAGES:-}" ] && args+=("trainer.num_stages=${NUM_STAGES}")
[ -n "${TRAIN_BATCH_SIZE:-}" ] && args+=("trainer.train_batch_size=${TRAIN_BATCH_SIZE}")
[ -n "${OUTPUT_DIR:-}" ] && args+=("output_dir=${OUTPUT_DIR}")
[ -n "${RAY_ADDRESS:-}" ] && args+=("trainer.ray_address=${RAY_ADDRESS}")
exec "$satseq" train "${CONFIG:-$here/config/mlmt.yaml}" "${args[@]}" "$@"
