#!/usr/bin/env bash
# mopt quantize end to end: code-qwen2-25m to a GGUF mix and to the int8 safetensors layout, each reloaded by
# `mopt run` (greedy text), the --json report (tensor types of the q4_k_m mix), and the exit codes and messages of
# bad input (unknown format, unsupported architecture, an existing output without --force, --method gptq for a
# format it does not implement, a write refused by the kernel), none leaving a file.
set -euo pipefail
: "${MOPT_BIN:?set MOPT_BIN to the mopt binary}"
: "${MOPT_MODELS_DIR:?set MOPT_MODELS_DIR to the shared models folder}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
model="$MOPT_MODELS_DIR/code-qwen2-25m"

echo "== q4_k_m GGUF with a JSON report"
"$MOPT_BIN" quantize "$model" -o "$tmp/m.gguf" --to q4_k_m --json --threads 2 >"$tmp/r.json"
node -e '
const r = JSON.parse(require("fs").readFileSync(process.argv[1]));
const ok = (c, m) => { if (!c) { console.error("FAIL: " + m); process.exit(1); } };
const type = n => r.tensors.find(t => t.name === n).type;
ok(r.format === "q4_k_m" && r.params > 24e6, "format and parameter count");
ok(type("token_embd.weight") === "q6_k", "tied token_embd takes the output rule: q6_k");
ok(type("blk.0.attn_v.weight") === "q6_k" && type("blk.1.attn_v.weight") === "q4_k", "attn_v by use_more_bits");
ok(type("blk.0.ffn_down.weight") === "q8_0" && type("blk.1.ffn_down.weight") === "q5_0", "ffn_down fallbacks");
ok(type("blk.0.attn_norm.weight") === "f32", "norms stay f32");
' "$tmp/r.json"
"$MOPT_BIN" run -m "$tmp/m.gguf" -p "import os" -n 8 --temp 0 >"$tmp/run.txt" 2>/dev/null
grep -q "import os" "$tmp/run.txt" || fail "the GGUF output does not run: $(cat "$tmp/run.txt")"

echo "== int8 folder"
"$MOPT_BIN" quantize "$model" -o "$tmp/int8" --to int8 --threads 2 | grep -q "wrote $tmp/int8 (int8)" ||
  fail "no summary line"
for f in config.json model.safetensors tokenizer.json chat_template.jinja; do
  [[ -f "$tmp/int8/$f" ]] || fail "int8 output lacks $f"
done
grep -q '"format": "pack-quantized"' "$tmp/int8/config.json" || fail "no compressed-tensors quantization_config"
"$MOPT_BIN" run -m "$tmp/int8" -p "import os" -n 8 --temp 0 >/dev/null 2>&1 || fail "the int8 output does not run"

echo "== bad input"
set +e
"$MOPT_BIN" quantize "$model" -o "$tmp/x.gguf" --to q3_k 2>"$tmp/err.txt"; rc=$?
set -e
[[ $rc -eq 2 ]] || fail "unknown format: exit $rc"
grep -q "choose one of: q8_0, q4_0, q4_k_m" "$tmp/err.txt" || fail "unknown format message: $(cat "$tmp/err.txt")"
mkdir "$tmp/gpt2"
echo '{"architectures": ["GPT2LMHeadModel"], "vocab_size": 100}' >"$tmp/gpt2/config.json"
set +e
"$MOPT_BIN" quantize "$tmp/gpt2" -o "$tmp/x.gguf" --to q8_0 2>"$tmp/err.txt"; rc=$?
set -e
[[ $rc -eq 1 ]] || fail "unsupported architecture: exit $rc"
grep -q 'architecture "GPT2LMHeadModel" is not supported' "$tmp/err.txt" || fail "arch message: $(cat "$tmp/err.txt")"
set +e
"$MOPT_BIN" quantize "$model" -o "$tmp/m.gguf" --to q8_0 2>"$tmp/err.txt"; rc=$?
set -e
[[ $rc -eq 1 ]] || fail "existing output: exit $rc"
grep -q "exists; pass --force" "$tmp/err.txt" || fail "existing output message: $(cat "$tmp/err.txt")"
set +e
"$MOPT_BIN" quantize "$model" -o "$tmp/g.gguf" --to q4_k_m --method gptq 2>"$tmp/err.txt"; rc=$?
set -e
[[ $rc -eq 1 ]] || fail "gptq for q4_k_m: exit $rc"
grep -q "method gptq is implemented for --to int8, q8_0, q4_0 and awq only, not --to q4_k_m" "$tmp/err.txt" ||
  fail "gptq refusal message: $(cat "$tmp/err.txt")"
[[ ! -e "$tmp/g.gguf" ]] || fail "a refused gptq run left g.gguf"
# --damp 0 is refused, not read as "not given" (the default dampening).
set +e
"$MOPT_BIN" quantize "$model" -o "$tmp/g.gguf" --to q8_0 --method gptq --damp 0 2>"$tmp/err.txt"; rc=$?
set -e
[[ $rc -ne 0 ]] || fail "--damp 0 accepted"
grep -q "damp: Value 0 not in range" "$tmp/err.txt" || fail "--damp 0 message: $(cat "$tmp/err.txt")"
[[ ! -e "$tmp/g.gguf" ]] || fail "a refused --damp 0 run left g.gguf"
# A write the kernel refuses mid-file (a file-size limit of 2 MB, SIGXFSZ ignored: write() fails with EFBIG as a
# full disk fails with ENOSPC): an error naming the file, and neither the output nor its temporary file remains.
set +e
(ulimit -f 2048; trap '' XFSZ; "$MOPT_BIN" quantize "$model" -o "$tmp/x.gguf" --to q8_0 --threads 2 2>"$tmp/err.txt")
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "failed write: exit $rc"
grep -q "writing $tmp/.*File too large (nothing was left behind)" "$tmp/err.txt" ||
  fail "failed write message: $(cat "$tmp/err.txt")"
[[ ! -e "$tmp/x.gguf" ]] || fail "a failed run left x.gguf"
[[ -z "$(ls -A "$tmp" | grep mopt-tmp || true)" ]] || fail "temporary files left behind"
echo "quantize e2e: ok"
