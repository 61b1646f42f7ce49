#!/usr/bin/env bash
# The accuracy cost of each format `mopt quantize` writes: code-qwen2-25m (bf16) quantized to each FORMAT, each
# output evaluated by `mopt eval` against the bf16 model on code-eval.txt (eval's default protocol: windows of 1024
# tokens side by side). Writes OUT/<format>.json (eval's --json) and prints the table of docs/quantize.md.
#   scripts/quantize_accuracy.sh OUT [BYTES]    BYTES > 0: only the text's first BYTES bytes (the e2e test's prefix)
# Environment: MOPT_BIN (default build/mopt), MOPT_MODELS_DIR (default ../shared/models), MOPT_THREADS (default 2),
# MOPT_QUANT_FORMATS (default: all, "q8_0 q6_k q5_k_m q4_k_m q4_0 int8 fp8 fp8-tensor awq awq-rtn"; fp8-tensor is
# --to fp8 --fp8-scale tensor, awq-rtn is --to awq --method rtn; FORMAT-gptq is --to FORMAT --method gptq and
# FORMAT-gptq-ao adds --act-order, for FORMAT int8, q8_0, q4_0, awq), MOPT_GPTQ_FLAGS (more flags for the gptq
# formats, e.g. "--calib FILE --calib-tokens 16384").
set -euo pipefail
out=${1:?usage: scripts/quantize_accuracy.sh OUT [BYTES]}
bytes=${2:-0}
bin=${MOPT_BIN:-build/mopt}
models=${MOPT_MODELS_DIR:-../shared/models}
threads=${MOPT_THREADS:-2}
read -r -a gptq_flags <<<"${MOPT_GPTQ_FLAGS:-}"
formats=${MOPT_QUANT_FORMATS:-"q8_0 q6_k q5_k_m q4_k_m q4_0 int8 fp8 fp8-tensor awq awq-rtn"}
model="$models/code-qwen2-25m"
mkdir -p "$out"
text="$models/code-eval.txt"
if [[ $bytes -gt 0 ]]; then
  head -c "$bytes" "$text" >"$out/text.txt"
  text="$out/text.txt"
fi

for f in $formats; do
  case $f in
    q8_0 | q6_k | q5_k_m | q4_k_m | q4_0) dst="$out/$f.gguf" flags=(--to "$f") ;;
    int8 | fp8 | awq) dst="$out/$f" flags=(--to "$f") ;;
    q8_0-gptq | q4_0-gptq) dst="$out/$f.gguf" flags=(--to "${f%-gptq}" --method gptq "${gptq_flags[@]}") ;;
    q8_0-gptq-ao | q4_0-gptq-ao) dst="$out/$f.gguf" flags=(--to "${f%-gptq-ao}" --method gptq --act-order "${gptq_flags[@]}") ;;
    int8-gptq | awq-gptq) dst="$out/$f" flags=(--to "${f%-gptq}" --method gptq "${gptq_flags[@]}") ;;
    int8-gptq-ao | awq-gptq-ao) dst="$out/$f" flags=(--to "${f%-gptq-ao}" --method gptq --act-order "${gptq_flags[@]}") ;;
    fp8-tensor) dst="$out/$f" flags=(--to fp8 --fp8-scale tensor) ;;
    awq-rtn) dst="$out/$f" flags=(--to awq --method rtn) ;;
    *) echo "unknown format $f" >&2; exit 2 ;;
  esac
  t0=$(date +%s%N)
  "$bin" quantize "$model" -o "$dst" "${flags[@]}" --force --threads "$threads" >/dev/null
  t1=$(date +%s%N)
  "$bin" eval "$dst" --ref "$model" --text "$text" --threads "$threads" --json >"$out/$f.json" 2>/dev/null
  t2=$(date +%s%N)
  size=$(du -sb "$dst" | cut -f1)
  echo "$f: quantize $(((t1 - t0) / 1000000)) ms, eval $(((t2 - t1) / 1000000)) ms, $size bytes" >&2
  echo "$size" >"$out/$f.bytes"
  rm -rf "${dst:?}"
done

node -e '
const fs = require("fs");
const [dir, ...names] = process.argv.slice(1);
const first = JSON.parse(fs.readFileSync(`${dir}/${names[0]}.json`));
const p = first.protocol;
console.log(`code-qwen2-25m, ${p.scored_tokens} targets in ${p.windows} windows of ${p.ctx}; bf16 perplexity ` +
            first.ref_ppl.toFixed(4));
console.log("");
console.log("| format | size (MB) | perplexity | Δ perplexity | mean KL (nats) | KL P99 | top-1 agreement |");
console.log("|---|---|---|---|---|---|---|");
for (const n of names) {
  const r = JSON.parse(fs.readFileSync(`${dir}/${n}.json`));
  const mb = Number(fs.readFileSync(`${dir}/${n}.bytes`, "utf8")) / 1e6;
  const sign = r.ppl_delta >= 0 ? "+" : "";
  console.log(`| ${n} | ${mb.toFixed(1)} | ${r.ppl.toFixed(4)} | ${sign}${r.ppl_delta.toFixed(4)} | ` +
              `${r.kl.mean.toFixed(5)} | ${r.kl.p99.toFixed(4)} | ${(100 * r.top1).toFixed(2)}% |`);
}
' "$out" $formats
