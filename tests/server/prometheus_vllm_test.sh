#!/usr/bin/env bash
# Debian's prometheus scrapes mopt serve --metrics-compat vllm; vLLM-named queries return its data. prometheus
# comes from scripts/install_deps.sh; without it the test fails (it never skips).
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
command -v prometheus >/dev/null || { echo "FAIL: prometheus is missing: run scripts/install_deps.sh"; exit 1; }
exec node prometheus_vllm.mjs
