#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; carry [".gpu"]): the LM
# head's quantized copy (CudaRunner::output_q_, docs/cuda.md "Quantized weights"):
#   tests:  CudaQuantRunner.* (every device format as the LM head of a small Llama against the CPU runner, and the
#           weight bytes with the copy) and CudaVerifyStep.* (verification rows bit-identical to decode rows with
#           the quantized copy);
#   decode: bench_gpu_decode --single-only, Llama-3.1-8B shape, the GGUF formats' layers with their files' LM head
#           (q4_k with a Q6_K head, as q4_k_m files have; q8_0 with a Q8_0 one) against the bf16 LM head
#           (new processes, alternating, ROUNDS pairs, default 1).
#   bash scripts/gpu_lm_head.sh [tests] [decode] [ROUNDS]   (no step named: both)
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
gpu_steps "tests decode" "$@"  # sets steps and rounds
status=0

if [[ $steps == *" tests "* ]]; then
  echo "== tests"
  gpu_gtest test_backend_cuda 'CudaQuantRunner.*:CudaVerifyStep.*' lm_head_tests.log 300 || status=1
fi
if [[ $steps == *" decode "* ]]; then
  echo "== Llama-3.1-8B shape, single stream: the LM head quantized as the GGUF files have it, and in bf16"
  for i in $(seq 1 "$rounds"); do
    for run in q4_k:q6_k q8_0:q8_0; do
      w=${run%:*} head=${run#*:}
      for mode in quant bf16; do
        args=(--single-only --weights "$w")
        [[ $mode == quant ]] && args+=(--lm-head-weights "$head")
        log=$O/lm_head_${w}_${mode}_$i.log
        timeout 200 "$G/bench_gpu_decode" "${args[@]}" > "$log" 2>&1 || status=1
        echo "$w, LM head $([[ $mode == quant ]] && echo "$head" || echo bf16) $i: $(grep -E 'decode, 1 stream' "$log" | head -1)"
      done
    done
  done
fi
exit $status
