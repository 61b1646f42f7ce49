#!/usr/bin/env bash
# deploy/monitoring: promtool checks the scrape config and the rules and runs the rules' unit tests; then
# tests/deploy/prometheus.mjs runs Debian's prometheus with the shipped config against a mopt serve, and checks the
# Grafana dashboard's and the rules' series against /metrics. Prometheus and the node packages come from
# scripts/install_deps.sh; without them the test fails (it never skips).
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}" "${MOPT_SOURCE_DIR:?}"
cd "$(dirname "$0")"
source ../server/check_packages.sh
for tool in prometheus promtool; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing: run scripts/install_deps.sh"; exit 1; }
done
mon=$MOPT_SOURCE_DIR/deploy/monitoring
promtool check config "$mon/prometheus.yml" || { echo "FAIL: promtool check config"; exit 1; }
echo "ok: promtool check config prometheus.yml"
promtool check rules "$mon/recording_rules.yml" "$mon/alert_rules.yml" || { echo "FAIL: promtool check rules"; exit 1; }
echo "ok: promtool check rules"
out=$(promtool test rules "$mon/tests/alerts_test.yml" 2>&1) || { echo "$out"; echo "FAIL: promtool test rules"; exit 1; }
grep -q SUCCESS <<< "$out" || { echo "$out"; echo "FAIL: promtool test rules did not report SUCCESS"; exit 1; }
echo "ok: promtool test rules tests/alerts_test.yml"
exec node prometheus.mjs
