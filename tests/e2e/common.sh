# Sourced by e2e scripts that run stories260K: checks $MOPT_BIN, sets $model, makes $tmp (removed on exit, with the
# server whose pid is in $srv stopped first), and defines fail MESSAGE.
: "${MOPT_BIN:?set MOPT_BIN to the mopt binary}"
MODELS=${MOPT_MODELS_DIR:-$(dirname "$0")/../../../shared/models}
model="$MODELS/stories260K.gguf"
[[ -f "$model" ]] || { echo "FAIL: $model not found (set MOPT_MODELS_DIR)" >&2; exit 1; }
tmp=$(mktemp -d)
srv=""
cleanup() {
  [[ -n "$srv" ]] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
