#!/usr/bin/env bash
# The suite on a loaded machine: runs the release tests RUNS times in a row (default 5), then the ASan/UBSan and
# ThreadSanitizer tests once, while a second build of the whole tree runs beside them (from scratch into
# build-load/, ccache off, restarted whenever it finishes), the case of a 2-core CI machine or a developer's
# laptop that builds while it tests. Stops at the first failing pass. Run after scripts/test.sh (it reuses build/,
# build-asan/ and build-tsan/; scripts/test_asan.sh and test_tsan.sh rebuild only what changed):
#   scripts/test.sh && scripts/test_loaded.sh [RUNS]
# Each pass's time and the load build's progress are printed; the logs are in build/loaded-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [RUNS] (a positive count, default 5)" >&2; exit 2; }
[[ -f build/CTestTestfile.cmake ]] || { echo "test_loaded: no release build in build/: run scripts/test.sh first" >&2; exit 2; }
JOBS=${JOBS:-$(nproc)}
logs=$PWD/build/loaded-logs
rm -rf "$logs" && mkdir -p "$logs"

# The load: the whole tree built from scratch, again and again, with all cores (the CUDA backend too where nvcc
# exists, as the release build). Its own process group, so one kill stops cmake, ninja and the compilers.
load_loop() {
  local n=0
  while true; do
    n=$((n + 1))
    rm -rf build-load
    echo "load build $n started $(date +%T)"
    CCACHE_DISABLE=1 \
      BUILD_DIR=build-load JOBS=$JOBS scripts/build.sh -DMOPT_CUDA_ARCHS=90a-real >/dev/null 2>&1 ||
      echo "load build $n failed (the load goes on)"
    echo "load build $n ended $(date +%T)"
  done
}
set -m
load_loop >"$logs/load.log" 2>&1 &
load_pid=$!
set +m
stop_load() { kill -- -"$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true; rm -rf build-load; }
trap stop_load EXIT
sleep 30  # the load is compiling before the first test starts

for ((i = 1; i <= runs; i++)); do
  start=$SECONDS
  echo "== release tests, pass $i of $runs (load: $(tail -1 "$logs/load.log"))"
  if ! ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 900 >"$logs/pass-$i.log" 2>&1; then
    grep -E 'tests passed|\(Failed\)|\(Timeout\)|\*\*\*' "$logs/pass-$i.log" | tail -20
    echo "FAIL: release tests, pass $i of $runs under load ($logs/pass-$i.log)"
    exit 1
  fi
  echo "   $(grep 'tests passed' "$logs/pass-$i.log") in $((SECONDS - start)) s"
done
for t in asan tsan; do
  start=$SECONDS
  echo "== scripts/test_$t.sh under load"
  scripts/test_$t.sh >"$logs/$t.log" 2>&1 || { tail -40 "$logs/$t.log"; echo "FAIL: scripts/test_$t.sh under load"; exit 1; }
  echo "   passed in $((SECONDS - start)) s"
done
echo "load builds: $(grep -c ended "$logs/load.log") finished during the run"
echo "PASS: $runs release passes, ASan/UBSan and ThreadSanitizer, all under load"
