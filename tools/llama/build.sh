#!/usr/bin/env bash
# Builds a real llama.cpp server and a tiny test model for troupe's
# end-to-end tests, and caches both outside the clone.
#
# llama.cpp's source comes from the npm package node-llama-cpp, which ships
# it as a git bundle (the npm registry is reachable where GitHub may not be).
# The model has random weights but the real Qwen2 tokenizer and chat
# template, made by make_gguf.py with gguf-py from the same source tree: its
# text is gibberish, but its protocol, token ids, log-probs and grammar-
# constrained output are those of a real server.
#
# Idempotent: every step is skipped when its output is already in the cache,
# so a second run costs a few milliseconds. Outputs are written under a
# temporary name and renamed, so an interrupted run never leaves a
# half-built binary or model that a later run would trust.
#
# Environment:
#   TROUPE_LLAMA_DIR  cache directory (default ${TROUPE_CACHE:-$HOME/.cache/troupe}/llama)
#   LLAMA_JOBS        parallel compile jobs (default 2)
#   PYTHON            a python3 that can import numpy (default: the first of
#                     python3, /usr/bin/python3 that can)
#   TROUPE_NO_APT=1   never apt-get install missing tools; fail instead
#   TROUPE_APT_LOCK_TIMEOUT
#                     seconds apt-get waits for the package manager's lock
#                     that another apt-get or dpkg holds (default 600)
#
# Prints the server and model paths on its last two lines.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=3.21.1
# The tarball's sha1, the "shasum" the npm registry lists for this release.
# npm pack checks the download against the registry; this check pins the
# release itself, so a republished tarball cannot slip into the cache.
NODE_LLAMA_CPP_SHA1=f7579ace3d45c8e93856cebbd8671fa43c2eef1b

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TROUPE_LLAMA_DIR:-${TROUPE_CACHE:-$HOME/.cache/troupe}/llama}"
jobs="${LLAMA_JOBS:-2}"
work="$cache/node-llama-cpp-$NODE_LLAMA_CPP_VERSION"
server="$cache/llama-server"
model="$cache/tiny-qwen2.gguf"
stamp="$cache/VERSION"

