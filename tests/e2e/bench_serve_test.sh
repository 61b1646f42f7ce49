#!/usr/bin/env bash
# Acceptance 3 of mopt bench: run it against `mopt serve` with stories260K and check that its token counts
# (from each response's usage) agree with the server's /metrics counters mopt:prompt_tokens_total and
# mopt:generation_tokens_total.
set -euo pipefail
source "$(dirname "$0")/common.sh"
# mopt serve is part of every build: a binary without it is broken, not a reason to skip.
# (The help is captured first: grep -q closing the pipe early would fail the pipeline under pipefail.)
serve_help=$("$MOPT_BIN" serve --help 2>&1 || true)
if ! grep -q -- "--served-model-name" <<<"$serve_help"; then
  echo "FAIL: '$MOPT_BIN serve --help' does not show serve's options: the binary has no serve verb" >&2
  exit 1
fi
fail() { echo "FAIL: $*" >&2; [[ -f "$tmp/serve.log" ]] && tail -20 "$tmp/serve.log" >&2; exit 1; }

"$MOPT_BIN" serve -m "$model" --port 0 >"$tmp/serve.log" 2>&1 &
srv=$!
port=""
for _ in $(seq 1200); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$tmp/serve.log" | head -1)
  [[ -n "$port" ]] && break
  kill -0 "$srv" 2>/dev/null || fail "mopt serve exited early"
  sleep 0.05
done
[[ -n "$port" ]] || fail "mopt serve did not report its port"
# Wait for /health to answer 200 (the model loads after the socket opens).
healthy=0
for _ in $(seq 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3 \
      && head -1 <&3) 2>/dev/null | grep -q " 200"; then
    healthy=1
  fi
  [[ $healthy == 1 ]] && break
  kill -0 "$srv" 2>/dev/null || fail "mopt serve exited while loading"
  sleep 0.1
done
[[ $healthy == 1 ]] || fail "mopt serve never became healthy on port $port"

for endpoint in completions chat; do
  echo "== $endpoint"
  "$MOPT_BIN" bench --url "http://127.0.0.1:$port" --endpoint "$endpoint" -c 4 -n 24 \
    --input-len uniform:4,24 --output-len uniform:8,32 --warmup 2 --seed 5 --progress off \
    --output "$tmp/$endpoint.json" | tee "$tmp/$endpoint.txt"
  node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
  const run = r.runs[0], s = run.summary, m = run.server_metrics;
  const ok = (c, msg) => { if (!c) { console.error("FAIL: " + msg); process.exit(1); } };
  ok(s.failed === 0 && s.completed === 24, "24 ok requests, got " + JSON.stringify(s.errors));
  ok(s.usage_reported === 24, "every response reported usage");
  ok(m.available, "metrics scraped: " + m.note);
  // The server labels its series with the served model name (model_name, as vLLM does).
  const series = (n) => m.deltas[n + "{model_name=\"" + process.argv[2] + "\"}"];
  const gen = series("mopt:generation_tokens_total"), prompt = series("mopt:prompt_tokens_total");
  ok(gen && prompt, "server exports mopt:generation_tokens_total and mopt:prompt_tokens_total");
  console.log(`client: ${s.input_tokens} prompt / ${s.output_tokens} generated tokens; ` +
              `server /metrics: +${prompt.delta} / +${gen.delta}`);
  ok(gen.delta === s.output_tokens, "generated tokens: client " + s.output_tokens + " vs /metrics " + gen.delta);
  ok(prompt.delta === s.input_tokens, "prompt tokens: client " + s.input_tokens + " vs /metrics " + prompt.delta);
  ok(s.ttft_s.n === 24 && s.ttft_s.p50 > 0, "TTFT measured");
  for (const q of run.requests) ok(q.output_tokens <= q.max_tokens && q.output_tokens >= 1, "tokens within max_tokens");
  ' "$tmp/$endpoint.json" "$(basename "$model")"
done

# The access log: one line per request, with its status and token counts (26 completions: 24 + 2 warm-up).
n_access=$(grep -c 'access .* "POST /v1/completions" 200 .* prompt_tokens=[0-9]* completion_tokens=[0-9]*' \
             "$tmp/serve.log" || true)
[[ $n_access -eq 26 ]] || fail "expected 26 access-log lines of /v1/completions, got $n_access"

echo "== --dataset random (vLLM's flags: lengths in the server's tokens)"
"$MOPT_BIN" bench --url "http://127.0.0.1:$port" --dataset random --random-input-len 24 --random-output-len 8 \
  --random-range-ratio 0.5 --num-prompts 12 --request-rate inf --ignore-eos --seed 3 --progress off \
  --output "$tmp/random.json" | tee "$tmp/random.txt"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
const run = r.runs[0];
const ok = (c, msg) => { if (!c) { console.error("FAIL: " + msg); process.exit(1); } };
ok(run.summary.completed === 12 && run.summary.failed === 0, "12 ok requests");
const lens = new Set();
for (const q of run.requests) {
  // The server counted exactly the tokens the workload drew, within [12, 36]; ignore_eos runs to max_tokens.
  ok(q.usage_prompt_tokens === q.expected_prompt_tokens, `usage.prompt_tokens ${q.usage_prompt_tokens} == drawn ${q.expected_prompt_tokens}`);
  ok(q.prompt_tokens >= 12 && q.prompt_tokens <= 36, `prompt tokens ${q.prompt_tokens} in [12, 36]`);
  ok(q.max_tokens >= 4 && q.max_tokens <= 12 && q.output_tokens === q.max_tokens, `output ${q.output_tokens} of ${q.max_tokens}`);
  lens.add(q.prompt_tokens);
}
ok(lens.size > 1, "lengths vary with --random-range-ratio 0.5");
console.log(`random dataset: prompt lengths ${[...lens].sort((a, b) => a - b).join(",")}`);
' "$tmp/random.json"
echo "PASS"
