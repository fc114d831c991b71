#!/usr/bin/env bash
# The GPU machine's one entry point, run from the repository root:
#   MLSYS_GIT_COMMIT=<sha> OUT=<dir> bash scripts/device.sh MODE
# MODE, by purpose (each stops starting new work after BUDGET_S seconds, default 540):
#   tests      every GPU test, one file at a time, each test's outcome in $OUT/tests.txt
#   kernels    ceilings, matmul (bf16 + fp8 prefill), quant (quantize, W8A16/W4A16 decode and prefill, W8A8)
#   attention  flash attention forward/backward/decode goals, then the extra shapes
#   fused      the fused memory-bound kernels' GPU tests, then `mlsys bench fused --sweep train` (every op, pass)
#   serve-attention  our paged decode kernel at batch 1-16 (Llama-3-8B heads, 1k and 4k keys): the few-CTA
#              regime calc.roofline.paged prices for `mlsys serve`; about 2 minutes (BUDGET_S=120)
#   spot       a quick check that behaviour is unchanged: quant GPU tests, the W8A16/W4A16 decode and
#              prefill sweeps, W8A8 at M = 1, and a few matmul and attention shapes of the committed reports
#   comm       NCCL collectives over every GPU of the host (scripts/device_comm.sh)
#   eight-gpu  issue 42 on an 8-GPU host (scripts/device_8gpu.sh): collectives on 8, then 2 and 4 GPUs, and the
#              training layouts TP 8, FSDP2 8, TP 4 x PP 2, TP 2 x FSDP2 4 (llama2-7b), held out against the committed
#              predictions; about 6-8 minutes. Score: python scripts/validate/score_8gpu.py <fetched OUT>/eight_gpu
#   memory     the memory calculator against torch.cuda.max_memory_allocated (bench/cases/memory.py)
#   models     whole-model prefill/decode/train runs (scripts/device_models.sh, when it exists)
#   sustained  each ceiling back to back until the card settles (mlsys bench ceilings --sustained), the training
#              step's extra ops and a training step run for SECONDS (scripts/train_ops_measure.py --steady)
#   train [measure|profile] [GPUS]   measured training steps on 2-4 GPUs (scripts/device_train.sh) -> $OUT/train
#   train-probe [GPUS] [zero2]       host-probed steps and GPU-bound controls (scripts/device_train_probe.sh)
#              -> $OUT/train_probe
#   train-attention  FlashAttention-2 in one GPU's step, and the card's ceilings (scripts/device_train_attention.sh)
#              -> $OUT/train_attention
#   comm-transfer    collectives fitted on 2 GPUs, checked on 4, then TP x PP (scripts/device_comm_transfer.sh)
#              -> $OUT/comm-transfer (its tar and log)
#   mutation NAME PLAN KINDS BUDGET_S [TREE]   a mutation plan over the host's CPU cores (scripts/device_mutation.sh)
#              -> $OUT/mutation/NAME.jsonl
# The modes' own scripts (scripts/device_*.sh, named above) are parts of this one: they take the mode's
# arguments after MODE and keep their own time budgets (BUDGET_S where it is set, else each one's default).
# Rows land in $OUT/<family>/rows.jsonl, the layout of reports/; the family's committed rows are
# copied in first (not with FRESH=1), so a sweep resumes and keeps them. Afterwards, on any machine:
#   mlsys bench report <fetched OUT> --out reports
set -uo pipefail
MODES="tests, kernels, attention, fused, serve-attention, spot, comm, eight-gpu, memory, models, sustained, train, train-probe, train-attention, comm-transfer, mutation"
MODE=${1:?usage: scripts/device.sh MODE [ARGS] (MODE: $MODES)}
shift
OUT=${OUT:-device_out}
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}
export NCCL_NVLS_ENABLE=0   # NVLink multicast off: on shared hosts it can take the GPUs out of service
exec > >(tee -a "$OUT/log.txt") 2>&1
start=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }

echo "== $(date -u) mode=$MODE commit=${MLSYS_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3   # python3's own pip
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version())"
} 2>&1 | tee "$OUT/env.txt"

# gpu_tests FILE [pytest args]: the GPU tests of FILE, each test's outcome and the exit status in $OUT/tests.txt
gpu_tests() {
  local file=$1 t; shift; t=$(left)
  [ "$t" -gt 30 ] || { echo "== $file skipped: budget spent" >> "$OUT/tests.txt"; return; }
  timeout "$t" python3 -m pytest -v -p no:cacheprovider -m gpu "$@" "$file" 2>&1 \
    | grep -E "PASSED|FAILED|ERROR|Error|assert|passed|failed" >> "$OUT/tests.txt"
  echo "== $file exit ${PIPESTATUS[0]}" >> "$OUT/tests.txt"
}
# bench FAMILY ARGS...: one `mlsys bench FAMILY` sweep into $OUT/FAMILY/rows.jsonl, bounded by the budget
bench() {
  local family=$1 t; shift; t=$(left)
  [ "$t" -gt 30 ] || { echo "skipped $family $*: budget spent"; return; }
  mkdir -p "$OUT/$family"
  if [ -z "${FRESH:-}" ] && [ ! -f "$OUT/$family/rows.jsonl" ] && [ -f "reports/$family/rows.jsonl" ]; then
    cp "reports/$family/rows.jsonl" "$OUT/$family/rows.jsonl"
  fi
  timeout "$t" python3 -m mlsyscalc bench "$family" --quiet --format csv --out "$OUT/$family/rows.jsonl" "$@" \
    > /dev/null 2>>"$OUT/log.txt"
  echo "bench $family $* -> exit $? at $(( $(date +%s) - start )) s"
}
ceilings() {
  mkdir -p "$OUT/matmul" "$OUT/quant"
  timeout 60 python3 -m mlsyscalc bench ceilings --out "$OUT/matmul/ceilings.json" --format csv \
    && cp "$OUT/matmul/ceilings.json" "$OUT/quant/ceilings.json"
}

