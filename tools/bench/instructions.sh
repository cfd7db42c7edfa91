#!/usr/bin/env bash
# instructions.sh: the instructions one iteration of a benchmark costs at two
# commits, counted by valgrind's callgrind: a figure that other tenants'
# load does not move, for changes too small for CPU time to show on a shared
# machine (make bench-compare).
#
#   tools/bench/instructions.sh [-b BASE] [-p PKG] [-n N] BENCH
#
# Builds PKG's test binary at BASE (default HEAD, in a temporary worktree)
# and from the working tree, and counts each one's instructions at N and 2N
# iterations (-test.benchtime Nx); the difference over N is the cost of one
# iteration (an episode, a grid), start-up and warm-up left out. It runs
# with GOMAXPROCS=1 and GOGC=off: collections start at moments that differ
# from run to run, which would move the count by hundreds per episode. So
# it does not see the collector's work, nor cache misses: what CPU time
# shows, and this does not, is theirs. Under callgrind, which runs ~50x
# slower, the runner's chunks hold one group each, so per-chunk costs count
# per episode. Example:
#
#   tools/bench/instructions.sh -b 4eef288 -n 2000 'TicTacToe/discard'
set -euo pipefail
base=HEAD pkg=./internal/bench n=1000
while getopts b:p:n: o; do
	case $o in
	b) base=$OPTARG ;; p) pkg=$OPTARG ;; n) n=$OPTARG ;;
	*) sed -n '2,19p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { sed -n '2,19p' "$0"; exit 2; }
bench=$1
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
	{ echo "instructions.sh: needs valgrind (Debian: apt-get install valgrind)" >&2; exit 1; }
. "$(dirname "$0")/pair.sh"
count() { # count BINARY ITERATIONS: the program's instructions
	GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
		"$1" -test.run '^$' -test.bench "$bench" -test.benchtime "$2x" >/dev/null 2>&1
	callgrind_annotate "$tmp/out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}'
}
per() { # per BINARY: instructions per iteration
	local a b
	a=$(count "$1" "$n") b=$(count "$1" $((2 * n)))
	echo $(((b - a) / n))
}
echo "instructions per iteration of $bench (N = $n): $base $(per "$tmp/A.test"), working tree $(per "$tmp/B.test")"
