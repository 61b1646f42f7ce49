#!/usr/bin/env bash
# mopt inspect: reports the README facts of the shared models in text and JSON, and rejects bad files with a
# clear message on stderr and exit code 1.
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
M=$MOPT_MODELS_DIR
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# JSON field access through node (installed by scripts/install_deps.sh).
jget() {  # $1 file, $2 JavaScript expression on `d`
  node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"
}

# stories260K.gguf: text report.
"$MOPT_BIN" inspect "$M/stories260K.gguf" > "$tmp/out.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "inspect gguf exited non-zero"; }
for want in "format:       gguf" "architecture: llama" "n_embd                   64" "n_layer                  5" \
            "n_head_kv                4" "n_ff                     172" "blk.4.ffn_down.weight" "tensors:      48" \
            "chat template: no"; do
  grep -qF "$want" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "gguf report lacks '$want'"; }
done
grep -qE "^tokenizer: +spm .* 512 tokens, bos 1 \"<s>\", eos 2 \"</s>\"" "$tmp/out.txt" || { cat "$tmp/out.txt"; fail "tokenizer summary"; }
echo "ok: gguf text"

# JSON: values against the README (48 F32 tensors; KV bytes/token = 2 * 5 layers * 32 kv_dim * elem).
"$MOPT_BIN" inspect "$M/stories260K.gguf" --json > "$tmp/g.json"
[[ $(jget "$tmp/g.json" "d['n_tensors']") == 48 ]] || fail "n_tensors"
[[ $(jget "$tmp/g.json" "d.tensors.every(t => t.dtype == 'f32')") == true ]] || fail "dtypes"
[[ $(jget "$tmp/g.json" "d['hyperparameters']['context_length']") == 2048 ]] || fail "context_length"
[[ $(jget "$tmp/g.json" "d['kv_bytes_per_token']['f16/bf16']") == 640 ]] || fail "kv bytes"
[[ $(jget "$tmp/g.json" "d.weight_bytes.stored == d.weight_bytes.f32 && d.weight_bytes.f32 == 4 * d.n_params") == true ]] || fail "f32 bytes"
echo "ok: gguf json"

# The CPU kernel path: the best this CPU runs (cpuid), or the one MOPT_CPU_ISA forces; a bad name is refused.
[[ $(jget "$tmp/g.json" "['avx2', 'avxvnni', 'avx512'].includes(d.cpu_path.isa) && d.cpu_path.chosen_by == 'cpuid'") == true ]] \
  || fail "cpu_path $(jget "$tmp/g.json" "JSON.stringify(d.cpu_path)")"
MOPT_CPU_ISA=avx2 "$MOPT_BIN" inspect "$M/stories260K.gguf" --json > "$tmp/g2.json"
[[ $(jget "$tmp/g2.json" "d.cpu_path.isa + ' ' + d.cpu_path.chosen_by") == "avx2 MOPT_CPU_ISA=avx2" ]] || fail "MOPT_CPU_ISA=avx2"
set +e; MOPT_CPU_ISA=avx3 "$MOPT_BIN" inspect "$M/stories260K.gguf" > /dev/null 2> "$tmp/err.txt"; rc=$?; set -e
[[ $rc -ne 0 ]] && grep -qF "MOPT_CPU_ISA=avx3 is not a CPU path" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "bad MOPT_CPU_ISA"; }
echo "ok: cpu path"

# llama2.c: same parameters minus the stored output copy; tokenizer found beside the model or by flag.
"$MOPT_BIN" inspect "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --json > "$tmp/b.json"
[[ $(jget "$tmp/b.json" "d['format']") == llama2.c ]] || fail "llama2.c format"
[[ $(jget "$tmp/b.json" "d['n_params'] + 512*64") == $(jget "$tmp/g.json" "d['n_params']") ]] || fail "llama2.c n_params"
[[ $(jget "$tmp/b.json" "d['tokenizer']['n_tokens']") == 512 ]] || fail "llama2.c tokenizer"
echo "ok: llama2.c"

# Hugging Face folder: n_params from the reference json, bf16 weights, ChatML template.
"$MOPT_BIN" inspect "$M/code-qwen2-25m" --json > "$tmp/q.json"
want=$(jget "$M/code-qwen2-25m.reference.json" "d.params")
[[ $(jget "$tmp/q.json" "d['n_params']") == "$want" ]] || fail "code-qwen2 n_params != $want"
[[ $(jget "$tmp/q.json" "d['architecture']") == qwen2 ]] || fail "architecture"
[[ $(jget "$tmp/q.json" "d.chat_template.present") == true ]] || fail "chat template"
[[ $(jget "$tmp/q.json" "d.weight_bytes.stored == 2 * d.n_params") == true ]] || fail "bf16 bytes"
[[ $(jget "$tmp/q.json" "d['tokenizer']['kind']") == bpe ]] || fail "tokenizer kind"
echo "ok: huggingface"

# Bad input: clear message on stderr, exit code 1, nothing on stdout.
check_bad() {  # $1 label, $2 expected stderr text, rest: args
  local label=$1 want=$2; shift 2
  set +e; "$MOPT_BIN" inspect "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; local rc=$?; set -e
  [[ $rc -eq 1 ]] || { cat "$tmp/err.txt"; fail "$label: exit code $rc"; }
  grep -qF "$want" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "$label: stderr lacks '$want'"; }
  [[ ! -s "$tmp/out.txt" ]] || fail "$label: printed a report"
  echo "ok: $label"
}
head -c 5000 "$M/stories260K.gguf" > "$tmp/trunc.gguf"
check_bad "truncated gguf" "truncated" "$tmp/trunc.gguf"
printf 'GGUF\x07\x00\x00\x00' > "$tmp/v7.gguf"
check_bad "bad version" "unsupported GGUF version 7" "$tmp/v7.gguf"
check_bad "missing file" "missing.gguf" "$tmp/missing.gguf"
mkdir "$tmp/hf"; echo '{"architectures": ["Foo"]}' > "$tmp/hf/config.json"
check_bad "unsupported architecture" "\"Foo\" is not supported" "$tmp/hf"
