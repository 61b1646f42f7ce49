#!/usr/bin/env bash
# Installs the Debian 12 packages mopt needs to build and test, and the node packages of the server and deployment
# tests (tests/server, tests/deploy: npm ci from their package-lock.json). Idempotent; uses sudo when not root.
# The deployment tests (tests/deploy) use Debian's chromium (the web console in a real browser) and prometheus (with
# promtool: the shipped scrape config, rules and their unit tests), installed without their recommendations.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libpcre2-dev libssl-dev openssl
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev nodejs npm)
deploy_pkgs=(chromium prometheus)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
missing_deploy=()
for p in "${deploy_pkgs[@]}"; do installed "$p" || missing_deploy+=("$p"); done
# Node may come from outside Debian (a newer nodejs without the separate npm package): accept what works.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
if ((${#missing[@]} + ${#missing_deploy[@]})); then
  echo "mopt: installing ${missing[*]} ${missing_deploy[*]}"
  $SUDO apt-get update -qq
fi
if ((${#missing[@]})); then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if ((${#missing_deploy[@]})); then
  # Without recommends: prometheus would bring node-exporter (a service of its own), chromium a desktop's worth.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing_deploy[@]}"
fi

# The tests' node packages, pinned by each folder's package-lock.json: the official openai client (tests/server),
# puppeteer-core (drives the system chromium; it downloads no browser), yaml and kubernetes-models (tests/deploy).
# The tests only check that they are there (tests/server/check_packages.sh).
for dir in tests/server tests/deploy; do
  if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.mopt-installed-lock" 2>/dev/null; then
    echo "mopt: installing the node packages of $dir (npm ci)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.mopt-installed-lock)
  fi
done
