#!/usr/bin/env bash
# mopt serve --memory-limit (CPU): too little memory is refused at start with the reason (nothing is loaded, exit
# 1); a limit below what the settings would take sizes the KV cache to what the limit leaves, and the server runs;
# a draft model's weights, workspace and KV cache count against the limit too; the flag is refused on CUDA
# (device memory is planned by --gpu-memory-utilization).
set -euo pipefail
source "$(dirname "$0")/common.sh"

echo "== 1 MiB: the weights and workspace alone do not fit"
if "$MOPT_BIN" serve -m "$model" --device cpu --port 0 --memory-limit 1MiB >"$tmp/small.log" 2>&1; then
  fail "serve started under a 1 MiB limit"
fi
cat "$tmp/small.log"
grep -q "refusing to start: the weights .* do not fit the 1.00 MiB memory limit (--memory-limit)" "$tmp/small.log" ||
  fail "no reason given"
grep -q "listening" "$tmp/small.log" && fail "it listened before refusing"

# serve_until_ready LOG ARGS...: mopt serve ARGS in the background (its pid in srv), until it says it is ready.
serve_until_ready() {
  local log=$1
  shift
  "$MOPT_BIN" serve "$@" >"$log" 2>&1 &
  srv=$!
  for _ in $(seq 300); do
    grep -q "ready:" "$log" && break
    kill -0 "$srv" 2>/dev/null || { cat "$log"; fail "serve exited: $*"; }
    sleep 0.05
  done
  grep -q "ready:" "$log" || fail "serve never became ready: $*"
  cat "$log"
}

echo "== 16 MiB: the KV cache (by need 256 x 2048 tokens = 320 MiB) is sized to what the limit leaves"
serve_until_ready "$tmp/fit.log" -m "$model" --device cpu --port 0 --memory-limit 16MiB
grep -q "memory: weights .* under the 16.00 MiB limit (--memory-limit); the KV cache is sized to what the limit leaves" \
  "$tmp/fit.log" || fail "no footprint line"
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=""

echo "== a draft model counts: its weights, workspace and KV cache come out of the same limit"
spec='{"model":"'"$model"'","num_speculative_tokens":3}'
if "$MOPT_BIN" serve -m "$model" --device cpu --port 0 --memory-limit 16MiB --speculative-config "$spec" \
     >"$tmp/draft_small.log" 2>&1; then
  fail "serve started under 16 MiB with a draft model (the target alone fits, both do not)"
fi
grep -q "refusing to start: the weights (.*, the draft model's .* of it) and workspace .* do not fit the 16.00 MiB" \
  "$tmp/draft_small.log" || { cat "$tmp/draft_small.log"; fail "no reason naming the draft model"; }
serve_until_ready "$tmp/draft.log" -m "$model" --device cpu --port 0 --memory-limit 32MiB --speculative-config "$spec"
grep -q "memory: weights .* (the draft model's .* of it) + .* under the 32.00 MiB limit" "$tmp/draft.log" ||
  fail "no footprint line with the draft model"
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=""

echo "== bad sizes and CUDA"
"$MOPT_BIN" serve -m "$model" --device cpu --memory-limit lots >"$tmp/bad.log" 2>&1 && fail "accepted 'lots'"
grep -q "expected a size" "$tmp/bad.log" || fail "no message for a bad size"
"$MOPT_BIN" serve -m "$model" --device cuda --memory-limit 1GiB >"$tmp/cuda.log" 2>&1 && fail "accepted on CUDA"
grep -q "on CUDA size device memory" "$tmp/cuda.log" || { cat "$tmp/cuda.log"; fail "no message on CUDA"; }
echo "PASS"
