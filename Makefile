# troupe's everyday tasks. Needs only Go (and bash, which make runs the
# recipes with); nothing here reaches the network except `make lint`,
# which fetches staticcheck from the Go module proxy when it can.

GO        ?= go
OUT       ?= out
# make run: the default self-play run.
EPISODES  ?= 1000
# make bench: time per benchmark, and where the results go.
BENCHTIME ?= 1s
BENCHOUT  ?= $(OUT)/bench.txt
# The CPU profile that guides the compiler (PGO): `go build ./cmd/troupe`
# applies it by itself, and make bench passes it to the test binaries, so
# that they measure the code the troupe command runs. make pgo remakes it;
# PGO=off measures the code without it.
PGO       ?= cmd/troupe/default.pgo
# make fuzz: time per fuzz target, and the bound on minimising each new
# input (Go's default, 60s, can spend a whole FUZZTIME minimising one).
FUZZTIME  ?= 10s
FUZZMINIMIZETIME ?= 100x
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# make llama: where tools/llama/build.sh caches llama-server and its tiny
# test model, outside the clone, so that every clone and CI run reuses it.
LLAMA_DIR ?= $(or $(TROUPE_LLAMA_DIR),$(or $(TROUPE_CACHE),$(HOME)/.cache/troupe)/llama)
# CI builds the real llama.cpp server (about 5 minutes, once per machine)
# and requires its end-to-end tests; elsewhere they run when the cache
# exists and skip, saying so, when it does not.
LLAMA_E2E ?= $(if $(filter true 1,$(CI)),1,)
# make agentsjs: where tools/agentsjs/install.sh installs the OpenAI Agents
# SDK for JavaScript (seats' harness test), outside the clone. CI
# installs it and requires the test; elsewhere it runs when the cache exists
# and skips, saying so, when it does not.
AGENTSJS_DIR ?= $(or $(TROUPE_AGENTSJS_DIR),$(or $(TROUPE_CACHE),$(HOME)/.cache/troupe)/agentsjs)
AGENTSJS_E2E ?= $(if $(filter true 1,$(CI)),1,)
# CI installs Debian's chromium (tools/browser/install.sh) and requires troupe
# view's browser tests; elsewhere they run when chromium is on PATH and skip,
# saying so, when it is not.
BROWSER_E2E ?= $(if $(filter true 1,$(CI)),1,)
# troupe's Python counterparts live in virtual environments pinned from
# PyPI (python/requirements/NAME.txt), cached outside the clone as
# PY_CACHE/pyenv-NAME, rebuilt when their pins change (tools/python/
# install.sh). CI installs the end-to-end ones (pettingzoo, gymnasium,
# openenv-core, verifiers, openai-agents) and requires their tests
# (TROUPE_REQUIRE_PYTHON=1); elsewhere those tests run when the venvs
# exist and skip, saying so, when not. The trainers' (torch) are never
# part of make test: make trainers, and make trainers-test requires their
# tests (TROUPE_REQUIRE_TRAINERS=1).
PY_E2E   ?= $(if $(filter true 1,$(CI)),1,)
PY_CACHE ?= $(or $(TROUPE_CACHE),$(HOME)/.cache/troupe)
# make marl-train: TorchRL's PPO on El Farol through troupe_env's vector
# environment, team reward against difference credit and the patron's own
# score, 10 seeds (docs/marl-training.md; about 200 CPU-seconds); MARL_ARGS
# are the script's flags (examples/torchrl/elfarol_ippo.py --help:
# --env pettingzoo for the PettingZoo environment, --agents 200...).
MARL_OUT  ?= $(OUT)/marl
MARL_ARGS ?= --env vector --reward team --reward difference --reward score --seeds 10 --weeks 2010

# -race needs cgo; without a C compiler the tests still run, without it.
RACE := $(if $(filter 1,$(shell $(GO) env CGO_ENABLED)),-race,)
# make test's go test flags, besides -race. -vet=off: make test has just run
# go vet ./..., every analyzer, so go test's own subset would only repeat it
# (uncached, on every package a change touches). -ldflags=-w: test binaries
# without DWARF, which nothing reads (stack traces and the race detector
# use the Go symbol table), link in about two thirds of the CPU time.
TESTFLAGS ?= -vet=off -ldflags=-w
# The race detector's options for make test: a race-built program sleeps a
# second at exit by default (atexit_sleep_ms=1000), for reports of other
# threads to come out. A test binary exits once its tests have finished
# (a race any of them met is reported by then), and a second for each of
# the 50 test binaries held go test's two package slots for 25 seconds of
# make test's time (an empty package's test: 1.02 -> 0.01 s). GORACE's own
# options come after, and win.
TESTGORACE ?= atexit_sleep_ms=0 $(GORACE)

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

.PHONY: help run build test faults api-check api-snapshot lint bench bench-vector bench-compare bench-instructions pgo fuzz clean llama browser python-e2e trainers trainers-test marl-train trl-grpo agentsjs partitions

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

