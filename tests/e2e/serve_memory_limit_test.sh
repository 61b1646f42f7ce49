#!/usr/bin/env bash
# mopt serve --memory-limit (CPU): too little memory is refused at start with the reason (nothing is loaded, exit
# 1); a limit below what the settings would take sizes the KV cache to what the limit leaves, and the server runs;
# the flag is refused on CUDA (device memory is planned by --gpu-memory-utilization).
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

echo "== 16 MiB: the KV cache (by need 256 x 2048 tokens = 320 MiB) is sized to what the limit leaves"
"$MOPT_BIN" serve -m "$model" --device cpu --port 0 --memory-limit 16MiB >"$tmp/fit.log" 2>&1 &
srv=$!
for _ in $(seq 300); do
  grep -q "ready:" "$tmp/fit.log" && break
  kill -0 "$srv" 2>/dev/null || { cat "$tmp/fit.log"; fail "serve exited under a 16 MiB limit"; }
  sleep 0.05
done
grep -q "ready:" "$tmp/fit.log" || fail "serve never became ready"
cat "$tmp/fit.log"
grep -q "memory: weights .* under the 16.00 MiB limit (--memory-limit); the KV cache is sized to what the limit leaves" \
  "$tmp/fit.log" || fail "no footprint line"
kill "$srv"; wait "$srv" 2>/dev/null || true; srv=""

echo "== bad sizes and CUDA"
"$MOPT_BIN" serve -m "$model" --device cpu --memory-limit lots >"$tmp/bad.log" 2>&1 && fail "accepted 'lots'"
grep -q "expected a size" "$tmp/bad.log" || fail "no message for a bad size"
"$MOPT_BIN" serve -m "$model" --device cuda --memory-limit 1GiB >"$tmp/cuda.log" 2>&1 && fail "accepted on CUDA"
grep -q "on CUDA size device memory" "$tmp/cuda.log" || { cat "$tmp/cuda.log"; fail "no message on CUDA"; }
echo "PASS"
