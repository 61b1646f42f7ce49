#!/usr/bin/env bash
# mopt run -tp N on the CPU (docs/tensor_parallel.md): greedy text of stories260K through 2 and 4 shards equals the
# unsharded run's, as does a batch of prompts through the engine; bad sizes are refused with the reason.
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
M=$MOPT_MODELS_DIR/stories260K.gguf
[[ -f "$M" ]] || { echo "FAIL: $M not found (set MOPT_MODELS_DIR)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'Once upon a time\nThe little dog\nLily and Ben went\n' > "$tmp/prompts.txt"
gen() {  # $1 = output file, rest = extra args
  local out=$1; shift
  "$MOPT_BIN" run -m "$M" --device cpu --kv-cache-dtype fp32 -n 200 --temp 0 "$@" > "$out" 2> "$out.err" ||
    { cat "$out.err"; echo "FAIL: mopt run $* exited non-zero"; exit 1; }
}
gen "$tmp/tp1.txt" -p "Once upon a time"
[[ $(wc -c < "$tmp/tp1.txt") -gt 200 ]] || { echo "FAIL: the unsharded run wrote too little"; exit 1; }
for tp in 2 4; do
  gen "$tmp/tp$tp.txt" -p "Once upon a time" -tp $tp
  grep -q "tensor parallel: $tp CPU shards" "$tmp/tp$tp.txt.err" || { echo "FAIL: -tp $tp ran no shards"; exit 1; }
  cmp -s "$tmp/tp1.txt" "$tmp/tp$tp.txt" || { echo "FAIL: -tp $tp text differs"; diff "$tmp/tp1.txt" "$tmp/tp$tp.txt" | head; exit 1; }
  echo "ok: -tp $tp greedy text equals the unsharded run's"
done
gen "$tmp/batch1.txt" --prompts "$tmp/prompts.txt"
gen "$tmp/batch2.txt" --prompts "$tmp/prompts.txt" --tensor-parallel-size 2
cmp -s "$tmp/batch1.txt" "$tmp/batch2.txt" || { echo "FAIL: --prompts with 2 shards differs"; exit 1; }
echo "ok: a batch of prompts through 2 shards equals the unsharded batch"
for case in "-tp 9|above the model's 8 attention heads" "-tp 0|tensor-parallel-size"; do
  set +e; "$MOPT_BIN" run -m "$M" --device cpu -p hi -n 4 ${case%%|*} > /dev/null 2> "$tmp/bad.err"; rc=$?; set -e
  [[ $rc -ne 0 ]] && grep -q -- "${case#*|}" "$tmp/bad.err" || { echo "FAIL: ${case%%|*}: rc $rc, $(cat "$tmp/bad.err")"; exit 1; }
done
echo "ok: bad sizes refused"
