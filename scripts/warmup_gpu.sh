#!/usr/bin/env bash
# Issue 23 on the GPU machine: warm-up before ready and the plan cache, on a Llama-3.1-8B-shape checkpoint on local
# disk. Runs THERE, in the repo root, from one `run` call with carry [".gpu"] (built here by scripts/gpu_prepare.sh):
#     bash scripts/warmup_gpu.sh
# Measures (docs/warmup.md), logs and a summary in $OUT (or /tmp/mopt-warmup-out):
#   1. cold start of `mopt serve` (empty plan cache): process start -> /health 200 -> first completion, phases;
#      the first request's TTFT after ready against the median of warm requests (acceptance: within 1.5x);
#      a ramp of 1 -> 64 concurrent streams (~400 prompt tokens, 128 out): inter-token gaps, and no GEMM tuning or
#      graph capture after ready (the /metrics counters and the server log; acceptance: none);
#   2. warm restart (plan cache present, weights in the page cache): the same timings (target: <= 10 s), plans
#      read from the cache and none tuned;
#   3. `mopt run -n 128` steady-state tok/s against bench_gpu_decode --single-only (acceptance: within 5%).
# The checkpoint: `mopt synth` (random bf16 weights, safetensors + tokenizer) into /tmp, or the one
# scripts/gate_tune_gpu.sh wrote. (Without synth the serve and run parts could not run: --load-format dummy has no
# tokenizer.) Restarts read the weights from the page cache (the file was just written or read).
# GPU time: about 3-5 minutes (synth, two server starts with weight reads, the ramp ~40 s, run, bench).
set -uo pipefail
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/mopt-warmup-out}
mkdir -p "$O"
source scripts/gpu_env.sh  # unpacks .gpu/bin.txz, sets LD_LIBRARY_PATH; G = the .gpu folder
M=$G/mopt
# The checkpoint scripts/gate_tune_gpu.sh writes, when it ran first in this machine's life (16 GB not written twice).
CK=${MOPT_WARMUP_CKPT:-${MOPT_GT_DIR:-/tmp/mopt-gate-tune}/llama-3.1-8b-random}
CACHE=/tmp/mopt-warmup-cache  # XDG_CACHE_HOME of every run below: the plan cache is $CACHE/mopt/plans-*.txt
PORT=18523
MAX_SEQS=64
MAX_LEN=${MOPT_WARMUP_MAX_LEN:-4096}  # MOPT_WARMUP_CKPT / _MAX_LEN: another checkpoint (a smoke test on a small model)
status=0
exec > >(tee "$O/warmup_gpu.log") 2>&1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[[ -x "$M" ]] || { echo "warmup_gpu: $M missing (scripts/gpu_prepare.sh builds it)"; exit 1; }

echo "== checkpoint"
if [[ -s "$CK/config.json" ]]; then
  echo "reusing $CK"
elif "$M" synth --help >/dev/null 2>&1; then
  rm -rf "$CK"
  "$M" synth --config tests/gpu/llama-3.1-8b/config.json -o "$CK" --dtype bf16 >/dev/null || exit 1
  sync
else
  echo "warmup_gpu: this mopt has no 'synth' verb (branch tunegate); --load-format dummy models have no tokenizer,"
  echo "so serve and run cannot be measured on them. Merge tunegate and run scripts/gpu_prepare.sh again."
  exit 2
fi

export XDG_CACHE_HOME=$CACHE
rm -rf "$CACHE"

