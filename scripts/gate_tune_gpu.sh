#!/usr/bin/env bash
# Acceptance 3 and 4 of issue 18 (mopt gate and mopt tune at the Llama-3.1-8B shape, bf16 and FP8), run THERE, on
# the GPU machine, in the repo root, from one `run` call with carry [".gpu"] (built here by scripts/gpu_prepare.sh):
#     bash scripts/gate_tune_gpu.sh            # everything in one call (ends before 575 s; see the timeline)
#     bash scripts/gate_tune_gpu.sh gate       # or the two halves in two calls, each with the checkpoints written
#     bash scripts/gate_tune_gpu.sh tune       #   again when the machine was given back in between
# Steps:
#   1. mopt synth writes a random-weight bf16 checkpoint of tests/gpu/llama-3.1-8b/config.json (16 GB of
#      safetensors shards and a tokenizer) to local disk ($MOPT_GT_DIR, default /tmp/mopt-gate-tune);
#   2. mopt quantize --to fp8 writes its FP8 variant beside it (compressed-tensors E4M3, per-channel weight
#      scales, dynamic per-token activations: W8A8 on CUDA; ~8.5 GB). It streams: one linear layer at a time in
#      fp32 in reused buffers (the largest, 14336 x 4096, is 235 MB), the embeddings and norms copied from the
#      mapped input as they are, 16 threads (docs/quantize.md). While it runs, one `mopt serve` of the bf16 checkpoint
#      starts and stops, so the plan cache ($W/cache, docs/warmup.md) holds the GEMM plans a restarted deployment
#      reads: the gate's restarts then time a restart, not the first start on a new machine (tuning + capture ~20 s);
#   3. gate, accuracy only (`mopt gate -m FP8 --baseline BF16 --gates accuracy`): both models in one process on
#      the GPU, KL / top-1 / top-5 over an eval text (the docs' first 8 KB, ~0.8 tokens a byte with synth's
#      tokenizer); threshold kl<=0.05 (why not top-1 on random weights: docs/gate.md);
#   4. gate, every other gate, on the bf16 checkpoint: 5-minute soak at 16 requests in flight, 512-word prompts,
#      128 tokens out; restart measured from that checkpoint (process start to the first completion, 3 times)
#      against the issue's 10 s target. Before it, where the machine lets us drop the page cache, the cold start:
#      the disk's own time to read the shards (direct I/O), then one start with the page cache dropped (reported
#      beside the gate: docs/gate.md says why it is not the restart row);
#   5. mopt tune -m BF16 -m FP8: the weight variant is searched with the other knobs; 512 in / 128 out at 32 in
#      flight, SLA ttft_p99=2s,tpot_p99=40ms,error_rate=0, as many trials as the time left allows, then one re-run
#      each of the winner and serve's defaults (the bf16 checkpoint); the winner line names its variant.
#
# Timeline of one call on the H200 (estimates: the first run measures them; the summary prints each step's time):
#     unpack .gpu                                                    ~5 s
#     synth, 16 GB bf16                                              ~30 s
#     quantize to FP8 beside the plan-cache serve start (~25 s to ready with a warm page cache)  ~25 s
#       (measured on the development machine, 2 cores shared with other jobs: the 8B shape with 1 and 2 decoder
#       layers took 9 and 16 CPU-s (29 s and 45 s wall), so ~7 CPU-s a layer: ~230 CPU-s for 32 layers, in
#       parallel loops but for the 8.5 GB written: ~15-25 s on 16 free cores)
#     accuracy gate (two engines, ~6.5k tokens)                      ~25 s     (killed at 150 s)
#     cold start: drop the page cache, read the shards (~12 s), drop it, one start (~13 s)   ~30 s
#     gate: 3 restarts (~5 s each), soak start and 48 warm-up requests, 300 s soak   ~330 s
#     tune: what is left before 575 s (~120 s): a search budget of that less 90 s for the last search trial
#           and the two re-runs; each trial is a server start (~4 s with a warm plan cache, ~25 s for settings
#           not seen before) and 96 + 32 requests (~6 s)
# MOPT_GT_SOAK (default 5m) sets the soak. A 5-minute soak leaves the leak gate's bound near 0.1 MB/h; a 460 s
# soak resolved it on the H200 (docs/gate.md, run as a bare `mopt gate` call), but with the steps above it no
# longer fits one 600 s call (each second of soak past 300 s adds one to the timeline above).
# If the tune has less than 30 s of search budget left it is not run, and the summary says to run
# `bash scripts/gate_tune_gpu.sh tune` in a second call (synth + quantize + plan cache again, then ~500 s of tune).
# Reports go to $OUT (or /tmp/mopt-gate-tune-out; 7 files, under the 8 a call returns): summary.txt, gate.txt
# (both gate runs' tables), gate.md, tune.txt, tune.md, best.toml and evidence.tgz (gate.json, soak.json, server
# logs, trials, quantize and synth logs).
#
# Here, without a GPU, `bash scripts/gate_tune_gpu.sh --cpu` runs the same flow on a tiny Llama-3-vocabulary
# config with build/mopt on the CPU (20 s soak, the tune until 240 s: 2.5-4 minutes), to check the script itself.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
mode=all
cpu=0
for arg in "$@"; do
  case $arg in
    all|gate|tune) mode=$arg ;;
    --cpu) cpu=1 ;;
    *) echo "usage: $0 [all|gate|tune] [--cpu]" >&2; exit 2 ;;
  esac
