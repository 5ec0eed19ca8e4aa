#!/usr/bin/env bash
# Evaluate a SAT-Seq run directory (all agents + their vote) or a single model on a benchmark.
#
#   bash recipes/sat_seq/run_inference.sh --dataset aime24
#   bash recipes/sat_seq/run_inference.sh --dataset math
#   bash recipes/sat_seq/run_inference.sh --dataset aime24 --checkpoint_dir /path/to/checkpoints --output_dir /path/to/results
#
# Defaults: --dataset aime24; --checkpoint_dir outputs/sat_seq_dapo if that run exists, else
# "embedded" (the embedded warm start); --output_dir outputs/<dataset>_inference.
# Every other option is passed through to `satseq eval` (see `satseq eval --help`): --n, --k,
# --temperature, --top_p, --max_new_tokens, --limit, --data_dir, --batch_size, --threads, --stage, --seed,
# --engine vllm (vLLM; on CPU its build lives in .venv-vllm: make setup-vllm).
# Interrupted? Run the same command again: finished problems are not redone.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv=".venv"
[[ " $* " == *" --engine vllm "* || " $* " == *" --engine=vllm "* ]] && venv=".venv-vllm"
if [[ -x "${REPO_ROOT}/${venv}/bin/satseq" ]]; then
    SATSEQ="${REPO_ROOT}/${venv}/bin/satseq"
elif [[ -x "${REPO_ROOT}/.venv/bin/satseq" ]]; then
    SATSEQ="${REPO_ROOT}/.venv/bin/satseq"
elif command -v satseq >/dev/null 2>&1; then
    SATSEQ="satseq"
else
    echo "error: satseq not found: install it (pip install -e .) or create ${REPO_ROOT}/.venv" >&2
    exit 2
fi

dataset=""
checkpoint_dir=""
output_dir=""
rest=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dataset) dataset="${2:?--dataset needs a value}"; shift 2 ;;
        --dataset=*) dataset="${1#*=}"; shift ;;
        --checkpoint_dir) checkpoint_dir="${2:?--checkpoint_dir needs a value}"; shift 2 ;;
        --checkpoint_dir=*) checkpoint_dir="${1#*=}"; shift ;;
        --output_dir) output_dir="${2:?--output_dir needs a value}"; shift 2 ;;
        --output_dir=*) output_dir="${1#*=}"; shift ;;
        *) rest+=("$1"); shift ;;
    esac
done

dataset="${dataset:-aime24}"
if [[ -z "${checkpoint_dir}" ]]; then
    if [[ -f outputs/sat_seq_dapo/run_info.json ]]; then
        checkpoint_dir="outputs/sat_seq_dapo"
    else
        checkpoint_dir="embedded"
    fi
fi
if [[ -z "${output_dir}" ]]; then
    name="$(basename "${dataset%/}")"
    name="${name%.*}"
    if [[ "${name}" == "test" || "${name}" == "train" ]]; then
        name="$(basename "$(dirname "${dataset%/}")")"
    fi
    output_dir="outputs/${name}_inference"
fi

echo "satseq eval: dataset=${dataset} checkpoint_dir=${checkpoint_dir} output_dir=${output_dir}" >&2
exec "${SATSEQ}" eval --dataset "${dataset}" --checkpoint_dir "${checkpoint_dir}" --output_dir "${output_dir}" \
    ${rest[@]+"${rest[@]}"}
