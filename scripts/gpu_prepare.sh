#!/usr/bin/env bash
# Runs HERE (no GPU needed): builds mopt, the CUDA backend libmopt_cuda.so, test_backend_cuda (and the GPU test of
# test_engine_speculative) and the GPU benchmarks with nvcc for sm_90a into the git-ignored folder .gpu/ (static
# libstdc++/libgcc; the CUDA runtime is static inside libmopt_cuda.so, cuBLAS dynamic), the object next to the
# executables (mopt loads it from beside itself, the tests and benchmarks link it), copies the shared objects the GPU machine lacks (PCRE2, ...) into
# .gpu/lib, and the model files the GPU run needs into .gpu/models. Then, on the GPU machine, in one `run` call
# with carry [".gpu"]:
#     bash scripts/gpu_all.sh
# code-qwen2-25m (48 MiB of bf16 weights, 33 MiB as .tar.xz), for the CodeQwen2 tests of test_backend_cuda, does not
# fit beside the executables in the 64 MiB a call carries: it goes to .gpu-models/, which travels in a call of its
# own just before (carry [".gpu-models"], command `true`); the machine keeps ignored folders between the calls of
# one warm lease, and scripts/gpu_env.sh unpacks it from there.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${GPU_BUILD_DIR:-build-gpu}
DEST=.gpu
MODELS=${MOPT_MODELS_DIR:-../shared/models}
JOBS=${JOBS:-2}

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
fi
# sm_90a machine code only (the H200's): a release's compute_80 PTX doubles nvcc's time and the archive's size.
# Fat binaries not compressed by nvcc: xz then packs them twice as small (gemm_skinny_mma_fp8.cu's object: 3.86 MB
# compressed by nvcc, 3.47 MB after xz; 31.8 MB uncompressed, 1.80 MB after xz), and bin.txz is one xz archive.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOPT_CUDA=ON "${launcher[@]}" \
  -DMOPT_CUDA_ARCHS="${MOPT_CUDA_ARCHS:-90a-real}" -DCMAKE_CUDA_FLAGS="--compress-mode=none" \
  -DMOPT_TESTS=ON -DMOPT_BENCH=ON -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
targets=(test_backend_cuda test_backend_cuda_tp test_engine_speculative bench_gpu_decode bench_gpu_logits bench_gpu_offline bench_gpu_skinny
         bench_structured_output bench_speculative bench_gpu_tp mopt)
# MOPT_GPU_TARGETS="test_backend_cuda bench_gpu_skinny ...": ship only these (a measurement script that needs a few,
# when all of them would not fit beside the tree, below; test_backend_cuda is always among them, gpu_env.sh needs it).
if [[ -n "${MOPT_GPU_TARGETS:-}" ]]; then
  read -r -a targets <<< "$MOPT_GPU_TARGETS"
  [[ " ${targets[*]} " == *" test_backend_cuda "* ]] || targets+=(test_backend_cuda)
fi
libs=()
for t in "${targets[@]}"; do [[ $t != mopt ]] && libs+=("$t"); done
nice ninja -C "$BUILD" -j "$JOBS" mopt_cuda "${libs[@]}"
# mopt itself needs every module (others' work in progress may not build): optional.
if [[ " ${targets[*]} " == *" mopt "* ]] && ! nice ninja -C "$BUILD" -j "$JOBS" mopt; then
  echo "gpu_prepare: WARNING: mopt did not build; the GPU run will skip the CLI smoke test" >&2
fi

rm -rf "$DEST"
mkdir -p "$DEST/lib" "$DEST/models"
for t in "${targets[@]}" libmopt_cuda.so; do
  [[ -x "$BUILD/$t" ]] || continue
  cp "$BUILD/$t" "$DEST/$t"
  strip --strip-unneeded "$DEST/$t"
done
# Shared objects outside glibc and CUDA (those exist on the GPU machine).
for bin in "$DEST"/*; do
  [[ -f "$bin" && -x "$bin" ]] || continue
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r so; do
    case "$(basename "$so")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libcudart*) ;;
      libmopt_cuda.so) ;;  # ours, beside the executables
      *) cp -L -n "$so" "$DEST/lib/" ;;
    esac
  done
done
for f in stories260K.gguf; do cp "$MODELS/$f" "$DEST/models/"; done
# The executables, libmopt_cuda.so and lib/ travel in one xz archive (the CUDA fat binary shrinks to a third;
# gzip left the folder over a call's 64 MiB once the quantized-weight kernels came): scripts/gpu_env.sh unpacks
# bin.txz there.
bins=()
for t in "${targets[@]}" libmopt_cuda.so; do [[ -x "$DEST/$t" ]] && bins+=("$t"); done
tar -C "$DEST" -cf - "${bins[@]}" lib | xz -T0 -6 > "$DEST/bin.txz"
(cd "$DEST" && rm -rf "${bins[@]}" lib)

# code-qwen2-25m packed with xz (kept in $BUILD between runs: the shared model does not change) and transformers'
# reference outputs; scripts/gpu_env.sh unpacks models/*.tar.xz there.
qarch=$BUILD/code-qwen2-25m.tar.xz
if [[ ! -s "$qarch" || -n "$(find "$MODELS/code-qwen2-25m" -newer "$qarch" -print -quit)" ]]; then
  echo "gpu_prepare: packing code-qwen2-25m (xz, about a minute)"
  tar -C "$MODELS" -cf - code-qwen2-25m | xz -T0 -6 > "$qarch.tmp"
  mv "$qarch.tmp" "$qarch"
fi
cp "$MODELS/code-qwen2-25m.reference.json" "$MODELS/code-eval.txt" "$DEST/models/"
rm -rf .gpu-models && mkdir -p .gpu-models && cp "$qarch" .gpu-models/

du -sh "$DEST"
# A device call carries the tracked files and $DEST, 64 MiB of disk blocks together (not of bytes: the tree's ~860
# small files take ~2 MiB more on disk than their sizes).
tree_kib=$(git ls-files -z | du -ck --files0-from=- | tail -1 | cut -f1)
dest_kib=$(du -sk "$DEST" | cut -f1)
if (( tree_kib + dest_kib > 64 * 1024 )); then
  echo "gpu_prepare: $DEST ($dest_kib KiB on disk) and the tracked files ($tree_kib KiB) are over the 64 MiB a" \
       "device call carries: ship fewer executables (MOPT_GPU_TARGETS=\"test_backend_cuda bench_gpu_decode ...\")" >&2
  exit 1
fi
ls -la "$DEST" "$DEST/models" .gpu-models
