# Sourced by the Slurm scripts (recipes/sat_seq/submit_sat_seq.sbatch, recipes/mlmt/math/submit_mlmt.sbatch):
# start a Ray cluster over the job's nodes, the head on the first node and a worker on each other
# one (srun ... ray start --block, in the background), and export RAY_ADDRESS (-> trainer.ray_address).
# Node i (0-based, in SLURM_JOB_NODELIST order) declares the custom resource satseq_node_<i> (100
# units), so trainer.placement can pin an actor to it: {"resources": {"satseq_node_1": 1}}.
#
# Knobs: RAY_PORT (6379), RAY_START_WAIT (seconds to let the head come up, 15), RAY_WORKER_WAIT (5),
# GPUS_PER_NODE (default $SLURM_GPUS_ON_NODE or 4), CPUS_PER_NODE (default $SLURM_CPUS_PER_TASK, else
# Ray's own count). Sets: nodes (array), head, head_ip, RAY_ADDRESS. The satseq package (with its
# ray extra) must be installed on every node, and the run directory must be on storage all nodes share.
[ -n "${SLURM_JOB_NODELIST:-}" ] || { echo "error: SLURM_JOB_NODELIST is not set: submit with sbatch" >&2; exit 2; }
export RAY_USAGE_STATS_ENABLED="${RAY_USAGE_STATS_ENABLED:-0}"  # no usage report leaves the cluster
port="${RAY_PORT:-6379}"
gpus="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-4}}"
cpus="${CPUS_PER_NODE:-${SLURM_CPUS_PER_TASK:-}}"
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head="${nodes[0]}"
head_ip="$(srun --nodes=1 --ntasks=1 -w "$head" hostname --ip-address | awk '{print $1}')"
export RAY_ADDRESS="${head_ip}:${port}"
echo "[ray_cluster] Ray head on $head ($RAY_ADDRESS), ${#nodes[@]} node(s), $gpus GPU(s) each"

_node_args() {  # ray start options of node $1 (its index)
  printf -- '--num-gpus=%s --resources={"satseq_node_%s":100}' "$gpus" "$1"
  [ -z "$cpus" ] || printf -- ' --num-cpus=%s' "$cpus"
}
# shellcheck disable=SC2046
srun --nodes=1 --ntasks=1 -w "$head" ray start --head --node-ip-address="$head_ip" --port="$port" \
  --include-dashboard=false $(_node_args 0) --block &
sleep "${RAY_START_WAIT:-15}"
for i in "${!nodes[@]}"; do
  [ "$i" -eq 0 ] && continue
  # shellcheck disable=SC2046
  srun --nodes=1 --ntasks=1 -w "${nodes[$i]}" ray start --address="$RAY_ADDRESS" $(_node_args "$i") --block &
done
sleep "${RAY_WORKER_WAIT:-5}"
