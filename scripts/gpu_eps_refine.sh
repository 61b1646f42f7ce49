#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; a call with carry
# [".gpu-models"], then this one with carry [".gpu"]): what one_row_plan_eps costs plain decoding and gives
# speculative decoding now that the in-graph refinement keeps its window (docs/speculative.md, "The in-graph
# refinement under one_row_plan_eps"), in one call:
#   1. the host rule's tests and the GPU tests of one-row plans under eps;
#   2. Llama-3.1-8B shape, bf16, single stream: fresh runners with and without the in-graph refinement, in turn,
#      at eps 0 and each EPS (bench_gpu_decode --single-only --fresh 4);
#   3. bench_speculative --device cuda --profile at eps 0 and each EPS.
#   bash scripts/gpu_eps_refine.sh [EPS...]   (default 0.02; each more EPS adds ~3 minutes to the call;
#   FRESH=N fresh runners of each setting, default 4; TILINGS=1 adds the tuner's per-tiling times, see the end)
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
EPS=("$@")
[[ ${#EPS[@]} -gt 0 ]] || EPS=(0.02)
status=0

echo "== tests"
gpu_gtest test_backend_cuda 'OneRowPlanChoice.*:CudaVerifyStep.*:CudaWarmup.*' eps_tests.log 120 || status=1

for e in 0 "${EPS[@]}"; do
  echo "== bench_gpu_decode --single-only --one-row-eps $e"
  timeout 150 "$G/bench_gpu_decode" --single-only --one-row-eps "$e" --fresh "${FRESH:-4}" --fresh-settings defaults,no-refine \
    > "$O/eps_decode_$e.log" 2>&1 || status=1
  grep -E "tok/s|fresh" "$O/eps_decode_$e.log" | tail -8
done

for e in 0 "${EPS[@]}"; do
  echo "== bench_speculative --one-row-eps $e"
  spec_at_eps eps_spec "$e" || status=1
done
# TILINGS=1: each fused one-row GEMM's tilings, with their reduction order and 1- and 8-row times, from the tuner's
# debug log at the last EPS, for the 8B shape and code-qwen2-25m (other rules than choose_one_row_variant's can be
# judged offline from them): eps_tilings_8b.log, eps_tilings_cq.log.
if [[ -n "${TILINGS:-}" ]]; then
  e=${EPS[-1]}
  echo "== tilings at eps $e (debug logs)"
  MOPT_LOG=debug timeout 120 "$G/bench_gpu_decode" --single-only --one-row-eps "$e" --fresh 1 --fresh-settings defaults \
    > "$O/eps_tilings_8b.log" 2>&1 || status=1
  MOPT_LOG=debug timeout 120 "$G/bench_speculative" --device cuda --rounds 1 --one-row-eps "$e" \
    > "$O/eps_tilings_cq.log" 2>&1 || status=1
  grep -h "8 rows in view" "$O/eps_tilings_8b.log" "$O/eps_tilings_cq.log" | sort -u | cut -c1-200
fi
exit $status
