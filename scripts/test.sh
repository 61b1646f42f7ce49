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
# The tests check that the CUDA backend compiles and links (no GPU runs here): for its sm_90a machine code only,
# not also the compute_80 PTX a release ships (MOPT_CUDA_ARCHS), which doubles nvcc's time.
scripts/build.sh -DMOPT_CUDA="${MOPT_CUDA:-ON}" -DMOPT_CUDA_ARCHS="${MOPT_CUDA_ARCHS:-90a-real}"
phase_done "release build"
echo "== tests (release)"
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 900
phase_done "release tests"
if [[ "${MOPT_SKIP_SANITIZE:-0}" != 1 ]]; then
  echo "== ASan/UBSan build"
  # clang, -O1 (the optimization level ASan's documentation suggests) and line tables only: reports keep file:line,
  # and clang compiles the sanitized tree in about two thirds of GCC's time (GCC's UBSan instrumentation doubles
  # its compile time; docs/testing.md has the figures). The release build above is GCC's.
  BUILD_DIR=build-asan BUILD_TYPE=None scripts/build.sh -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DMOPT_UNITY=ON -DMOPT_CUDA=OFF -DMOPT_SANITIZE=address,undefined -DMOPT_BENCH=OFF \
    -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only -DNDEBUG"
  phase_done "ASan/UBSan build"
  # Long-running model-quality and load tests already ran in the release pass; under ASan (~10x slower) they
  # would dominate CI time without exercising more parsing code. The deployment tests (tests/deploy: the package,
  # Prometheus, the manifests, the console in a browser) check files and a release binary, not memory safety; the
  # console's routes run under ASan in test_server. gate_test measures the server's memory growth, which ASan's
  # quarantine of freed memory turns into growth of its own.
  unit_exclude=${MOPT_ASAN_UNIT_EXCLUDE:-'*Perplexity*:*Golden.CodeQwen2*'}
  script_exclude="load_test|bench_overhead|gate_test|quantize_accuracy|e2e\\.(deb|prometheus|manifests|console)_test"
  script_exclude=${MOPT_ASAN_EXCLUDE:-$script_exclude}
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The unit tests: each executable once, whole (scripts/run_unit_tests.sh says why not ctest's process per case).
  echo "== unit tests (ASan/UBSan), excluding: $unit_exclude"
  asan_status=0
  JOBS=$JOBS scripts/run_unit_tests.sh build-asan "$unit_exclude" || asan_status=1
  echo "== e2e, server and layering tests (ASan/UBSan), excluding: $script_exclude"
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" --timeout 1800 -R '^(e2e|layering)\.' \
    -E "$script_exclude" || asan_status=1
  unset ASAN_OPTIONS UBSAN_OPTIONS
  [[ $asan_status == 0 ]] || { echo "FAIL: tests under ASan/UBSan"; exit 1; }
  phase_done "ASan/UBSan tests"

  scripts/test_tsan.sh
  phase_done "ThreadSanitizer build and tests"
fi
