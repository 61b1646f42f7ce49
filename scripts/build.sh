#!/usr/bin/env bash
# Configures and builds mopt into build/ (Release). Extra args go to cmake (e.g. -DMOPT_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@"
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
