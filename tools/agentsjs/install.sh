#!/usr/bin/env bash
# Installs the OpenAI Agents SDK for JavaScript (@openai/agents, openai, zod:
# the versions package.json and package-lock.json pin) into a cache outside
# the clone, for seats' end-to-end test of a real agent harness: `make
# agentsjs`, and `make test` under CI. npm ci reads the lock file, so every
# machine gets the same packages; a second run, with the cache in place and
# the lock file unchanged, does nothing.
#
# Environment:
#   TROUPE_AGENTSJS_DIR  cache directory (default ${TROUPE_CACHE:-$HOME/.cache/troupe}/agentsjs)
#
# Prints the cache directory on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TROUPE_AGENTSJS_DIR:-${TROUPE_CACHE:-$HOME/.cache/troupe}/agentsjs}"

log() { printf 'tools/agentsjs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v node >/dev/null || die "node is not on PATH (the Agents SDK needs Node.js 20 or later)"
command -v npm >/dev/null || die "npm is not on PATH"
major="$(node -p 'process.versions.node.split(".")[0]')"
((major >= 20)) || die "node $(node --version) is too old: the Agents SDK needs Node.js 20 or later"

mkdir -p "$cache"
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then flock 9; fi

want="$(cat "$here/package.json" "$here/package-lock.json" | sha1sum | cut -d' ' -f1)"
if [[ -d "$cache/node_modules/@openai/agents" && "$(cat "$cache/STAMP" 2>/dev/null)" == "$want" ]]; then
	log "cached in $cache"
	echo "$cache"
	exit 0
fi
log "npm ci into $cache"
rm -f "$cache/STAMP"
cp "$here/package.json" "$here/package-lock.json" "$cache/"
# --ignore-scripts: none of these packages needs an install script, and none
# is run.
(cd "$cache" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
echo "$want" >"$cache/STAMP"
log "installed: $(cd "$cache" && node -p 'require("./node_modules/@openai/agents/package.json").version') of @openai/agents"
echo "$cache"