log() { printf 'tools/llama: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$cache"
# One build at a time per cache: parallel `make test` runs wait here.
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then flock 9; fi

# The stamp names what the cache was built from: a new release or a changed
# model recipe rebuilds what depends on it.
stamp_of() { printf 'node-llama-cpp %s; model %s\n' "$NODE_LLAMA_CPP_VERSION" "$(sha1sum "$here/make_gguf.py" | cut -d' ' -f1)"; }
want="$(stamp_of)"
if [[ -x "$server" && -f "$model" && -f "$stamp" && "$(cat "$stamp")" == "$want" &&
	"$(cat "$server.version" 2>/dev/null)" == "$NODE_LLAMA_CPP_VERSION" ]]; then
	log "cached in $cache"
	printf '%s\n%s\n' "$server" "$model"
	exit 0
fi

# apt-get waits this long for the dpkg and package-list locks when another
# apt-get (an unattended upgrade, a neighbouring job) holds them, rather
# than failing at once.
apt_lock=(-o "DPkg::Lock::Timeout=${TROUPE_APT_LOCK_TIMEOUT:-600}")

# apt_need CMD PKG: make CMD available, installing Debian's PKG when we may.
apt_updated=
apt_need() {
	local probe="$1" pkg="$2"
	if eval "$probe" >/dev/null 2>&1; then return 0; fi
	if [[ "${TROUPE_NO_APT:-}" == 1 || "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
		die "missing $pkg (install it, e.g. apt-get install -y $pkg)"
	fi
	if [[ -z "$apt_updated" ]]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" update -qq >&2
		apt_updated=1
	fi
	log "apt-get install $pkg"
	DEBIAN_FRONTEND=noninteractive apt-get "${apt_lock[@]}" install -y -qq "$pkg" >&2
	eval "$probe" >/dev/null 2>&1 || die "$pkg installed but still not usable"
}

apt_need 'command -v git' git
apt_need 'command -v npm' npm
apt_need 'command -v cmake' cmake
apt_need 'command -v g++' g++
apt_need 'command -v make' make

# The pyenv shim's python3 on some machines has no numpy; Debian's has it
# once python3-numpy is installed.
pick_python() {
	local p
	for p in ${PYTHON:-} python3 /usr/bin/python3; do
		if command -v "$p" >/dev/null && "$p" -c 'import numpy' >/dev/null 2>&1; then
			command -v "$p"
			return 0
		fi
	done
	return 1
}
if [[ -n "${PYTHON:-}" ]]; then
	"$PYTHON" -c 'import numpy' >/dev/null 2>&1 || die "PYTHON=$PYTHON cannot import numpy"
	python="$PYTHON"
elif ! python="$(pick_python)"; then
	apt_need '/usr/bin/python3 -c "import numpy"' python3-numpy
	python=/usr/bin/python3
fi

start=$SECONDS

# 1. The package, fetched with npm (no install: we need one file of it).
tgz="$work/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz"
if [[ ! -f "$tgz" ]]; then
	log "npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION"
	mkdir -p "$work/npm.tmp"
	(cd "$work/npm.tmp" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null)
	got="$(sha1sum "$work/npm.tmp/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz" | cut -d' ' -f1)"
	[[ "$got" == "$NODE_LLAMA_CPP_SHA1" ]] || die "node-llama-cpp tarball sha1 $got, want $NODE_LLAMA_CPP_SHA1"
	mv "$work/npm.tmp/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz" "$tgz"
	rm -rf "$work/npm.tmp"
fi

# 2. llama.cpp's source, cloned from the bundle inside the package.
src="$work/src"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
	log "unpacking llama.cpp source"
	rm -rf "$work/src.tmp" "$work/pkg"
	mkdir -p "$work/pkg"
	tar -xzf "$tgz" -C "$work/pkg" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
	git -c advice.detachedHead=false clone -q "$work/pkg/package/llama/gitRelease.bundle" "$work/src.tmp" >&2
	[[ -f "$work/src.tmp/CMakeLists.txt" ]] || die "git clone of the bundle produced no source tree"
	mv "$work/src.tmp" "$src"
	rm -rf "$work/pkg"
fi

# 3. llama-server, statically linked against ggml and llama so the binary
# alone can be run or copied. Built for the baseline CPU (no -march=native)
# so a cache moved to another machine still runs; the test model is tiny.
# The binary records the release it was built from, so that a new release
# rebuilds it.
if [[ ! -x "$server" || "$(cat "$server.version" 2>/dev/null)" != "$NODE_LLAMA_CPP_VERSION" ]]; then
	build="$work/build"
	log "building llama-server with $jobs jobs (about 5 minutes on 2 cores)"
	cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
		-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
		>"$work/cmake-configure.log" 2>&1 || { tail -40 "$work/cmake-configure.log" >&2; die "cmake configure failed (log: $work/cmake-configure.log)"; }
	cmake --build "$build" --target llama-server -j "$jobs" >"$work/cmake-build.log" 2>&1 ||
		{ tail -40 "$work/cmake-build.log" >&2; die "cmake build failed (log: $work/cmake-build.log)"; }
	cp "$build/bin/llama-server" "$server.tmp"
	mv "$server.tmp" "$server"
	printf '%s\n' "$NODE_LLAMA_CPP_VERSION" >"$server.version"
	# The objects are 250 MB and only a full rebuild would use them.
	rm -rf "$build"
	log "llama-server built in $((SECONDS - start)) s"
fi

# 4. The test model.
"$server" --version >&2 2>&1 || die "$server does not run"
rm -f "$stamp"
want="$(stamp_of)" # the recipe as it is run now
log "writing $model"
PYTHONPATH="$src/gguf-py" "$python" "$here/make_gguf.py" \
	--vocab "$src/models/ggml-vocab-qwen2.gguf" --out "$model.tmp" >&2
mv "$model.tmp" "$model"

printf '%s\n' "$want" >"$stamp"
log "done in $((SECONDS - start)) s; cache: $cache"
printf '%s\n%s\n' "$server" "$model"
