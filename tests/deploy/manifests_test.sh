#!/usr/bin/env bash
# deploy/k8s, deploy/docker, deploy/systemd and deploy/serve.toml against the Kubernetes schemas and mopt serve's
# flags (tests/deploy/manifests.mjs says what it checks). The node packages come from scripts/install_deps.sh; without
# them the test fails (it never skips).
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}" "${MOPT_SOURCE_DIR:?}"
cd "$(dirname "$0")"
source ../server/check_packages.sh
exec node manifests.mjs
