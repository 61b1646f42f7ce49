#!/usr/bin/env bash
# Reference outputs of the mixture-of-experts test models from Hugging Face transformers (scripts/moe_reference.py),
# run where torch and transformers are installed (the GPU machine; no network needed). For each config
# tests/data/moe/<name>.json it writes a random-weight checkpoint with `mopt synth` (f32, seed below: the tests
# regenerate the same weights) and then runs transformers on it. Results go to $OUT (default: ./moe_reference_out):
#   <name>.ref.json, <name>.logits.f32 (commit these into tests/data/moe/) and resaved/<name>/ (not needed there).
# Usage: [MOPT_BIN=build/mopt] [OUT=dir] [DEVICE=cpu|cuda] scripts/moe_reference_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MOPT_BIN=${MOPT_BIN:-build/mopt}
OUT=${OUT:-$PWD/moe_reference_out}
DEVICE=${DEVICE:-cpu}
SEED=7  # tests/unit/backend/moe: kSynthSeed
[[ -x "$MOPT_BIN" ]] || { echo "moe_reference_gpu.sh: no mopt binary at $MOPT_BIN (build it, or set MOPT_BIN)" >&2; exit 1; }
python3 -c 'import torch, transformers, safetensors' || { echo "moe_reference_gpu.sh: needs torch, transformers and safetensors" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
models=()
for cfg in tests/data/moe/*.json; do
  case "$cfg" in *.ref.json) continue ;; esac
  name=$(basename "$cfg" .json)
  "$MOPT_BIN" synth --config "$cfg" -o "$work/$name" --dtype f32 --seed "$SEED" --no-words > /dev/null
  models+=("$work/$name")
done
mkdir -p "$OUT"
python3 scripts/moe_reference.py --out "$OUT" --device "$DEVICE" "${models[@]}"
"$MOPT_BIN" --version > "$OUT/mopt_version.txt" 2>&1 || true
ls -la "$OUT"
