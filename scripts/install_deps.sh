#!/usr/bin/env bash
# Installs the Debian 12 packages mopt needs to build and test (idempotent; uses sudo when not root).
set -euo pipefail
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
