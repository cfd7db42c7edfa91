#!/usr/bin/env bash
# Plays docs/experiments/blotto.md's preregistered experiment and checks it:
# two `troupe experiment blotto` commands (blue fixed at the team reward, red's
# reward team, individual or difference; blue fixed at the difference reward,
# red's team or difference), then tools/experiments/blotto_check.py, which
# recomputes their statistics with numpy and applies the preregistered
# criteria. The outputs' CSV and SVG files must be byte-identical to those in
# docs/experiments/blotto/; with --update they replace them.
#
# Usage (from the repository root): tools/experiments/blotto.sh [--update] [OUT]
# OUT defaults to out/blotto. About 20 CPU-seconds.
set -euo pipefail
update=0
if [[ ${1:-} == --update ]]; then
	update=1
	shift
fi
out=${1:-out/blotto}
docs=docs/experiments/blotto
go build -o "$out/troupe" ./cmd/troupe
common=(--param fields=3 --grid n=3,6,12,24 --side red --learner egreedy:alpha=0.1,epsilon=0.1
	--seeds 20 --seed 1 --episodes 3000 --window 300 --quiet)
for arm in team difference; do
	rm -rf "${out:?}/blue-$arm"
done
"$out/troupe" experiment blotto "${common[@]}" --side-allocator blue=team --allocator team,individual,difference \
	--title "Team Blotto: red's reward against blue on the team reward" --out "$out/blue-team"
"$out/troupe" experiment blotto "${common[@]}" --side-allocator blue=difference --allocator team,difference \
	--title "Team Blotto: red's reward against blue on the difference reward" --out "$out/blue-difference"
/usr/bin/python3 tools/experiments/blotto_check.py "$out/blue-team" "$out/blue-difference"
status=0
for arm in team difference; do
	mkdir -p "$docs/blue-$arm"
	for f in "$out/blue-$arm"/{results,finals,modes,comparisons}.csv "$out/blue-$arm"/*.svg; do
		kept="$docs/blue-$arm/$(basename "$f")"
		if ((update)); then
			cp "$f" "$kept"
		elif ! cmp -s "$f" "$kept"; then
			echo "blotto.sh: $f differs from $kept" >&2
			status=1
		fi
	done
done
if ((status == 0 && !update)); then
	echo "blotto.sh: every CSV and SVG is byte-identical to $docs"
fi
exit $status
