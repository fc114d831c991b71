#!/usr/bin/env bash
# Run on the GPU machine from the repository root: GPU tests, ceilings, matmul + quant sweeps.
# Usage: MLSYS_GIT_COMMIT=<sha> bash scripts/device_bench_kernels.sh smoke|full|w4|splitk|lean
# words (ran at a485d54, removed with the reverted kernel change; `git show a485d54`): GEMV GPU tests, the W4A16
#     decode sweep with and without the int4 scale words.
# final7: attention GPU tests, the W8A16/W4A16 decode sweep, the fp8 prefill sweep (~9.5 min).
# stream: the GEMV's load pattern alone in three layouts (probe stream), matmul + GEMV GPU tests (~3 min, ran at 0dc72c2).
# spf (ran at commit 5a8f360, removed with the reverted kernel change; `git show 5a8f360`): the int4 GEMV's scales
#     prefetched into the L2 / not loaded at all (probe gemv --int4), attention + quant GPU tests.
# evict: GEMV and decode GPU tests, the decode goal sweep, the flush probe (one GEMV shape + decode) (~5 min).
# final6: GEMV + W8A8 GPU tests, the W8A16/W4A16 decode sweep, the bf16 prefill sweep (~9.2 min).
# gemv7: GEMV tests, ceilings, the flush and GEMV probes, the W8A16/W4A16 decode sweep (~9.5 min).
# tests: every kernel GPU test, verbose, one file at a time (~9.5 min at most; run this first next time).
# final5: all kernel GPU tests, bf16 prefill (4-stage 128x256 tiles with a half-tile epilogue), one fp8 shape.
# few: the few-tile matmul path choice (tests, squares bf16/fp8) and the forward attention extra shapes (~6 min).
# final4: matmul GPU tests, bf16 + fp8 prefill, forward attention extra shapes (~9.5 min).
# final3: matmul GPU tests, bf16 prefill, few-tile config probe, fp8 prefill (~9.5 min).
# final1 / final2: the measurement of record (tests, ceilings, prefill bf16/fp8, W8A8 / decode GEMVs, quantize).
# lean2: the same after autotuning by GPU time, plus the first W8A16 kernel (~9 min).
# lean: the one-launch W4A16/W8A16 decode kernel (kernels/quant_gemv.py) over the decode sweep, the matmul's
#     device-descriptor default vs host descriptors on the few-tile squares, GPU tests, ceilings (~9 min).
# w4: only the W4A16 kernels (default "interleave" + the evenodd / halves variants of experiments/w4a16_packed_order.py)
#     over the decode sweep, side by side in one quant.jsonl, plus quant tests and ceilings (~5-6 min).
# splitk: matmul only: persistent kernel (launch cache on / off) vs split-K (auto, 2, 4) on the few-tile
#     shapes (splitk_squares, skinny) into matmul_splitk.jsonl, plus the matmul GPU tests (<= 8.5 min).
# Writes under $OUT (<= 8 files): log.txt, tests.txt, ceilings.json, matmul.jsonl, quant.jsonl, sass.txt.
# The reports are then made on the dev machine: python -m mlsyscalc.bench.report <fetched dir> reports/
set -u
MODE=${1:-smoke}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "== $(date -u) mode=$MODE commit=${MLSYS_GIT_COMMIT:-unknown}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
if ! python3 -c "import mlsyscalc.kernels.matmul" 2>/dev/null; then
  # editable install unavailable (this throwaway copy only): map kernels/ and model_specs/ into the package
  ln -sfn ../kernels mlsyscalc/kernels && ln -sfn ../model_specs mlsyscalc/model_specs && export PYTHONPATH=$PWD
  python3 -c "import mlsyscalc.kernels.matmul; print('using symlinked package layout')"
fi
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
export TRITON_CACHE_DIR=/tmp/triton_cache
B="python3 -m mlsyscalc bench"
# gpu_tests CAP FILE [more files, pytest args]: the GPU tests of FILE (and the others), verbose, each test's outcome
# and the exit status appended to $OUT/tests.txt (a file cut by its cap still names each test that ran)
gpu_tests() {
  local cap=$1 file=$2; shift 2
  timeout "$cap" python3 -m pytest -v -p no:cacheprovider -m gpu "$@" "$file" 2>&1 \
    | grep -E "PASSED|FAILED|ERROR|Error|assert|passed|failed" >> "$OUT/tests.txt"
  echo "== $file exit ${PIPESTATUS[0]}" >> "$OUT/tests.txt"
}

