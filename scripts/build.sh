#!/usr/bin/env bash
# Configures and builds mopt into build/ (Release). Extra args go to cmake (e.g. -DMOPT_CUDA=OFF).
# BUILD_DIR, BUILD_TYPE and JOBS override the defaults; TARGETS (space-separated) builds only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@"
targets=()
[[ -n "${TARGETS:-}" ]] && read -r -a targets <<< "$TARGETS" && targets=(--target "${targets[@]}")
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${targets[@]}"
