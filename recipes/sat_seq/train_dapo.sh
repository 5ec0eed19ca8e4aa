#!/usr/bin/env bash
# SAT-Seq training launcher (the seed's recipes/sat_seq/train_dapo.sh).
#
#   bash recipes/sat_seq/train_dapo.sh [key=value ...]
#
# Environment knobs (defaults run on a fresh CPU machine with the embedded tiny model):
#   TRAIN_BATCH_SIZE   prompts per stage                      (default 8)
#   NUM_STAGES         training stages                        (default 40)
#   AGENT1_PATH..AGENT3_PATH  each agent's model: HF dir, hub id, smollm2, or embedded (default)
#   TRAIN_FILE         DAPO-format {"prompt","chosen","rejected"} or {"problem","answer"} JSONL
#                      (default: the embedded arithmetic task)
#   RUN_NAME           run directory under outputs/           (default sat_seq_dapo)
#   CONFIG             YAML config                            (default recipes/sat_seq/config/sat_seq.yaml)
# Extra key=value arguments are passed through as config overrides.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
satseq="$root/.venv/bin/satseq"
[ -x "$satseq" ] || satseq="satseq"

args=(
  "trainer.train_batch_size=${TRAIN_BATCH_SIZE:-8}"
  "trainer.num_stages=${NUM_STAGES:-40}"
  "sat_seq.agents.0.path=${AGENT1_PATH:-embedded}"
  "sat_seq.agents.1.path=${AGENT2_PATH:-embedded}"
  "sat_seq.agents.2.path=${AGENT3_PATH:-embedded}"
  "run_name=${RUN_NAME:-sat_seq_dapo}"
)
if [ -n "${TRAIN_FILE:-}" ]; then
  args+=("data.train=${TRAIN_FILE}")
fi
exec "$satseq" train "${CONFIG:-$here/config/sat_seq.yaml}" "${args[@]}" "$@"
