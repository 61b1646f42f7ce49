#!/usr/bin/env bash
# Installs the test's node packages (the official openai client) once; safe when tests run in parallel.
set -euo pipefail
cd "$(dirname "$0")"
command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm missing: run scripts/install_deps.sh"; exit 1; }
exec 9> "${TMPDIR:-/tmp}/mopt-server-tests-npm.lock"
flock 9
if [[ ! -f node_modules/.package-lock.json ]] || ! cmp -s package-lock.json node_modules/.mopt-installed-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.mopt-installed-lock
fi
