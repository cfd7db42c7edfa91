#!/usr/bin/env bash
# Readies the Python counterparts of troupe env-serve's end-to-end tests
# (cli/envserve_test.go), once per machine: `make python-e2e`, and `make test`
# under CI. Debian's python3 with numpy, cloudpickle and typing-extensions
# (apt), and snapshots of PettingZoo, Gymnasium, OpenEnv and websockets at
# the commits below, unpacked under DIR (default ~/.cache/troupe/python):
#
#   DIR/lib          pettingzoo/, gymnasium/, websockets/  (TROUPE_PETTINGZOO_PATH)
#   DIR/openenv/src  OpenEnv's client code                  (TROUPE_OPENENV_PATH=DIR/openenv/src:DIR/lib)
#
# Snapshots come from GitHub's tarballs, or, when TROUPE_SNAPSHOTS names a
# directory of bare mirrors (OWNER+NAME/repo, as the fetch tool leaves them),
# from those. It prints the two variables' values, to eval.
#
#   TROUPE_NO_APT=1  never apt-get install; fail instead when a package is missing
set -euo pipefail

log() { echo "python-e2e: $*" >&2; }
die() { log "$*"; exit 1; }

dir="${1:-${TROUPE_CACHE:-$HOME/.cache/troupe}/python}"
# Pinned: the commits the tests were written against (2026-12).
pins=(
	"Farama-Foundation/PettingZoo 761353e6a9d29cb3c6b88232e50ee036f94b08fd pettingzoo lib"
	"Farama-Foundation/Gymnasium 3f0476a8cc224dcce2167cc4b6971ae0f04d5cfc gymnasium lib"
	"python-websockets/websockets 04e599ca3caad2c5bb3fa8eaf24066fd270e90a7 src/websockets lib"
	"huggingface/OpenEnv 385de5ebb8d08d51d000d7dfc19de5f3c6a9c215 src/openenv openenv/src"
)

debs=()
/usr/bin/python3 -c 'import numpy' 2>/dev/null || debs+=(python3-numpy)
/usr/bin/python3 -c 'import cloudpickle' 2>/dev/null || debs+=(python3-cloudpickle)
/usr/bin/python3 -c 'import typing_extensions' 2>/dev/null || debs+=(python3-typing-extensions)
if ((${#debs[@]})); then
	if [[ "${TROUPE_NO_APT:-}" == 1 || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
		die "missing Debian packages: ${debs[*]} (apt-get install -y ${debs[*]})"
	fi
	log "apt-get install ${debs[*]}"
	apt_lock=(-o "DPkg::Lock::Timeout=${TROUPE_APT_LOCK_TIMEOUT:-600}")
	DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" install -y -qq --no-install-recommends "${debs[@]}" >&2
fi

for pin in "${pins[@]}"; do
	read -r repo commit path into <<<"$pin"
	name="${path##*/}"
	stamp="$dir/$into/.$name.$commit"
	[[ -e "$stamp" ]] && continue
	mkdir -p "$dir/$into"
	tmp="$(mktemp -d)"
	mirror="${TROUPE_SNAPSHOTS:-}/${repo/\//+}/repo"
	if [[ -n "${TROUPE_SNAPSHOTS:-}" && -d "$mirror" ]]; then
		log "$repo@${commit:0:12}: from $mirror"
		git --git-dir="$mirror" archive "$commit" "$path" | tar -x -C "$tmp"
	else
		log "$repo@${commit:0:12}: from GitHub"
		curl -fsSL "https://codeload.github.com/$repo/tar.gz/$commit" | tar -xz -C "$tmp" --strip-components=1 "${repo#*/}-$commit/$path"
	fi
	rm -rf "${dir:?}/$into/$name" "$dir/$into/.$name".*
	mv "$tmp/$path" "$dir/$into/$name"
	rm -rf "$tmp"
	touch "$stamp"
done
PYTHONPATH="$dir/lib" /usr/bin/python3 -c 'import pettingzoo, gymnasium, websockets.asyncio.client' ||
	die "the snapshots under $dir/lib do not import"
echo "TROUPE_PETTINGZOO_PATH=$dir/lib"
echo "TROUPE_OPENENV_PATH=$dir/openenv/src:$dir/lib"
