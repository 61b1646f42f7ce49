#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; carry [".gpu"]): the
# tensor-core skinny tilings' persistent twins (kernels.h; gemm_skinny_mma.cuh, PERS) against their tilings:
#   tests:  CudaSkinnyPersistent.* (every twin has its tiling's bits at one row and is its tiling at several),
#           CudaQuantGemm.TensorCoreTilingsMatchReference and CudaFusedGemm.* (every tiling, twins included,
#           against the reference; bf16 rows against one-row calls of the same reduction order);
#   skinny: bench_gpu_skinny --m 1 over the tensor-core tilings and the twins (v10-v33) of fp8, int4 and bf16 at
#           the Llama-3.1-8B shapes, each tiling's cold and stream times;
#   decode: bench_gpu_decode --single-only, the defaults against --no-persistent (new processes, alternating), for
#           each of bf16, fp8, int4 (ROUNDS pairs, default 1): the single stream with and without the twins.
#   bash scripts/gpu_persistent.sh [tests] [skinny] [decode] [ROUNDS]   (no step named: all three)
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
gpu_steps "tests skinny decode" "$@"  # sets steps and rounds
status=0

if [[ $steps == *" tests "* ]]; then
  echo "== tests"
  gpu_gtest test_backend_cuda 'CudaSkinnyPersistent.*:CudaQuantGemm.TensorCoreTilingsMatchReference:CudaFusedGemm.*' \
    persistent_tests.log 400 \
    || status=1
fi
if [[ $steps == *" skinny "* ]]; then
  echo "== skinny GEMMs, m = 1: tilings (v10-v29) and persistent twins of v26-v29 (v30-v33)"
  log=$O/persistent_skinny.log
  timeout 300 "$G/bench_gpu_skinny" --m 1 --weights fp8,int4,bf16 --only "$(seq -s, 10 33)" --variants --rounds 5 \
    > "$log" 2>&1 || status=1
  grep -E '^[a-z0-9_]+ +(qkv|o|gate_up|down|kv|lm_head) |stream us|32 layers' "$log"
fi
if [[ $steps == *" decode "* ]]; then
  echo "== Llama-3.1-8B shape, single stream: with the twins (defaults) and without (--no-persistent)"
  for i in $(seq 1 "$rounds"); do
    for w in bf16 fp8 int4; do
      for mode in default nopers; do
        args=(--single-only --weights "$w")
        [[ $mode == nopers ]] && args+=(--no-persistent)
        log=$O/persistent_decode_${w}_${mode}_$i.log
        timeout 200 "$G/bench_gpu_decode" "${args[@]}" > "$log" 2>&1 || status=1
        echo "$w $mode $i: $(grep -E 'decode, 1 stream' "$log" | head -1)"
      done
    done
  done
fi
exit $status
