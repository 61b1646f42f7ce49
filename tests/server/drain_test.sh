#!/usr/bin/env bash
# SIGTERM drain: in-flight streams complete, new connections refused, exit code 0.
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
exec node drain.mjs
