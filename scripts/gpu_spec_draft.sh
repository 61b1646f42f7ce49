#!/usr/bin/env bash
# Runs THERE, on the GPU machine, in the repo root (after scripts/gpu_prepare.sh here; a call with carry
# [".gpu-models"], then this one with carry [".gpu"]): a draft model on the GPU beside its target
# (docs/speculative.md, "Draft model"), in one call:
#   1. the GPU test of the engine with a draft model (greedy output equal to plain decoding's, the warm-up
#      covering the draft's runner);
#   2. bench_speculative --device cuda with the target's first 2 of 8 layers as its draft (an early exit), then
#      with the target quantized to Q4_0 by mopt quantize, 3 proposals a step; greedy texts compared with plain
#      decoding round by round (a difference fails the run).
#   bash scripts/gpu_spec_draft.sh
# Logs go to $OUT (or /tmp/mopt-gpu-out); the lines that decide are printed after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # sets G (.gpu) and O (the log folder), unpacks bin.txz, sets the library path
status=0

echo "== test_engine_speculative (GPU tests)"
gpu_gtest test_engine_speculative 'SpecDraftCuda.*' spec_draft_test.log 120 || status=1

Q=$MOPT_MODELS_DIR/code-qwen2-25m
if [[ ! -d "$Q" ]]; then
  echo "code-qwen2-25m is not in $MOPT_MODELS_DIR: carry .gpu-models in a call just before this one"
  exit 1
fi
echo "== bench_speculative --device cuda --draft-layers 2"
timeout 200 "$G/bench_speculative" --device cuda --rounds 2 --draft-layers 2 \
  --speculative-config '{"method":"ngram","num_speculative_tokens":3}' > "$O/spec_draft_layers.log" 2>&1 || status=1
grep -E "speed-up with speculation|differs|^all |us per step" "$O/spec_draft_layers.log"

echo "== bench_speculative --device cuda, draft model code-qwen2-25m Q4_0"
if timeout 120 "$G/mopt" quantize "$Q" -o "$O/cq-q4_0.gguf" --to q4_0 --force > "$O/quantize_draft.log" 2>&1; then
  timeout 200 "$G/bench_speculative" --device cuda --rounds 2 \
    --speculative-config "{\"model\":\"$O/cq-q4_0.gguf\",\"num_speculative_tokens\":3}" \
    > "$O/spec_draft_q4_0.log" 2>&1 || status=1
  grep -E "speed-up with speculation|differs|^all |us per step" "$O/spec_draft_q4_0.log"
else
  echo "mopt quantize --to q4_0 failed:"; tail -n 5 "$O/quantize_draft.log"; status=1
fi
exit $status
