#!/usr/bin/env bash
# ASan/UBSan (CPU only): builds the unit tests and mopt into build-asan/ with clang and runs them once (each unit-test
# executable whole, then the e2e, server and layering scripts). Called by scripts/test.sh and
# scripts/test_loaded.sh; runs alone too (after scripts/install_deps.sh). An up-to-date build-asan/ is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
start=$SECONDS
echo "== ASan/UBSan build"
# clang, -O1 (the optimization level ASan's documentation suggests) and line tables only: reports keep file:line,
# and clang compiles the sanitized tree in about two thirds of GCC's time (GCC's UBSan instrumentation doubles
# its compile time; docs/testing.md has the figures). The release build above is GCC's.
BUILD_DIR=build-asan BUILD_TYPE=None scripts/build.sh -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DMOPT_UNITY=ON -DMOPT_UNITY_TESTS=ON -DMOPT_CUDA=OFF -DMOPT_SANITIZE=address,undefined -DMOPT_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only -DNDEBUG"
echo "== ASan/UBSan build: $((SECONDS - start)) s"
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