if [ "$MODE" = smoke ]; then
  timeout 240 python3 -m pytest -q -x -p no:cacheprovider -k "not splitk" tests/test_kernels_matmul.py tests/test_kernels_quant.py \
    tests/test_bench_harness.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 120 $B matmul --quiet --dtype bfloat16 --dtype fp8_tensor --dtype fp8_row \
    --shapes 4096x4096x4096,8192x8192x8192,2048x12288x4096 --out "$OUT/matmul.jsonl" --format csv
  timeout 120 $B quant --quiet --shapes 1x4096x4096,16x8192x8192,4096x4096x4096 --out "$OUT/quant.jsonl" --format csv
  timeout 60 $B ceilings --out "$OUT/ceilings.json" --format csv
elif [ "$MODE" = w4 ]; then
  # the W4A16 GPU gate tests (bf16; 3x4099x4224: odd N, K % 256 != 0); the sweep gates every shape again
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -k w4a16 tests/test_kernels_quant.py 2>&1 | tail -25 \
    | tee "$OUT/tests.txt"
  timeout 45 $B ceilings --out "$OUT/ceilings.json" --format csv
  # one kind after another over the same shapes: each row times its own bf16 torch.matmul baseline
  timeout 330 $B quant --quiet --kind w4a16 --kind w4a16_evenodd --kind w4a16_halves --sweep decode \
    --out "$OUT/quant.jsonl" --format csv
elif [ "$MODE" = lean ]; then
  # host-lean launches: the one-launch decode GEMV (kernels/quant_gemv.py) and the matmul with device-built
  # descriptors + launch cache (the new defaults) beside the host-descriptor path, few-tile squares
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -k "not splitk" tests/test_kernels_quant_gemv.py \
    tests/test_kernels_matmul.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 45 $B ceilings --out "$OUT/ceilings.json" --format csv
  timeout 90 $B matmul --quiet --dtype bfloat16 --dtype fp8_tensor --sweep splitk_squares --path auto --path tma \
    --out "$OUT/matmul.jsonl" --format csv
  timeout 270 $B quant --quiet --kind w4a16_gemv --kind w8a16_gemv --sweep decode --out "$OUT/quant.jsonl" --format csv
elif [ "$MODE" = lean2 ]; then
  # after tuning by GPU time (kernels/tuning.py): few-tile squares, the decode GEMVs and the first W8A16 kernel
  timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu -k "not splitk" tests/test_kernels_quant_gemv.py \
    tests/test_kernels_matmul.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 100 $B matmul --quiet --dtype bfloat16 --dtype fp8_tensor --sweep splitk_squares --out "$OUT/matmul.jsonl" \
    --format csv
  timeout 330 $B quant --quiet --kind w4a16_gemv --kind w8a16_gemv --kind w8a16 --sweep decode --out "$OUT/quant.jsonl" \
    --format csv
elif [ "$MODE" = final1 ]; then
  # the measurement of record, part 1: GPU tests, ceilings, the prefill sweep (bf16, fp8), W8A8 squares
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -k "not splitk" tests/test_kernels_quant_gemv.py \
    tests/test_kernels_matmul.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 45 $B ceilings --out "$OUT/ceilings.json" --format csv
  timeout 220 $B matmul --quiet --dtype bfloat16 --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 160 $B matmul --quiet --dtype fp8_tensor --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 40 $B quant --quiet --kind w8a8 --out "$OUT/quant.jsonl" --format csv
elif [ "$MODE" = final2 ]; then
  # part 2: the decode GEMVs (new and first W8A16 kernel) and the quantize kernels
  timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_quant_gemv.py \
    tests/test_kernels_attention.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 300 $B quant --quiet --kind w4a16_gemv --kind w8a16_gemv --kind w8a16 --sweep decode \
    --out "$OUT/quant.jsonl" --format csv
  timeout 150 $B quant --quiet --kind quantize --out "$OUT/quant.jsonl" --format csv
elif [ "$MODE" = final3 ]; then
  # after the config probe (experiments/probe_configs.py): matmul GPU tests, the bf16 prefill sweep (GROUP_M 16 and
  # few-tile configs, do_bench-timed autotuning of long calls), the few-tile probe (pointer / host-descriptor
  # tiles), then fp8 again
  timeout 70 python3 -m pytest -q -p no:cacheprovider -m gpu -k "not splitk" tests/test_kernels_matmul.py 2>&1 \
    | tail -25 | tee "$OUT/tests.txt"
  timeout 200 $B matmul --quiet --dtype bfloat16 --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 90 python3 experiments/probe_configs.py matmul --small --out "$OUT" > "$OUT/probe.log" 2>&1
  timeout 130 $B matmul --quiet --dtype fp8_tensor --sweep prefill --out "$OUT/matmul.jsonl" --format csv
