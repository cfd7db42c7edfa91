# pair.sh, sourced by compare.sh and instructions.sh: builds the test binary
# of package $pkg at commit $base (in a temporary worktree) as $tmp/A.test
# and from the working tree as $tmp/B.test, and removes both on exit. Both
# are built with the profile $PGO (a path from the repository's root, or
# off): the working tree's, so that the code alone differs.
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/base" "$base"
pgo=${PGO:-off}
if [ "$pgo" != off ] && [ "$pgo" != auto ]; then
	pgo=$(cd "$root" && realpath "$pgo")
	cp "$pgo" "$tmp/profile.pgo" # the working tree's, for both
	pgo=$tmp/profile.pgo
fi
(cd "$tmp/base" && go test -pgo="$pgo" -c -o "$tmp/A.test" "$pkg")
(cd "$root" && go test -pgo="$pgo" -c -o "$tmp/B.test" "$pkg")
