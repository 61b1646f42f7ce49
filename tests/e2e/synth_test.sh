#!/usr/bin/env bash
# mopt synth end to end (about a second): a toy Llama-3-vocabulary config becomes a sharded Hugging Face checkpoint
# that inspect reads and run generates from on the CPU; a second write into it and bad input are refused.
# (The writer's weights, shards and tokenizer are unit-tested in tests/unit/model/random_checkpoint_test.cpp.)
set -euo pipefail
: "${MOPT_BIN:?set MOPT_BIN to the mopt binary}"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$tmp/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128256, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "bos_token_id": 128000, "eos_token_id": 128001,
 "tie_word_embeddings": false}
JSON
"$MOPT_BIN" synth --config "$tmp/config.json" -o "$tmp/ck" --max-shard-size 16MB >"$tmp/files.txt" 2>"$tmp/err.txt" ||
  { cat "$tmp/err.txt"; fail "synth failed"; }
cat "$tmp/files.txt" "$tmp/err.txt"
grep -q "model-00001-of-00002.safetensors" "$tmp/files.txt" || fail "the two 16 MB embeddings should need 2 shards"
grep -q "model.safetensors.index.json" "$tmp/files.txt" || fail "no index"
grep -q "bf16 weights" "$tmp/err.txt" || fail "no summary line"

"$MOPT_BIN" inspect "$tmp/ck" >"$tmp/inspect.txt" || fail "inspect failed"
grep -q "format:       huggingface" "$tmp/inspect.txt" || fail "not read as a Hugging Face folder"
grep -qE "^tokenizer: +bpe .*128256 tokens, bos 128000 \"<\|begin_of_text\|>\", eos 128001" "$tmp/inspect.txt" ||
  { cat "$tmp/inspect.txt"; fail "tokenizer summary"; }

"$MOPT_BIN" run -m "$tmp/ck" -p "the little dog" -n 8 --temp 0 --ignore-eos >"$tmp/run.txt" 2>"$tmp/run.err" ||
  { cat "$tmp/run.err"; fail "run failed"; }
[[ $(wc -c <"$tmp/run.txt") -gt 14 ]] || { cat "$tmp/run.txt"; fail "run printed no generated text"; }

set +e
"$MOPT_BIN" synth --config "$tmp/config.json" -o "$tmp/ck" >/dev/null 2>"$tmp/e1.txt"; rc1=$?
"$MOPT_BIN" synth --config "$tmp/missing.json" -o "$tmp/x" >/dev/null 2>"$tmp/e2.txt"; rc2=$?
set -e
[[ $rc1 == 1 ]] && grep -q "already holds a checkpoint" "$tmp/e1.txt" || { cat "$tmp/e1.txt"; fail "overwrite not refused"; }
[[ $rc2 == 1 ]] && grep -q "missing.json" "$tmp/e2.txt" || { cat "$tmp/e2.txt"; fail "missing config not named"; }
echo "PASS"