elif [ "$MODE" = final4 ]; then
  # the measurement of record after the few-tile path choice (device- vs host-built descriptors): matmul GPU
  # tests, bf16 and fp8 prefill sweeps; then the forward attention's extra shapes with what time is left
  timeout 75 python3 -m pytest -q -p no:cacheprovider -m gpu -k "not splitk" tests/test_kernels_matmul.py 2>&1 \
    | tail -25 | tee "$OUT/tests.txt"
  timeout 200 $B matmul --quiet --dtype bfloat16 --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 150 $B matmul --quiet --dtype fp8_tensor --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 120 $B attention --quiet --sweep extra --kind fwd --out "$OUT/fwd_extra.jsonl" --format csv
elif [ "$MODE" = few ]; then
  # the few-tile path choice with the leaner host-descriptor launch: its GPU tests, the squares in bf16 and fp8,
  # then the forward attention extra shapes, resumed from FWD_EXTRA (rows of an earlier call) when given
  timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu -k "few_tile or fast_path or launch_cache" \
    tests/test_kernels_matmul.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 100 $B matmul --quiet --dtype bfloat16 --dtype fp8_tensor --sweep splitk_squares --out "$OUT/matmul.jsonl" \
    --format csv
  [ -n "${FWD_EXTRA:-}" ] && cp "$FWD_EXTRA" "$OUT/fwd_extra.jsonl"
  timeout 200 $B attention --quiet --sweep extra --kind fwd --out "$OUT/fwd_extra.jsonl" --format csv
elif [ "$MODE" = tests ]; then
  # every kernel GPU test, one file at a time
  gpu_tests 130 tests/test_kernels_matmul.py -k "not splitk"
  gpu_tests 140 tests/test_kernels_quant_gemv.py
  gpu_tests 200 tests/test_kernels_attention.py
  gpu_tests 100 tests/test_kernels_quant.py
elif [ "$MODE" = attn8 ]; then
  # the attention GPU tests after the forward's softmax step became a shared helper (commit c325d15)
  gpu_tests 230 tests/test_kernels_attention.py
elif [ "$MODE" = final7 ]; then
  # the measurement of record at this session's last kernel commit: the attention GPU tests (decode's fast path
  # changed since they last all ran), the W8A16/W4A16 decode sweep, the fp8 prefill sweep
  gpu_tests 230 tests/test_kernels_attention.py
  timeout 150 $B quant --quiet --kind w8a16_gemv --kind w4a16_gemv --sweep decode --out "$OUT/quant.jsonl" --format csv
  timeout 185 $B matmul --quiet --dtype fp8_tensor --sweep prefill --out "$OUT/matmul.jsonl" --format csv
elif [ "$MODE" = stream ]; then
  # the GEMV's weight reads without its arithmetic, per tile, in the row-major layout and two blocked ones
  # (probe stream), then the matmul and GEMV GPU tests (the commits after the last tests call)
  timeout 240 python3 experiments/probe_configs.py stream --out "$OUT" > "$OUT/probe_stream.log" 2>&1
  gpu_tests 110 tests/test_kernels_matmul.py -k "not splitk"
  gpu_tests 170 tests/test_kernels_quant_gemv.py
elif [ "$MODE" = evict ]; then
  # ran at commit a4dec67 (L2 evict_first hints on the GEMV weights and decode K/V, with one-stage configs; reverted
  # after this call measured no gain, reports/probes): GEMV tuning over every config (GPU test), decode GPU tests,
  # the decode goal sweep, then the flush probe at 1x8192x8192 + decode
  gpu_tests 90 tests/test_kernels_quant_gemv.py -k repeated
  gpu_tests 40 tests/test_kernels_attention.py -k decode
  timeout 100 $B attention --quiet --format csv --sweep goals --kind bandwidth --kind decode --out "$OUT/decode.jsonl"
  timeout 60 python3 experiments/probe_configs.py flush --quick --out "$OUT" > "$OUT/probe_flush.log" 2>&1
elif [ "$MODE" = final6 ]; then
  # the measurement of record at this session's last commit: GEMV and W8A8 GPU tests, the W8A16/W4A16 decode sweep
  # (three GEMV kernels chosen per shape), then the bf16 prefill sweep again (matmul host code changed since its rows)
  gpu_tests 170 tests/test_kernels_quant_gemv.py tests/test_kernels_quant.py -k "gemv or w8a8"
  timeout 150 $B quant --quiet --kind w8a16_gemv --kind w4a16_gemv --sweep decode --out "$OUT/quant.jsonl" --format csv
  timeout 215 $B matmul --quiet --dtype bfloat16 --sweep prefill --out "$OUT/matmul.jsonl" --format csv