run: ## self-play El Farol offline; samples to out/elfarol.jsonl
	$(GO) run ./cmd/troupe run elfarol --episodes $(EPISODES) --seed 1 --out $(OUT)/elfarol.jsonl

build: ## build the troupe binary into out/troupe
	$(GO) build -o $(OUT)/troupe ./cmd/troupe

llama: ## build llama-server and a tiny test model into LLAMA_DIR (cached)
	TROUPE_LLAMA_DIR="$(LLAMA_DIR)" bash tools/llama/build.sh

agentsjs: ## install the OpenAI Agents SDK for JavaScript into AGENTSJS_DIR (cached; needs node and npm)
	TROUPE_AGENTSJS_DIR="$(AGENTSJS_DIR)" bash tools/agentsjs/install.sh

partitions: ## the network-partition schedules over network namespaces, the long ones too, required (root; installs nftables; docs/distributed.md#partitions)
	bash tools/netns/install.sh
	TROUPE_PARTITIONS=all TROUPE_REQUIRE_NETNS=1 $(GO) test -count=1 -v -run 'TestPartitions|TestPartitionCutsAndHeals' ./internal/netns ./distributed/natsrun

browser: ## install Debian's chromium for troupe view's browser tests (once; a no-op when installed)
	bash tools/browser/install.sh

# make trl-grpo: TRL's GRPO trainer (pyenv-llm: torch, transformers, trl and
# openenv-core, pinned) trains a tiny model built here on a troupe game served
# by troupe env-serve, through OpenEnv's client, on CPU (docs/openenv.md).
LLM_PY    ?= $(or $(TROUPE_PYTHON_LLM),$(PY_CACHE)/pyenv-llm/bin/python)
TRL_STEPS ?= 30

trl-grpo: build ## TRL's GRPO trains a tiny local model on El Farol through troupe env-serve (OpenEnv), on CPU; out/trl-grpo/summary.json
	$(LLM_PY) examples/trl/troupe_grpo.py --troupe $(OUT)/troupe --steps $(TRL_STEPS) --out $(OUT)/trl-grpo

python-e2e: ## install the pinned venvs of the end-to-end tests: PettingZoo, Gymnasium, OpenEnv, verifiers, Agents SDK (cached in PY_CACHE)
	TROUPE_CACHE="$(PY_CACHE)" bash tools/python/install.sh e2e agents

trainers: ## install the pinned trainers' venvs: torch with TorchRL, and with TRL (gigabytes, many minutes; cached in PY_CACHE)
	TROUPE_CACHE="$(PY_CACHE)" bash tools/python/install.sh marl llm

marl-train: build ## TorchRL's PPO learns El Farol through troupe_env on CPU: team reward against difference credit, into MARL_OUT
	TROUPE_CACHE="$(PY_CACHE)" bash tools/python/install.sh marl
	PYTHONPATH=python CUDA_VISIBLE_DEVICES= "$(PY_CACHE)/pyenv-marl/bin/python" examples/torchrl/elfarol_ippo.py \
		--troupe $(OUT)/troupe --out $(MARL_OUT) $(MARL_ARGS)

trainers-test: trainers ## the trainers' end-to-end tests (TorchRL through troupe_env, TRL through OpenEnv), required (TROUPE_REQUIRE_TRAINERS=1)
	TROUPE_CACHE="$(PY_CACHE)" TROUPE_REQUIRE_TRAINERS=1 $(GO) test -count=1 -run 'TestEnvServeTorchRL|TestTRLGRPO' ./cli

test: $(if $(LLAMA_E2E),llama) $(if $(BROWSER_E2E),browser) $(if $(PY_E2E),python-e2e) $(if $(AGENTSJS_E2E),agentsjs) ## gofmt check, go vet, go test -race (in CI with the llama.cpp, browser, Agents SDK and Python end-to-end tests)
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@# The go.mod files of the whole module graph, which a build alone does
	@# not fetch: cli's TestNewScenarioBuildsTestsAndRuns builds a module of
	@# its own offline (GOPROXY=off), and resolving its graph reads them.
	$(GO) list -m all >/dev/null
	$(if $(RACE),,@echo "note: cgo is off, so the tests run without -race")
	TROUPE_CACHE="$(PY_CACHE)" GORACE="$(TESTGORACE)" TROUPE_LLAMA_DIR="$(LLAMA_DIR)" TROUPE_AGENTSJS_DIR="$(AGENTSJS_DIR)" $(if $(LLAMA_E2E),TROUPE_REQUIRE_LLAMA=1) $(if $(BROWSER_E2E),TROUPE_REQUIRE_BROWSER=1) $(if $(AGENTSJS_E2E),TROUPE_REQUIRE_AGENTSJS=1) $(if $(PY_E2E),TROUPE_REQUIRE_PYTHON=1) \
		$(GO) test $(RACE) $(TESTFLAGS) -timeout 20m ./...

