#!/usr/bin/env bash
# Installs Debian's chromium for troupe view's browser tests (viewer/
# browser_test.go), once per machine: `make browser`, and `make test` under
# CI. Does nothing when a chromium is already on PATH.
#
#   TROUPE_NO_APT=1   never apt-get install; fail instead
#   TROUPE_APT_LOCK_TIMEOUT  seconds apt-get waits for the package manager's
#                     lock that another apt-get or dpkg holds (default 600)
set -euo pipefail

log() { echo "browser: $*" >&2; }
die() { log "$*"; exit 1; }

for name in chromium chromium-browser; do
	if command -v "$name" >/dev/null; then
		log "$name is installed: $("$name" --version 2>/dev/null || echo "$name")"
		exit 0
	fi
done
if [[ "${TROUPE_NO_APT:-}" == 1 || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
	die "chromium is missing: install Debian's package (apt-get install -y chromium) or put one on PATH"
fi
log "apt-get install chromium"
# Wait for the dpkg and package-list locks that another apt-get holds,
# rather than failing at once.
apt_lock=(-o "DPkg::Lock::Timeout=${TROUPE_APT_LOCK_TIMEOUT:-600}")
DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" install -y -qq --no-install-recommends chromium >&2
command -v chromium >/dev/null || die "apt-get installed chromium, but it is not on PATH"
log "installed: $(chromium --version 2>/dev/null)"