done
O=${OUT:-/tmp/mopt-gate-tune-out}
W=${MOPT_GT_DIR:-/tmp/mopt-gate-tune}
mkdir -p "$O" "$W"
t_start=$SECONDS
# seconds: the script ends before a 580 s mark (the call's limit is 600 s); the CPU check keeps its tune short
deadline=${MOPT_GT_DEADLINE:-$([[ $cpu == 1 ]] && echo 240 || echo 575)}
status=0
summary=()
note() { summary+=("$*"); echo "$*"; }
left() { echo $((deadline - (SECONDS - t_start))); }
# The plan cache of every server and engine below (docs/warmup.md): warmed in step 2, read by the gate and tune.
export XDG_CACHE_HOME=$W/cache

if [[ $cpu == 1 ]]; then
  MOPT=${MOPT_BIN:-build/mopt}
  device=cpu
  ckpt=$W/tiny-llama3
  config=$W/tiny-config.json
  # Llama-3.1's vocabulary and special ids at a toy size.
  sed -e 's/"hidden_size": 4096/"hidden_size": 128/' -e 's/"intermediate_size": 14336/"intermediate_size": 256/' \
      -e 's/"num_attention_heads": 32/"num_attention_heads": 4/' \
      -e 's/"num_hidden_layers": 32/"num_hidden_layers": 2/' \
      -e 's/"num_key_value_heads": 8/"num_key_value_heads": 2/' -e 's/"head_dim": 128/"head_dim": 32/' \
      tests/gpu/llama-3.1-8b/config.json >"$config"
  soak=20s; gate_c=4; gate_in=64; gate_out=16; warmup=16; restart_limit=10s
  tune_c=4; tune_n=24; tune_warmup=4; tune_in=64; tune_out=16; tune_slo=ttft_p99=5s,tpot_p99=200ms,error_rate=0
  eval_bytes=3000; acc_timeout=120
  dev_args=(--device cpu --threads 1 --max-model-len 1024)
  rerun_s=30  # the two re-runs and the last search trial
else
  source scripts/gpu_env.sh  # unpacks .gpu/bin.txz, sets LD_LIBRARY_PATH
  MOPT=$G/mopt
  [[ -x $MOPT ]] || { echo "gate_tune_gpu: $MOPT missing: scripts/gpu_prepare.sh did not build mopt" >&2; exit 1; }
  note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)"
  device=cuda
  ckpt=$W/llama-3.1-8b-random
  config=tests/gpu/llama-3.1-8b/config.json
  soak=${MOPT_GT_SOAK:-5m}; gate_c=16; gate_in=512; gate_out=128; warmup=48; restart_limit=10s
  tune_c=32; tune_n=96; tune_warmup=32; tune_in=512; tune_out=128; tune_slo=ttft_p99=2s,tpot_p99=40ms,error_rate=0
  eval_bytes=8000; acc_timeout=150
  dev_args=(--device cuda --max-model-len 4096)
  rerun_s=90