FAULT_EPISODES ?= 40

faults: ## the file-fault matrices (docs/faults.md) over larger runs: every call of a FAULT_EPISODES-episode troupe run, an experiment's and an export's failed in every way
	$(GO) test -count=1 -v -run '^TestFaultMatrix' ./cli -args -faults.episodes $(FAULT_EPISODES) -faults.all

api-check: ## the exported API against the last release's (api/troupe.apidata.gz): each break must be named in CHANGELOG.md
	$(GO) test -count=1 -run '^TestTreeKeepsReleasedAPI$$' ./internal/apicheck

api-snapshot: ## at a release: take the tree's exported API as the baseline api-check compares with
	$(GO) run ./internal/apicheck/apisnapshot -o api/troupe.apidata.gz

lint: ## gofmt, go vet, and staticcheck when the module proxy can serve it
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@if GOBIN="$(abspath $(OUT))/bin" $(GO) install $(STATICCHECK) 2>/dev/null; then \
		echo "$(OUT)/bin/staticcheck ./..."; "$(OUT)/bin/staticcheck" ./...; \
	else \
		echo "staticcheck: could not be installed from the module proxy; skipped"; \
	fi

bench-instructions: ## instructions per iteration at BASE and in the working tree, under callgrind (BENCH=..., PKG=, BASE=, N=, PGO=)
	PGO="$(PGO)" tools/bench/instructions.sh -b "$(or $(BASE),HEAD)" -p "$(or $(PKG),./internal/bench)" -n "$(or $(N),1000)" "$(or $(BENCH),TicTacToe/discard)"

bench-compare: ## the same work's CPU time at BASE and in the working tree, alternating (BENCH=..., PKG=, BASE=, N=, ROUNDS=, PGO=)
	PGO="$(PGO)" tools/bench/compare.sh -b "$(or $(BASE),HEAD)" -p "$(or $(PKG),./internal/bench)" -n "$(or $(N),100000)" -r "$(or $(ROUNDS),6)" "$(or $(BENCH),TicTacToe/discard)"

bench: ## run every benchmark once, the engine's targets again on one core, and the El Farol grid's pure-Python yardstick; results also in out/bench.txt
	@mkdir -p $(dir $(BENCHOUT))
	$(GO) test -pgo=$(PGO) -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./... | tee $(BENCHOUT)
	@# One core, as OpenSpiel's benchmark and the Python loop run: a CPU-second
	@# buys troupe less on two (docs/benchmarks.md).
	$(GO) test -pgo=$(PGO) -run '^$$' -bench 'ElFarol100|TicTacToe|ElFarolGrid(PlainLoop)?$$' -benchmem -benchtime $(BENCHTIME) -cpu 1 ./internal/bench ./experiment | tee -a $(BENCHOUT)
	@if command -v python3 >/dev/null; then \
		echo "python3 tools/bench/elfarol_grid.py"; python3 tools/bench/elfarol_grid.py | tee -a $(BENCHOUT); \
	else \
		echo "python3 not found: the grid's pure-Python yardstick (tools/bench/elfarol_grid.py) skipped"; \
	fi
	@echo "benchmark results written to $(BENCHOUT)"

bench-vector: build ## CPU per move of random tic-tac-toe through the vector environment against PettingZoo's tictactoe_v3, same run (MOVES=, BATCH=)
	$(or $(TROUPE_PYTHON_E2E),$(or $(TROUPE_CACHE),$(HOME)/.cache/troupe)/pyenv-e2e/bin/python) python/bench/vector_bench.py $(OUT)/troupe --moves $(or $(MOVES),200000) $(foreach b,$(or $(BATCH),16 256),--batch $(b)) --out $(OUT)/bench-vector.json

pgo: ## profile the benchmarks' workloads into cmd/troupe/default.pgo, the profile that guides the compiler
	tools/bench/pgo.sh cmd/troupe/default.pgo

fuzz: ## run each Fuzz target for FUZZTIME
	@# -tags fuzzing leaves out the test files whose imports the fuzz targets
	@# never reach (viewer's external tests): the fuzzer instruments every
	@# package in the test binary, and counts their coverage at every execution.
	@targets="$$($(GO) test -tags fuzzing -list '^Fuzz' ./... | awk '/^Fuzz/ { names = names " " $$1; next } /^ok/ { n = split(names, f, " "); for (i = 1; i <= n; i++) print $$2, f[i]; names = "" }')"; \
	if [ -z "$$targets" ]; then echo "no fuzz targets"; exit 0; fi; \
	while read -r pkg name; do \
		echo "$(GO) test -tags fuzzing -run '^$$' -fuzz '^$$name\$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg"; \
		$(GO) test -tags fuzzing -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) "$$pkg"; \
	done <<< "$$targets"

clean: ## remove out/ and test caches
	rm -rf $(OUT)
	$(GO) clean -testcache
