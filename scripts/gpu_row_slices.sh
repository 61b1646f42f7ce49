#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; a call with carry
# [".gpu-models"], then this one with carry [".gpu"]): the row slices of verification GEMMs
# (SkinnyGemmParams::row_slice; docs/speculative.md, "Row slices") measured in one call:
#   1. the GPU tests of row invariance, verification steps and warm-up;
#   2. every CUDA-core bf16 tiling at code-qwen2-25m's shapes for 8 rows, whole and in slices of 1, 2 and 4 rows;
#   3. bench_speculative --device cuda --profile (the verification steps take the fastest slicing) with
#      one_row_plan_eps 0 and each EPS (default 0.05).
#   bash scripts/gpu_row_slices.sh [EPS...]
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
EPS=("$@")
[[ ${#EPS[@]} -gt 0 ]] || EPS=(0.05)
status=0

echo "== tests"
gpu_gtest test_backend_cuda 'CudaFusedGemm.*:CudaQuantGemm.RowsMatch*:CudaVerifyStep.*:CudaWarmup.*:CudaRunner.Spec*' \
  slice_tests.log 240 || status=1

for s in 0 1 2 4; do
  echo "== bf16 tilings at code-qwen2-25m's shapes, 8 rows, row slice $s"
  timeout 90 "$G/bench_gpu_skinny" --dims 512,1408,512,128,4096 --weights bf16 --m 8 --variants --only 0,1,2,3,4,5,6,7,8,9 \
    --row-slice "$s" > "$O/skinny_slice_$s.log" 2>&1 || status=1
  grep -E "^bf16|cold us" "$O/skinny_slice_$s.log"
done

for e in 0 "${EPS[@]}"; do
  echo "== bench_speculative --one-row-eps $e"
  MOPT_LOG=debug spec_at_eps spec_slices_eps "$e" || status=1
  grep -E "row slice" "$O/spec_slices_eps_$e.log" | sort | uniq | head -40
done
exit $status
