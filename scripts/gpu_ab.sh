#!/usr/bin/env bash
# Runs THERE, on the GPU machine (after scripts/gpu_env.sh's setup; carry [".gpu"]): bench_gpu_decode of two
# builds in one call, A then B then A again where time allows, and a table of B/A for single stream, 64 sequences
# and prefill. The builds are usually the previous commit's and this one's (build the old tree's bench_gpu_decode
# with scripts/gpu_prepare.sh in a worktree of that commit and copy it into .gpu as old_bench_gpu_decode).
#   bash scripts/gpu_ab.sh OLD_BIN NEW_BIN [ROUNDS]      (ROUNDS: 1 = A B, 2 = A B A B; default 1)
# Figures go to $OUT/ab_{a,b}{1,2,..}.json and one table to stdout; exits 1 when a run fails.
set -uo pipefail
cd "$(dirname "$0")/.."
A=$1 B=$2 ROUNDS=${3:-1}
source scripts/gpu_env.sh
for r in $(seq 1 "$ROUNDS"); do
  for side in a b; do
    bin=$A; [[ $side == b ]] && bin=$B
    echo "== $side$r: $bin"
    timeout 240 "$bin" --json "$O/ab_$side$r.json" > "$O/ab_$side$r.log" 2>&1 ||
      { echo "gpu_ab: $bin failed:"; tail -5 "$O/ab_$side$r.log"; exit 1; }
  done
done
python3 - "$O" "$ROUNDS" <<'PY'
import json, statistics, sys
o, rounds = sys.argv[1], int(sys.argv[2])
def runs(side):
    return [json.load(open(f"{o}/ab_{side}{r}.json")) for r in range(1, rounds + 1)]
a, b = runs("a"), runs("b")
keys = [("decode_tps_greedy", "1 stream, tok/s"), ("batch64_tps", "64 sequences, tok/s"),
        ("prefill_tflops", "prefill 2048, TFLOP/s")]
print(f"{'figure':<24} {'A (old)':>10} {'B (new)':>10} {'B/A':>7}   (median of {rounds} run(s) each)")
for k, name in keys:
    va, vb = statistics.median(x[k] for x in a), statistics.median(x[k] for x in b)
    print(f"{name:<24} {va:>10.1f} {vb:>10.1f} {vb / va:>7.3f}")
PY
