#!/usr/bin/env bash
# Installs the Debian 12 packages mopt needs to build and test, and the node packages of the server tests
# (tests/server: npm ci from its package-lock.json). Idempotent; uses sudo when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libpcre2-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node may come from outside Debian (a newer nodejs without the separate npm package): accept what works.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || tmp+=("$p"); done
  missing=("${tmp[@]+"${tmp[@]}"}")
fi
if ((${#missing[@]})); then
  echo "mopt: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# The server tests' node packages (the official openai client), pinned by tests/server/package-lock.json; the tests
# only check that they are there (tests/server/check_packages.sh).
if ! cmp -s tests/server/package-lock.json tests/server/node_modules/.mopt-installed-lock 2>/dev/null; then
  echo "mopt: installing the server tests' node packages (npm ci in tests/server)"
  (cd tests/server && npm ci --no-audit --no-fund --loglevel=error &&
   cp package-lock.json node_modules/.mopt-installed-lock)
fi
