#!/usr/bin/env bash
# Runs THERE, on a GPU machine, after scripts/gpu_prepare.sh (carry .gpu; the CodeQwen2 model from .gpu-models
# carried by a call just before, as for gpu_all.sh): the tensor-parallel figures of issue 22 in one run
# (docs/tensor_parallel.md). With two or more GPUs, ranks one GPU each; with one, every rank on GPU 0 (the
# protocol only: its speed figures measure no interconnect).
#   1. test_backend_cuda_tp (eager module loading: ranks may share a GPU) and test_backend_cuda's CudaNccl.*;
#   2. top-1 agreement of TP 2 with TP 1 on code-qwen2-25m (fp32 and bf16 compute);
#   3. bench_gpu_tp: all-reduce latency, peer against NCCL, and decode of the Llama-3.1-8B shape at TP 1 and 2;
#      with two GPUs also the Llama-3.1-70B shape (bf16; it does not fit one H200);
#   4. with two GPUs: `mopt run -tp 2 --device cuda` writes the CPU's greedy text on stories260K (fp32).
# Output in $MOPT_GPU_OUT (default $OUT, else /tmp/mopt-gpu-tp).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
export MOPT_MODELS_DIR=$G/models
O=${MOPT_GPU_OUT:-${OUT:-/tmp/mopt-gpu-tp}}
mkdir -p "$O"
status=0
n_gpu=$(nvidia-smi -L | wc -l)
same=(); ((n_gpu >= 2)) || same=(--same-gpu)
echo "== $n_gpu GPU(s)"

echo "== test_backend_cuda_tp, test_backend_cuda CudaNccl.*"
timeout 300 "$G/test_backend_cuda_tp" >"$O/tp_tests.log" 2>&1 || status=1
timeout 120 "$G/test_backend_cuda" --gtest_filter='CudaNccl.*' >>"$O/tp_tests.log" 2>&1 || status=1
grep -E "^\[ +(OK|FAILED) |CUDA tp|NCCL TP|Failure" "$O/tp_tests.log"

echo "== top-1 agreement, TP 2 vs TP 1, code-qwen2-25m"
timeout 200 "$G/bench_gpu_tp" --tp 2 "${same[@]}" --skip-allreduce --skip-decode \
  --agreement "$G/models/code-qwen2-25m" --json "$O/tp_agreement.json" 2>&1 | grep -v "mopt info" || status=1

echo "== bench_gpu_tp, Llama-3.1-8B shape"
timeout 300 "$G/bench_gpu_tp" --tp 2 "${same[@]}" --json "$O/tp_8b.json" 2>&1 | grep -v "mopt info" || status=1

if ((n_gpu >= 2)); then
  echo "== bench_gpu_tp, Llama-3.1-70B shape"
  timeout 400 "$G/bench_gpu_tp" --tp 2 --shape llama-3.1-70b --skip-allreduce --json "$O/tp_70b.json" 2>&1 |
    grep -v "mopt info" || status=1
  if [[ -x "$G/mopt" ]]; then
    echo "== mopt run -tp 2 --device cuda vs --device cpu (stories260K, greedy, 128 tokens)"
    args=(run -m "$G/models/stories260K.gguf" -p "Once upon a time" -n 128 --temp 0)
    timeout 60 "$G/mopt" "${args[@]}" --device cuda -tp 2 >"$O/tp_run_cuda.txt" 2>"$O/tp_run_cuda.err"
    timeout 60 "$G/mopt" "${args[@]}" --device cpu --kv-cache-dtype fp32 >"$O/tp_run_cpu.txt" 2>/dev/null
    if [[ -s "$O/tp_run_cpu.txt" ]] && cmp -s "$O/tp_run_cuda.txt" "$O/tp_run_cpu.txt"; then
      echo "PASS: identical text"
    else
      echo "FAIL"; tail -n 5 "$O/tp_run_cuda.err"; status=1
    fi
  fi
fi
exit $status
