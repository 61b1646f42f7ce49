#!/usr/bin/env bash
# mopt eval: perplexity alone and against a reference (stories260K GGUF vs the same weights as a llama2.c
# checkpoint: KL 0, full agreement), the JSON document, the progress lines, and the exit codes: 0 when every gate
# check passes, 1 when one fails, 2 for a malformed gate and every other error.
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
M=$MOPT_MODELS_DIR
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The text: the published stories260K story (the fenced block after "Reference output, greedy").
awk '/Reference output, greedy/{f=1} f&&/^```$/{n++; if(n==2) exit; next} f&&n==1' "$M/README.md" > "$tmp/story.txt"
[[ $(wc -c < "$tmp/story.txt") -gt 400 ]] || { echo "FAIL: could not extract the story"; exit 1; }
json() {  # $1 = file, $2 = JavaScript expression over d
  node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"
}
ev_on() {  # $1 = device, rest = mopt eval arguments; sets rc
  local dev=$1; shift
  set +e; "$MOPT_BIN" eval "$@" --device "$dev" --threads 1 > "$tmp/out" 2> "$tmp/err"; rc=$?; set -e
}
ev() { ev_on cpu "$@"; }
expect_rc() {  # $1 = wanted exit code, $2 = label
  [[ $rc -eq $1 ]] || { echo "FAIL: $2: exit code $rc, expected $1"; cat "$tmp/out" "$tmp/err"; exit 1; }
}

# Perplexity alone, JSON: windows side by side, every window's first token unscored.
ev "$M/stories260K.gguf" --text "$tmp/story.txt" --ctx 64 --json
expect_rc 0 "perplexity"
n=$(json "$tmp/out" 'd.protocol.text_tokens'); w=$(json "$tmp/out" 'd.protocol.windows')
[[ $w -eq $(( (n + 63) / 64 )) ]] || { echo "FAIL: $w windows for $n tokens"; exit 1; }
[[ $(json "$tmp/out" 'd.protocol.scored_tokens') -eq $((n - w)) ]] || { echo "FAIL: scored tokens"; cat "$tmp/out"; exit 1; }
[[ $(json "$tmp/out" 'd.ppl > 1 && d.ppl < 4 && d.reference === null && d.gate === null && d.windows.length') -eq $w ]] \
  || { echo "FAIL: perplexity JSON"; cat "$tmp/out"; exit 1; }
echo "ok: perplexity (JSON)"

# Against the same weights in another format, with a passing gate: the table, KL 0, agreement 100%.
ev "$M/stories260K.gguf" --ref "$M/stories260K.bin" --text "$tmp/story.txt" --ctx 100 --stride 40 \
   --gate 'top1>=0.995, kl<=0.001,kl_max<=0,topk>=1,ppl_delta<=0,ppl_ratio<=1,ppl<5' --progress
expect_rc 0 "passing gate"
grep -q "top-1 agreement *100.000%" "$tmp/out" || { echo "FAIL: table"; cat "$tmp/out"; exit 1; }
[[ $(grep -c "^gate: PASS" "$tmp/out") -eq 7 ]] || { echo "FAIL: gate lines"; cat "$tmp/out"; exit 1; }
grep -q "^\[eval\] 100% .*tokens/s" "$tmp/err" || { echo "FAIL: --progress printed no lines"; cat "$tmp/err"; exit 1; }
echo "ok: against a reference, passing gate"
ev "$M/stories260K.gguf" --ref "$M/stories260K.bin" --text "$tmp/story.txt" --ctx 100 --json --gate 'kl<=0'
expect_rc 0 "JSON against a reference"
[[ $(json "$tmp/out" 'd.kl.mean === 0 && d.kl.max === 0 && d.top1 === 1 && d.topk === 1 && d.ppl === d.ref_ppl && d.gate.passed') == true ]] \
  || { echo "FAIL: JSON against a reference"; cat "$tmp/out"; exit 1; }
echo "ok: JSON against a reference"

# A failing check: exit 1, the failing check named.
ev "$M/stories260K.gguf" --ref "$M/stories260K.bin" --text "$tmp/story.txt" --ctx 100 --gate 'top1>=0.995,ppl_ratio>1'
expect_rc 1 "failing gate"
grep -q "^gate: FAIL ppl_ratio>1 (ppl_ratio = 1)" "$tmp/out" || { echo "FAIL: failing check not named"; cat "$tmp/out"; exit 1; }
grep -q "^gate: PASS top1>=0.995" "$tmp/out" || { echo "FAIL: passing check not listed"; cat "$tmp/out"; exit 1; }
ev "$M/stories260K.gguf" --text "$tmp/story.txt" --ctx 64 --gate 'ppl<1' --json
expect_rc 1 "failing perplexity gate"
[[ $(json "$tmp/out" 'd.gate.passed === false && d.gate.checks[0].passed === false') == true ]] || { echo "FAIL: JSON gate"; exit 1; }
grep -q "^gate: FAIL ppl<1" "$tmp/err" || { echo "FAIL: --json gate lines on stderr"; cat "$tmp/err"; exit 1; }
echo "ok: failing gate exits 1"

