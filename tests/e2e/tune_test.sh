#!/usr/bin/env bash
# mopt tune end to end on stories260K (CPU): a short study (5 trials at most) writes best.toml, the reports and the trial
# log; `mopt serve --config best.toml` runs with exactly those settings (its /metrics says so); --resume replays
# the log without new trials; two weight variants (-m twice) are searched as the model knob and the winner's variant
# is named; a second run into the same directory without --resume is refused; bad input gets
# clear errors. (The search's logic is unit-tested in tests/unit/tune; acceptance figures are in docs/tune.md.)
set -euo pipefail
source "$(dirname "$0")/common.sh"

args=(tune -m "$model" --device cpu --threads 1 --max-model-len 256 -c 4 -n 40 --input-len 12 --output-len 16
      --ignore-eos --warmup 8 --slo ttft_p99=2s,tpot_p99=200ms,error_rate=0 --trials 5 --progress off
      --search max-num-seqs=2,4 --search max-num-batched-tokens=512,2048 -o "$tmp/out")
echo "== a 5-trial study"
"$MOPT_BIN" "${args[@]}" >"$tmp/tune.txt" 2>"$tmp/tune.err" || { cat "$tmp/tune.txt" "$tmp/tune.err"; fail "tune failed"; }
cat "$tmp/tune.txt"
grep -q "^\[trial 1/5\] serve's defaults" "$tmp/tune.err" || fail "no progress line for the defaults trial"
grep -q "best .* | elapsed .*, left ~" "$tmp/tune.err" || fail "no best-so-far / time-left progress"
for f in best.toml report.html report.svg report.md trials.jsonl trials/001.json trials/001.server.log; do
  [[ -s "$tmp/out/$f" ]] || fail "$f was not written"
done
grep -q "Pareto front" "$tmp/out/report.svg" || fail "the chart has no Pareto front"
grep -q "<svg" "$tmp/out/report.html" || fail "the HTML page does not embed the chart"
grep -q 'href="trials/' "$tmp/out/report.html" || fail "the HTML page does not link the evidence"
lines=$(wc -l <"$tmp/out/trials.jsonl")
node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const ok = (c, m) => { if (!c) { console.error("FAIL: " + m); process.exit(1); } };
ok(lines[0].type === "study" && lines[0].study.sla === "ttft_p99=2000ms,tpot_p99=200ms,error_rate=0", "study line");
const t = lines.slice(1);
const roles = t.map(x => x.role).join(",");
// The budget: the defaults and two search trials, then the re-runs of the winner (and of the defaults when the
// winner is another trial).
ok(roles === "defaults,search,search,confirm" || roles === "defaults,search,search,confirm,confirm", "roles " + roles);
ok(t.every(x => x.status !== "ok" || (x.requests === 40 && x.goodput > 0)), "measured trials carry their figures");
const win = t.filter(x => x.role !== "confirm" && x.feasible).sort((a, b) => b.goodput - a.goodput)[0];
ok(win && t[3].key === win.key + ";confirm", "the first re-run repeats the winner");
ok(win.role === "defaults" ? t.length === 4 : t[4].key === "defaults;confirm", "the defaults are re-run too");
' "$tmp/out/trials.jsonl"

echo "== --finalists 2: the two best trials re-run, the winner by their re-runs"
fargs=()  # the study's arguments with 6 trials, into $tmp/fin
for ((i = 0; i < ${#args[@]}; ++i)); do
  case ${args[i]} in --trials) fargs+=(--trials 6); ((++i)) ;; -o) fargs+=(-o "$tmp/fin"); ((++i)) ;; *) fargs+=("${args[i]}") ;; esac
done
"$MOPT_BIN" "${fargs[@]}" --finalists 4 >/dev/null 2>"$tmp/fin.err" && fail "--finalists 4 accepted with 6 trials"
grep -q "too few" "$tmp/fin.err" || { cat "$tmp/fin.err"; fail "--finalists 4 with 6 trials: no clear error"; }
"$MOPT_BIN" "${fargs[@]}" --finalists 2 >"$tmp/fin.txt" 2>"$tmp/fin.err" ||
  { cat "$tmp/fin.txt" "$tmp/fin.err"; fail "tune --finalists 2 failed"; }
