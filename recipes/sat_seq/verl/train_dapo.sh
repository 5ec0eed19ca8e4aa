#!/usr/bin/env bash
# SAT-Seq on verl (the seed's recipes/sat_seq/train_dapo.sh, for verl). Needs GPUs: verl has no CPU platform.
#
#   bash recipes/sat_seq/train_dapo.sh [hydra overrides ...]     # from verl's checkout, the recipe placed
#                                                                # at verl/recipes/sat_seq (README.md)
# Environment knobs:
#   TRAIN_BATCH_SIZE     prompts per stage                                   (default 8)
#   NUM_STAGES           training stages (verl's trainer.total_training_steps) (default 40)
#   NUM_AGENTS           K                                                   (default 3, or the AGENTk_PATHs set)
#   AGENT1_PATH..AGENTk_PATH   each agent's model (HF id or directory)       (default MODEL_PATH)
#   MODEL_PATH           the shared base model                               (default Qwen/Qwen2.5-0.5B-Instruct)
#   TRAIN_FILE, VAL_FILE verl's parquet datasets (prompt = chat messages, reward_model.ground_truth)
#                                                                            (default ~/data/dapo/{train,test}.parquet)
#   N_GPUS               GPUs on the node, split evenly between the agents   (default 8)
#   PYTHON               the interpreter with verl and satseq                (default python)
# Extra arguments are Hydra overrides of config/sat_seq.yaml (verl's ppo_trainer underneath).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ "$(basename "$here")" = verl ]; then  # in satseq's repository: recipes/sat_seq/verl
  root="$(cd "$here/../../.." && pwd)"; pkg=recipes.sat_seq.verl
else                                       # placed in verl's checkout: recipes/sat_seq
  root="$(cd "$here/../.." && pwd)"; pkg=recipes.sat_seq
fi
K=${NUM_AGENTS:-0}
if [ "$K" = 0 ]; then
  K=3
  for k in 1 2 3 4 5 6 7 8; do v="AGENT${k}_PATH"; [ -n "${!v:-}" ] && K=$k; done
fi
model=${MODEL_PATH:-Qwen/Qwen2.5-0.5B-Instruct}
agents=""
for k in $(seq 1 "$K"); do
  v="AGENT${k}_PATH"
  agents+="${agents:+,}{name:agent_${k},path:'${!v:-$model}',trainable:true}"
done
cd "$root"
exec "${PYTHON:-python}" -m "$pkg.main_sat_seq" \
  "actor_rollout_ref.model.path=$model" \
  "actor_rollout_ref.model.external_lib=$pkg" \
  "reward.custom_reward_function.path=$here/real_controller.py" \
  "data.train_files=${TRAIN_FILE:-$HOME/data/dapo/train.parquet}" \
  "data.val_files=${VAL_FILE:-$HOME/data/dapo/test.parquet}" \
  "data.train_batch_size=${TRAIN_BATCH_SIZE:-8}" \
  "trainer.total_training_steps=${NUM_STAGES:-40}" \
  "trainer.n_gpus_per_node=${N_GPUS:-8}" \
  "sat_seq.agents=[$agents]" \
  "$@"
