#!/usr/bin/env bash
# The preregistered experiment of docs/experiments/equal-cost.md: every arm
# of every game as its own `troupe experiment` (group, tree and episode
# count are experiment-wide), each arm given the episodes that make its
# total cost (environment steps, counterfactual re-simulations and tree
# continuations included) reach the game's budget, then `troupe experiment
# compare` of each game's arms at equal cost and per episode.
#
#   tools/experiments/equal-cost.sh [OUT]      # default out/equal-cost
#
# The budgets are the cost of the difference reward's (leave-one-out's in
# signal) run: 500 weeks of El Farol, 3,000 episodes of Blotto and Signal;
# every cell ends with 200 episodes of its learnt policy alone (--evaluate),
# the measure that compares tree arms, whose main lines are a search's;
# the cost per episode of each arm was read from a run of 8 episodes
# (El Farol N=100: 1 step, difference 101, at-grpo with --tree 4 401).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/equal-cost}
TROUPE=${TROUPE:-$OUT/troupe}
mkdir -p "$OUT"
go build -o "$TROUPE" ./cmd/troupe

SEEDS=(--seeds 10 --seed 1 --evaluate 200)
PG='pg-table:rate=0.1'           # team and counterfactual credit: running-mean baseline
PG0='pg-table:rate=0.1,baseline=0' # group-relative credit: the advantage as published

# arm DIR EPISODES ARGS...: one arm, played unless DIR holds it already.
arm() {
	local dir=$1 episodes=$2
	shift 2
	if [[ -f $dir/report.md ]]; then
		return
	fi
	rm -rf "$dir"
	"$TROUPE" experiment "$@" "${SEEDS[@]}" --episodes "$episodes" --out "$dir" -q
}

# compare OUTDIR REFERENCE DIR=LABEL...
compare() {
	local out=$1 ref=$2
	shift 2
	rm -rf "$out"
	"$TROUPE" experiment compare "$@" --reference "$ref" --out "$out"
}

# El Farol, 7 nights, capacity 6.
for n in 20 100; do
	g=(elfarol --param nights=7 --param capacity=6 --param agents=$n)
	d=$OUT/elfarol-$n
	case $n in
	20) team=10500 grouped=10504 tree=130 ;;
	100) team=50500 grouped=50504 tree=126 ;;
	esac
	arm "$d/difference" 500 "${g[@]}" --allocator difference --learner "$PG"
	arm "$d/team" $team "${g[@]}" --allocator team --learner "$PG"
	for a in grpo rloo magrpo; do
		arm "$d/$a" $grouped "${g[@]}" --allocator $a --group 8 --learner "$PG0"
	done
	arm "$d/at-grpo" $tree "${g[@]}" --allocator at-grpo --tree 4 --learner "$PG0"
	compare "$d/compare" difference "$d/difference=difference" "$d/team=team" "$d/grpo=grpo" \
		"$d/rloo=rloo" "$d/magrpo=magrpo" "$d/at-grpo=at-grpo"
done

# Team Blotto, 3 battlefields, 4 soldiers a side, self-play: NashConv of the
# learnt joint policy at each cell's end (equal cost: every arm ends at the
# budget).
g=(blotto --param fields=3 --param n=4 --nashconv full)
d=$OUT/blotto-selfplay
arm "$d/difference" 3000 "${g[@]}" --allocator difference --learner "$PG"
arm "$d/team" 27000 "${g[@]}" --allocator team --learner "$PG"
arm "$d/shapley" 871 "${g[@]}" --allocator shapley --learner "$PG"
for a in grpo rloo magrpo; do
	arm "$d/$a" 27000 "${g[@]}" --allocator $a --group 8 --learner "$PG0"
done
arm "$d/at-grpo" 819 "${g[@]}" --allocator at-grpo --tree 4 --learner "$PG0"
compare "$d/compare" difference "$d/difference=difference" "$d/team=team" "$d/shapley=shapley" \
	"$d/grpo=grpo" "$d/rloo=rloo" "$d/magrpo=magrpo" "$d/at-grpo=at-grpo"

# Team Blotto against a blue side that learns from its team reward: red's
# share of the battlefields.
g=(blotto --param fields=3 --param n=4 --side red --side-allocator blue=team)
d=$OUT/blotto-side
arm "$d/difference" 3000 "${g[@]}" --allocator difference --learner "$PG"
arm "$d/team" 27000 "${g[@]}" --allocator team --learner "$PG"
arm "$d/grpo" 27000 "${g[@]}" --allocator grpo --group 8 --learner "$PG0"
compare "$d/compare" difference "$d/difference=difference" "$d/team=team" "$d/grpo=grpo"

# Signal, 4 candidates, meaningless symbols. Signal declares no null action,
# so the difference reward is leave-one-out's (the agent absent).
g=(signal --param candidates=4 --param vocab=symbols)
d=$OUT/signal
arm "$d/leave-one-out" 3000 "${g[@]}" --allocator leave-one-out --learner "$PG"
arm "$d/shapley" 3000 "${g[@]}" --allocator shapley --learner "$PG"
arm "$d/team" 6000 "${g[@]}" --allocator team --learner "$PG"
for a in grpo rloo magrpo; do
	arm "$d/$a" 6000 "${g[@]}" --allocator $a --group 8 --learner "$PG0"
done
arm "$d/at-grpo" 858 "${g[@]}" --allocator at-grpo --tree 4 --learner "$PG0"
compare "$d/compare" team "$d/team=team" "$d/leave-one-out=leave-one-out" "$d/shapley=shapley" \
	"$d/grpo=grpo" "$d/rloo=rloo" "$d/magrpo=magrpo" "$d/at-grpo=at-grpo"

# The outputs kept in docs/experiments/equal-cost/ are those of the default
# OUT: compare them byte for byte (UPDATE=1 replaces them).
if [[ $OUT == out/equal-cost ]]; then
	keep=docs/experiments/equal-cost
	status=0
	for g in elfarol-20 elfarol-100 blotto-selfplay blotto-side signal; do
		for f in compare.csv compare_tests.csv report.md cost_curves.svg curves.svg; do
			if [[ ${UPDATE:-} == 1 ]]; then
				mkdir -p "$keep/$g"
				cp "$OUT/$g/compare/$f" "$keep/$g/$f"
			elif ! cmp -s "$OUT/$g/compare/$f" "$keep/$g/$f"; then
				echo "equal-cost: $g/$f differs from $keep/$g/$f" >&2
				status=1
			fi
		done
	done
	if ((status == 0)) && [[ ${UPDATE:-} != 1 ]]; then
		echo "equal-cost: every output is byte-identical to $keep/"
	fi
	exit $status
fi
