#!/usr/bin/env bash
# Mixture-of-experts models end to end (a few seconds): mopt synth writes the Mixtral and Qwen2-MoE test configs
# (tests/data/moe), inspect counts total and active parameters and the bytes a token reads (worked out by hand below),
# plan shows the active count, run generates on the CPU (DeepSeek-V2 too); quantize (not written for MoE yet) and
# DeepSeek-V3 are refused with their reasons.
# (Forward-pass correctness: tests/unit/backend/moe; loaders: tests/unit/model/moe_load_test.cpp.)
set -euo pipefail
: "${MOPT_BIN:?set MOPT_BIN to the mopt binary}" "${MOPT_SOURCE_DIR:?}"
D=$MOPT_SOURCE_DIR/tests/data/moe
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
jget() {  # $1 file, $2 JavaScript expression on `d`
  node -e 'const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); console.log(eval(process.argv[2]))' "$1" "$2"
}

for name in mixtral qwen2_moe deepseek_v2_lite; do
  "$MOPT_BIN" synth --config "$D/$name.json" -o "$tmp/$name" --dtype f32 --seed 7 --no-words >/dev/null 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "synth $name"; }
done

# Mixtral test config: vocab 512, hidden 64, 2 layers, 4 heads / 2 KV heads of 16, 8 experts of 96, top-2.
#   embedding + output 2 x 512 x 64 = 65,536; final norm 64
#   per layer: norms 128, attention 64x64 + 2 x 64x32 + 64x64 = 12,288, router 64x8 = 512, experts 8 x 3 x 64x96 = 147,456
#   total 65,600 + 2 x 160,384 = 386,368; active (2 of 8 experts) 65,600 + 2 x (128 + 12,288 + 512 + 36,864) = 165,184
#   read per token (f32, the embedding lookup excluded) 4 x (165,184 - 32,768) = 529,664 bytes
# `mopt inspect --json` of model $1: architecture $2, $3 parameters, $4 active, $5 bytes read per token.
expect_counts() {
  local j=$tmp/$1.json key want
  "$MOPT_BIN" inspect "$tmp/$1" --json >"$j" || fail "inspect $1"
  for key in architecture:$2 n_params:$3 n_active_params:$4 bytes_read_per_token:$5; do
    want=${key#*:}
    [[ $(jget "$j" "d.${key%%:*}") == "$want" ]] || fail "$1 ${key%%:*} $(jget "$j" "d.${key%%:*}") (expected $want)"
  done
}
expect_counts mixtral mixtral 386368 165184 529664
[[ $(jget "$tmp/mixtral.json" 'd.hyperparameters.n_expert_used') == 2 ]] || fail "n_expert_used"
"$MOPT_BIN" inspect "$tmp/qwen2_moe" >"$tmp/q2.txt" || fail "inspect qwen2_moe"
grep -q "^active: .*per token" "$tmp/q2.txt" || { cat "$tmp/q2.txt"; fail "inspect prints no active count"; }
grep -q "^blk.1.ffn_down_shexp.weight .*\[128,64\]" "$tmp/q2.txt" || fail "no shared expert tensor"
grep -q "^blk.1.ffn_down_exps.weight .*\[32,64,8\]" "$tmp/q2.txt" || fail "no stacked experts"

# DeepSeek-V2-Lite test config: vocab 512, hidden 128, 3 layers (the first dense, n_ff 256), 4 heads, MLA with
# q_proj, kv_lora_rank 64, qk_nope 32 + qk_rope 16, v_head_dim 32; 16 experts of 32, top-6, 2 shared experts (64).
#   attention per layer: q 128x192 = 24,576, kv_a 128x80 = 10,240, kv_a_norm 64, kv_b 64x256 = 16,384,
#     o 128x128 = 16,384, + 2 norms 256 = 67,904
#   layer 0: + dense MLP 3 x 128x256 = 98,304 -> 166,208
#   layers 1, 2: + router 2,048, experts 16 x 3 x 128x32 = 196,608, shared 3 x 128x64 = 24,576 -> 291,136;
#     active (6 of 16 experts: 73,728) 168,256
#   total 131,200 (embedding, output, final norm) + 166,208 + 2 x 291,136 = 879,680; active 633,920
#   read per token (f32, the embedding lookup excluded) 4 x (633,920 - 65,536) = 2,273,536 bytes
#   KV cache per token (K and zero-padded V per head, fp16): 2 x 3 layers x 4 heads x 48 x 2 bytes = 2,304
expect_counts deepseek_v2_lite deepseek2 879680 633920 2273536
[[ $(jget "$tmp/deepseek_v2_lite.json" 'd.hyperparameters.kv_bytes_per_token_f16') == 2304 ]] ||
  fail "deepseek KV bytes per token"

"$MOPT_BIN" plan -m "$tmp/mixtral" --device cpu --no-measure --max-num-seqs 4 >"$tmp/plan.txt" || fail "plan"
grep -q "0.39M parameters (0.17M active per token: 2 of 8 experts)" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "plan"; }

for name in mixtral qwen2_moe deepseek_v2_lite; do
  "$MOPT_BIN" run -m "$tmp/$name" --device cpu -p "hello" -n 8 --temp 0 --ignore-eos >"$tmp/run.txt" 2>"$tmp/run.err" ||
    { cat "$tmp/run.err"; fail "run $name"; }
done

set +e; "$MOPT_BIN" quantize "$tmp/mixtral" -o "$tmp/q.gguf" --to q8_0 >/dev/null 2>"$tmp/q.err"; rc=$?; set -e
[[ $rc != 0 ]] && grep -q "mixture-of-experts model" "$tmp/q.err" || { cat "$tmp/q.err"; fail "quantize not refused"; }

cat >"$tmp/deepseek.json" <<'JSON'
{"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 16}
JSON
set +e; "$MOPT_BIN" synth --config "$tmp/deepseek.json" -o "$tmp/ds" >/dev/null 2>"$tmp/ds.err"; rc=$?; set -e
[[ $rc == 1 ]] && grep -q "DeepSeek-V3" "$tmp/ds.err" || { cat "$tmp/ds.err"; fail "DeepSeek-V3"; }
echo "PASS"
