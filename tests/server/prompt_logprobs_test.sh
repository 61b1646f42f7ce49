#!/usr/bin/env bash
# Prompt logprobs (echo + logprobs, max_tokens 0) through the official openai npm client (stories260K,
# code-qwen2-25m against transformers' reference).
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
exec node prompt_logprobs.mjs
