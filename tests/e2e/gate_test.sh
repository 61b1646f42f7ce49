#!/usr/bin/env bash
# Acceptance 2 of mopt gate: it catches planted faults. The same short gate run (stories260K, CPU, 6 s soak) against
# a healthy server and against servers with one test-only fault each (mopt serve --test-fault leak|slow|error):
# the healthy one passes every gate that applies (exit 0), and each fault fails its own gate and no other
# (exit 1). Also: the resource gate under --memory-limit (with its refusal probe), the accuracy gate against a
# baseline, the report formats, --strict, and bad input.
#
# The soak is seconds long, so the leak threshold is raised from 0.1 MB/h (a production soak's) to 1000 MB/h: the
# planted leak (64 KiB per request) grows by ~10^5 MB/h, a healthy server by under 100 MB/h after its warm-up.
set -euo pipefail
source "$(dirname "$0")/common.sh"

cat >"$tmp/thresholds.toml" <<'TOML'
# a seconds-long soak cannot resolve 0.1 MB/h
leak_mb_per_hour = 1000
restarts = 2
TOML
base=(gate -m "$model" --device cpu --threads 1 --max-model-len 256 -c 4 --input-len 12 --output-len 16
      --ignore-eos --warmup 400 --sample-interval 200ms --timeout 30s --progress off)
common=("${base[@]}" --thresholds "$tmp/thresholds.toml")

# run NAME EXPECTED_EXIT GATE=VERDICT... : runs the gate with --test-fault NAME and checks every verdict.
run() {
  local fault=$1 want_rc=$2; shift 2
  echo "== --test-fault $fault"
  set +e
  "$MOPT_BIN" "${common[@]}" --soak 6s --serve-arg=--test-fault="$fault" -o "$tmp/$fault" --json \
    --markdown "$tmp/$fault.md" --html "$tmp/$fault.html" >"$tmp/$fault.json" 2>"$tmp/$fault.err"
  local rc=$?
  set -e
  node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
  const want = Object.fromEntries(process.argv.slice(2).map(s => s.split("=")));
  let bad = false;
  for (const g of r.gates) {
    console.log(`  ${g.name.padEnd(12)} ${g.verdict.padEnd(5)} ${g.measured}`);
    if (want[g.name] !== g.verdict) { console.error(`FAIL: ${g.name} is ${g.verdict}, expected ${want[g.name]}: ${g.detail}`); bad = true; }
  }
  if (r.gates.length !== 7) { console.error("FAIL: seven gates expected"); bad = true; }
  if (bad) process.exit(1);
  ' "$tmp/$fault.json" "$@" || { cat "$tmp/$fault.err"; fail "fault $fault: wrong verdicts"; }
  [[ $rc == "$want_rc" ]] || fail "fault $fault: exit $rc, expected $want_rc"
  grep -q "| leak |" "$tmp/$fault.md" || fail "no Markdown report"
  grep -q "<table>" "$tmp/$fault.html" || fail "no HTML report"
  [[ -s "$tmp/$fault/soak.json" && -s "$tmp/$fault/gate.json" && -s "$tmp/$fault/soak.server.log" ]] ||
    fail "evidence missing in $tmp/$fault"
}
skips=(cuda_graphs=skip accuracy=skip resources=skip)
run none  0 leak=pass tail=pass errors=pass restart=pass "${skips[@]}"
grep -q "<svg" "$tmp/none.html" || fail "the HTML report has no memory chart"
run leak  1 leak=fail tail=pass errors=pass restart=pass "${skips[@]}"
run slow  1 leak=pass tail=fail errors=pass restart=pass "${skips[@]}"
run error 1 leak=pass tail=pass errors=fail restart=pass "${skips[@]}"

echo "== under --memory-limit, against a baseline: the resource and accuracy gates pass"
printf 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n' >"$tmp/text.txt"
for _ in 1 2 3 4 5 6; do cat "$tmp/text.txt" "$tmp/text.txt" >"$tmp/t2" && mv "$tmp/t2" "$tmp/text.txt"; done
"$MOPT_BIN" "${common[@]}" --soak 3s --memory-limit 256MiB --baseline "$model" --eval-text "$tmp/text.txt" \
  -o "$tmp/limits" --json >"$tmp/limits.json" 2>"$tmp/limits.err" || { cat "$tmp/limits.err" "$tmp/limits.json"; fail "exit $?"; }
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
const g = Object.fromEntries(r.gates.map(x => [x.name, x]));
const ok = (c, m) => { if (!c) { console.error("FAIL: " + m); process.exit(1); } };
for (const x of r.gates) console.log(`  ${x.name.padEnd(12)} ${x.verdict.padEnd(5)} ${x.measured}`);
ok(g.resources.verdict === "pass", "resources: " + g.resources.detail);
ok(g.resources.data.refusal.refused && /refusing to start/.test(g.resources.data.refusal.outcome),
   "too little memory must be refused: " + g.resources.data.refusal.outcome);
ok(g.resources.data.planned_bytes > 0 && g.resources.data.planned_bytes <= 256 * 1048576, "planned footprint");
ok(g.accuracy.verdict === "pass" && g.accuracy.data.top1 === 1 && g.accuracy.data.kl < 1e-9,
   "the model against itself: " + JSON.stringify(g.accuracy));
