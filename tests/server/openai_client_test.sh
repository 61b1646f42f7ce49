#!/usr/bin/env bash
# The official openai npm client against mopt serve (stories260K); results must match `mopt run`.
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
exec node openai_client.mjs
