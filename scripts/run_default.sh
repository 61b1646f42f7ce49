#!/usr/bin/env bash
# Quick start: install what is missing, build, and generate from the bundled default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
MODELS=${MOPT_MODELS_DIR:-../shared/models}
./build/mopt inspect "$MODELS/stories260K.gguf"
./build/mopt run -m "$MODELS/stories260K.gguf" -p "Once upon a time" -n 256 --temp 0
