#!/usr/bin/env bash
# Attention on the GPU machine: install, GPU tests, then the sweep; everything lands under $OUT.
#   scripts/device_bench_attention.sh smoke   # GPU tests + one shape per kind (a first, short call)
#   scripts/device_bench_attention.sh full    # the issue's goals sweep, then the extra shapes
#   scripts/device_bench_attention.sh decode  # decode goals only, into a fresh $OUT/decode.jsonl
#   scripts/device_bench_attention.sh fwd     # forward goals only, into a fresh $OUT/fwd.jsonl
#   scripts/device_bench_attention.sh fwdec   # GPU tests of those paths, forward then decode goals (fresh rows)
# Rows already in reports/attention/results.jsonl are carried in and skipped (resume), so a
# call cut short by its time limit is finished by the next one. Set MLSYS_GIT_COMMIT where the
# copy has no .git. Copy $OUT/attention.jsonl back to reports/attention/results.jsonl afterwards.
set -o pipefail
MODE=${1:-full}
OUT=${OUT:-device_out}
BUDGET_S=${BUDGET_S:-540}           # stop starting sweeps after this many seconds
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
start=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }

python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || export PYTHONPATH=$PWD
if ! python3 -c "import mlsyscalc.kernels.attention" 2>/dev/null; then   # editable install unusable in this copy
  ln -sfn ../kernels mlsyscalc/kernels && ln -sfn ../model_specs mlsyscalc/model_specs && export PYTHONPATH=$PWD
fi
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cudnn', torch.backends.cudnn.version())"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
[ -f reports/attention/results.jsonl ] && cp reports/attention/results.jsonl "$OUT/attention.jsonl"

bench() {  # bench LOGNAME ARGS...: one sweep, bounded by what is left of the budget
  local t; t=$(left); [ "$t" -gt 30 ] || { echo "skipped $*: budget spent"; return; }
  timeout "$t" python3 -m mlsyscalc bench attention --quiet --format csv "${@:2}" >>"$OUT/$1.log" 2>&1
  echo "$* -> exit $? after $(( $(date +%s) - start )) s"
}

if [ "$MODE" = smoke ]; then
  timeout 240 python3 -m pytest -q -x -m gpu tests/test_kernels_attention.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
  bench smoke --sweep smoke --out "$OUT/smoke.jsonl"
  python3 - "$OUT/smoke.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['kernel']:20s} {r['variant']:10s} {r['shape']:28s} ok={r['ok']} err={r['rel_err']} "
          f"ms={r['median_ms']} base_ms={r['baseline_median_ms']} TF={r['tflops_per_s']} GBps={r['GBps']} {r['error'] or ''}")
PY
elif [ "$MODE" = fwd ]; then  # forward goals only (per-shape load-path choice), fresh rows
  bench fwd --sweep goals --kind fwd --out "$OUT/fwd.jsonl"
elif [ "$MODE" = fwdec ]; then  # forward and decode goals (fresh rows), after the GPU tests of those paths
  timeout 120 python3 -m pytest -q -x -k "descriptor or gpu" \
    tests/test_kernels_attention.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
  bench fwd --sweep goals --kind fwd --out "$OUT/fwd.jsonl"   # decode gets what the forward leaves
  bench decode --sweep goals --kind bandwidth --kind decode --out "$OUT/decode.jsonl"
elif [ "$MODE" = decode ]; then  # decode only, fresh rows (not resumed), host time per call recorded
  timeout 150 python3 -m pytest -q -x -m gpu -k decode tests/test_kernels_attention.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
  bench decode --sweep goals --kind bandwidth --kind decode --out "$OUT/decode.jsonl"
else
  bench sweep --sweep goals --kind bandwidth --kind decode --kind fwd --kind bwd --out "$OUT/attention.jsonl"
  bench sweep --sweep extra --kind fwd --kind decode --out "$OUT/attention.jsonl"
fi
grep -h "best config\|Triton autotuning" "$OUT"/*.log 2>/dev/null | sort | uniq -c | sort -rn | head -20
