#!/usr/bin/env bash
# Runs THERE, on the GPU machine, after scripts/gpu_all.sh in the same call (carry [".gpu"]): `mopt plan` for the
# Llama-3.1-8B shape on the detected GPU against what the engine allocates and measures there.
#   - KV blocks: plan's kv_cache.num_blocks against the engine's (bench_gpu_offline on random weights, same
#     --gpu-memory-utilization and block size); within 1% passes.
#   - Decode ceiling: plan's single-stream ceiling (weights / table bandwidth) against bench_gpu_decode's
#     roofline from the measured copy bandwidth ($OUT/bench.json from gpu_all.sh); within 10% passes. The
#     measured single-stream rate is printed beside them.
# Prints a table and exits 1 when a comparison fails.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
O=${OUT:-/tmp/mopt-gpu-out}
mkdir -p "$O"
CFG=tests/gpu/llama-3.1-8b/config.json
UTIL=0.92
G=$PWD/.gpu
# The same engine limits on both sides: 256 sequences of 2,052 tokens want more than the budget, so both size the
# KV cache by --gpu-memory-utilization.
"$G/mopt" plan -m "$CFG" --device cuda --gpu-memory-utilization "$UTIL" --max-model-len 2052 --max-num-seqs 256 \
  --max-num-batched-tokens 8192 --json > "$O/plan_8b.json" ||
  { echo "plan_vs_engine: mopt plan failed" >&2; exit 1; }
timeout 180 "$G/bench_gpu_offline" --config "$CFG" --device cuda -n 4 --prompt-len 2048 --gen 4 \
  --max-num-seqs 256 --max-num-batched-tokens 8192 --gpu-memory-utilization "$UTIL" --json "$O/offline_small.json" > "$O/offline_small.log" 2>&1 ||
  { echo "plan_vs_engine: bench_gpu_offline failed:" >&2; tail -5 "$O/offline_small.log" >&2; exit 1; }
python3 - "$O/plan_8b.json" "$O/offline_small.json" "$O/bench.json" <<'PY'
import json, os, sys
plan = json.load(open(sys.argv[1]))
eng = json.load(open(sys.argv[2]))
bench = json.load(open(sys.argv[3])) if os.path.exists(sys.argv[3]) else None
kv = plan["kv_cache"]
eng_blocks = eng["kv_tokens"] // kv["block_size"]
ok = True
def row(what, planned, measured, tol):
    global ok
    diff = (planned - measured) / measured
    good = abs(diff) <= tol
    ok &= good
    print(f"{what:<34} plan {planned:>12,.1f}  engine {measured:>12,.1f}  {100*diff:+6.2f}%  "
          f"{'ok' if good else 'MISSED'} (within {100*tol:.0f}%)")
print(f"Llama-3.1-8B shape on {plan['hardware']['name']} ({plan['hardware']['source']}), "
      f"gpu_memory_utilization {eng.get('gpu_memory_utilization', 0.92)}")
row("KV blocks", kv["num_blocks"], eng_blocks, 0.01)
if bench:
    row("decode ceiling, 1 stream (tok/s)", plan["ceilings"]["decode_tokens_per_s"], bench["decode_roofline_tps"], 0.10)
    print(f"{'measured decode, 1 stream (tok/s)':<34} {bench['decode_tps_greedy']:.1f} "
          f"({100*bench['decode_tps_greedy']/plan['ceilings']['decode_tokens_per_s']:.0f}% of the planned ceiling)")
else:
    print("decode ceiling: no bench.json from scripts/gpu_all.sh in this call; not compared")
    ok = False
sys.exit(0 if ok else 1)
PY
