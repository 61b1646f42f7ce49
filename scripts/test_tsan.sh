#!/usr/bin/env bash
# ThreadSanitizer (CPU only): builds the thread pool, engine and server tests into build-tsan/ and runs them; with
# MOPT_TSAN_E2E=1 also mopt, and the server tests that drive mopt serve's HTTP, engine and signal threads (drain,
# bad input) against it. Any report fails the run. Called by scripts/test.sh (without the mopt part: building
# every module of mopt under TSan again cost CI minutes over its 45-minute budget; the in-process server and
# engine tests run the same HTTP and engine threads); runs alone too (after scripts/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
e2e=${MOPT_TSAN_E2E:-0}
targets="test_core test_engine test_server"
[[ $e2e == 1 ]] && targets+=" mopt"
echo "== ThreadSanitizer build ($targets)"
# clang (as the ASan build, scripts/test.sh), -O1 and line tables: reports keep file:line.
BUILD_DIR=build-tsan BUILD_TYPE=None TARGETS="$targets" scripts/build.sh \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DMOPT_UNITY=ON -DMOPT_UNITY_TESTS=ON -DMOPT_CUDA=OFF -DMOPT_SANITIZE=thread -DMOPT_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only -DNDEBUG"
reports=$PWD/build-tsan/tsan-reports
rm -rf "$reports" && mkdir -p "$reports"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 log_path=$reports/report"
echo "== tests (ThreadSanitizer)"
tsan_status=0
build-tsan/test_core || tsan_status=1
build-tsan/test_server || tsan_status=1
# The engine tests that run threads (the engine's own thread, concurrent clients); the others step the engine from
# the test thread on a one-thread runner, where there is nothing to race, and take most of the time.
build-tsan/test_engine --gtest_filter='-EngineModel.*:EngineRandom.*:SchedulerRandom.*:EngineFake.ConcurrentGreedyMatchesOracle' ||
  tsan_status=1
[[ $e2e == 1 ]] && for t in drain bad_input; do
  echo "-- tests/server/${t}_test.sh against the ThreadSanitizer mopt"
  MOPT_BIN=$PWD/build-tsan/mopt MOPT_MODELS_DIR=${MOPT_MODELS_DIR:-$PWD/../shared/models} \
    bash "tests/server/${t}_test.sh" || tsan_status=1
done
if compgen -G "$reports/report*" >/dev/null; then
  echo "ThreadSanitizer reports:"
  cat "$reports"/report*
  tsan_status=1
fi
[[ $tsan_status == 0 ]] || { echo "FAIL: tests under ThreadSanitizer"; exit 1; }