case "$MODE" in
  tests)
    gpu_tests tests/test_kernels_matmul.py -k "not splitk"
    gpu_tests tests/test_kernels_quant_gemv.py
    gpu_tests tests/test_kernels_quant.py
    gpu_tests tests/test_kernels_attention.py
    gpu_tests tests/test_kernels_fused.py
    gpu_tests tests/test_memory_torch.py ;;
  kernels)
    ceilings
    bench matmul --dtype bfloat16 --sweep prefill
    bench matmul --dtype fp8_tensor --sweep prefill
    bench quant --kind w8a16 --kind w4a16 --sweep decode
    bench quant --kind w8a16 --kind w4a16 --sweep quant_prefill
    bench quant --kind w8a8
    bench quant --kind w8a8 --shapes 1x8192x8192,16x8192x8192,1x12288x4096
    bench quant --kind quantize ;;
  serve-attention)  # decode at batch 1-16, the paged serving kernels' few-CTA regime (docs/serving.md); ~2 min
    bench attention --sweep serving --kind decode ;;
  attention)
    bench attention --sweep goals
    bench attention --sweep extra --kind fwd --kind decode ;;
  fused)   # tests first (about a minute with compiles), then about 4 minutes of sweep (docs/bench.md)
    gpu_tests tests/test_kernels_fused.py
    bench fused --sweep train ;;
  spot)   # fresh rows (FRESH=1): compare them with the committed ones before merging any
    export FRESH=1
    ceilings
    decode=1x12288x4096,1x4096x4096,1x57344x8192,1x8192x28672,16x12288x4096,16x4096x4096,16x57344x8192,16x8192x28672
    bench quant --kind w8a16 --kind w4a16 --shapes "$decode"
    bench quant --kind w8a16 --kind w4a16 --shapes 256x4096x4096,2048x4096x4096,8192x4096x4096,2048x8192x28672,8192x57344x8192
    bench quant --kind w8a8 --shapes 1x8192x8192,16x8192x8192,4096x4096x4096
    gpu_tests tests/test_kernels_quant.py
    bench matmul --dtype bfloat16 --shapes 4096x4096x4096,8192x8192x8192,2048x12288x4096
    bench attention --sweep smoke --kind fwd --kind decode
    gpu_tests tests/test_kernels_quant_gemv.py
    gpu_tests tests/test_kernels_matmul.py -k "not splitk"
    gpu_tests tests/test_kernels_attention.py ;;
  comm)
    OUT="$OUT/comm" bash scripts/device_comm.sh ;;
  eight-gpu)   # its own budget: what is left of this one, less a margin for the summary below
    OUT="$OUT/eight_gpu" BUDGET_S=$(( $(left) - 15 )) bash scripts/device_8gpu.sh
    tail -n 30 "$OUT/eight_gpu/steps.jsonl" ;;
  memory)
    MLSYS_COMMIT=${MLSYS_GIT_COMMIT:-unknown} timeout "$(left)" python3 -m mlsyscalc.bench.cases.memory --out "$OUT/memory" ;;
  models)   # hook: the whole-model validation writes its own script; this mode runs it when it lands
    if [ -f scripts/device_models.sh ]; then OUT="$OUT/models" bash scripts/device_models.sh
    else echo "no scripts/device_models.sh yet: nothing to run"; exit 2; fi ;;
  sustained)
    mkdir -p "$OUT/sustained"
    timeout "$(left)" python3 -m mlsyscalc bench ceilings --sustained --seconds "${SECONDS_EACH:-20}" \
      --out "$OUT/sustained/ceilings.json" --format csv > "$OUT/sustained/ceilings.csv" 2>>"$OUT/log.txt"
    echo "ceilings --sustained -> exit $? at $(( $(date +%s) - start )) s"
    timeout "$(left)" python3 scripts/train_ops_measure.py --out "$OUT/sustained/train_ops.jsonl" \
      --steady "${STEADY_S:-25}" --model llama3-8b --layers 8 --seq 8192
    echo "train_ops_measure -> exit $? at $(( $(date +%s) - start )) s" ;;
  train)
    bash scripts/device_train.sh "$OUT/train" "$@" ;;
  train-probe)
    bash scripts/device_train_probe.sh "$OUT/train_probe" "$@" ;;
  train-attention)
    bash scripts/device_train_attention.sh "$OUT/train_attention" ;;
  comm-transfer)
    OUT="$OUT/comm-transfer" bash scripts/device_comm_transfer.sh ;;
  mutation)
    mkdir -p "$OUT/mutation"
    OUT="$OUT/mutation" bash scripts/device_mutation.sh "$@" ;;
  *) echo "unknown mode $MODE ($MODES)"; exit 2 ;;
esac
echo "== done after $(( $(date +%s) - start )) s"