fi
fp8=$ckpt-fp8
# Up to $2 seconds (and never past the deadline) for a command: the script ends on time whatever hangs.
bounded() {
  local cap=$1; shift
  local l; l=$(left)
  ((cap > l)) && cap=$l
  ((cap < 1)) && cap=1
  timeout "$cap" "$@"
}

# ---- 1. the bf16 checkpoint -------------------------------------------------------------------------------------
if [[ ! -s $ckpt/config.json ]]; then
  echo "== mopt synth: random bf16 weights for $config -> $ckpt"
  rm -rf "$ckpt" "$fp8"
  t0=$SECONDS
  bounded 300 "$MOPT" synth --config "$config" -o "$ckpt" --dtype bf16 >"$W/synth.txt" 2>"$W/synth.err"
  rc=$?
  cat "$W/synth.err"
  [[ $rc == 0 ]] || { note "synth: FAILED (exit $rc)"; exit 1; }
  note "synth: $((SECONDS - t0)) s: $(tail -n 1 "$W/synth.err" | sed 's/^mopt synth: //')"
else
  note "synth: reusing $ckpt"
fi
note "bf16 checkpoint: $(du -sb "$ckpt" | cut -f1) bytes on disk in $(ls "$ckpt" | wc -l) files ($ckpt)"

# ---- 2. the FP8 variant, and the plan cache warmed by one serve start beside it ---------------------------------
# The serve start: the bf16 checkpoint with the gate's settings (the plan cache's file is per shape and engine
# limits), stopped once ready; on the CPU there is nothing to warm, and it only checks this path of the script.
rm -f "$W/warm.log"
"$MOPT" serve --model "$ckpt" "${dev_args[@]}" --host 127.0.0.1 --port 0 >"$W/warm.log" 2>&1 &
warm_pid=$!
t_warm=$SECONDS
if [[ ! -s $fp8/config.json ]]; then
  echo "== mopt quantize --to fp8: $ckpt -> $fp8"
  rm -rf "$fp8"
  t0=$SECONDS
  bounded 300 "$MOPT" quantize "$ckpt" -o "$fp8" --to fp8 --progress >"$W/quantize.txt" 2>"$W/quantize.err"
  rc=$?
  tail -n 3 "$W/quantize.err"
  cat "$W/quantize.txt"
  [[ $rc == 0 ]] || { note "quantize: FAILED (exit $rc)"; kill "$warm_pid" 2>/dev/null; exit 1; }
  note "quantize: $((SECONDS - t0)) s: $(tail -n 1 "$W/quantize.txt")"
else
  note "quantize: reusing $fp8"
fi
note "fp8 checkpoint: $(du -sb "$fp8" | cut -f1) bytes on disk ($fp8)"
while kill -0 "$warm_pid" 2>/dev/null && ! grep -q "ready:" "$W/warm.log" && (($(left) > 60)) &&
      ((SECONDS - t_warm < 240)); do
  sleep 0.5
done
if grep -q "ready:" "$W/warm.log"; then
  note "plan cache: a serve start of the bf16 checkpoint was ready within $((SECONDS - t_warm)) s;" \
       "$(ls "$XDG_CACHE_HOME"/mopt/plans-*.txt 2>/dev/null | wc -l) plan file(s) in $XDG_CACHE_HOME/mopt"
else
  note "plan cache: the warming serve start did not get ready (see warm.log in evidence.tgz): the first restart tunes"
fi
kill "$warm_pid" 2>/dev/null
wait "$warm_pid" 2>/dev/null

