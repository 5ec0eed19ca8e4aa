#!/usr/bin/env bash
# MLMT-RL, coach (HL) and solver (LL) both trainable, alternating schedule coach 1 : solver 20
# (in every 21 steps the solver trains 20, then the coach 1).
#
#   bash recipes/mlmt/math/HLT_LLT_RR_1_20.sh [key=value ...]
#
# Knobs (MODEL_PATH, TRAIN_FILE, NUM_STAGES, ...): see _launch.sh next to this file.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/_launch.sh" mlmt.coach.trainable=true mlmt.solver.trainable=true \
  mlmt.schedule.coach=1 mlmt.schedule.solver=20 "run_name=${RUN_NAME:-HLT_LLT_RR_1_20}" "$@"
