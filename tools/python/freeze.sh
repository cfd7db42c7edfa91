#!/usr/bin/env bash
# Rewrites python/requirements/NAME.txt from its venv after a pin changed:
#
#   $TROUPE_CACHE/pyenv-NAME/bin/python -m pip install PACKAGE==VERSION
#   tools/python/freeze.sh NAME
#
# The file keeps its comment header; the pins become the venv's
# `pip freeze --all` less pip, sorted, PyPI's CUDA and Triton wheels marked
# Linux only (as torch's own metadata requires them). The venv must pass
# `pip check`. tools/python/install.sh then adopts the venv as it is.
set -euo pipefail
die() { echo "python: $*" >&2; exit 1; }
(($# == 1)) || die "usage: $0 NAME"
root="$(cd "$(dirname "$0")/../.." && pwd)"
req="$root/python/requirements/$1.txt"
py="${TROUPE_CACHE:-$HOME/.cache/troupe}/pyenv-$1/bin/python"
[[ -x "$py" ]] || die "no venv: $py"
"$py" -m pip check --disable-pip-version-check >&2 || die "pyenv-$1 fails pip check: fix it before pinning it"
tmp="$(mktemp)"
{
	[[ -f "$req" ]] && sed -n '/^#/!q; p' "$req"
	"$py" -m pip freeze --all --disable-pip-version-check | grep -iv '^pip==' |
		sed -E 's/^((cuda-|nvidia-|triton=)[^;]*)$/\1; platform_system == "Linux"/' | LC_ALL=C sort -f
} >"$tmp"
mv "$tmp" "$req"
echo "python: $req: $(grep -vc '^#' "$req") pins" >&2
