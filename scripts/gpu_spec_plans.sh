#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; a call with carry
# [".gpu-models"], then this one with carry [".gpu"]): issue 20's one-row plan criterion (docs/speculative.md,
# "One-row plans with the verification rows in view") measured in one call, each step with its own time limit:
#   1. the GPU tests of the criterion and of verification rows;
#   2. every bf16 tiling's 1- and 8-row time at code-qwen2-25m's shapes (bench_gpu_skinny --dims);
#   3. bench_speculative --device cuda --profile with one_row_plan_eps 0 and each EPS (default 0.02 0.05);
#   4. bench_gpu_decode --single-only (Llama-3.1-8B shape, bf16) with eps 0 and the first EPS, alternating, ROUNDS
#      times (default 1; each run takes about a minute and a half, and one call has 10 minutes).
#   [ROUNDS=N] bash scripts/gpu_spec_plans.sh [EPS...]
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
EPS=("$@")
[[ ${#EPS[@]} -gt 0 ]] || EPS=(0.02 0.05)
status=0

echo "== tests"
gpu_gtest test_backend_cuda 'CudaVerifyStep.*:CudaWarmup.OneRowPlanEps*:OneRowPlanChoice.*' spec_tests.log || status=1

echo "== bf16 tilings at code-qwen2-25m's shapes, 1 and 8 rows"
timeout 120 "$G/bench_gpu_skinny" --dims 512,1408,512,128,4096 --weights bf16 --m 1,8 --variants \
  > "$O/skinny_qwen.log" 2>&1 || status=1
tail -n 60 "$O/skinny_qwen.log"

for e in 0 "${EPS[@]}"; do
  echo "== bench_speculative --one-row-eps $e"
  spec_at_eps spec_eps "$e" || status=1
done

for round in $(seq 1 "${ROUNDS:-1}"); do
  for e in 0 "${EPS[0]}"; do
    echo "== bench_gpu_decode --single-only --one-row-eps $e (round $round)"
    timeout 150 "$G/bench_gpu_decode" --single-only --one-row-eps "$e" > "$O/decode_eps_${e}_$round.log" 2>&1 ||
      status=1
    grep -E "decode, 1 stream" "$O/decode_eps_${e}_$round.log"
  done
done
exit $status
