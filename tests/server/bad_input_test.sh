#!/usr/bin/env bash
# Bad-input suite (>= 40 cases) against mopt serve with stories260K; the server survives and frees its KV cache.
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
exec node bad_input.mjs
