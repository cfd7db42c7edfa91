#!/usr/bin/env bash
# compare.sh: the CPU time of the same work at two commits, alternating, on a
# shared machine where one benchmark's figure moves by half within minutes.
#
#   tools/bench/compare.sh [-b BASE] [-p PKG] [-n EPISODES] [-r ROUNDS] [-c CPUS] BENCH
#
# Builds PKG's test binary at BASE (default HEAD, in a temporary worktree)
# and from the working tree, then runs each in turn ROUNDS times with a fixed
# amount of work (-test.benchtime EPISODESx) under GNU time, and prints the
# user+system CPU seconds of each process, then their medians and minima.
# Interference from other tenants only slows a run, so the minima are the
# cleanest comparison and the medians the typical one. Example:
#
#   tools/bench/compare.sh -b 3914639 -n 400000 'TicTacToe/discard'
set -euo pipefail
base=HEAD pkg=./internal/bench n=100000 rounds=6 cpus=$(nproc)
while getopts b:p:n:r:c: o; do
	case $o in
	b) base=$OPTARG ;; p) pkg=$OPTARG ;; n) n=$OPTARG ;; r) rounds=$OPTARG ;; c) cpus=$OPTARG ;;
	*) sed -n '2,15p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { sed -n '2,15p' "$0"; exit 2; }
bench=$1
[ -x /usr/bin/time ] || { echo "compare.sh: needs GNU time at /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
. "$(dirname "$0")/pair.sh"
cpu() { /usr/bin/time -f '%U %S' "$1" -test.run '^$' -test.bench "$bench" -test.benchtime "${n}x" -test.cpu "$cpus" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'; }
as=() bs=()
for r in $(seq "$rounds"); do
	a=$(cpu "$tmp/A.test") b=$(cpu "$tmp/B.test")
	printf 'round %d: %s %s s, working tree %s s\n' "$r" "$base" "$a" "$b"
	as+=("$a") bs+=("$b")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
least() { printf '%s\n' "$@" | sort -g | head -1; }
echo "CPU seconds for $n episodes of $bench, median (min): $base $(median "${as[@]}") ($(least "${as[@]}")), working tree $(median "${bs[@]}") ($(least "${bs[@]}"))"
