#!/usr/bin/env bash
# compare.sh: whether the troupe command at BASE and in the working tree write
# the same bytes: samples and episode records of every built-in scenario at
# concurrency 1 and 8 (dict rewards under several allocators, tree sampling,
# merged turns), the same runs on an embedded NATS server against local ones,
# and troupe serve's answers and status codes to a set of requests. For a
# change that must not change behaviour (a refactor, a move of packages).
#
#   tools/golden/compare.sh [-b BASE]     (default BASE: HEAD)
#
# Prints each file that differs and exits 1 if any does. Needs curl.
set -euo pipefail
base=HEAD
while getopts b: o; do
	case $o in
	b) base=$OPTARG ;;
	*) sed -n '2,11p' "$0"; exit 2 ;;
	esac
done
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/src" "$base"
(cd "$tmp/src" && go build -o "$tmp/A" ./cmd/troupe)
(cd "$root" && go build -o "$tmp/B" ./cmd/troupe)

# runs BIN DIR: the local and NATS runs.
runs() {
	local bin=$1 out=$2 s c
	mkdir -p "$out"
	for s in bargain blotto committee debate elfarol negotiation signal tictactoe werewolf; do
		for c in 1 8; do
			"$bin" run "$s" -n 40 -g 4 -c $c -s 7 -q -a team,difference,shapley,grpo --reward-format dict \
				-o "$out/$s.c$c.jsonl" --episodes-out "$out/$s.c$c.episodes.jsonl" 2>/dev/null ||
				"$bin" run "$s" -n 40 -g 4 -c $c -s 7 -q -a team,grpo,equal-split --reward-format dict \
					-o "$out/$s.c$c.jsonl" --episodes-out "$out/$s.c$c.episodes.jsonl"
		done
		"$bin" run "$s" -n 12 -c 8 -s 3 -q --layout nested --tree 2 -o "$out/$s.tree.jsonl" 2>/dev/null || true
	done
	"$bin" run elfarol -n 200 -c 8 -q --merge-turns -o "$out/elfarol.merged.jsonl"
	for s in elfarol tictactoe werewolf; do
		for c in 1 8; do
			"$bin" run "$s" -n 32 -g 4 -c $c -s 5 -q -a team --reward-format dict --nats embedded \
				--nats-dir "$tmp/nats.$$" -o "$out/$s.nats.c$c.jsonl" --episodes-out "$out/$s.nats.c$c.episodes.jsonl" 2>/dev/null
			rm -rf "$tmp/nats.$$"
		done
	done
	"$bin" run tictactoe -n 12 -c 4 -s 3 -q --tree 2 --nats embedded --nats-dir "$tmp/nats.$$" -o "$out/tree.nats.jsonl" 2>/dev/null
	rm -rf "$tmp/nats.$$" "$out"/*.progress.json
}

# serves BIN DIR: troupe serve's answers, on a free port.
serves() {
	local bin=$1 out=$2 port pid k=0 body
	mkdir -p "$out"
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	"$bin" serve --addr "127.0.0.1:$port" >"$tmp/serve.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
	for body in \
		'{"scenario":"tictactoe","n":4,"seed":3,"policy_seed":4,"group_index":1,"index":0,"rollout_id":10}' \
		'{"scenario":"elfarol","params":{"agents":"12"},"n":2,"seed":5,"policy_seed":6,"allocators":["team","difference"],"reward_format":"dict"}' \
		'{"scenario":"blotto","n":2,"seed":5,"policy_seed":6,"allocators":["team","shapley"],"reward_format":"dict"}' \
		'{"scenario":"tictactoe","n":1,"seed":9,"policy_seed":9,"tree":{"k":2}}' \
		'{"scenario":"werewolf","n":2,"seed":1,"policy_seed":2,"merge_turns":true}' \
		'{"scenario":"nosuch","n":1}' '{"scenario":"tictactoe","n":-1}'; do
		k=$((k + 1))
		curl -s -o "$out/answer$k.json" -w '%{http_code}\n' -X POST -H 'Content-Type: application/json' \
			-d "$body" "http://127.0.0.1:$port/v1/rollouts" >>"$out/codes"
	done
	curl -s "http://127.0.0.1:$port/v1/scenarios" >"$out/scenarios.json"
	curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/v1/rollouts" >>"$out/codes"
	curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/nosuch" >>"$out/codes"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

for side in A B; do
	runs "$tmp/$side" "$tmp/out.$side"
	serves "$tmp/$side" "$tmp/out.$side/serve"
done
differ=0
while read -r f; do
	if ! cmp -s "$tmp/out.A/$f" "$tmp/out.B/$f"; then
		echo "differs: $f"
		differ=1
	fi
done < <(cd "$tmp/out.A" && find . -type f | sort)
n=$(cd "$tmp/out.A" && find . -type f | wc -l)
[ "$(cd "$tmp/out.B" && find . -type f | wc -l)" = "$n" ] || { echo "the two sides wrote different sets of files"; differ=1; }
[ $differ = 0 ] && echo "$n files byte-identical at $base and in the working tree"
exit $differ
