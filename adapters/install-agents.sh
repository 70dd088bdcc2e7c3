#!/usr/bin/env bash
# Install the agent CLIs that reef's wrappers run, at the versions pinned in adapters/<name>/descriptor.json.
#   adapters/install-agents.sh [NAME...]      default: claude opencode pi codex
# Each goes to $REEF_AGENTS_DIR/<name> (default ${XDG_DATA_HOME:-~/.local/share}/reef/agents/<name>), where the
# wrappers and tests/test_agents_e2e.py look first. A pin already installed is skipped, and npm's own cache makes a
# reinstall take seconds. Install scripts run with HOME pointed at a temp dir: opencode's postinstall writes there.
# Exit status: 0 when every requested agent is installed, 1 otherwise (each failure is reported).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${REEF_AGENTS_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/reef/agents}"
npm_cache="${npm_config_cache:-$HOME/.npm}"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "install-agents.sh: node and npm are needed (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
[ "$#" -gt 0 ] || set -- claude opencode pi codex
rc=0
for name in "$@"; do
  desc="$here/$name/descriptor.json"
  if [ ! -f "$desc" ]; then echo "install-agents.sh: no adapter '$name'" >&2; rc=1; continue; fi
  read -r pkg ver bin < <(node -e 'const d=require(process.argv[1]); console.log(d.npm.package, d.npm.version, d.binary)' "$desc")
  have="$(node -e 'try { console.log(require(process.argv[1]).version) } catch (e) {}' "$dir/$name/node_modules/$pkg/package.json")"
  if [ "$have" = "$ver" ] && [ -x "$dir/$name/node_modules/.bin/$bin" ]; then
    echo "$name: $pkg@$ver already in $dir/$name"
    continue
  fi
  tmp_home="$(mktemp -d)"
  start=$SECONDS
  if HOME="$tmp_home" XDG_CONFIG_HOME="$tmp_home/.config" XDG_CACHE_HOME="$tmp_home/.cache" \
      XDG_DATA_HOME="$tmp_home/.local/share" npm_config_cache="$npm_cache" \
      npm install --prefix "$dir/$name" --no-audit --no-fund --loglevel=error "$pkg@$ver" >&2 \
      && [ -x "$dir/$name/node_modules/.bin/$bin" ]; then
    echo "$name: installed $pkg@$ver in $dir/$name ($((SECONDS - start)) s)"
  else
    echo "install-agents.sh: could not install $pkg@$ver into $dir/$name" >&2
    rc=1
  fi
  rm -rf "$tmp_home"
done
exit $rc
