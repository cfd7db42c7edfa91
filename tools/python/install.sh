#!/usr/bin/env bash
# Builds troupe's Python virtual environments from their pinned
# requirements, once per machine, outside the clone:
#
#   tools/python/install.sh NAME...      (e2e agents marl llm)
#
# NAME's pins are python/requirements/NAME.txt (every package, dependencies
# included); its venv is $TROUPE_CACHE/pyenv-NAME (default
# ~/.cache/troupe/pyenv-NAME), where internal/pyenv finds it. make
# python-e2e builds e2e and agents (make test does under CI), make trainers
# marl and llm (torch: gigabytes, many minutes).
#
# A venv is rebuilt from scratch when its requirements file or the Python
# changes: a stamp in the venv holds the file's SHA-256 and the Python's
# version, written only once the install and `pip check` succeeded, so an
# interrupted build is redone. A venv whose packages are exactly the pins
# (built by hand, or stamped for an edit of the comments) is adopted as it
# is, without reinstalling. Packages come
# from pip's index (PyPI unless pip is configured otherwise), with
# --no-deps: the pins are the whole set.
#
#   TROUPE_PYTHON_BASE   the Python the venvs are made with (default
#                        python3; 3.10 or later, with the venv module)
set -euo pipefail

log() { echo "python: $*" >&2; }
die() { log "$*"; exit 1; }

root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${TROUPE_CACHE:-$HOME/.cache/troupe}"
base="${TROUPE_PYTHON_BASE:-python3}"
(($#)) || die "usage: $0 NAME... (the venvs: $(cd "$root/python/requirements" && ls *.txt | sed 's/\.txt$//' | tr '\n' ' '))"

command -v "$base" >/dev/null || die "$base not found (TROUPE_PYTHON_BASE names the Python to build the venvs with)"
version="$("$base" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
"$base" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "$base is Python $version; the pins need 3.10 or later"
if ! "$base" -c 'import venv, ensurepip' 2>/dev/null; then
	# Debian's python3 keeps venv's ensurepip in a package of its own; CI
	# runs as root on Debian, so it installs it, as tools/llama does cmake.
	if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null && [[ "$(command -v "$base")" == /usr/bin/* ]]; then
		log "apt-get install python3-venv (the venv module's ensurepip)"
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv >&2
	fi
	"$base" -c 'import venv, ensurepip' 2>/dev/null || die "$base has no venv or ensurepip module (Debian: apt-get install python3-venv)"
fi

# pins FILE: the requirements' name==version lines, normalised (lower
# case, - for _ and .), comments and environment markers left out.
pins() { sed -e 's/#.*//' -e 's/;.*//' -e 's/[[:space:]]//g' "$1" | norm; }
# installed PYTHON: its packages as pins prints them (pip itself left out).
installed() { "$1" -m pip freeze --all --disable-pip-version-check 2>/dev/null | grep -iv '^pip==' | norm; }
norm() { awk -F'==' 'NF { n = tolower($1); gsub(/[_.]/, "-", n); print n "==" $2 }' | LC_ALL=C sort; }

for name in "$@"; do
	req="$root/python/requirements/$name.txt"
	[[ -f "$req" ]] || die "no requirements for $name: $req does not exist"
	dir="$cache/pyenv-$name"
	stamp="$dir/.troupe-requirements"
	want="$(sha256sum "$req" | cut -d' ' -f1) python $version"
	mkdir -p "$cache"
	(
		# One build per venv at a time: make runs in parallel, or two clones.
		if command -v flock >/dev/null; then
			exec 9>"$cache/.pyenv-$name.lock"
			flock 9
		fi
		if [[ -x "$dir/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
			log "pyenv-$name is up to date ($dir)"
			exit 0
		fi
		if [[ -x "$dir/bin/python" ]] &&
			[[ "$("$dir/bin/python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" == "$version" ]] &&
			diff <(pins "$req") <(installed "$dir/bin/python") >/dev/null; then
			echo "$want" >"$stamp"
			log "pyenv-$name: adopted $dir (its packages are the pins)"
			exit 0
		fi
		log "pyenv-$name: building $dir from $req with $base ($version)"
		rm -rf "$dir"
		"$base" -m venv "$dir"
		"$dir/bin/python" -m pip install --disable-pip-version-check --no-input --no-deps -q -r "$req"
		"$dir/bin/python" -m pip check --disable-pip-version-check >&2 ||
			die "pyenv-$name: the pins of $req are inconsistent (pip check above)"
		echo "$want" >"$stamp"
		log "pyenv-$name: ready ($dir/bin/python)"
	)
done
