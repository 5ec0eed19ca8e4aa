#!/usr/bin/env bash
# Three-turn MLMT evaluation (solve -> coach feedback -> refine) on MATH-500: accuracy after turn 1
# and after turn 3, improvement (wrong -> right) and degradation (right -> wrong) rates.
#
#   bash recipes/mlmt/math/eval_math500.sh <model_path> [satseq eval options]
#
# <model_path>: an MLMT run directory (its solver and coach, latest stage), or a single model (HF
# dir, hub id, smollm2, embedded) that plays both roles. MATH-500 is read from --data_dir /
# $SATSEQ_DATA_DIR (<dir>/math500/test.jsonl) before the hub. DATASET=embedded evaluates on the
# embedded task's held-out split instead. Other options go to `satseq eval` (--n, --limit,
# --temperature, --batch_size, --engine vllm, ...; with --engine vllm the satseq of .venv-vllm runs, made by
# make setup-vllm). Results: $OUTPUT_DIR (default outputs/mlmt_eval_<dataset>_<name>).
set -euo pipefail
if [ $# -lt 1 ] || [ -z "${1:-}" ] || [[ "$1" == -* ]]; then
  echo "usage: $0 <model_path> [satseq eval options]" >&2
  exit 2
fi
model="$1"; shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv=".venv"
[[ " $* " == *" --engine vllm "* || " $* " == *" --engine=vllm "* ]] && venv=".venv-vllm"
satseq="$root/$venv/bin/satseq"
[ -x "$satseq" ] || satseq="$root/.venv/bin/satseq"
[ -x "$satseq" ] || satseq="satseq"
dataset="${DATASET:-math500}"
out="${OUTPUT_DIR:-outputs/mlmt_eval_${dataset}_$(basename "${model%/}")}"
exec "$satseq" eval --dataset "$dataset" --checkpoint_dir "$model" --workflow coach --output_dir "$out" "$@"
