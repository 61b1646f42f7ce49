#!/usr/bin/env bash
# Runs THERE, on the GPU machine (after scripts/gpu_prepare.sh here, carry [".gpu"]): Nsight Compute over two
# single-stream decode steps of bench_gpu_decode (Llama-3.1-8B shape, bf16, CUDA graph replay; the profiler runs
# each kernel node alone, so PDL overlap is absent), then one line per kernel (in launch order for the first
# layer) and a table per kernel kind: launches, mean us, DRAM bytes read, achieved GB/s.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[[ -n "$NCU" ]] || { echo "gpu_profile: ncu not found" >&2; exit 1; }
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__registers_per_thread
timeout 400 "$NCU" --profile-from-start off --clock-control none --cache-control none --metrics "$metrics" --csv \
  "$G/bench_gpu_decode" --profile-window "$@" > "$O/ncu.csv" 2> "$O/ncu.err"
rc=$?
tail -n 3 "$O/ncu.err"
python3 - "$O/ncu.csv" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next(i for i, r in enumerate(rows) if "Kernel Name" in r and "Metric Name" in r)
h = rows[hdr]; ki, ii, mi, vi = h.index("Kernel Name"), h.index("ID"), h.index("Metric Name"), h.index("Metric Value")
kern = collections.OrderedDict()
for r in rows[hdr + 1:]:
    if len(r) <= vi: continue
    k = kern.setdefault(r[ii], {"name": r[ki]})
    k[r[mi]] = float(r[vi].replace(",", "") or 0)
def short(n):
    n = re.sub(r"\(.*$", "", n) if "<" not in n else n
    n = n.replace("mopt::cuda::", "").replace("(anonymous namespace)::", "")
    return n[:90]
ks = list(kern.values())
print(f"{len(ks)} kernels profiled")
print("first 12 kernels in order:")
for k in ks[:12]:
    t = k.get("gpu__time_duration.sum", 0) / 1e3; b = k.get("dram__bytes_read.sum", 0)
    print(f"  {t:8.2f} us  {b/1e6:8.2f} MB  {b/max(t,1e-9)/1e3:7.0f} GB/s  grid {k.get('launch__grid_size',0):6.0f}  regs {k.get('launch__registers_per_thread',0):4.0f}  {short(k['name'])}")
agg = collections.OrderedDict()
for k in ks:
    a = agg.setdefault(short(k["name"]) + f" grid {k.get('launch__grid_size',0):.0f}", [0, 0.0, 0.0])
    a[0] += 1; a[1] += k.get("gpu__time_duration.sum", 0) / 1e3; a[2] += k.get("dram__bytes_read.sum", 0)
tot = sum(a[1] for a in agg.values())
print(f"{'launches':>8} {'mean us':>8} {'sum us':>9} {'MB read':>8} {'GB/s':>6}  kernel")
for n, a in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{a[0]:8d} {a[1]/a[0]:8.2f} {a[1]:9.1f} {a[2]/a[0]/1e6:8.2f} {a[2]/max(a[1],1e-9)/1e3:6.0f}  {n}")
print(f"sum of kernel times: {tot:.1f} us over {len(ks)} launches ({tot/2:.1f} us per decode step if 2 steps)")
PY
exit $rc