grep -q "chosen among 2 finalists by their re-runs" "$tmp/fin.txt" || { cat "$tmp/fin.txt"; fail "no finalists line"; }
node -e '
const t = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse).slice(1);
// A failure prints every trial as the log has it (a trial that missed the SLA on a loaded machine leaves one
// finalist, and the roles differ: the figures say whether that is what happened).
const ok = (c, m) => {
  if (c) return;
  console.error("FAIL: " + m);
  for (const x of t) console.error(JSON.stringify(x).slice(0, 400));
  process.exit(1);
};
const fin = t.slice(0, 3).filter(x => x.feasible).sort((a, b) => b.goodput - a.goodput).slice(0, 2);
// The defaults re-run once more unless they are a finalist (their finalist re-run is reused).
const roles = "defaults,search,search,confirm,confirm" + (fin.some(x => x.role === "defaults") ? "" : ",confirm");
ok(t.map(x => x.role).join(",") === roles, "roles " + t.map(x => x.role));
ok(fin.length === 2 && t[3].key === fin[0].key + ";confirm" && t[4].key === fin[1].key + ";confirm",
   "the re-runs repeat the two best trials, best first");
// The winner: the finalist whose re-run met the SLA, else (both or neither) the higher re-run goodput.
const r = [t[3], t[4]];
const pick = r[0].feasible !== r[1].feasible ? (r[0].feasible ? 0 : 1) : (r[1].goodput > r[0].goodput ? 1 : 0);
const rep = require("fs").readFileSync(process.argv[2], "utf8");
const want = fin[pick].role === "defaults" ? "winner: serve\x27s defaults" : "winner: trial " + fin[pick].index + " ";
ok(rep.includes(want), "the winner is finalist " + (pick + 1) + ": " + rep);
' "$tmp/fin/trials.jsonl" "$tmp/fin.txt"

echo "== mopt serve --config best.toml runs the winning settings"
cat "$tmp/out/best.toml"
seqs=$(sed -n 's/^max-num-seqs = //p' "$tmp/out/best.toml")
mbt=$(sed -n 's/^max-num-batched-tokens = //p' "$tmp/out/best.toml")
bs=$(sed -n 's/^block-size = //p' "$tmp/out/best.toml")
"$MOPT_BIN" serve --config "$tmp/out/best.toml" --port 0 >"$tmp/serve.log" 2>&1 &
srv=$!
port=""
for _ in $(seq 300); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$tmp/serve.log" | head -1)
  grep -q "ready:" "$tmp/serve.log" && [[ -n "$port" ]] && break
  kill -0 "$srv" 2>/dev/null || { cat "$tmp/serve.log"; fail "serve --config exited"; }
  sleep 0.05
done
metrics=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3 && cat <&3) )
info=$(grep '^mopt:engine_config_info{' <<<"$metrics") || fail "no mopt:engine_config_info in /metrics"
echo "$info"
grep -q "block_size=\"$bs\",max_num_seqs=\"$seqs\",max_num_batched_tokens=\"$mbt\",max_model_len=\"256\"" <<<"$info" ||
  fail "serve runs other settings than best.toml says"
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=""

echo "== --resume replays the log"
"$MOPT_BIN" "${args[@]}" --resume >"$tmp/resume.txt" 2>"$tmp/resume.err" || { cat "$tmp/resume.err"; fail "resume failed"; }
grep -q "resuming with $((lines - 1)) logged trial" "$tmp/resume.err" || fail "resume did not read the log"
grep -q "^\[trial" "$tmp/resume.err" && fail "resume ran trials again"
[[ $(wc -l <"$tmp/out/trials.jsonl") == "$lines" ]] || fail "resume changed the log"
cmp <(sed -n 's/^winner: //p' "$tmp/tune.txt") <(sed -n 's/^winner: //p' "$tmp/resume.txt") || fail "resume found another winner"

