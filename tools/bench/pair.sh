# pair.sh, sourced by compare.sh and instructions.sh: builds the test binary
# of package $pkg at commit $base (in a temporary worktree) as $tmp/A.test
# and from the working tree as $tmp/B.test, and removes both on exit.
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/base" "$base"
(cd "$tmp/base" && go test -c -o "$tmp/A.test" "$pkg")
(cd "$root" && go test -c -o "$tmp/B.test" "$pkg")
