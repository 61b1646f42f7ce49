#!/usr/bin/env bash
# Mixture-of-experts models end to end (a few seconds): mopt synth writes the Mixtral and Qwen2-MoE test configs
# (tests/data/moe), inspect counts total and active parameters and the bytes a token reads (worked out by hand below),
# plan shows the active count, run generates on the CPU; quantize (not written for MoE yet) and DeepSeek-V2 (MLA) are
# refused with their reasons.
# (Forward-pass correctness: tests/unit/backend/moe; loaders: tests/unit/model/moe_load_test.cpp.)
set -euo pipefail
: "${MOPT_BIN:?set MOPT_BIN to the mopt binary}" "${MOPT_SOURCE_DIR:?}"
D=$MOPT_SOURCE_DIR/tests/data/moe
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
jget() {  # $1 file, $2 JavaScript expression on `d`
  node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"
}

for name in mixtral qwen2_moe; do
  "$MOPT_BIN" synth --config "$D/$name.json" -o "$tmp/$name" --dtype f32 --seed 7 --no-words >/dev/null 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "synth $name"; }
done

# Mixtral test config: vocab 512, hidden 64, 2 layers, 4 heads / 2 KV heads of 16, 8 experts of 96, top-2.
#   embedding + output 2 x 512 x 64 = 65,536; final norm 64
#   per layer: norms 128, attention 64x64 + 2 x 64x32 + 64x64 = 12,288, router 64x8 = 512, experts 8 x 3 x 64x96 = 147,456
#   total 65,600 + 2 x 160,384 = 386,368; active (2 of 8 experts) 65,600 + 2 x (128 + 12,288 + 512 + 36,864) = 165,184
#   read per token (f32, the embedding lookup excluded) 4 x (165,184 - 32,768) = 529,664 bytes
"$MOPT_BIN" inspect "$tmp/mixtral" --json >"$tmp/mixtral.json" || fail "inspect mixtral"
[[ $(jget "$tmp/mixtral.json" 'd.architecture') == mixtral ]] || fail "architecture"
[[ $(jget "$tmp/mixtral.json" 'd.n_params') == 386368 ]] || fail "n_params $(jget "$tmp/mixtral.json" 'd.n_params')"
[[ $(jget "$tmp/mixtral.json" 'd.n_active_params') == 165184 ]] ||
  fail "n_active_params $(jget "$tmp/mixtral.json" 'd.n_active_params')"
[[ $(jget "$tmp/mixtral.json" 'd.bytes_read_per_token') == 529664 ]] ||
  fail "bytes_read_per_token $(jget "$tmp/mixtral.json" 'd.bytes_read_per_token')"
[[ $(jget "$tmp/mixtral.json" 'd.hyperparameters.n_expert_used') == 2 ]] || fail "n_expert_used"
"$MOPT_BIN" inspect "$tmp/qwen2_moe" >"$tmp/q2.txt" || fail "inspect qwen2_moe"
grep -q "^active: .*per token" "$tmp/q2.txt" || { cat "$tmp/q2.txt"; fail "inspect prints no active count"; }
grep -q "^blk.1.ffn_down_shexp.weight .*\[128,64\]" "$tmp/q2.txt" || fail "no shared expert tensor"
grep -q "^blk.1.ffn_down_exps.weight .*\[32,64,8\]" "$tmp/q2.txt" || fail "no stacked experts"

"$MOPT_BIN" plan -m "$tmp/mixtral" --device cpu --no-measure --max-num-seqs 4 >"$tmp/plan.txt" || fail "plan"
grep -q "0.39M parameters (0.17M active per token: 2 of 8 experts)" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "plan"; }

for name in mixtral qwen2_moe; do
  "$MOPT_BIN" run -m "$tmp/$name" --device cpu -p "hello" -n 8 --temp 0 --ignore-eos >"$tmp/run.txt" 2>"$tmp/run.err" ||
    { cat "$tmp/run.err"; fail "run $name"; }
done

set +e; "$MOPT_BIN" quantize "$tmp/mixtral" -o "$tmp/q.gguf" --to q8_0 >/dev/null 2>"$tmp/q.err"; rc=$?; set -e
[[ $rc != 0 ]] && grep -q "mixture-of-experts model" "$tmp/q.err" || { cat "$tmp/q.err"; fail "quantize not refused"; }

cat >"$tmp/deepseek.json" <<'JSON'
{"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 16}
JSON
set +e; "$MOPT_BIN" synth --config "$tmp/deepseek.json" -o "$tmp/ds" >/dev/null 2>"$tmp/ds.err"; rc=$?; set -e
[[ $rc == 1 ]] && grep -q "multi-head latent attention (MLA)" "$tmp/ds.err" || { cat "$tmp/ds.err"; fail "DeepSeek-V2"; }
echo "PASS"
