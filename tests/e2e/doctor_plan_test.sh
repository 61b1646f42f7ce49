#!/usr/bin/env bash
# mopt doctor and mopt plan as a user runs them: doctor's exit code is its worst verdict, a model that cannot be read
# fails with its reason, plan's table and JSON agree with each other, bad input is refused with a clear message;
# and mopt run sizes its KV cache to its one sequence (not to the RAM).
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
M=$MOPT_MODELS_DIR
tmp=$(mktemp -d); trap 'chmod -R u+rwX "$tmp"; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
jget() {  # $1 file, $2 JavaScript expression on `d`
  node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"
}
worst() {  # the exit code doctor's verdicts call for
  jget "$1" 'd.checks.some(c => c.verdict == "fail") ? 2 : d.checks.some(c => c.verdict == "warn") ? 1 : 0'
}

# doctor: text and JSON on this machine, with a model.
set +e; "$MOPT_BIN" doctor -m "$M/stories260K.gguf" > "$tmp/doc.txt" 2>&1; rc_text=$?
"$MOPT_BIN" doctor -m "$M/stories260K.gguf" --json > "$tmp/doc.json"; rc=$?; set -e
[[ $rc -eq $(worst "$tmp/doc.json") ]] || fail "doctor exit code $rc is not its worst verdict"
[[ $rc_text -eq $rc ]] || fail "text and --json runs exit differently ($rc_text vs $rc)"
for g in "Driver and CUDA" "GPU health" "Topology" "Containers and devices" "CPU" "Model"; do
  grep -qx "$g" "$tmp/doc.txt" || { cat "$tmp/doc.txt"; fail "doctor printed no '$g' group"; }
done
[[ $(jget "$tmp/doc.json" 'd.checks.find(c => c.id == "model.parse").verdict') == ok ]] || fail "model.parse not ok"
[[ $(jget "$tmp/doc.json" 'd.checks.find(c => c.id == "model.files").verdict') == ok ]] || fail "model.files not ok"
[[ $(jget "$tmp/doc.json" 'd.facts.model.tensor_bytes') -gt 1000000 ]] || fail "no tensor bytes for stories260K"
echo "ok: doctor"

# A model that is not there, and one this user may not read: failures that say why.
set +e; "$MOPT_BIN" doctor -m "$tmp/missing.gguf" --json > "$tmp/miss.json"; rc=$?; set -e
[[ $rc -eq 2 ]] || fail "a missing model gave exit code $rc"
jget "$tmp/miss.json" 'd.checks.find(c => c.id == "model.files").evidence' | grep -q "No such file" || fail "no reason given"
if [[ $(id -u) -ne 0 ]]; then  # root reads everything
  cp "$M/stories260K.gguf" "$tmp/locked.gguf"; chmod 000 "$tmp/locked.gguf"
  set +e; "$MOPT_BIN" doctor -m "$tmp/locked.gguf" --json > "$tmp/locked.json"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "an unreadable model gave exit code $rc"
  jget "$tmp/locked.json" 'd.checks.find(c => c.id == "model.files").fix' | grep -q "chmod\|SELinux" || fail "no access hint"
fi
echo "ok: doctor model failures"

# plan on the CPU: the table and the JSON give the same KV figures; the flags run.
"$MOPT_BIN" plan -m "$M/stories260K.gguf" --device cpu --no-measure --max-num-seqs 4 > "$tmp/plan.txt"
"$MOPT_BIN" plan -m "$M/stories260K.gguf" --device cpu --no-measure --max-num-seqs 4 --json > "$tmp/plan.json"
[[ $(jget "$tmp/plan.json" 'd.kv_cache.num_blocks') -eq 128 ]] || fail "plan: 4 x 2048 tokens should be 128 blocks of 64"
[[ $(jget "$tmp/plan.json" 'd.kv_cache.bytes_per_token') -eq 640 ]] || fail "plan: stories260K fp16 KV is 640 B/token"
grep -q "blocks  *128 " "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "the table disagrees with the JSON"; }
flags=$(jget "$tmp/plan.json" 'd.flags')
[[ $flags == "mopt serve -m $M/stories260K.gguf --device cpu "* ]] || fail "unexpected flags: $flags"
run_flags=${flags#mopt serve -m $M/stories260K.gguf }
# shellcheck disable=SC2086  # the plan's flags, word-split as a shell would
"$MOPT_BIN" run -m "$M/stories260K.gguf" -n 8 --temp 0 $run_flags > /dev/null 2> "$tmp/run.txt" ||
  { cat "$tmp/run.txt"; fail "mopt run rejected the plan's flags"; }
grep -q "KV cache on cpu (sized by need: 4 seqs x 2048 tokens): 128 blocks" "$tmp/run.txt" ||
  { cat "$tmp/run.txt"; fail "the engine allocated something else than the plan"; }
echo "ok: plan (cpu)"

# plan for a GPU from the table, from a config.json alone.
"$MOPT_BIN" plan -m "$MOPT_SOURCE_DIR/tests/gpu/llama-3.1-8b/config.json" --gpu H100 --max-model-len 8192 --json > "$tmp/h100.json"
[[ $(jget "$tmp/h100.json" 'd.kv_cache.bytes_per_token') -eq 131072 ]] || fail "Llama-3.1-8B bf16 KV is 128 KiB/token"
[[ $(jget "$tmp/h100.json" 'd.hardware.name') == H100-SXM ]] || fail "--gpu H100 is not the H100-SXM row"
if "$MOPT_BIN" plan -m "$M/stories260K.gguf" --gpu Voodoo2 > /dev/null 2> "$tmp/err.txt"; then fail "unknown GPU accepted"; fi
grep -q "H200" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "the error does not list the table"; }
if "$MOPT_BIN" plan -m "$M/stories260K.gguf" --device cpu --no-measure --kv-cache-dtype fp8 > /dev/null 2> "$tmp/err.txt"; then
  fail "fp8 CPU KV cache accepted"
fi
grep -q "fp16 (auto) or fp32" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "no clear message for an fp8 CPU cache"; }
echo "ok: plan (gpu table, bad input)"

# mopt run: one prompt, -n 256 -> one sequence of 257 positions, 5 blocks of 64 (not a fraction of the RAM).
"$MOPT_BIN" run -m "$M/stories260K.gguf" -n 256 --temp 0 --device cpu > /dev/null 2> "$tmp/run.txt"
grep -q "KV cache on cpu (sized by need: 1 seq x 257 tokens): 5 blocks x 64 tokens" "$tmp/run.txt" ||
  { cat "$tmp/run.txt"; fail "mopt run did not size its KV cache to its sequence"; }
echo "ok: run KV sizing"
