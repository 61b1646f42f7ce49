#!/usr/bin/env bash
# mopt run: greedy generation from BOS reproduces the published stories260K text (GGUF and llama2.c formats, and
# with a draft model proposing), batch mode completes every prompt, and bad input fails with a clear message and
# a non-zero exit.
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
M=$MOPT_MODELS_DIR
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The reference: the fenced block after "Reference output, greedy" in the models README.
# ($(...) drops the final newline: the model's text goes on after the published excerpt ends.)
printf '%s' "$(awk '/Reference output, greedy/{f=1} f&&/^```$/{n++; if(n==2) exit; next} f&&n==1' "$M/README.md")" > "$tmp/want.txt"
[[ $(wc -c < "$tmp/want.txt") -gt 400 ]] || { echo "FAIL: could not extract the reference text"; exit 1; }
check() {  # $1 = label, rest = mopt run args
  local label=$1; shift
  "$MOPT_BIN" run "$@" -n 400 --temp 0 > "$tmp/out.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt"; echo "FAIL: $label exited non-zero"; exit 1; }
  if ! cmp -s <(head -c "$(wc -c < "$tmp/want.txt")" "$tmp/out.txt") "$tmp/want.txt"; then
    echo "FAIL: $label output differs from the published text"; diff <(head -c 2000 "$tmp/out.txt") "$tmp/want.txt" | head -20; exit 1
  fi
  grep -q "generation:.*steady state" "$tmp/err.txt" || { echo "FAIL: $label printed no speed line"; exit 1; }
  # Load and warm-up are reported apart from generation; the CPU runner has nothing to warm.
  grep -q "^load: " "$tmp/err.txt" && grep -q "^warm-up: " "$tmp/err.txt" ||
    { echo "FAIL: $label printed no load / warm-up lines"; cat "$tmp/err.txt"; exit 1; }
  if grep -q -- "--device auto: using cpu" "$tmp/err.txt" && ! grep -q "nothing to warm on this backend" "$tmp/err.txt"; then
    echo "FAIL: $label: the CPU warm-up should do nothing"; exit 1
  fi
  echo "ok: $label"
}
check "gguf" -m "$M/stories260K.gguf"
check "llama2.c" -m "$M/stories260K.bin" --tokenizer "$M/tok512.bin"
check "llama2.c (tokenizer found beside the model)" -m "$M/stories260K.bin"
# Speculative decoding with a draft model (the llama2.c copy of the model drafting for the GGUF one): the same
# published text, the proposals reported.
check "gguf, draft model" -m "$M/stories260K.gguf" \
  --speculative-config "{\"model\":\"$M/stories260K.bin\",\"num_speculative_tokens\":4}"
grep -q "^speculative: [0-9]* of [0-9]* proposed tokens accepted" "$tmp/err.txt" ||
  { echo "FAIL: the draft model's run printed no speculative line"; cat "$tmp/err.txt"; exit 1; }

# Batch mode: every prompt completes, aggregate throughput printed.
printf 'Once upon a time\nThe cat\nLily went to the park\n' > "$tmp/prompts.txt"
"$MOPT_BIN" run -m "$M/stories260K.gguf" --prompts "$tmp/prompts.txt" -n 32 --temp 0 > "$tmp/out.txt" 2> "$tmp/err.txt"
[[ $(grep -c '^\[[0-9]\]' "$tmp/out.txt") -eq 3 ]] || { echo "FAIL: batch mode did not print 3 completions"; cat "$tmp/out.txt"; exit 1; }
grep -q "generated tokens/s" "$tmp/err.txt" || { echo "FAIL: batch mode printed no throughput"; exit 1; }
echo "ok: batch mode"
# The default device is auto: the choice and the KV capacity are logged; on this machine (no GPU) it is the CPU,
# and --device cpu gives the same completions.
grep -q -- "--device auto: using" "$tmp/err.txt" || { echo "FAIL: --device auto did not log its choice"; cat "$tmp/err.txt"; exit 1; }
grep -q "KV cache on " "$tmp/err.txt" || { echo "FAIL: no KV cache capacity line"; cat "$tmp/err.txt"; exit 1; }
if grep -q -- "--device auto: using cpu" "$tmp/err.txt"; then
  "$MOPT_BIN" run -m "$M/stories260K.gguf" --prompts "$tmp/prompts.txt" -n 32 --temp 0 --device cpu > "$tmp/out_cpu.txt" 2>/dev/null
  cmp -s "$tmp/out.txt" "$tmp/out_cpu.txt" || { echo "FAIL: --device auto (cpu) and --device cpu differ"; exit 1; }
fi
echo "ok: --device auto"

# Bad input: clear message, non-zero exit, no crash.
if "$MOPT_BIN" run -m "$tmp/missing.gguf" -n 4 > /dev/null 2> "$tmp/err.txt"; then echo "FAIL: missing model accepted"; exit 1; fi
grep -q "missing.gguf" "$tmp/err.txt" || { echo "FAIL: error does not name the file"; cat "$tmp/err.txt"; exit 1; }
head -c 100 "$M/stories260K.gguf" > "$tmp/trunc.gguf"
set +e; "$MOPT_BIN" run -m "$tmp/trunc.gguf" -n 4 > /dev/null 2> "$tmp/err.txt"; rc=$?; set -e
[[ $rc -eq 1 ]] || { echo "FAIL: truncated model gave exit code $rc"; cat "$tmp/err.txt"; exit 1; }
set +e
"$MOPT_BIN" run -m "$M/stories260K.gguf" -n 4 --speculative-config \
  "{\"model\":\"$M/code-qwen2-25m\",\"num_speculative_tokens\":4}" > /dev/null 2> "$tmp/err.txt"; rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "must share the target's tokenizer" "$tmp/err.txt" ||
  { echo "FAIL: a draft model with another tokenizer: exit code $rc"; cat "$tmp/err.txt"; exit 1; }
echo "ok: bad input"
