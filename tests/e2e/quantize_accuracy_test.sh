#!/usr/bin/env bash
# The accuracy cost of each format mopt quantize writes, measured by mopt eval against the bf16 model
# (scripts/quantize_accuracy.sh): code-qwen2-25m on the first 8 KB of code-eval.txt (2,681 targets in 3 windows of
# 1024), a prefix on which every ordering below holds with a margin. Asserts what the formats promise relative to
# each other: AWQ's mean KL below round-to-nearest INT4's (the same layout), GPTQ's q4_0 below round-to-nearest
# q4_0, q4_k_m's below q4_0's, 8-bit below 4-bit, and top-1 agreement of at least 0.98 for 8-bit weights (measured
# 0.9858 q8_0, 0.9877 int8) and 0.92 for fp8 (0.9385; its activations are E4M3 too). The production gate
# top1 >= 0.995 is not met by 8-bit weights on this 25M-parameter model, GPTQ's included: docs/quantize.md has the
# full-text table. About 80 CPU-seconds.
# Slow under sanitizers: scripts/test.sh runs it in the release pass only.
set -euo pipefail
: "${MOPT_BIN:?set MOPT_BIN to the mopt binary}"
: "${MOPT_MODELS_DIR:?set MOPT_MODELS_DIR to the shared models folder}"
: "${MOPT_SOURCE_DIR:?set MOPT_SOURCE_DIR to the source tree}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MOPT_QUANT_FORMATS="q8_0 int8 fp8 q4_0 q4_0-gptq q4_k_m awq-rtn awq" MOPT_THREADS=2 \
  "$MOPT_SOURCE_DIR/scripts/quantize_accuracy.sh" "$tmp" 8192
node -e '
const fs = require("fs");
const dir = process.argv[1];
const r = {};
for (const n of ["q8_0", "int8", "fp8", "q4_0", "q4_0-gptq", "q4_k_m", "awq-rtn", "awq"])
  r[n] = JSON.parse(fs.readFileSync(dir + "/" + n + ".json"));
const ok = (c, m) => { if (!c) { console.error("FAIL: " + m); process.exit(1); } };
ok(r["q8_0"].protocol.scored_tokens > 2600, "the prefix is scored: " + r["q8_0"].protocol.scored_tokens);
ok(r["awq"].kl.mean < r["awq-rtn"].kl.mean, "AWQ mean KL below RTN INT4");
ok(r["q4_0-gptq"].kl.mean < r["q4_0"].kl.mean, "GPTQ q4_0 mean KL below round-to-nearest q4_0");
ok(r["q4_k_m"].kl.mean < r["q4_0"].kl.mean, "q4_k_m mean KL below q4_0");
for (const e of ["q8_0", "int8", "fp8"]) {
  ok(r[e].top1 >= (e === "fp8" ? 0.92 : 0.98), e + " top-1 " + r[e].top1);
  for (const f of ["q4_0", "q4_0-gptq", "q4_k_m", "awq"]) ok(r[e].kl.mean < r[f].kl.mean, e + " KL below " + f);
}
' "$tmp"
echo "quantize accuracy: ok"
