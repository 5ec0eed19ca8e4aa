#!/usr/bin/env bash
# The GPU check: what differs on CUDA, in under 10 minutes on one H100 (docs/scale.md, "The GPU check").
#
#     bash bench/scale/gpu_check.sh [OUT]          # from the repository root; OUT defaults to /tmp/gpu_check
#
# The GPU machine this project is sometimes lent has torch, transformers, peft and accelerate but reaches
# no package registry. Whatever else satseq needs travels as wheels (at most 64 MiB per call): made here with
#     pip download --only-binary=:all: --python-version 3.11 -d wheels typer pydantic math-verify ...
# and installed there by this script when WHEELS=DIR is set (pip install --no-index --find-links DIR).
#
# It runs, each step timed and its output kept in OUT:
#   1. the CUDA-marked tests (tests/test_cuda_paths.py): FSDP2 on one NCCL rank equal to the plain
#      model's update, its bf16 mixed-precision policy and CPU offload, the engine's log-probs against
#      the trainer's in fp32 and bf16;
#   2. the embedded SAT-Seq (K = 3, full fine-tuning, certificate) and GRPO runs on CUDA, fp32 and bf16
#      (rollout.dtype=bfloat16, trainer.autocast=bfloat16), 4 stages each;
#   3. the all-reduce path and FSDP2 with NCCL: torchrun --nproc_per_node 1 ... trainer.strategy=replicate
#      and =fsdp2 (one GPU holds one rank: NCCL refuses two ranks on one device), and with 2 ranks when
#      the machine has 2 GPUs;
#   4. a SmolLM2-135M-shaped Llama (random weights): the step time and peak GPU memory of a full
#      fine-tuning AdamW update, fp32 and bf16 autocast, and the engine's decode throughput;
#   5. with VERL=1 (verl 0.9.1 with its vllm extra installed there, TRAIN_FILE/VAL_FILE verl parquet files,
#      MODEL_PATH a local model): the SAT-Seq verl recipe end to end, two agents, 2 stages (docs/verl.md).
# Run once on one H200 (docs/scale.md, "The GPU check": every step passed after a device fix).
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # usage: the comment above
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0
fi
set -uo pipefail
OUT=${1:-/tmp/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python}
if [ -n "${WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --find-links "$WHEELS" -e . || { echo "gpu_check: installing from $WHEELS failed"; exit 1; }
fi
$PY - <<'EOF' || exit 1
import torch, transformers
assert torch.cuda.is_available(), "gpu_check: no CUDA device"
print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.device_count()} x "
      f"{torch.cuda.get_device_name(0)}")
EOF
FAILED=0
step() {  # step NAME COMMAND...: run, time, keep the log, go on after a failure
  local name=$1; shift
  local t0=$(date +%s)
  if "$@" > "$OUT/$name.log" 2>&1; then status=ok; else status=FAILED; FAILED=1; fi
  echo "$name: $status in $(( $(date +%s) - t0 )) s (log: $OUT/$name.log)"
  tail -n 3 "$OUT/$name.log" | sed 's/^/    /'
}
FAST="trainer.num_stages=4 trainer.train_batch_size=16 data.train_size=256 data.eval_size=32 trainer.progress=false
      trainer.tensorboard=false trainer.save_every=0 output_dir=$OUT/runs device=cuda"
BF16="rollout.dtype=bfloat16 trainer.autocast=bfloat16"
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())")

step tests_cuda $PY -m pytest -q -m cuda tests/test_cuda_paths.py
step sft_warm_start $PY -m satseq.cli sft --out "$OUT/runs" --steps 300  # a short fixed-step warm start (CPU)
for m in sat_seq grpo; do
  step "${m}_fp32" $PY -m satseq.cli train method=$m $FAST run_name=${m}_fp32
  step "${m}_bf16" $PY -m satseq.cli train method=$m $FAST $BF16 run_name=${m}_bf16
done
for s in replicate fsdp2; do
  step "torchrun_1gpu_$s" $PY -m torch.distributed.run --nproc_per_node 1 -m satseq.cli train $FAST \
       trainer.strategy=$s run_name=torchrun_1_$s
  if [ "$GPUS" -ge 2 ]; then
    step "torchrun_2gpu_$s" $PY -m torch.distributed.run --nproc_per_node 2 -m satseq.cli train $FAST \
         trainer.strategy=$s run_name=torchrun_2_$s
  fi
done
step smollm2_shaped $PY - <<'EOF'
"""Step time and peak memory of a SmolLM2-135M-shaped full fine-tuning update, and decode throughput."""
import time, torch
from transformers import LlamaConfig, LlamaForCausalLM
from satseq.models.tiny import build_char_tokenizer
from satseq.rollout.hf_engine import HFEngine
from satseq.rollout.types import SamplingParams
from satseq.update.batch import TurnBatch, batch_logprobs
from satseq.update.loop import optimizer_step
from satseq.utils.precision import set_autocast

cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                  num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True)
g = torch.Generator().manual_seed(0)
B, P, R = 32, 128, 128
prompts = [torch.randint(0, 49152, (P,), generator=g).tolist() for _ in range(B)]
responses = [torch.randint(0, 49152, (R,), generator=g).tolist() for _ in range(B)]
batch = TurnBatch(prompts, responses, torch.arange(B), torch.zeros(B), [[0.0] * R] * B)
for mode in ("off", "bfloat16"):
    set_autocast(mode)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for i in range(6):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        lp, mask = batch_logprobs(model, batch, 0, temperature=1.0, device="cuda", grad=True, chunk=B)
        optimizer_step(opt, -(lp * mask).sum() / mask.sum(), list(model.parameters()), 1.0)
        torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    print(f"update autocast={mode}: {B} rows x ({P}+{R}) tokens, median step {sorted(times[1:])[2]:.3f} s, "
          f"peak GPU memory {torch.cuda.max_memory_allocated() / 1e9:.2f} GB")
    del model, opt
    torch.cuda.empty_cache()
set_autocast("off")
model = LlamaForCausalLM(cfg).cuda().eval()
for dtype in (None, torch.bfloat16):
    eng = HFEngine(build_char_tokenizer(), batch_size=256, device="cuda", dtype=dtype)
    eng.eos_ids = set()  # random weights: every row runs to max_new_tokens
    ps = [p[:64] for p in prompts] * 8
    eng.generate(model, ps[:8], SamplingParams(max_new_tokens=8), torch.Generator().manual_seed(0))
    torch.cuda.synchronize(); t0 = time.perf_counter()
    gens = eng.generate(model, ps, SamplingParams(max_new_tokens=128), torch.Generator().manual_seed(0))
    torch.cuda.synchronize(); dt = time.perf_counter() - t0
    n = sum(len(x.response_ids) for x in gens)
    print(f"decode dtype={dtype or 'float32'}: {len(ps)} rows x 128 new tokens, {n / dt:.0f} tok/s")
EOF
if [ -n "${VERL:-}" ]; then
  step verl_sat_seq env NUM_AGENTS=2 N_GPUS="$GPUS" TRAIN_BATCH_SIZE=4 NUM_STAGES=2 \
       bash recipes/sat_seq/verl/train_dapo.sh actor_rollout_ref.rollout.name=vllm trainer.val_before_train=false \
       trainer.default_local_dir="$OUT/runs/verl_sat_seq"
fi
echo "gpu_check: $([ $FAILED = 0 ] && echo 'every step passed' || echo 'some step FAILED') (logs in $OUT)"
exit $FAILED
