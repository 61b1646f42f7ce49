#!/usr/bin/env bash
# mopt serve startup and configuration: --config file, the model's own chat template (code-qwen2-25m, ChatML with
# special tokens), --chat-template override, and startup failures that exit 1 with a clear message.
set -euo pipefail
: "${MOPT_BIN:?}" "${MOPT_MODELS_DIR:?}"
M=$MOPT_MODELS_DIR
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Starts a server in the background; sets PORT and PID. Args: log file, then mopt serve args.
start() {
  local log=$1; shift
  "$MOPT_BIN" serve --port 0 --threads 1 --kv-cache-memory 64MiB "$@" 2> "$log" &
  PID=$!; pids+=("$PID")
  for _ in $(seq 1 300); do
    grep -q "ready:" "$log" && break
    kill -0 "$PID" 2>/dev/null || { cat "$log"; fail "server exited during startup"; }
    sleep 0.1
  done
  PORT=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
  [[ -n "$PORT" ]] || fail "no port in the log"
}
stop() { kill -TERM "$1"; wait "$1" || fail "server exited non-zero on SIGTERM"; }

# --config: settings from a TOML file (served name and max_model_len show in /v1/models).
cat > "$tmp/serve.toml" <<EOT
model = "$M/stories260K.gguf"
served-model-name = ["from-config"]
max-model-len = 300
EOT
start "$tmp/a.log" --config "$tmp/serve.toml"
models=$(curl -sf "http://127.0.0.1:$PORT/v1/models")
[[ "$models" == *'"id":"from-config"'* && "$models" == *'"max_model_len":300'* ]] || fail "--config not applied: $models"
echo "ok: --config file"
# Port in use: exit 1 naming the problem.
set +e; "$MOPT_BIN" serve -m "$M/stories260K.gguf" --port "$PORT" 2> "$tmp/inuse.log"; rc=$?; set -e
[[ $rc -eq 1 ]] && grep -q "cannot listen" "$tmp/inuse.log" || { cat "$tmp/inuse.log"; fail "port in use gave rc $rc"; }
echo "ok: port in use -> exit 1 with a message"
stop "$PID"

# Bad model / bad template file: exit 1 with a message, no crash.
head -c 1000 "$M/stories260K.gguf" > "$tmp/trunc.gguf"
set +e; "$MOPT_BIN" serve -m "$tmp/trunc.gguf" --port 0 2> "$tmp/bad.log"; rc=$?; set -e
[[ $rc -eq 1 ]] && grep -q "trunc.gguf" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "bad model gave rc $rc"; }
echo "ok: bad model -> exit 1 naming the file"
printf '{%% for m in messages %%}{{ m.content }' > "$tmp/broken.jinja"
set +e; "$MOPT_BIN" serve -m "$M/stories260K.gguf" --port 0 --chat-template "$tmp/broken.jinja" 2> "$tmp/tmpl.log"; rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "chat-template" "$tmp/tmpl.log" || { cat "$tmp/tmpl.log"; fail "broken template gave rc $rc"; }
echo "ok: broken --chat-template -> exit 1"

# The model's own ChatML template: the rendering parses <|im_start|> (1) and <|im_end|> (2) as special tokens.
start "$tmp/q.log" -m "$M/code-qwen2-25m" --served-model-name q
body='{"messages":[{"role":"system","content":"You write Python."},{"role":"user","content":"Sort a list."}]}'
toks=$(curl -sf "http://127.0.0.1:$PORT/tokenize" -H 'Content-Type: application/json' -d "$body")
[[ "$toks" == *'"tokens":[1,'* ]] || fail "chat prompt does not start with <|im_start|>: $toks"
n_start=$(grep -o '[[,]1[],]' <<< "$toks" | wc -l); n_end=$(grep -o '[[,]2[],]' <<< "$toks" | wc -l)
[[ $n_start -ge 3 && $n_end -ge 2 ]] || fail "expected 3 <|im_start|> and 2 <|im_end|>: $toks"
echo "ok: the model's chat template with special tokens"
stop "$PID"

# --chat-template overrides it.
printf '{%% for m in messages %%}[{{ m.role }}]{{ m.content }}{%% endfor %%}' > "$tmp/custom.jinja"
start "$tmp/c.log" -m "$M/stories260K.gguf" --chat-template "$tmp/custom.jinja" --served-model-name s
t1=$(curl -sf "http://127.0.0.1:$PORT/tokenize" -H 'Content-Type: application/json' \
       -d '{"messages":[{"role":"user","content":"Hi"}]}')
t2=$(curl -sf "http://127.0.0.1:$PORT/tokenize" -H 'Content-Type: application/json' -d '{"prompt":"[user]Hi"}')
[[ "$t1" == "$t2" ]] || fail "--chat-template not used: $t1 vs $t2"
echo "ok: --chat-template override"
grep -q 'access .* "POST /tokenize" 200 ' "$tmp/c.log" || fail "no access-log line for /tokenize: $(cat "$tmp/c.log")"
echo "ok: access log"
stop "$PID"

# vLLM's spellings: a positional model, an inline --chat-template, --seed (the same unseeded samples from two
# servers), --disable-log-requests (no access-log lines), -tp 1.
sample() {
  curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"v","prompt":"Once upon a time","max_tokens":24,"temperature":1.0}' | sed 's/.*"text":"\([^"]*\)".*/\1/'
}
samples=()
for i in 1 2; do
  start "$tmp/v$i.log" "$M/stories260K.gguf" --seed 11 --disable-log-requests -tp 1 --served-model-name v \
    --chat-template '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}'
  samples+=("$(sample)")
  t1=$(curl -sf "http://127.0.0.1:$PORT/tokenize" -H 'Content-Type: application/json' \
         -d '{"messages":[{"role":"user","content":"Hi"}]}')
  t2=$(curl -sf "http://127.0.0.1:$PORT/tokenize" -H 'Content-Type: application/json' -d '{"prompt":"<user>Hi"}')
  [[ "$t1" == "$t2" ]] || fail "inline --chat-template not used: $t1 vs $t2"
  stop "$PID"
  ! grep -q 'access ' "$tmp/v$i.log" || fail "--disable-log-requests still logs requests: $(cat "$tmp/v$i.log")"
done
[[ -n "${samples[0]}" && "${samples[0]}" == "${samples[1]}" ]] ||
  fail "--seed 11: two servers sampled differently: '${samples[0]}' vs '${samples[1]}'"
echo "ok: positional model, inline --chat-template, --seed, --disable-log-requests"
# What mopt cannot honour is refused at startup, naming the flag.
for case in "-tp 9|tensor-parallel-size" "--generation-config auto|generation-config" \
            "--quantization fp8|quantization" "--kv-cache-dtype fp8|kv-cache-dtype" "--dtype half|dtype"; do
  bad=${case%%|*}
  # shellcheck disable=SC2086
  set +e; "$MOPT_BIN" serve "$M/stories260K.gguf" --port 0 $bad 2> "$tmp/refused.log"; rc=$?; set -e
  [[ $rc -ne 0 ]] && grep -q -- "${case#*|}" "$tmp/refused.log" || fail "$bad: rc $rc, $(cat "$tmp/refused.log")"
done
echo "ok: vLLM flags mopt cannot honour are refused"
echo "all checks passed"
