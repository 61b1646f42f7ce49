#!/usr/bin/env bash
# The web console in headless Chromium (tests/deploy/console.mjs says what it checks). Chromium and the node packages
# come from scripts/install_deps.sh; without them the test fails (it never skips).
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
cd "$(dirname "$0")"
source ../server/check_packages.sh
command -v chromium >/dev/null || { echo "FAIL: chromium is missing: run scripts/install_deps.sh"; exit 1; }
exec node console.mjs
