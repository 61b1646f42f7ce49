#!/usr/bin/env bash
# The CPU backend's decode and prompt figures (docs/cpu.md, "Quantized matrix products"): builds bench_decode and
# runs it on a generated 1.1B-parameter Llama (TinyLlama's shape) in every weight format the figures cover, on every
# instruction-set path this CPU runs (the others are named as skipped), with the memory read bandwidth measured in
# the same run before each format. Run it on a quiet machine: other processes change every figure.
# Usage: scripts/bench_cpu.sh [threads (default 2)] [extra bench_decode flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench-cpu}  # its own folder: configuring build/ without CUDA would rebuild it all
threads=${1:-2}
shift || true
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOPT_CUDA=OFF > /dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target bench_decode
exec "$BUILD_DIR/bench_decode" --threads "$threads" --no-stories --prompt 64 \
  --dtypes q4_0,q8_0,q4_k,q5_k,q6_k --isas avx2,avxvnni,avx512 "$@"
