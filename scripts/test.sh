#!/usr/bin/env bash
# Builds everything (the CUDA backend included: MOPT_CUDA=ON unless set otherwise, so a machine without nvcc fails
# loudly instead of compiling no GPU test) and runs every test:
#   1. Release build + all tests (unit, e2e, server, bench-tool tests); GPU tests skip without a GPU.
#   2. ASan/UBSan build (CPU only) of the unit tests and mopt, run once.
#   3. ThreadSanitizer build (CPU only) of the thread pool, engine and server tests, run once
#      (MOPT_TSAN_E2E=1 adds mopt and the drain / bad-input server tests against it: scripts/test_tsan.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, so a CI log shows where its minutes went (the budget is 45 minutes on 2 cores).
phase_start=$SECONDS
phase_done() { echo "== $1: $((SECONDS - phase_start)) s (total $SECONDS s)"; phase_start=$SECONDS; }
scripts/install_deps.sh
phase_done "dependencies"
JOBS=${JOBS:-$(nproc)}
echo "== release build (CUDA: ${MOPT_CUDA:-ON}; MOPT_CUDA=OFF builds without the CUDA backend)"
# The tests check that the CUDA backend compiles and links (no GPU runs here): to sm_90a PTX only (MOPT_CUDA_ARCHS),
# without ptxas's machine code (~43% of nvcc's time: 690 -> 393 s over the CUDA files, docs/testing.md) or the
# compute_80 PTX a release adds, and with cicc's own optimizer off (-Xcicc -O0: the front end and the PTX it emits
# are checked; cicc at -O3 was ~2/3 of what was left). scripts/gpu_prepare.sh builds the optimized machine code
# (ptxas included) for every GPU run.
scripts/build.sh -DMOPT_CUDA="${MOPT_CUDA:-ON}" -DMOPT_CUDA_ARCHS="${MOPT_CUDA_ARCHS:-90a-virtual}" \
  -DCMAKE_CUDA_FLAGS="${MOPT_CUDA_FLAGS--Xcicc -O0}"
phase_done "release build"
echo "== tests (release)"
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 900
phase_done "release tests"
if [[ "${MOPT_SKIP_SANITIZE:-0}" != 1 ]]; then
  scripts/test_asan.sh
  phase_done "ASan/UBSan build and tests"

  scripts/test_tsan.sh
  phase_done "ThreadSanitizer build and tests"
fi
