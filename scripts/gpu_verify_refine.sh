#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; a call with carry
# [".gpu-models"], then this one with carry [".gpu"]): the in-graph refinement of verification graphs
# (RunnerOptions::refine_verification_graphs; docs/speculative.md), in one call:
#   1. the GPU tests of verification steps, the warm-up and the fused GEMMs (rows bit for bit as one-row decode);
#   2. bench_speculative --device cuda --rounds 2, with and without the refinement, alternating, N times each
#      (default 4), then once each with --profile (the step times of 1 .. 8 rows);
#   3. the refinement's switches from the debug log of one run.
#   bash scripts/gpu_verify_refine.sh [N]
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
N=${1:-4}
status=0

echo "== tests"
gpu_gtest test_backend_cuda 'CudaVerifyStep.*:CudaWarmup.*:CudaFusedGemm.*' verify_refine_tests.log 150 || status=1

for i in $(seq 1 "$N"); do
  for mode in refine no-refine; do
    args=()
    [[ $mode == no-refine ]] && args=(--no-verify-refine)
    timeout 120 "$G/bench_speculative" --device cuda --rounds 2 "${args[@]}" > "$O/vr_${mode}_$i.log" 2>&1 || status=1
    echo "$mode $i: $(grep -E '^all ' "$O/vr_${mode}_$i.log")"
  done
done
for mode in refine no-refine; do
  args=()
  [[ $mode == no-refine ]] && args=(--no-verify-refine)
  echo "== --profile, $mode"
  timeout 150 "$G/bench_speculative" --device cuda --rounds 1 --profile "${args[@]}" > "$O/vr_${mode}_profile.log" 2>&1 \
    || status=1
  grep -E "^all |cost model|  [1-8] rows? " "$O/vr_${mode}_profile.log"
done
echo "== switches (debug log)"
MOPT_LOG=debug timeout 120 "$G/bench_speculative" --device cuda --rounds 1 > "$O/vr_debug.log" 2>&1 || status=1
grep -E "verification graph [0-9]+:" "$O/vr_debug.log" | sed 's/^\[mopt debug\] //' | sort | uniq -c | head -40
exit $status
