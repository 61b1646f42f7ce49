# Sourced THERE, on the GPU machine, from the repo root by scripts/gpu_all.sh and scripts/gpu_profile.sh: unpacks what
# scripts/gpu_prepare.sh shipped in $MOPT_GPU_DIR (default .gpu): the
# executables, libmopt_cuda.so and lib/ in bin.txz and any model packed as models/*.tar.xz, and points the loader at
# cuBLAS, the directory and its lib/ (the tests and benchmarks link libmopt_cuda.so; mopt finds it beside itself).
G=${MOPT_GPU_DIR:-.gpu}
[[ "$G" == /* ]] || G=$PWD/$G
# scripts/gpu_prepare.sh ships the executables and lib/ in bin.txz (xz; Python's tarfile reads it everywhere).
[[ -f "$G/bin.txz" ]] && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
  "$G/bin.txz" "$G"
for f in test_backend_cuda libmopt_cuda.so; do
  [[ -x "$G/$f" ]] || { echo "gpu_env: $G/$f missing: run scripts/gpu_prepare.sh first" >&2; exit 1; }
done
# Models packed in $G/models, or in .gpu-models/ (beside the repo root), carried by an earlier call of the same
# lease (scripts/gpu_prepare.sh says why).
for a in "$G"/models/*.tar.xz "$PWD"/.gpu-models/*.tar.xz; do
  [[ -f "$a" ]] || continue
  d=$G/models/$(basename "${a%.tar.xz}")
  [[ -d "$d" ]] || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$a" "$G/models" || { echo "gpu_env: cannot unpack $a" >&2; exit 1; }
done

# cuBLAS: the CUDA toolkit's, or the one PyTorch's wheels bring.
libdirs="$G:$G/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [[ -e $d/libcublasLt.so.13 ]] && libdirs+=":$d"; done
pyd=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
[[ -n "$pyd" ]] && libdirs+=":$pyd"
# NCCL (dlopened by the CUDA backend's tensor-parallel path, backend/cuda/nccl_comm.h): the toolkit's, or the wheel's.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -e $d/libnccl.so.2 && ":$libdirs:" != *":$d:"* ]] && libdirs+=":$d"
done
pyd=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
[[ -n "$pyd" ]] && libdirs+=":$pyd"
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
export MOPT_MODELS_DIR="$G/models"
# Where the scripts write their logs and JSON: $OUT (the device call's folder that comes back), else a folder of /tmp.
O=${O:-${OUT:-/tmp/mopt-gpu-out}}
mkdir -p "$O"

# Helpers of the measurement scripts (gpu_spec_plans.sh, gpu_row_slices.sh, gpu_eps_refine.sh, gpu_spec_draft.sh,
# gpu_eps_default.sh, gpu_verify_refine.sh, gpu_persistent.sh, gpu_lm_head.sh, gpu_a8.sh):
# each runs one step under its own time limit, writes its log to $O and prints the lines that decide; the return
# code is the step's.
# gpu_steps "STEP ..." ARGS...: the steps a script was asked for, as " a b " in $steps (none named: all of STEP ...),
# and a number among ARGS in $rounds (default 1).
gpu_steps() {
  local all=$1 a
  shift
  steps=" $* "
  rounds=1
  for a in "$@"; do [[ $a =~ ^[0-9]+$ ]] && rounds=$a; done
  for a in $all; do [[ $steps == *" $a "* ]] && return 0; done
  steps=" $all "
}
# gpu_gtest BINARY FILTER LOG [SECONDS]: a GPU test binary of $G with --gtest_filter; a skip fails too (a GPU test
# that skips on the GPU machine did not run).
gpu_gtest() {
  timeout "${4:-150}" "$G/$1" --gtest_filter="$2" > "$O/$3" 2>&1
  local rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) |PASSED|FAILED TEST|Failure" "$O/$3"
  if grep -q "^\[  SKIPPED \]" "$O/$3"; then rc=1; fi
  return $rc
}
# spec_at_eps LOG_PREFIX EPS [ARGS...]: bench_speculative --device cuda --rounds 2 --profile at one_row_plan_eps EPS
# (code-qwen2-25m, n-gram), log $O/LOG_PREFIX_EPS.log.
spec_at_eps() {
  local log=$O/$1_$2.log e=$2
  shift 2
  timeout 180 "$G/bench_speculative" --device cuda --rounds 2 --profile --one-row-eps "$e" "$@" > "$log" 2>&1
  local rc=$?
  grep -E "speed-up with speculation|cost model|differs| row|^all " "$log"
  return $rc
}