ok(r.passed, "every gate that applies passed");
' "$tmp/limits.json"

echo "== the table, --strict, and an accuracy threshold the model cannot meet"
printf 'leak_mb_per_hour = 1000\nrestarts = 1\naccuracy = "top1>=1.01"\n' >"$tmp/strict.toml"
set +e
"$MOPT_BIN" "${base[@]}" --soak 2s --thresholds "$tmp/strict.toml" --strict --baseline "$model" \
  --eval-text "$tmp/text.txt" -o "$tmp/strict" >"$tmp/strict.txt" 2>&1
rc=$?
set -e
cat "$tmp/strict.txt"
[[ $rc == 1 ]] || fail "a failed gate should exit 1, got $rc"
grep -q "^cuda_graphs  skip .*" "$tmp/strict.txt" || fail "the table does not show the skipped CUDA graphs gate"
grep -q "not applicable: the server runs on the CPU" "$tmp/strict.txt" || fail "the skip does not say why"
grep -q "^accuracy     FAIL .*top1 1 " "$tmp/strict.txt" || fail "the accuracy gate must fail top1>=1.01"
grep -q "^FAILED.*--strict" "$tmp/strict.txt" || fail "no overall verdict"

echo "== --gates: only the named gates run, and only their probes"
"$MOPT_BIN" "${base[@]}" --gates accuracy --baseline "$model" --eval-text "$tmp/text.txt" -o "$tmp/only_acc" \
  >"$tmp/only_acc.txt" 2>"$tmp/only_acc.err" || { cat "$tmp/only_acc.err" "$tmp/only_acc.txt"; fail "--gates accuracy: exit $?"; }
cat "$tmp/only_acc.txt"
[[ $(grep -cE '^(leak|tail|errors|cuda_graphs|accuracy|resources|restart) ' "$tmp/only_acc.txt") == 1 ]] ||
  fail "--gates accuracy must report one gate"
grep -qE "^accuracy +pass .*top-1 100.00%" "$tmp/only_acc.txt" || fail "the accuracy row (the model against itself)"
grep -q "^PASSED.*(1 of 7 gates run, --gates: accuracy)" "$tmp/only_acc.txt" || fail "the verdict must say which gates ran"
[[ ! -e $tmp/only_acc/soak.json && ! -e $tmp/only_acc/restart-1.server.log ]] || fail "--gates accuracy ran a soak or a restart"
grep -q '"gates": \[' "$tmp/only_acc/gate.json" || fail "gate.json does not record the selection"
printf 'restarts = 2\nrestart = "1ms"\n' >"$tmp/fast.toml"
set +e
"$MOPT_BIN" "${base[@]}" --gates restart,tail --soak 2s --thresholds "$tmp/fast.toml" -o "$tmp/only_rt" --json \
  >"$tmp/only_rt.json" 2>"$tmp/only_rt.err"
rc=$?
set -e
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
const names = r.gates.map(g => g.name).join(",");
if (names !== "tail,restart") { console.error("FAIL: gates " + names + ", expected tail,restart"); process.exit(1); }
const rt = r.gates[1];
if (rt.verdict !== "fail" || rt.data.seconds.length !== 2) { console.error("FAIL: restart " + JSON.stringify(rt)); process.exit(1); }
' "$tmp/only_rt.json" || { cat "$tmp/only_rt.err"; fail "--gates restart,tail"; }
[[ $rc == 1 ]] || fail "--gates restart,tail with a 1 ms restart threshold should exit 1, got $rc"
[[ -s $tmp/only_rt/soak.json && -s $tmp/only_rt/restart-2.server.log ]] || fail "--gates restart,tail: evidence missing"

echo "== bad input"
expect_error() {  # message, args...
  local msg=$1; shift
  set +e
  "$MOPT_BIN" "$@" >"$tmp/e.txt" 2>&1
  local rc=$?
  set -e
  # 2 for bad values, CLI11's own codes (> 100) for malformed flags; never 0 or 1, the gates' verdicts
  [[ $rc != 0 && $rc != 1 ]] || { cat "$tmp/e.txt"; fail "mopt $* should fail as bad input, got exit $rc"; }
  grep -q -- "$msg" "$tmp/e.txt" || { cat "$tmp/e.txt"; fail "mopt $* should say '$msg'"; }
}
printf 'latency = "1s"\n' >"$tmp/bad.toml"
expect_error "unknown threshold 'latency'" gate -m "$model" --thresholds "$tmp/bad.toml"
printf 'tail_p999 = "soon"\n' >"$tmp/bad2.toml"
expect_error "expected a duration" gate -m "$model" --thresholds "$tmp/bad2.toml"
expect_error "not expected:.* -n" gate -m "$model" -n 100
expect_error "needs --eval-text" gate -m "$model" --baseline "$model"
expect_error "expected a size" gate -m "$model" --memory-limit lots
expect_error "unknown gate 'latency' (the gates: leak, tail" gate -m "$model" --gates tail,latency
expect_error "named twice" gate -m "$model" --gates tail,tail
expect_error "--gates accuracy needs --baseline" gate -m "$model" --gates accuracy
echo "PASS"
