#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; carry [".gpu"]): the skinny
# GEMM with 8-bit activations on the integer tensor cores (backend/cuda/gemm_skinny_w8a8.h) for Q8_0 weights:
#   tests:  CudaSkinnyW8a8.* (every tiling, prologue and epilogue against the CPU backend's Q8_0 product);
#   skinny: bench_gpu_skinny --weights q8_0 --m 1,8 --w8a8 at the Llama-3.1-8B layer shapes: the f16 tensor-core
#           tilings' best and each w8a8 tiling, cold and stream, with the output check, and the 32 layers' sums.
#   bash scripts/gpu_w8a8.sh [tests] [skinny]   (no step named: both)
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
gpu_steps "tests skinny" "$@"  # sets steps
status=0

if [[ $steps == *" tests "* ]]; then
  echo "== tests"
  gpu_gtest test_backend_cuda 'CudaSkinnyW8a8.*' w8a8_tests.log 200 || status=1
fi
if [[ $steps == *" skinny "* ]]; then
  echo "== skinny GEMMs, q8_0, m = 1 and 8: f16 tensor-core tilings and w8a8"
  log=$O/w8a8_skinny.log
  timeout 300 "$G/bench_gpu_skinny" --m 1,8 --weights q8_0 --shapes qkv,o,gate_up,down,lm_head --w8a8 --variants \
    --rounds 5 > "$log" 2>&1 || status=1
  grep -E 'copy|^q8_0 |w8a8|32 layers|the same through' "$log"
fi
exit $status
