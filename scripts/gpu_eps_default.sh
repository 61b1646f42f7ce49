#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; a call with carry
# [".gpu-models"], then this one with carry [".gpu"]): the default one_row_plan_eps (kDefaultOneRowPlanEps, 0.03)
# against 0, in one call (docs/speculative.md, "The H200 at last, and eps 0.03 by default"):
#   1. the GPU tests of one-row plans, verification steps, the warm-up and the fused GEMMs;
#   2. bench_speculative --device cuda --rounds 2, the defaults, --one-row-eps 0 and --no-verify-refine (the
#      verification graphs' own refinement off) in turn, each a new process, N rounds (default 6): the speed-up, the
#      acceptance length and the mean forward time of a verification step;
#   3. Llama-3.1-8B shape, bench_gpu_decode --single-only with the defaults and at --one-row-eps 0, twice each in
#      bf16 and once in fp8 (whose plans are not in the plan cache: tuned at every start): what plain decoding and
#      its start-up tuning pay.
#   bash scripts/gpu_eps_default.sh [N]
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
N=${1:-6}
status=0

echo "== tests"
gpu_gtest test_backend_cuda 'OneRowPlanChoice.*:CudaVerifyStep.*:CudaWarmup.*:CudaFusedGemm.*' eps_default_tests.log 200 \
  || status=1

for i in $(seq 1 "$N"); do
  for mode in default eps0 norefine; do
    args=()
    [[ $mode == eps0 ]] && args=(--one-row-eps 0)
    [[ $mode == norefine ]] && args=(--no-verify-refine)
    log=$O/epsd_${mode}_$i.log
    timeout 120 "$G/bench_speculative" --device cuda --rounds 2 "${args[@]}" > "$log" 2>&1 || status=1
    echo "$mode $i: $(grep -E '^all ' "$log" | awk '{print "plain", $3, "spec", $4, $5, "accept", $6}')" \
         "verification step $(grep -E '^speculative .*verification' "$log" | sed 's/.*verification steps //; s/,.*//') us"
  done
done

for run in bf16:1 bf16:2 fp8:1; do
  w=${run%:*} i=${run#*:}
  for mode in default eps0; do
    args=(--weights "$w")
    [[ $mode == eps0 ]] && args+=(--one-row-eps 0)
    log=$O/epsd_decode_${w}_${mode}_$i.log
    start=$(date +%s%N)
    timeout 200 "$G/bench_gpu_decode" --single-only "${args[@]}" > "$log" 2>&1 || status=1
    echo "8B $w $mode $i: $(grep -E 'decode, 1 stream' "$log" | head -1) ($((($(date +%s%N) - start) / 1000000)) ms)"
  done
done
exit $status
