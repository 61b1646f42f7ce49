#!/usr/bin/env bash
# The CUDA backend on demand (docs/cuda.md, "The CUDA backend as a shared object"): the mopt binary links no CUDA
# library; without a usable GPU, --device cuda fails with a clear message and --device auto runs on the CPU and
# says why; a missing or foreign libmopt_cuda.so is a clear error, and $MOPT_CUDA_LIB points at another one. In a
# CUDA build, every mopt function libmopt_cuda.so needs from the binary is exported by it.
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}" "${MOPT_CUDA_BUILT:?}"
M=$MOPT_MODELS_DIR
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bin=$MOPT_BIN
run() {  # $1 = output name, rest = extra args of `$bin run`; $with_env: VAR=value words for env(1)
  local name=$1; shift
  set +e
  env ${with_env:-} "$bin" run -m "$M/stories260K.gguf" -p "Once upon a time" -n 24 --temp 0 "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?; set -e  # exit code in $rc, stdout in $tmp/<name>.out, stderr in $tmp/<name>.err
}

# No CUDA library at link time, in the binary's own dependencies or in its loaded closure.
if readelf -d "$MOPT_BIN" | awk '/NEEDED/ {print $NF}' | grep -Ei 'libcuda|libcudart|libcublas'; then
  fail "mopt has a link-time dependency on a CUDA library"
fi
if ldd "$MOPT_BIN" | grep -Ei 'libcuda|libcudart|libcublas'; then fail "ldd mopt lists a CUDA library"; fi
echo "ok: ldd mopt lists no libcuda / libcudart / libcublas"

so=$(dirname "$MOPT_BIN")/libmopt_cuda.so
if [[ $MOPT_CUDA_BUILT == ON ]]; then
  [[ -f $so ]] || fail "CUDA build without $so next to mopt"
  # Every C++ symbol the object leaves undefined must come from the binary (its libstdc++ is its own, hidden).
  nm -D --defined-only "$MOPT_BIN" | awk '{print $3}' | sort -u > "$tmp/exported"
  nm -D --undefined-only "$so" | awk '$1 == "U" && $2 ~ /^_Z/ {print $2}' | sort -u > "$tmp/needed"
  [[ -s $tmp/needed ]] || fail "libmopt_cuda.so needs no mopt function from the binary: the check compares nothing"
  missing=$(comm -23 "$tmp/needed" "$tmp/exported")
  [[ -z $missing ]] || fail "mopt does not export what libmopt_cuda.so needs: $(c++filt <<<"$missing" | tr '\n' ' ')"
  echo "ok: mopt exports the $(wc -l < "$tmp/needed") functions libmopt_cuda.so needs from it"
fi

# The rest is about a machine without a GPU. On one with a GPU it cannot run: a visible skip (ctest's
# SKIP_RETURN_CODE 77), never a pass; scripts/gpu_all.sh checks there that --device auto picks the GPU.
if [[ -e /dev/nvidiactl ]] || nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: this machine has an NVIDIA GPU: the no-GPU checks below cannot run here (the export check above ran)"
  exit 77
fi

# --device cuda: a clear error (in a CUDA build it comes from the loaded object: proof that it loads here).
run cuda --device cuda
[[ $rc -eq 1 ]] || fail "--device cuda without a GPU exited $rc"
grep -q -- "use --device cpu" "$tmp/cuda.err" || fail "--device cuda error does not say what to do: $(cat "$tmp/cuda.err")"
if [[ $MOPT_CUDA_BUILT == ON ]]; then want="no usable CUDA GPU"; else want="not built with CUDA"; fi
grep -q "$want" "$tmp/cuda.err" || fail "--device cuda error lacks '$want': $(cat "$tmp/cuda.err")"
echo "ok: --device cuda: $(head -n 1 "$tmp/cuda.err")"

# --device auto: the CPU, with the reason logged; the same text as --device cpu.
run auto --device auto
[[ $rc -eq 0 ]] || fail "--device auto exited $rc: $(cat "$tmp/auto.err")"
grep -Eq -- "--device auto: using cpu \((no NVIDIA driver|no usable CUDA GPU|this mopt was not built with CUDA)" \
  "$tmp/auto.err" || fail "--device auto did not say it uses the CPU and why: $(cat "$tmp/auto.err")"
run cpu --device cpu
[[ $rc -eq 0 && -s $tmp/cpu.out ]] || fail "--device cpu exited $rc"
cmp -s "$tmp/auto.out" "$tmp/cpu.out" || fail "--device auto and --device cpu printed different text"
echo "ok: $(grep -- '--device auto' "$tmp/auto.err")"

if [[ $MOPT_CUDA_BUILT != ON ]]; then
  echo "ok: all checks of a build without CUDA (the libmopt_cuda.so checks below need a CUDA build)"
  exit 0
fi
# The binary alone (no object beside it): --device cuda names the file and the fix; auto still runs.
mkdir "$tmp/bin" && cp "$MOPT_BIN" "$tmp/bin/mopt"
bin=$tmp/bin/mopt
run alone --device cuda
[[ $rc -eq 1 ]] && grep -q "$tmp/bin/libmopt_cuda.so (next to the mopt executable) does not exist" "$tmp/alone.err" &&
  grep -q "MOPT_CUDA_LIB" "$tmp/alone.err" || fail "missing libmopt_cuda.so: $(cat "$tmp/alone.err")"
run alone_auto --device auto
[[ $rc -eq 0 ]] && cmp -s "$tmp/alone_auto.out" "$tmp/cpu.out" || fail "--device auto without the object: exit $rc"
echo "ok: without libmopt_cuda.so: $(head -n 1 "$tmp/alone.err")"
# $MOPT_CUDA_LIB: the object elsewhere is loaded (its error comes from inside it), a wrong path is named, and a
# library that is not the backend is refused.
with_env="MOPT_CUDA_LIB=$so" run env_ok --device cuda
[[ $rc -eq 1 ]] && grep -q "no usable CUDA GPU" "$tmp/env_ok.err" || fail "MOPT_CUDA_LIB=$so: $(cat "$tmp/env_ok.err")"
with_env="MOPT_CUDA_LIB=$tmp/nowhere.so" run env_missing --device cuda
[[ $rc -eq 1 ]] && grep -q "$tmp/nowhere.so (\$MOPT_CUDA_LIB) does not exist" "$tmp/env_missing.err" ||
  fail "MOPT_CUDA_LIB to a missing file: $(cat "$tmp/env_missing.err")"
libm=$(ldd "$MOPT_BIN" | awk '/libm\.so/ {print $3}')
with_env="MOPT_CUDA_LIB=$libm" run env_foreign --device cuda
[[ $rc -eq 1 ]] && grep -q "is not mopt's CUDA backend" "$tmp/env_foreign.err" ||
  fail "MOPT_CUDA_LIB to another library: $(cat "$tmp/env_foreign.err")"
echo "ok: MOPT_CUDA_LIB (loaded; missing file named; foreign library refused)"
