# Sourced THERE, on the GPU machine, from the repo root by scripts/gpu_all.sh and scripts/gpu_profile.sh: unpacks the
# executables scripts/gpu_prepare.sh shipped in .gpu/bin.tgz and points the loader at cuBLAS and .gpu/lib.
G=$PWD/.gpu
[[ -f "$G/bin.tgz" ]] && tar -C "$G" -xzf "$G/bin.tgz"  # scripts/gpu_prepare.sh ships the executables gzipped
[[ -x "$G/test_backend_cuda" ]] || { echo "gpu_env: $G/test_backend_cuda missing: run scripts/gpu_prepare.sh first" >&2; exit 1; }

# cuBLAS: the CUDA toolkit's, or the one PyTorch's wheels bring.
libdirs="$G/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [[ -e $d/libcublasLt.so.13 ]] && libdirs+=":$d"; done
pyd=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
[[ -n "$pyd" ]] && libdirs+=":$pyd"
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
export MOPT_MODELS_DIR="$G/models"