# --ref-kv-cache-dtype without --ref: the model itself is the reference, with another KV cache (CPU: fp16 vs fp32):
# close but not identical, and both labelled with their KV cache dtype.
ev "$M/stories260K.gguf" --text "$tmp/story.txt" --ctx 100 --ref-kv-cache-dtype fp32 --json --gate 'top1>=0.99'
expect_rc 0 "--ref-kv-cache-dtype"
[[ $(json "$tmp/out" "d.reference.endsWith('(--kv-cache-dtype fp32)') && d.model.endsWith('(--kv-cache-dtype auto)') \
      && d.kl.mean > 0 && d.kl.mean < 1e-3 && d.top1 >= 0.99 && d.gate.passed") == true ]] \
  || { echo "FAIL: --ref-kv-cache-dtype"; cat "$tmp/out"; exit 1; }
echo "ok: --ref-kv-cache-dtype compares the model with itself on another KV cache"

# Errors exit 2 with a message that says what is wrong.
error_case() {  # $1 = label, $2 = expected text in stderr, rest = args
  local label=$1 want=$2; shift 2
  ev "$@"
  expect_rc 2 "$label"
  grep -q -- "$want" "$tmp/err" || { echo "FAIL: $label: message lacks '$want'"; cat "$tmp/err"; exit 1; }
  echo "ok: $label"
}
error_case "malformed gate" "unknown comparison" "$M/stories260K.gguf" --text "$tmp/story.txt" --gate 'top1=>0.9'
error_case "empty gate item" "empty item" "$M/stories260K.gguf" --text "$tmp/story.txt" --gate 'ppl<9,'
error_case "unknown gate metric" "unknown metric" "$M/stories260K.gguf" --text "$tmp/story.txt" --gate 'accuracy>=0.9'
error_case "gate needs --ref" "give --ref" "$M/stories260K.gguf" --text "$tmp/story.txt" --gate 'kl<=0.01'
error_case "vocabularies differ" "scores 512 tokens per position but the reference 4096" \
  "$M/stories260K.gguf" --ref "$M/code-qwen2-25m" --text "$tmp/story.txt"
error_case "missing reference" "loading the reference '$tmp/nope'" "$M/stories260K.gguf" --ref "$tmp/nope" \
  --text "$tmp/story.txt"
error_case "missing text" "missing.txt" "$M/stories260K.gguf" --text "$tmp/missing.txt"
: > "$tmp/empty.txt"
error_case "empty text" "is empty" "$M/stories260K.gguf" --text "$tmp/empty.txt"
error_case "missing model" "nope.gguf" "$tmp/nope.gguf" --text "$tmp/story.txt"
error_case "fp8 KV cache on the CPU" "fp8 is a CUDA KV cache" "$M/stories260K.gguf" --text "$tmp/story.txt" \
  --kv-cache-dtype fp8 --ref-kv-cache-dtype auto
error_case "window beyond the context" "context length 1024" "$M/code-qwen2-25m" --text "$tmp/story.txt" --ctx 2048
error_case "speculative decoding in eval" "nothing is proposed" "$M/stories260K.gguf" --text "$tmp/story.txt" \
  --speculative-config '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'
error_case "stride beyond the window" "--stride" "$M/stories260K.gguf" --text "$tmp/story.txt" --ctx 64 --stride 65

# --device cuda goes to the CUDA runner through the same engine: on a GPU the figures equal the CPU's; without one
# (or in a build without CUDA) a clear refusal that points to --device cpu, exit 2.
ev "$M/stories260K.gguf" --text "$tmp/story.txt" --ctx 64 --json
cpu_ppl=$(json "$tmp/out" 'd.ppl')
ev_on cuda "$M/stories260K.gguf" --text "$tmp/story.txt" --ctx 64 --json
if [[ $rc -eq 0 ]]; then
  [[ $(json "$tmp/out" "d.device === 'cuda' && Math.abs(d.ppl / $cpu_ppl - 1) < 1e-3") == true ]] \
    || { echo "FAIL: --device cuda: ppl $(json "$tmp/out" 'd.ppl') vs cpu $cpu_ppl"; cat "$tmp/out"; exit 1; }
  echo "ok: --device cuda equals the CPU"
else
  expect_rc 2 "--device cuda without a GPU"
  grep -q -- "--device cpu" "$tmp/err" || { echo "FAIL: --device cuda refusal"; cat "$tmp/err"; exit 1; }
  echo "ok: --device cuda refused without a GPU: $(tail -1 "$tmp/err")"
fi
