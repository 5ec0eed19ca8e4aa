#!/usr/bin/env bash
# A*-PO + PAG training (the seed notebook), then the six-panel dashboard.
#
#   bash recipes/apo_pag/train_apo_pag.sh [key=value ...]
#
# Environment knobs (defaults: embedded tiny model and task, CPU):
#   MODEL_PATH   HF model dir, hub id, smollm2, or embedded (default)
#   TRAIN_FILE   training problems: file or dataset name (default: the embedded task)
#   EVAL_FILE    held-out problems (default: the embedded held-out split)
#   UPDATE       apo (A*-PO + PAG, default) or grpo (PAG with the clipped policy gradient)
#   RUN_NAME     run directory under outputs/ (default apo_pag)
# Writes outputs/<run_name>/ (metrics.jsonl, vstar.json, checkpoints) and its dashboard.png.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
satseq="$root/.venv/bin/satseq"
[ -x "$satseq" ] || satseq="satseq"
args=("model.path=${MODEL_PATH:-embedded}" "pag.update=${UPDATE:-apo}" "run_name=${RUN_NAME:-apo_pag}")
[ -n "${TRAIN_FILE:-}" ] && args+=("data.train=${TRAIN_FILE}")
[ -n "${EVAL_FILE:-}" ] && args+=("data.eval=${EVAL_FILE}")
out=$("$satseq" train "$here/config/apo_pag.yaml" "${args[@]}" "$@" | tee /dev/stderr | sed -n 's/^run directory: //p')
"$satseq" plot "$out"