# ---- 3. the accuracy gate: the FP8 variant against the bf16 checkpoint ------------------------------------------
if [[ $mode == all || $mode == gate ]]; then
  # The eval text: prose of this repo's docs, the same bytes on every run of one commit.
  cat docs/*.md | head -c "$eval_bytes" >"$W/eval.txt"
  # Random weights: the next-token distributions are nearly flat (128k logits of std ~1.3, the top two ~0.3
  # apart), so top-1 agreement measures rounding noise; the bound is the KL part of the default, and the report
  # still shows top-1 and top-5 (docs/gate.md).
  printf 'accuracy = "kl<=0.05"\n' >"$W/accuracy.toml"
  echo "== mopt gate --gates accuracy: $fp8 against $ckpt over $(wc -c <"$W/eval.txt") bytes"
  rm -rf "$W/gate-fp8"
  t0=$SECONDS
  bounded "$acc_timeout" "$MOPT" gate -m "$fp8" --baseline "$ckpt" --eval-text "$W/eval.txt" --gates accuracy \
    "${dev_args[@]}" --thresholds "$W/accuracy.toml" -o "$W/gate-fp8" --markdown "$W/gate-fp8.md" \
    >"$W/gate-fp8.txt" 2>"$W/gate-fp8.err"
  rc=$?
  tail -n 5 "$W/gate-fp8.err"
  cat "$W/gate-fp8.txt"
  note "gate (fp8 accuracy): exit $rc in $((SECONDS - t0)) s (0: passed; 1: failed; 124: out of time)"
  while IFS= read -r line; do note "  $line"; done < <(grep -E '^accuracy ' "$W/gate-fp8.txt")
  [[ $rc == 0 ]] || status=1
fi

# ---- 4. mopt gate on the bf16 checkpoint --------------------------------------------------------------------------
if [[ $mode == all || $mode == gate ]]; then
  # The cold start (MOPT_GT_COLD=0 skips it): the first start on a host whose page cache does not hold the
  # checkpoint (after a reboot, on a new machine) reads the 16 GB from disk, so the disk's own read time, measured
  # just before it, bounds it from below. It is reported beside the gate, not as its restart row: a restart is the
  # server process started again on its host, which finds the checkpoint where the previous run left it.
  if [[ ${MOPT_GT_COLD:-1} == 1 ]] && sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
    shards=("$ckpt"/*.safetensors)
    t0=$(date +%s%N)
    for f in "${shards[@]}"; do
      # 4 direct (uncached) readers per shard, 64 MiB requests
      n=$((($(stat -c %s "$f") + (64 << 20) - 1) >> 26)); per=$(((n + 3) / 4))
      for i in 0 1 2 3; do
        dd if="$f" of=/dev/null bs=64M iflag=direct skip=$((i * per)) count=$per status=none &
      done
      wait
    done
    disk_ms=$((($(date +%s%N) - t0) / 1000000))
    sync && echo 3 >/proc/sys/vm/drop_caches
    note "disk: the ${#shards[@]} shards read (direct I/O, 4 readers a shard) in $disk_ms ms"
    printf 'restart = "%s"\nrestarts = 1\n' "$restart_limit" >"$W/cold.toml"
    rm -rf "$W/gate-cold"
    bounded 120 "$MOPT" gate -m "$ckpt" "${dev_args[@]}" --gates restart --thresholds "$W/cold.toml" \
      --input-len "$gate_in" --output-len 16 --ignore-eos -o "$W/gate-cold" >"$W/gate-cold.txt" 2>"$W/gate-cold.err"
    rc=$?
    note "cold start (page cache dropped, then one start to its first answer; the disk above is its floor):" \
         "exit $rc: $(grep -E '^restart ' "$W/gate-cold.txt")"
  else
    note "cold start: not measured (MOPT_GT_COLD=0, or the page cache cannot be dropped here)"
  fi
  printf 'restart = "%s"\n' "$restart_limit" >"$W/thresholds.toml"
  # A 20 s soak cannot resolve 0.1 MB/h (docs/gate.md): the CPU flow check uses the tests' threshold.
  [[ $cpu == 1 ]] && printf 'leak_mb_per_hour = 1000\n' >>"$W/thresholds.toml"
  echo "== mopt gate: soak $soak at $gate_c in flight, $gate_in words in, $gate_out tokens out;" \
       "restart < $restart_limit"
  rm -rf "$W/gate"
  t0=$SECONDS
  bounded 100000 "$MOPT" gate -m "$ckpt" "${dev_args[@]}" -c "$gate_c" \
    --gates leak,tail,errors,cuda_graphs,resources,restart \
    --input-len "$gate_in" --output-len "$gate_out" --ignore-eos --warmup "$warmup" --soak "$soak" \
    --thresholds "$W/thresholds.toml" --progress lines -o "$W/gate" --markdown "$W/gate.md" \
    >"$W/gate.txt" 2>"$W/gate.err"
  rc=$?
  tail -n 20 "$W/gate.err"
  cat "$W/gate.txt"
  note "gate (bf16): exit $rc in $((SECONDS - t0)) s (0: every gate that applies passed; 1: a gate failed;" \
       "124: out of time)"
  gates='^(leak|tail|errors|cuda_graphs|accuracy|resources|restart) '
  while IFS= read -r line; do note "  $line"; done < <(grep -E "$gates" "$W/gate.txt")
  [[ $rc == 0 ]] || status=1
  { echo "# bf16 checkpoint: every gate but accuracy"; cat "$W/gate.txt"; echo
    echo "# fp8 variant against the bf16 checkpoint: accuracy"; cat "$W/gate-fp8.txt" 2>/dev/null; } >"$O/gate.txt"
  cat "$W/gate.md" "$W/gate-fp8.md" >"$O/gate.md" 2>/dev/null
fi

# ---- 5. mopt tune over both variants -----------------------------------------------------------------------------
if [[ $mode == all || $mode == tune ]]; then
  l=$(left)
  budget=$((l - rerun_s))
  if ((budget < 30)); then
    note "tune: NOT RUN: $l s left of this call; run 'bash scripts/gate_tune_gpu.sh tune' in another call"
    status=1
  else
    echo "== mopt tune -m bf16 -m fp8: $tune_in words in, $tune_out tokens out, $tune_c in flight," \
         "$tune_n requests a trial, SLA $tune_slo, search for $budget s"
    rm -rf "$W/tune"
    t0=$SECONDS
    bounded $((l - 3)) "$MOPT" tune -m "$ckpt" -m "$fp8" "${dev_args[@]}" -c "$tune_c" -n "$tune_n" \
      --warmup "$tune_warmup" --input-len "$tune_in" --output-len "$tune_out" --ignore-eos --slo "$tune_slo" \
      --time-budget "${budget}s" --confirm-runs 1 --progress off -o "$W/tune" >"$O/tune.txt" 2>"$W/tune.err"
    rc=$?
    grep -E '^(mopt tune|mopt plan|SLA|  [a-z-]+: )' "$W/tune.err" | head -n 14
    grep '^\[trial [0-9]*\] ' "$W/tune.err"
    cat "$O/tune.txt"
    [[ -s $W/tune/report.md ]] && cp "$W/tune/report.md" "$O/tune.md"
    [[ -s $W/tune/best.toml ]] && cp "$W/tune/best.toml" "$O/best.toml"
    note "tune: exit $rc in $((SECONDS - t0)) s (0: a winner; 2: no trial met the SLA; 124: out of time)"
    while IFS= read -r line; do note "  $line"; done < <(grep -E '^(search|winner|re-run): ' "$O/tune.txt")
    [[ $rc == 0 ]] || status=1
  fi
fi

# Evidence: logs, soak.json, trial files (one archive: $OUT returns at most 8 files).
tar -C "$W" -czf "$O/evidence.tgz" --exclude="$(basename "$ckpt")" --exclude="$(basename "$fp8")" \
  --exclude=cache --exclude='*.safetensors' . 2>/dev/null
echo
echo "======================== gate_tune_gpu summary ($device, $((SECONDS - t_start)) s) ========================"
printf '%s\n' "${summary[@]}" | tee "$O/summary.txt"
echo "gate_tune_gpu: exit status $status"
exit $status
