#!/usr/bin/env bash
# The golden references (stories260K text, code-qwen2-25m continuations and logits) and the quantized-weight runner
# check, once per CPU instruction-set path (MOPT_CPU_ISA, backend/cpu/isa.h). A path this CPU does not run is named
# as skipped; with none run at all the script exits 77 (a ctest skip).
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}" "${MOPT_BUILD_DIR:?}"
tb="$MOPT_BUILD_DIR/test_backend"
[[ -x "$tb" ]] || { echo "skip: $tb is not built"; exit 77; }
ran=0
for isa in scalar avx2 avxvnni avx512; do
  if ! MOPT_CPU_ISA=$isa "$MOPT_BIN" inspect "$MOPT_MODELS_DIR/stories260K.gguf" > /dev/null 2>&1; then
    echo "skipped: path $isa (this CPU or build does not run it)"
    continue
  fi
  filter='Golden.*:CpuRunner.QuantizedWeightsMatchReference'
  [[ $isa == scalar ]] && filter='Golden.Stories260K*:CpuRunner.QuantizedWeightsMatchReference'  # qwen: minutes
  MOPT_CPU_ISA=$isa MOPT_MODELS_DIR="$MOPT_MODELS_DIR" "$tb" --gtest_filter="$filter" --gtest_brief=1 \
    || { echo "FAIL: path $isa"; exit 1; }
  echo "ok: path $isa"
  ran=$((ran + 1))
done
[[ $ran -gt 0 ]] || { echo "no path ran"; exit 77; }
