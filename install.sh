#!/usr/bin/env bash
# Install reef from this checkout into a virtual environment and put `reef` on PATH.
#   ./install.sh            reef and its runtime dependencies
#   ./install.sh --dev      plus the test dependencies
# Idempotent: re-running upgrades in place. Env: REEF_VENV (default ./.venv), REEF_BIN_DIR (default ~/.local/bin).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
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
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"

bin_dir="${REEF_BIN_DIR:-$HOME/.local/bin}"
mkdir -p "$bin_dir"
for exe in "$venv"/bin/reef "$venv"/bin/reef-*; do
  [ -e "$exe" ] || continue
  ln -sf "$exe" "$bin_dir/$(basename "$exe")"
done
echo "reef installed in $venv; linked into $bin_dir"
case ":$PATH:" in
  *":$bin_dir:"*) ;;
  *) echo "note: $bin_dir is not on your PATH; add it, or run $venv/bin/reef" ;;
esac
