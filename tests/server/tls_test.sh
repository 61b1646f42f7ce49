#!/usr/bin/env bash
# HTTPS with OpenSSL: the openai client over TLS, handshakes gone wrong, bad certificate and key files.
set -euo pipefail
cd "$(dirname "$0")"
source ./check_packages.sh
command -v openssl >/dev/null || { echo "FAIL: openssl is missing: run scripts/install_deps.sh"; exit 1; }
exec node tls.mjs