echo "== weight variants: -m twice, the model knob named by file name, the winner's variant in the report"
"$MOPT_BIN" quantize "$model" -o "$tmp/s260k-q8.gguf" --to q8_0 >/dev/null || fail "quantize to q8_0"
vargs=(tune -m "$model" -m "$tmp/s260k-q8.gguf" --device cpu --threads 1 --max-model-len 256 -c 4 -n 24
       --input-len 12 --output-len 16 --ignore-eos --warmup 4 --slo ttft_p99=2s,tpot_p99=200ms,error_rate=0
       --trials 5 --progress off --search model=stories260K.gguf,s260k-q8.gguf --search max-num-seqs=4
       --search max-num-batched-tokens=2048 --search block-size=64 --search kv-cache-dtype=fp16
       --search prefix-caching=on --search kv-cache-memory=auto -o "$tmp/variants")
"$MOPT_BIN" "${vargs[@]}" >"$tmp/variants.txt" 2>"$tmp/variants.err" ||
  { cat "$tmp/variants.txt" "$tmp/variants.err"; fail "tune with two variants failed"; }
cat "$tmp/variants.txt"
grep -q "model: .*\[stories260K.gguf\] s260k-q8.gguf" "$tmp/variants.err" ||
  { cat "$tmp/variants.err"; fail "the search space does not list both variants"; }
node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const ok = (c, m) => { if (!c) { console.error("FAIL: " + m); process.exit(1); } };
ok(lines[0].study.models.length === 2, "the study names both variants");
const t = lines.slice(1);
const models = new Set(t.filter(x => x.role === "search").map(x => x.settings.model.replace(/.*\//, "")));
ok(models.has("stories260K.gguf") && models.has("s260k-q8.gguf"), "the search tried both variants: " + [...models]);
ok(t.filter(x => x.role === "defaults").every(x => x.serve_args[1].endsWith("stories260K.gguf")),
   "the defaults serve the first -m");
const toml = fs.readFileSync(process.argv[2], "utf8");
const model = /^model = "(.*)"$/m.exec(toml)[1];
const win = fs.readFileSync(process.argv[3], "utf8").match(/^winner: (.*)$/m)[1];
const name = model.replace(/.*\//, "");
ok(win.includes(name), "the winner line names its variant " + name + ": " + win);
' "$tmp/variants/trials.jsonl" "$tmp/variants/best.toml" "$tmp/variants.txt"

echo "== refusals"
expect_error() {  # message, args...
  local msg=$1; shift
  if "$MOPT_BIN" "$@" >"$tmp/e.txt" 2>&1; then fail "mopt $* should fail"; fi
  grep -q -- "$msg" "$tmp/e.txt" || { cat "$tmp/e.txt"; fail "mopt $* should say '$msg'"; }
}
expect_error "pass --resume" "${args[@]}"
expect_error "ttft_p99" tune -m "$model" --slo ttft=1s -o "$tmp/x"
expect_error "unknown knob 'warp'" tune -m "$model" --device cpu --search warp=1 -o "$tmp/x"
expect_error "only on CUDA" tune -m "$model" --device cpu --search cuda-graphs=on,off -o "$tmp/x"
expect_error "not a whole number" tune -m "$model" --device cpu --search block-size=0 -o "$tmp/x"
expect_error "not expected:.* --duration" tune -m "$model" --device cpu --duration 5s -o "$tmp/x"
expect_error "too few" tune -m "$model" --device cpu --trials 2 -o "$tmp/x"
expect_error "$tmp/missing.gguf" tune -m "$tmp/missing.gguf" --device cpu -o "$tmp/x"
expect_error "given twice" tune -m "$model" -m "$model" --device cpu -o "$tmp/x"
expect_error "not one of the -m variants" tune -m "$model" -m "$tmp/s260k-q8.gguf" --device cpu \
  --search model=stories260K.gguf,other.gguf -o "$tmp/x"
expect_error "no -m variant 2" tune -m "$model" -m "$tmp/s260k-q8.gguf" --device cpu --search model=0,2 -o "$tmp/x"
echo "PASS"
