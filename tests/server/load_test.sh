#!/usr/bin/env bash
# Load test: 256 concurrent streaming clients for 60 s (MOPT_LOAD_SECONDS / MOPT_LOAD_CLIENTS override), zero
# failures, /metrics totals == client counts. About 70 s of wall time.
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
exec node load.mjs
