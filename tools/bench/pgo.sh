#!/usr/bin/env bash
# pgo.sh OUT: writes to OUT the CPU profile that guides the compiler
# (profile-guided optimisation, https://go.dev/doc/pgo): troupe's hot
# workloads, measured by their benchmarks. They are the El Farol learning
# grid of `troupe experiment` and self-play runs of every built-in
# scenario, with JSONL and without, El Farol with 100 agents and
# tic-tac-toe among them. The binaries profiled are built without a
# profile, so that the result does not depend on the one it replaces.
# `go build ./cmd/troupe` applies cmd/troupe/default.pgo by itself
# (-pgo=auto); `make bench` passes it to the test binaries.
set -euo pipefail
out=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -pgo=off -run '^$' -bench 'ElFarolGrid$' -benchtime 20x \
	-cpuprofile "$tmp/grid.pprof" -o "$tmp/experiment.test" ./experiment >/dev/null
go test -pgo=off -run '^$' -bench 'Scenarios|ElFarol100/(jsonl|discard)|TicTacToe/(jsonl|discard)' -benchtime 1s \
	-cpuprofile "$tmp/runs.pprof" -o "$tmp/bench.test" ./internal/bench >/dev/null
go tool pprof -proto "$tmp/grid.pprof" "$tmp/runs.pprof" >"$out"
echo "wrote $out ($(wc -c <"$out") bytes)"
