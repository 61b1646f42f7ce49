# Sourced by the server tests: the node packages they use (the official openai client) must be installed, and from
# the current package-lock.json. scripts/install_deps.sh installs them (npm ci); tests never write here.
command -v node >/dev/null || { echo "FAIL: node missing: run scripts/install_deps.sh"; exit 1; }
if ! cmp -s package-lock.json node_modules/.mopt-installed-lock 2>/dev/null; then
  echo "FAIL: tests/server/node_modules is missing or older than package-lock.json: run scripts/install_deps.sh"
  exit 1
fi