# Starts the server, measures start -> ready -> first completion, runs the client checks; writes $O/<tag>.json.
serve_and_measure() {
  local tag=$1 ramp=$2
  local t_start
  t_start=$(date +%s.%N)
  "$M" serve -m "$CK" --port "$PORT" --max-num-seqs "$MAX_SEQS" --max-model-len "$MAX_LEN" --served-model-name m \
    > "$O/serve_$tag.log" 2>&1 &
  local spid=$!
  python3 - "$PORT" "$spid" "$t_start" "$ramp" "$O/$tag.json" <<'PY'
import http.client, json, os, random, statistics, sys, threading, time
port, spid, t_start, ramp, out = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
res = {}
def health():
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        r = c.getresponse()
        return r.status, r.read().decode()
    except Exception as e:
        return 0, str(e)
phases = []
while True:
    st, body = health()
    if st == 200:
        break
    if st == 503 and body not in phases:
        phases.append(body)
    if not os.path.exists(f"/proc/{spid}"):
        print("serve exited before it was ready"); sys.exit(1)
    if time.time() - t_start > 300:
        print("serve not ready within 300 s"); sys.exit(1)
    time.sleep(0.05)
res["ready_s"] = time.time() - t_start
res["health_503_bodies_seen"] = len(phases)
res["warmup_phase_seen"] = any("warm-up" in p for p in phases)
words = ("the of and to in is was he for it with as his on be at by had are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way "
         "well down should because each just those people how too little state good very make world still own see "
         "men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three").split()
rng = random.Random(1)
def prompt(n):
    return " ".join(rng.choice(words) for _ in range(n))
def stream(n_prompt, max_tokens):
    """One streamed completion: (ttft, [gaps between chunks], tokens)."""
    body = json.dumps({"model": "m", "prompt": prompt(n_prompt), "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.time()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    times = []
    for line in r:
        line = line.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            times.append(time.time())
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times)
first_ttft, _, n = stream(32, 16)
res["first_completion_s"] = time.time() - t_start
res["first_ttft_ms"] = 1e3 * first_ttft
warm = [1e3 * stream(32, 16)[0] for _ in range(10)]
res["warm_ttft_median_ms"] = statistics.median(warm)
res["first_vs_warm_ttft"] = res["first_ttft_ms"] / res["warm_ttft_median_ms"]
if ramp:
    stages = []
    for conc in (1, 2, 4, 8, 16, 32, 64):
        gaps, tpots, errors = [], [], []
        def worker():
            try:
                _, g, _ = stream(400, 128)
                gaps.extend(g)
                if g: tpots.append(sum(g) / len(g))  # time per output token after the first
            except Exception as e:
                errors.append(str(e))
        th = [threading.Thread(target=worker) for _ in range(conc)]
        t0 = time.time()
        for t in th: t.start()
        for t in th: t.join()
        gaps.sort()
        # Chunks can arrive several to a read, so single gaps are compared with the median TPOT of the requests.
        med = statistics.median(tpots) if tpots else float("nan")
        worst = gaps[-1] if gaps else float("nan")
        stages.append({"concurrency": conc, "seconds": time.time() - t0, "errors": len(errors),
                       "tpot_median_ms": 1e3 * med, "itl_max_ms": 1e3 * worst, "max_over_median": worst / med})
        print(f"ramp {conc:3d} streams: TPOT median {1e3*med:6.2f} ms, largest gap {1e3*worst:7.2f} ms "
              f"({worst/med:4.1f}x), {len(errors)} errors, {time.time()-t0:5.1f} s", flush=True)
    res["ramp"] = stages
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/metrics")
metrics = c.getresponse().read().decode()
for name in ("mopt:warmed_up", "mopt:gemm_tunings_after_warmup_total", "mopt:graph_captures_after_warmup_total"):
    for line in metrics.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):  # with or without labels (model_name)
            res[name.split(":")[1]] = float(line.split()[-1])
json.dump(res, open(out, "w"), indent=1)
print(json.dumps(res, indent=1))
PY
  local crc=$?
  kill -TERM "$spid" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$spid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$spid" 2>/dev/null && kill -KILL "$spid"
  wait "$spid" 2>/dev/null
  grep -E "startup:|uploaded in|KV cache on|plan cache|after the warm-up" "$O/serve_$tag.log"
  return $crc
}

echo "== 1. cold start (no plan cache), first request, ramp 1 -> 64"
serve_and_measure cold 1 || status=1
echo "== 2. warm restart (plan cache present, weights in the page cache)"
serve_and_measure warm 0 || status=1
ls -l "$CACHE"/mopt/ 2>&1

echo "== 3. mopt run -n 128 vs bench_gpu_decode --single-only"
timeout 240 "$M" run -m "$CK" -p "Once upon a time" -n 128 --temp 0 --ignore-eos > "$O/run.out" 2> "$O/run.err"
[[ $? -eq 0 ]] || status=1
grep -E "^(startup|load|warm-up|prompt|generation):" "$O/run.err"
if [[ -x "$G/bench_gpu_decode" ]]; then
  timeout 240 "$G/bench_gpu_decode" --single-only > "$O/bench_single.log" 2>&1 || status=1
  grep -E "decode, 1 stream" "$O/bench_single.log"
