#!/usr/bin/env bash
# Installs what the network-partition tests (internal/netns,
# distributed/natsrun/partition_linux_test.go) need besides root: ip
# (Debian's iproute2) and nft (nftables), once per machine: `make
# partitions`. Does nothing when both are on PATH. netem (for delays) is a
# kernel module, not a package: without it the tests drop packets but do
# not delay them, and say so.
#
#   TROUPE_NO_APT=1   never apt-get install; fail instead
#   TROUPE_APT_LOCK_TIMEOUT  seconds apt-get waits for the package manager's
#                     lock that another apt-get or dpkg holds (default 600)
set -euo pipefail

log() { echo "netns: $*" >&2; }
die() { log "$*"; exit 1; }

missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v nft >/dev/null || missing+=(nftables)
if ((${#missing[@]} == 0)); then
	log "ip and nft are installed"
	exit 0
fi
if [[ "${TROUPE_NO_APT:-}" == 1 || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
	die "missing: ${missing[*]}: install Debian's packages (apt-get install -y ${missing[*]})"
fi
log "apt-get install ${missing[*]}"
# Wait for the dpkg and package-list locks that another apt-get holds,
# rather than failing at once.
apt_lock=(-o "DPkg::Lock::Timeout=${TROUPE_APT_LOCK_TIMEOUT:-600}")
DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >&2
command -v ip >/dev/null && command -v nft >/dev/null || die "apt-get installed ${missing[*]}, but ip or nft is not on PATH"
log "installed ${missing[*]}"