elif [ "$MODE" = gemv7 ]; then
  # the GEMV's K-split-over-programs kernel (sk) and wider column tiles: GPU tests (GEMV, W8A8 gate), what do_bench's
  # L2 flush costs a small read (probe flush), every GEMV candidate (probe gemv), then the decode sweep of record
  gpu_tests 100 tests/test_kernels_quant_gemv.py tests/test_kernels_quant.py -k "gemv or w8a8"
  timeout 40 $B ceilings --out "$OUT/ceilings.json" --format csv
  timeout 50 python3 experiments/probe_configs.py flush --out "$OUT" > "$OUT/probe_flush.log" 2>&1
  timeout 120 python3 experiments/probe_configs.py gemv --out "$OUT" > "$OUT/probe_gemv.log" 2>&1
  timeout 220 $B quant --quiet --kind w8a16_gemv --kind w4a16_gemv --sweep decode --out "$OUT/quant.jsonl" --format csv
elif [ "$MODE" = final5 ]; then
  # every GPU test of the kernels (matmul, GEMV, quant, attention), then the bf16 prefill sweep with the
  # 4-stage 128x256 tiles that the half-tile epilogue (SUBTILE) lets fit, then the fp8 shape final4 missed
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -k "not splitk" tests/test_kernels_matmul.py \
    tests/test_kernels_quant_gemv.py 2>&1 | tail -15 | tee "$OUT/tests.txt"
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_quant.py \
    tests/test_kernels_attention.py 2>&1 | tail -15 | tee -a "$OUT/tests.txt"
  timeout 210 $B matmul --quiet --dtype bfloat16 --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 40 $B matmul --quiet --dtype fp8_tensor --shapes 16384x8192x28672 --out "$OUT/matmul.jsonl" --format csv
elif [ "$MODE" = splitk ]; then
  # no ceilings here (time): the report can reuse a calibration measured on the same card
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kernels_matmul.py 2>&1 | tail -25 \
    | tee "$OUT/tests.txt"
  S="$OUT/matmul_splitk.jsonl"   # kernel names: triton_matmul[_nocache], triton_matmul_splitk{_auto,2,4}
  timeout 120 $B matmul --quiet --dtype bfloat16 --sweep splitk_squares --split-k none --split-k auto --split-k 2 \
    --split-k 4 --out "$S" --format csv
  timeout 40 $B matmul --quiet --dtype bfloat16 --sweep splitk_squares --no-launch-cache --out "$S" --format csv
  timeout 150 $B matmul --quiet --dtype bfloat16 --sweep skinny --split-k none --split-k auto --out "$S" --format csv
  timeout 70 $B matmul --quiet --dtype fp8_tensor --sweep splitk_squares --split-k none --split-k auto \
    --out "$S" --format csv
else  # split-K tests compile many kernels: they run in the splitk mode
  timeout 100 python3 -m pytest -q -p no:cacheprovider -k "not splitk" tests/test_kernels_matmul.py tests/test_kernels_quant.py \
    tests/test_bench_harness.py 2>&1 | tail -25 | tee "$OUT/tests.txt"
  timeout 45 $B ceilings --out "$OUT/ceilings.json" --format csv
  timeout 130 $B matmul --quiet --dtype bfloat16 --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 100 $B matmul --quiet --dtype fp8_tensor --sweep prefill --out "$OUT/matmul.jsonl" --format csv
  timeout 150 $B quant --quiet --kind w8a16 --kind w4a16 --out "$OUT/quant.jsonl" --format csv
  timeout 30 $B quant --quiet --kind w8a8 --kind quantize --out "$OUT/quant.jsonl" --format csv
fi
# Did the compiler use Hopper's instructions? Count HGMMA/QGMMA/IMMA (wgmma) and UTMALDG (TMA) per kernel.
# (skipped in the tests mode; at most 300 cubins: with many tuned configs the census outran final5's cap)
case "$MODE" in tests|attn8|final7|gemv7|final6|evict|stream) echo "== done $(date -u)"; exit 0 ;; esac
for f in $(find $TRITON_CACHE_DIR -name '*.cubin' 2>/dev/null | head -300); do
  n=$(basename "$f" .cubin)
  s=$(cuobjdump -sass "$f" 2>/dev/null)
  echo "$n HGMMA=$(grep -c 'HGMMA' <<<"$s") QGMMA=$(grep -c 'QGMMA' <<<"$s") IGMMA=$(grep -c 'IGMMA' <<<"$s") \
HMMA=$(grep -c 'HMMA' <<<"$s") IMMA=$(grep -c 'IMMA' <<<"$s") UTMALDG=$(grep -c 'UTMALDG' <<<"$s") \
UTMASTG=$(grep -c 'UTMASTG' <<<"$s") LDL=$(grep -c 'LDL' <<<"$s")"
  j="${f%.cubin}.json"; [ -f "$j" ] && python3 -c "import json,sys; d=json.load(open('$j')); print('   ', {k: d.get(k) for k in ('num_warps','num_stages','shared','n_regs','n_spills')})" 2>/dev/null
done | sort | uniq > "$OUT/sass.txt"
echo "== done $(date -u)"
