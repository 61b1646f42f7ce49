#!/usr/bin/env bash
# Runs every unit-test executable of a build folder (BUILD/test_*) once each, whole, JOBS at a time, where ctest
# starts one process per test case. Under the sanitizers a process start costs a large share of a small test
# (ASan maps its shadow memory), and the suite has ~2,400 cases, ~1,800 of them parameter sweeps: one process per
# executable turned most of the ASan phase's time into test time (docs/testing.md has the figures).
#   scripts/run_unit_tests.sh BUILD [EXCLUDE]
# EXCLUDE: test names to leave out, as gtest filter patterns separated by ':' (e.g. '*Perplexity*:Golden.CodeQwen2*').
# Each executable's output goes to BUILD/unit-logs/<name>.log; a failing one's last lines are printed. Exit status 1
# when any fails. MOPT_BIN (for the tests that run the binary) is BUILD/mopt, as ctest sets it.
set -euo pipefail
[[ $# -ge 1 && -d "$1" ]] || { echo "usage: $0 BUILD_DIR [EXCLUDE_PATTERNS]" >&2; exit 2; }
build=$(cd "$1" && pwd)
exclude=${2:-}
logs=$build/unit-logs
rm -rf "$logs" && mkdir -p "$logs"
export MOPT_BIN=$build/mopt BUILD=$build LOGS=$logs FILTER=${exclude:+-$exclude}

# Largest executables first: they hold the most tests, so the last one to start is a short one.
mapfile -t bins < <(find "$build" -maxdepth 1 -type f -name 'test_*' -perm -u+x -printf '%s %p\n' | sort -rn |
                    cut -d' ' -f2-)
((${#bins[@]})) || { echo "run_unit_tests: no test_* executables in $build" >&2; exit 1; }

run_one() {
  local bin=$1 name start status=0
  name=$(basename "$bin")
  start=$SECONDS
  (cd "$BUILD" && "$bin" ${FILTER:+"--gtest_filter=$FILTER"}) >"$LOGS/$name.log" 2>&1 || status=$?
  local ran passed skipped
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$LOGS/$name.log" | tail -1)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$LOGS/$name.log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?,.*/\1/p' "$LOGS/$name.log" | tail -1)
  if [[ $status != 0 ]]; then
    echo "FAIL $name (exit $status, $((SECONDS - start)) s); the end of $LOGS/$name.log:"
    grep -E '^\[  FAILED  \]' "$LOGS/$name.log" | head -20 || true
    tail -40 "$LOGS/$name.log"
    return 1
  fi
  echo "ok   $name: ${ran:-0} tests, ${passed:-0} passed, ${skipped:-0} skipped ($((SECONDS - start)) s)"
}
export -f run_one

printf '%s\n' "${bins[@]}" | xargs -P "${JOBS:-$(nproc)}" -I{} bash -c 'run_one "$1"' _ {} && exit 0
echo "run_unit_tests: at least one test executable failed (logs in $logs)"
exit 1