fi

echo
echo "================================ summary ================================"
python3 - "$O" <<'PY' || status=1
import json, os, re, sys
o = sys.argv[1]
ok = True
def load(n):
    try: return json.load(open(os.path.join(o, n)))
    except Exception: return None
def phases(tag):
    try:
        for l in open(os.path.join(o, f"serve_{tag}.log")):
            if "startup:" in l: return l.split("startup:", 1)[1].strip()
    except Exception: pass
    return "?"
def check(name, good, value, target):
    global ok
    ok &= bool(good)
    print(f"{'PASS' if good else 'FAIL'}  {name:44s} {value:30s} target {target}")
cold, warm = load("cold.json"), load("warm.json")
for tag, r in (("cold", cold), ("warm", warm)):
    if not r:
        check(f"{tag} start", False, "no result", ""); continue
    print(f"{tag}: ready {r['ready_s']:.1f} s, first completion {r['first_completion_s']:.1f} s after process start; "
          f"phases: {phases(tag)}")
    if tag == "cold":  # a warm start may finish its warm-up between two polls
        check(f"{tag}: /health 503 with the warm-up phase", r["warmup_phase_seen"], str(r["warmup_phase_seen"]),
              "seen")
    check(f"{tag}: first TTFT / warm median", r["first_vs_warm_ttft"] <= 1.5,
          f"{r['first_ttft_ms']:.1f} / {r['warm_ttft_median_ms']:.1f} ms = {r['first_vs_warm_ttft']:.2f}x", "<= 1.5x")
    late = r.get("gemm_tunings_after_warmup_total", -1) + r.get("graph_captures_after_warmup_total", -1)
    check(f"{tag}: tunings + captures after ready", late == 0, f"{late:.0f}", "0 (/metrics)")
if cold and "ramp" in cold:
    worst = max(s["max_over_median"] for s in cold["ramp"])
    errs = sum(s["errors"] for s in cold["ramp"])
    print("ramp (largest inter-token gap / median TPOT, per stage):",
          ", ".join(f"{s['concurrency']}: {s['max_over_median']:.1f}x" for s in cold["ramp"]))
    check("ramp 1->64: requests failed", errs == 0, str(errs), "0")
    check("ramp 1->64: largest gap / median TPOT (info)", True, f"{worst:.1f}x",
          "< 3x; larger gaps are prefills of arriving requests, not tuning (counters above)")
if warm:
    check("warm restart: process start -> first completion", warm["first_completion_s"] <= 10,
          f"{warm['first_completion_s']:.1f} s", "<= 10 s")
    log = open(os.path.join(o, "serve_warm.log")).read()
    m = re.search(r"(\d+) GEMM plans tuned, (\d+) from the plan cache", log)
    check("warm restart: plans tuned / from the cache", m and m.group(1) == "0" and int(m.group(2)) > 0,
          f"{m.group(1)} / {m.group(2)}" if m else "?", "0 / > 0")
run_err = open(os.path.join(o, "run.err")).read() if os.path.exists(os.path.join(o, "run.err")) else ""
bench = open(os.path.join(o, "bench_single.log")).read() if os.path.exists(os.path.join(o, "bench_single.log")) else ""
g = re.search(r"generation:\s+\d+ tokens in\s+[\d.]+ ms \(\s*([\d.]+) tokens/s", run_err)
b = re.search(r"decode, 1 stream: GPU greedy ([\d.]+) tok/s", bench)
if g and b:
    ratio = float(g.group(1)) / float(b.group(1))
    check("mopt run -n 128 / bench_gpu_decode single", abs(ratio - 1) <= 0.05,
          f"{g.group(1)} / {b.group(1)} tok/s = {ratio:.3f}", "within 5%")
else:
    check("mopt run -n 128 / bench_gpu_decode single", False, "missing figures", "within 5%")
sys.exit(0 if ok else 1)
PY
exit $status
