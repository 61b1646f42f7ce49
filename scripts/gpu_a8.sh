#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; carry [".gpu"]): the skinny
# GEMM with 8-bit activations on the integer tensor cores (backend/cuda/gemm_skinny_a8.h) for Q8_0 and 4-bit weights:
#   tests:  CudaSkinnyA8.* (every format, tiling, prologue and epilogue against an fp64 reference of the CPU
#           backend's activation quantization; as tuner variants) and CudaQuantGemm.* (the other tilings' bounds;
#           row invariance, the a8 variants included), and the runner tests the tuner may pick them in
#           (CudaQuantRunner, CudaVerifyStep; CudaSkinnyPersistent for the numbering);
#   skinny: bench_gpu_skinny --weights q8_0,int4,q4_k --m 1,8 --a8 at the Llama-3.1-8B layer shapes: the f16
#           tensor-core tilings' best and each a8 tiling, cold and stream, with the output check, and the 32 layers'
#           sums;
#   decode: bench_gpu_decode --single-only per format (MOPT_A8_FORMATS, default "q8_0 int4 q4_k"; LM heads as in
#           gpu_all.sh), then fresh runners alternating the defaults (the tuner may pick the a8 tilings) and f16-act
#           (never).
#   bash scripts/gpu_a8.sh [tests] [skinny] [decode]   (no step named: all three)
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
gpu_steps "tests skinny decode" "$@"  # sets steps
status=0

if [[ $steps == *" tests "* ]]; then
  echo "== tests"
  filter='CudaSkinnyA8.*:CudaQuantGemm.*:CudaQuantRunner.*:CudaVerifyStep.*:CudaSkinnyPersistent.*'
  gpu_gtest test_backend_cuda "$filter" a8_tests.log 300 || status=1
fi
if [[ $steps == *" skinny "* ]]; then
  echo "== skinny GEMMs, q8_0 / int4 / q4_k, m = 1 and 8: f16 tensor-core tilings and a8"
  log=$O/a8_skinny.log
  timeout 300 "$G/bench_gpu_skinny" --m 1,8 --weights q8_0,int4,q4_k --shapes qkv,o,gate_up,down,lm_head --a8 \
    --variants --rounds 5 > "$log" 2>&1 || status=1
  grep -E 'copy|^(q8_0|int4|q4_k) |a8|32 layers|the same through' "$log" | grep -v '^ '
fi
if [[ $steps == *" decode "* ]]; then
  for w in ${MOPT_A8_FORMATS:-q8_0 int4 q4_k}; do
    head=(); [[ $w == q4_k ]] && head=(--lm-head-weights q6_k); [[ $w == q8_0 ]] && head=(--lm-head-weights q8_0)
    echo "== bench_gpu_decode --single-only --weights $w ${head[*]}, fresh: defaults / f16-act"
    log=$O/a8_decode_$w.log
    timeout 200 "$G/bench_gpu_decode" --single-only --weights "$w" "${head[@]}" --fresh 2 \
      --fresh-settings defaults,f16-act > "$log" 2>&1 || status=1
    grep -E 'tok/s|gemm m=1 ' "$log" | head -40
  done
fi
exit $status
