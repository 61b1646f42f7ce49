#!/usr/bin/env bash
# Structured output, tool calls and reasoning through the official openai npm client (stories260K).
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
exec node structured_client.mjs
