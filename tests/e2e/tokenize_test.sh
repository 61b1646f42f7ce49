#!/usr/bin/env bash
# mopt tokenize end to end: ids for GGUF vocab-only files, a Hugging Face folder, llama2.c tokenizers;
# --file, --parse-special, --add-special; clear errors for bad input. Expected ids come from the
# llama.cpp vocab vectors (Hugging Face outputs) and from stories260K.gguf's own vocab.
set -u
BIN=${MOPT_BIN:?set MOPT_BIN to the mopt binary}
M=${MOPT_MODELS_DIR:?set MOPT_MODELS_DIR}
V=$M/llama.cpp-vocab
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect() {  # expect NAME EXPECTED CMD...
  local name=$1 want=$2
  shift 2
  local got
  got=$("$@" 2>"$tmp/err")
  local rc=$?
  if [[ $rc -ne 0 || "$got" != "$want" ]]; then
    echo "FAIL $name: want '$want', got '$got' (rc $rc): $(cat "$tmp/err")"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
expect_error() {  # expect_error NAME NEEDLE CMD...
  local name=$1 needle=$2
  shift 2
  if "$@" >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL $name: succeeded, expected an error"
    fails=$((fails + 1))
  elif ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL $name: error does not mention '$needle': $(cat "$tmp/err")"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

expect gpt2 "15496 995" "$BIN" tokenize -m "$V/ggml-vocab-gpt-2.gguf" "Hello world"
expect gpt2-spaces "220 220 220 18435" "$BIN" tokenize -m "$V/ggml-vocab-gpt-2.gguf" "    Hello"
expect llama-spm "15043 3186" "$BIN" tokenize -m "$V/ggml-vocab-llama-spm.gguf" "Hello world"
expect llama-spm-bos "1 15043 3186" "$BIN" tokenize --add-special -m "$V/ggml-vocab-llama-spm.gguf" "Hello world"
expect bert "7592 1010 2088 999" "$BIN" tokenize -m "$V/ggml-vocab-bert-bge.gguf" "Hello, world!"
expect starcoder "8302 5810" "$BIN" tokenize -m "$V/ggml-vocab-starcoder.gguf" "Hello world"
printf 'Hello world' >"$tmp/text.txt"
expect file "15043 3186" "$BIN" tokenize -m "$V/ggml-vocab-llama-spm.gguf" --file "$tmp/text.txt"
printf '\n =' >"$tmp/nl.txt"
expect file-newline "198 796" "$BIN" tokenize -m "$V/ggml-vocab-gpt-2.gguf" -f "$tmp/nl.txt"
expect empty "" "$BIN" tokenize -m "$V/ggml-vocab-gpt-2.gguf" ""

# Hugging Face folder: control tokens only with --parse-special.
Q=$M/code-qwen2-25m
# (ids of " Hello, world!" from code-qwen2-25m.tokenizer.out)
expect qwen-special "1 922 443 311 14 327 3798 3 2" "$BIN" tokenize -m "$Q" --parse-special "<|im_start|> Hello, world!<|im_end|>"
plain=$("$BIN" tokenize -m "$Q" "<|im_start|>")
if [[ " $plain " == *" 1 "* || -z "$plain" ]]; then
  echo "FAIL qwen-plain: '<|im_start|>' without --parse-special gave '$plain'"
  fails=$((fails + 1))
else
  echo "ok   qwen-plain"
fi

expect qwen "42 443 311 327 3798" "$BIN" tokenize -m "$Q" "Hello world"

# llama2.c tokenizer, the checkpoint (tokenizer found beside it) and the GGUF agree.
text="Once upon a time, there was a little girl named Lily."
a=$("$BIN" tokenize --tokenizer "$M/tok512.bin" "$text")
b=$("$BIN" tokenize -m "$M/stories260K.gguf" "$text")
c=$("$BIN" tokenize -m "$M/stories260K.bin" "$text")
if [[ -z "$a" || "$a" != "$b" || "$a" != "$c" ]]; then
  echo "FAIL stories: tok512 '$a' gguf '$b' checkpoint '$c'"
  fails=$((fails + 1))
else
  echo "ok   stories ($a)"
fi
expect show-pieces "$(printf '1\t<s>\n403\t Once')" "$BIN" tokenize --show-pieces --add-special -m "$M/stories260K.gguf" "Once"

# Errors: clear messages, non-zero exit.
expect_error missing-model "cannot open" "$BIN" tokenize -m "$tmp/nope.gguf" "hi"
printf '\x07\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\x7f' >"$tmp/bad.bin"
expect_error bad-tok512 "length 2147483647" "$BIN" tokenize --tokenizer "$tmp/bad.bin" "hi"
mkdir -p "$tmp/hf" && echo '{not json' >"$tmp/hf/tokenizer.json"
expect_error bad-json "not valid JSON" "$BIN" tokenize -m "$tmp/hf" "hi"
expect_error both-inputs "not both" "$BIN" tokenize -m "$V/ggml-vocab-gpt-2.gguf" -f "$tmp/text.txt" "hi"
expect_error no-model "give a model" "$BIN" tokenize "hi"

if [[ $fails -ne 0 ]]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all tokenize checks passed"
