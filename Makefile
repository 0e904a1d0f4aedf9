# NOVA: build, demo, test and the checks CI runs. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Go is at /usr/local/go on the machines this repository targets.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

BIN := bin
DEMO_DIR ?= .nova/demo
# Ports of the nova dev `make demo` runs for the manager's approval (0: a free
# port), e.g. make demo DEMO_NATS_PORT=24222 DEMO_MONGO_PORT=27028.
DEMO_NATS_PORT ?= 0
DEMO_MONGO_PORT ?= 0
# Every module of go.work, as absolute directories.
MODULES = $(shell $(GO) list -m -f '{{.Dir}}')
# Binaries: the nova CLI and one per service.
SERVICES := graph-engine sandbox audit gateway input-analyzer code-generator code-validator output-validator
# -bench flags of `make bench`, e.g. BENCH_FLAGS='-benchtime 200x -count 5'.
BENCH_FLAGS ?=
IMAGE_PREFIX ?= nova
# The chart's appVersion, the tag the chart's images default to.
IMAGE_TAG ?= $(shell deploy/images/images.sh app-version)

# Pinned proto toolchain: protoc from Debian 12's protobuf-compiler, and
# protoc-gen-go from the `tool` directive of proto/go.mod.
PROTOC_VERSION := libprotoc 3.21.12
PROTOS = $(wildcard proto/nova/v1/*.proto)

# Every Debian package the build, the checks and the tests use, in one list:
#   bubblewrap, python3 and its libraries   the sandbox's Python runtime
#   nodejs, npm                             JavaScript nodes (npm is skipped when
#                                           an npm command exists: NodeSource's
#                                           nodejs carries its own and conflicts
#                                           with Debian's npm package)
#   protobuf-compiler, libprotobuf-dev      protoc and its well-known .proto
#                                           files (google/protobuf/*.proto) for
#                                           `make proto` and the drift check
#   util-linux                              prlimit for the JavaScript sandbox
#   curl                                    the HTTP API examples of docs/, run
#                                           by a test
#   chromium                                the console's browser test (headless,
#                                           driven from Go with chromedp)
# `make deps` installs what is missing, then `make deps-check` proves each tool
# and file is usable and names any that is not.
DEB_PACKAGES := bubblewrap python3 python3-fitz python3-pandas python3-requests \
	python3-pil python3-bs4 python3-lxml python3-openpyxl python3-pypdf \
	nodejs npm protobuf-compiler libprotobuf-dev util-linux curl chromium
# Packages that count as present when their command is (package:command).
DEB_SATISFIED_BY := npm:npm
# What the sandbox's python3 must import (module:Debian package).
PYTHON := /usr/bin/python3
PYTHON_MODULES := fitz:python3-fitz pandas:python3-pandas requests:python3-requests \
	PIL:python3-pil bs4:python3-bs4 lxml:python3-lxml openpyxl:python3-openpyxl \
	pypdf:python3-pypdf

# The JavaScript runtime's packages (axios, cheerio), installed by `make deps`.
JS_RUNTIME := services/sandbox/jsrunner/runtime
# The web console's TypeScript, compiled by tsc (installed by `make deps`)
# into $(CONSOLE)/dist, which is committed and embedded in the gateway.
CONSOLE := services/gateway/console
TSC := /usr/bin/node $(CONSOLE)/node_modules/typescript/bin/tsc

.PHONY: help
help:
	@echo 'make demo    run the invoice-routing and ai-orders examples on the embedded NATS and store, a large invoice approved with nova signal on a nova dev (installs system packages when missing)'
	@echo 'make test    make check, then go test -count=1 ./... in every module of go.work (make test-go: only the tests)'
	@echo 'make build   bin/nova, bin/graph-engine, bin/sandbox, bin/audit, bin/gateway, ... (static, CGO_ENABLED=0)'
	@echo 'make check   generated proto code up to date, gofmt, go vet, the console type-checked and its dist up to date, docs/reference/configuration.md up to date'
	@echo 'make config-doc  regenerate docs/reference/configuration.md from the config structs of the services (env tags, doc comments)'
	@echo 'make console compile the console (services/gateway/console/src, TypeScript) into its dist/'
	@echo 'make fuzz    run each fuzz target (parsers, event decoding, sandbox protocol) for FUZZTIME (default 20000x inputs); part of make test'
	@echo 'make proto   regenerate proto/nova/v1/*.pb.go (protoc $(PROTOC_VERSION))'
	@echo 'make bench   benchmarks of services/nova and the sandbox runner (BENCH_FLAGS=...)'
	@echo 'make bench-sandbox  sandbox latency (p50, p99), executions/s and CPU per execution, warm Python and JavaScript, next to plain python3/node (BENCH_SANDBOX_FLAGS="-n 200 -cases a": 200 executions of case (a) only)'
	@echo 'make bench-messages  messages per 3-node workflow on nova dev by kind (published, deliveries, acks, KV, pull requests, replies), stored per stream, idle messages/s and CPU, beside the commit before; then the servers'"'"' own counts at R1 and R3 (BENCH_MESSAGES_FLAGS="-workflows 200")'
	@echo 'make bench-load  nova dev driven over NATS from outside at 1, 8 and 32 in flight: wf/s, p50/p90/p99, CPU per workflow (nova dev, sandbox processes), PSS, then the same after 20000 more workflows on the same data dir (paired in ABBA order with a fresh nova dev beside, ratios of the means), beside plain python3 (BENCH_LOAD_FLAGS="-history 0" skips that)'
	@echo 'make bench-chain  the chain of work per execution: BSON bytes by collection and the disk bytes of the embedded store, for a 3-node code workflow and ai-orders (BENCH_CHAIN_FLAGS="-baseline-bin DIR" measures another build beside)'
	@echo 'make bench-restart  nova dev restarted after kill -9 with 0, 10000 and 100000 ended executions kept, killed a while after the server wrote its state and before it first did: time until the bucket answers and until a workflow completes, and the TTL scan it logged (BENCH_RESTART_FLAGS=...)'
	@echo 'make bench-control  steering executions: cancel to the program gone (p50/p99, beside a bare SIGKILL), CPU and RSS of nova dev with 1000 executions waiting for a signal over a minute (beside none), lateness of 200 sleeps of 2 s (beside bare message schedules) (BENCH_CONTROL_FLAGS=...)'
	@echo 'make bench-parallel  branches: 10 sleeps of 0.5 s fanned out and joined (beside in a row), a map of 1000 items at concurrency 16 (engine time and CPU per item, RSS; beside 1000 one-node executions), 3-node throughput (beside the commit before branches) (BENCH_PARALLEL_FLAGS=...)'
	@echo 'make bench-scale  the 3-node workflow as nova dev gets 1, 2, 4, 8, 12 cores and as the production shape (NATS, store, audit, engines, sandboxes each a process) gets 1:1 to 4:4 engines:sandboxes (taskset; wf/s, p50/p99, CPU per workflow by part, against linear, NATS msgs and backlogs, where the time went; shapes that do not fit are listed), and the fast path at 1 and 32 in flight beside the commit before (BENCH_SCALE_FLAGS="-nats-servers 3 -profile DIR -before-workers 2")'
	@echo 'make bench-scale-pack  $(BIN)/bench-scale-pack.tgz: static binaries, bwrap and its libraries, and packed.sh, to run make bench-scale on a machine without network or Go (packed.sh TARBALL OUTDIR)'
	@echo 'make bench-gateway  what the HTTP gateway adds: p50 of POST /v1/executions?wait vs the start event over NATS, starts/s through each (BENCH_GATEWAY_FLAGS=...)'
	@echo 'make bench-cache  the generated-code cache: examples/ai-orders.yaml 100 times with the scripted model over HTTP: model calls, tokens and cost of run 1 vs the others, AI-node latency on a hit vs a code node running the cached code; exits 1 if a later run calls the model (BENCH_CACHE_FLAGS=...)'
	@echo 'make bench-console  the console: first paint of the executions list and the workflows page with 100 and 10000 executions stored, in headless Chromium, beside the gateway of BENCH_CONSOLE_BASELINE (BENCH_CONSOLE_FLAGS="-runs 3")'
	@echo 'make bench-store  audit store on the embedded FerretDB: write time and CPU per execution and reads of one execution after 500 to 20000 executions, beside FerretDB as shipped (BENCH_STORE_FLAGS=...)'
	@echo 'make bench-export  nova chain export of 1000 and 100000 executions from the embedded FerretDB: executions/s, peak Go heap and peak RSS growth side by side (BENCH_EXPORT_FLAGS="-executions 20000")'
	@echo 'make chaos   kill each part of NOVA (whole nova dev, sandbox, engine, audit, one NATS server of 3) with SIGKILL under 300 workflows at 50 in flight, and the server firing the ticks of a schedule (and `nova dev` 1.5 s after a tick, per catchup); prints correct/lost/duplicated/redelivered and p50/p99 per case (CHAOS_FLAGS="-workflows 100")'
	@echo 'make deps-images  install $(IMAGE_DEB_PACKAGES) (only for the image targets), and the settings podman needs here'
	@echo 'make base-images  local stand-ins of the base images the Dockerfiles name (debian:bookworm-slim, golang:1.26-bookworm, distroless static) where the registry cannot be reached'
	@echo 'make images  build the nine images with podman (or Docker), tagged $(IMAGE_PREFIX)/<service>:$(IMAGE_TAG) as the chart names them'
	@echo 'make images-test  build the images, then test them with podman: non-root, no toolchain, services up on a read-only root, the sandbox in the chart'"'"'s context and without each relaxation'
	@echo 'make compose-test  build the images, bring deploy/compose.yaml up with podman-compose, run the examples through the gateway with curl, kill the sandbox under load, take it down'
	@echo 'make kube-test  build Helm and the images, play the chart'"'"'s pods with podman kube play (helm template, values of a small install), run workflows through its gateway'
	@echo 'make helm    build Helm from the Go module proxy (the version deploy/test requires) into $(BIN)/tools/'
	@echo 'make helm-lint      helm lint --strict helm/nova (defaults, KEDA off, external NATS)'
	@echo 'make helm-template  helm template helm/nova into $(BIN)/helm-template/ (the same value sets, and the default on a cluster with KEDA)'
	@echo 'make deps    install missing Debian packages ($(DEB_PACKAGES)) and the JavaScript modules, then make deps-check'
	@echo 'make deps-check  check that every tool and file the build, the checks and the tests use is present and works'
	@echo 'make clean   remove bin/, .nova/ and .tilt/'

.PHONY: build
build:
	@mkdir -p $(BIN)
	cd services/nova && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(BIN)/nova .
	@for s in $(SERVICES); do \
		echo "cd services/$$s && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(BIN)/$$s ."; \
		(cd services/$$s && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(BIN)/$$s .); \
	done

.PHONY: demo
demo: deps build
	@case "$(DEMO_DIR)" in ""|/|.|..) echo "refusing to wipe DEMO_DIR='$(DEMO_DIR)'" >&2; exit 1;; esac
	rm -rf -- "$(DEMO_DIR)"
	@echo
	@echo '=== invoice-routing with the built-in sample invoice (3 x 500 EUR) on nova dev: above the threshold, so the'
	@echo '    execution waits at the wait node manager_approval until a manager approves it with nova signal'
	@echo
	@NOVA="$(BIN)/nova" DEMO_DIR="$(DEMO_DIR)" DEMO_NATS_PORT="$(DEMO_NATS_PORT)" DEMO_MONGO_PORT="$(DEMO_MONGO_PORT)" \
		bash examples/approval-demo.sh
	@echo
	@echo '=== the same workflow with --set amount=500: the auto_approve branch'
	@echo
	$(BIN)/nova run examples/invoice-routing.yaml --set amount=500 --chain --data-dir "$(DEMO_DIR)"
	@echo
	@echo '=== ai-orders: AI nodes whose code is written from their prompt, checked, run and verified (total 1500: the review branch).'
	@echo '    The model is the scripted one (examples/scripted-llm.yaml) unless OPENAI_API_KEY or OPENAI_BASE_URL is set.'
	@echo
	$(BIN)/nova run examples/ai-orders.yaml --set total=1500 --chain --data-dir "$(DEMO_DIR)"

.PHONY: test
# The checks that build nothing much come first; the tests then compile
# the modules' dependencies while test binaries already run (most of a test
# waits on a server, a sandbox or a timer), and go vet, the modules' check
# and the fuzzing that follow find them compiled. On 2 cores with an empty
# build cache, `go vet` first spent 354 s compiling what the tests then
# reused, with a core idle while two tests waited. (Fuzzing beside the
# tests under nice gained nothing: 611 s against 612, the tests slower by
# what the fuzzing took; from an empty cache make test is bound by CPU.)
test: deps check-proto check-fmt check-console check-config-doc test-go vet check-modules fuzz

# Fuzz targets (module directory, package, target); plain go test runs their
# seed corpus (f.Add and testdata/fuzz) as regression tests, `make fuzz`
# explores each for FUZZTIME, a count of inputs (20000x: 2 to 17 s a target
# on 2 cores) or a duration (FUZZTIME=10m make fuzz for a long run). The
# default is a count: a duration ends on a clock, where Go before 1.27 can
# fail the target with its own race (go.dev/issue/75804).
FUZZTIME ?= 20000x
FUZZ_TARGETS := \
	pkg:./workflow:FuzzParse \
	pkg:./jsonvalue:FuzzParseObject \
	pkg:./contextsummary:FuzzSummarize \
	pkg:./bus/busfuzz:FuzzDecodeEvent \
	pkg:./eventjson:FuzzUnmarshalMatchesReference \
	services/sandbox:./runner:FuzzProtocolScanner \
	services/sandbox:./outputschema:FuzzAnalyze

# A target that fails with only "context deadline exceeded" and wrote no
# failing input hit Go's own race at the end of a duration -fuzztime
# (go.dev/issue/75804, fixed in Go 1.27): it runs once more; a second
# failure, or any failure that wrote an input, fails.
.PHONY: fuzz
fuzz:
	@out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		dir=$${t%%:*}; rest=$${t#*:}; pkg=$${rest%%:*}; name=$${rest#*:}; \
		for try in 1 2; do \
			echo "=== fuzz $$name in $$dir/$${pkg#./} for $(FUZZTIME)"; \
			if (cd "$$dir" && $(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) "$$pkg") >"$$out" 2>&1; then \
				cat "$$out"; break; \
			fi; \
			cat "$$out"; \
			if [ $$try = 1 ] && grep -q 'context deadline exceeded' "$$out" && ! grep -q 'Failing input written' "$$out"; then \
				echo "=== $$name: only the fuzzing engine's end-of-time race (go.dev/issue/75804), no failing input written: once more"; \
				continue; \
			fi; \
			exit 1; \
		done; \
	done

# go test of every module of go.work in one go command, without the checks:
# it schedules the packages of all modules together, where a loop over the
# modules would leave a core idle while one module's slowest package ran
# alone. TEST_PARALLEL is how many compiles and test binaries run at once:
# three per core, as a test binary spends most of its time waiting (on 2
# cores with everything compiled, -p 2 took 227 s of wall time for 167 s of
# CPU, -p 6 150 s for 169 s).
TEST_PARALLEL ?= $(shell echo $$(( $$(nproc) * 3 )))
# -vet=all: go test runs every go vet check on each package it tests, beside
# the test binaries that wait, where `make vet` after it alone on the CPU
# took 50 s; `make vet` then finds those packages vetted (cached) and vets
# the rest. -timeout 30m: the e2e package alone runs past go test's default
# 10 minutes when another make test shares the machine (each test bounds
# itself; this bounds a package that hangs).
TEST_FLAGS ?= -p $(TEST_PARALLEL) -vet=all -timeout 30m
.PHONY: test-go
test-go:
	@pkgs=""; for m in $(MODULES); do pkgs="$$pkgs ./$${m#$(CURDIR)/}/..."; done; \
	echo "=== go test -count=1 $(TEST_FLAGS) in every module of go.work"; \
	status=0; $(GO) test -count=1 $(TEST_FLAGS) $$pkgs || status=$$?; \
	if [ -n "$${NOVA_CHROMIUM:-}" ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then echo "the console's browser test (TestConsoleInBrowser) ran in headless Chromium"; \
	else echo "SKIPPED: the console's browser test (TestConsoleInBrowser): no chromium; make deps installs Debian package chromium"; fi; \
	if [ $$status != 0 ]; then echo "FAILED: see the FAIL lines above" >&2; exit 1; fi; \
	echo "all modules passed"

.PHONY: check
check: check-proto check-fmt vet check-modules check-console check-config-doc

# docs/reference/configuration.md is generated from the config structs'
# tags and doc comments; the check fails, with a diff, when it is stale.
.PHONY: config-doc check-config-doc
config-doc:
	$(GO) run github.com/novaflow/nova/pkg/config/cmd/configdoc -root $(CURDIR) -out docs/reference/configuration.md
check-config-doc:
	@$(GO) run github.com/novaflow/nova/pkg/config/cmd/configdoc -root $(CURDIR) -out docs/reference/configuration.md -check

# Each module must build on its own (GOWORK=off), as the Dockerfiles build
# it: its go.mod and go.sum must be complete without the workspace, and it
# must select the versions the workspace does, so that what go vet and the
# tests compiled with go.work is what the module builds alone. Both are
# checked by loading every package and test of the module both ways (go
# list; building each module again took 38 s on 2 cores, to compile the
# same code).
.PHONY: check-modules
check-modules:
	@printf '%s\n' $(MODULES) | xargs -P "$$(nproc)" -I@@ sh -c '\
		cd "@@" || exit 255; \
		f="{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}"; \
		alone=$$(mktemp); work=$$(mktemp); trap "rm -f $$alone $$work" EXIT; \
		if ! GOWORK=off GOFLAGS=-mod=readonly $(GO) list -deps -test -f "$$f" ./... >$$alone 2>&1; then \
			head -5 $$alone >&2; echo "@@: does not load without go.work; run GOWORK=off go mod tidy there" >&2; exit 255; fi; \
		$(GO) list -deps -test -f "$$f" ./... >$$work || exit 255; \
		grep -v "^github.com/novaflow/nova" $$alone | sort -u -o $$alone; \
		grep -v "^github.com/novaflow/nova" $$work | sort -u -o $$work; \
		if ! cmp -s $$work $$alone; then \
			echo "@@: selects other versions without go.work (>) than with it (<); align its go.mod with the workspace:" >&2; \
			diff $$work $$alone | grep "^[<>]" | head -10 >&2; exit 255; fi'; \
	echo "modules: each loads on its own, with the versions of the workspace"

# The console's dist/ must be what its sources compile to (type-checked).
.PHONY: console check-console tsc-installed
tsc-installed:
	@test -f $(CONSOLE)/node_modules/typescript/bin/tsc || { \
		echo "TypeScript is not installed in $(CONSOLE)/node_modules: run make deps" >&2; exit 1; }
console: tsc-installed
	$(TSC) -p $(CONSOLE)
	@echo "console: $(CONSOLE)/dist compiled from $(CONSOLE)/src"
check-console: tsc-installed
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(TSC) -p $(CONSOLE) --outDir "$$tmp" || exit 1; \
	if ! diff -r "$$tmp" $(CONSOLE)/dist >/dev/null; then \
		echo "$(CONSOLE)/dist is not what $(CONSOLE)/src compiles to: run make console and commit it" >&2; exit 1; fi; \
	echo "console: type-checked, dist up to date"

.PHONY: check-proto
check-proto: protoc-version
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cd proto && protoc -I . --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--go_out="$$tmp" --go_opt=paths=source_relative nova/v1/*.proto; \
	if ! diff -r -x '*.proto' "$$tmp/nova/v1" nova/v1 >/dev/null; then \
		diff -r -x '*.proto' "$$tmp/nova/v1" nova/v1 | head -40 >&2 || true; \
		echo "proto/nova/v1: generated code differs from the .proto files; run 'make proto' and commit the result" >&2; \
		exit 1; \
	fi; \
	echo "proto: generated code is up to date"

.PHONY: check-fmt
check-fmt:
	@unformatted=$$(find . -path ./.git -prune -o -path ./.nova -prune -o -name '*.go' ! -name '*.pb.go' -print0 | xargs -0 -r gofmt -l); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:" >&2; echo "$$unformatted" >&2; exit 1; fi; \
	echo "gofmt: clean"

.PHONY: vet
vet:
	@pkgs=""; for m in $(MODULES); do pkgs="$$pkgs ./$${m#$(CURDIR)/}/..."; done; \
	$(GO) vet $$pkgs && echo "go vet: every module of go.work"

.PHONY: proto
proto: protoc-version
	cd proto && protoc -I . --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--go_out=. --go_opt=paths=source_relative nova/v1/*.proto

.PHONY: protoc-version
protoc-version:
	@command -v protoc >/dev/null || { echo "protoc not found: run 'make deps' (Debian package protobuf-compiler, $(PROTOC_VERSION))" >&2; exit 1; }
	@v="$$(protoc --version)"; if [ "$$v" != "$(PROTOC_VERSION)" ]; then \
		echo "protoc is '$$v' but NOVA's generated code is pinned to '$(PROTOC_VERSION)' (Debian 12 protobuf-compiler); install that version" >&2; \
		exit 1; fi

.PHONY: bench
bench:
	cd services/nova && $(GO) test -run '^$$' -bench . -benchmem $(BENCH_FLAGS) ./...
	cd services/sandbox/runner && $(GO) test -run '^$$' -bench . -benchmem $(BENCH_FLAGS) ./...

# What the engine sees of one execution, next to a plain interpreter subprocess
# measured in the same run (see services/sandbox/cmd/bench-sandbox).
BENCH_SANDBOX_FLAGS ?=
# Chaos: SIGKILL of each part under load, loopback only, bounded in time
# (-case-timeout, 4 minutes per case by default). Exits 1 unless every case
# completes every workflow correctly with each audit document once.
CHAOS_FLAGS ?=
.PHONY: chaos
chaos: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-chaos ./chaos
	$(BIN)/nova-chaos -bin $(BIN) $(CHAOS_FLAGS)

# Load: a nova dev on a fresh data dir driven over NATS from a separate
# process; wf/s, latency, CPU per workflow by process, PSS, and a baseline of
# plain python3 subprocesses in the same run (BENCH_LOAD_FLAGS="-workflows 1000").
BENCH_LOAD_FLAGS ?=
.PHONY: bench-load
bench-load: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchload ./load
	$(BIN)/nova-benchload -bin $(BIN) $(BENCH_LOAD_FLAGS)

# Messages: what a 3-node workflow costs the bus, counted by kind
# (published, deliveries, acks, KV, pull requests, replies), the messages
# stored per stream, idle messages a second and CPU, beside the build of
# BENCH_MESSAGES_BASE; then the servers' own counts on one server and on
# three with every stream on three (BENCH_MESSAGES_FLAGS="-r3=false").
BENCH_MESSAGES_BASE ?= 3497adc
.PHONY: bench-messages
bench-messages: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchmessages ./messages
	$(call base-nova,$(BENCH_MESSAGES_BASE),$(BIN)/base-messages)
	$(BIN)/nova-benchmessages -bin $(BIN) -base-bin $(BIN)/base-messages $(BENCH_MESSAGES_FLAGS)

# The chain of work's bytes per execution (BSON by collection, the embedded
# store's disk) for a 3-node code workflow and ai-orders; beside another
# commit's binaries with BENCH_CHAIN_FLAGS='-baseline-bin DIR'.
.PHONY: bench-chain
bench-chain: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchchain ./chain
	$(BIN)/nova-benchchain -bin $(BIN) $(BENCH_CHAIN_FLAGS)

# nova dev restarted after kill -9 with 0, 10000 and 100000 ended
# executions' states kept: until the bucket answers, until a workflow
# completes (BENCH_RESTART_FLAGS="-states 0,600000").
.PHONY: bench-restart
bench-restart: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchrestart ./restart
	$(BIN)/nova-benchrestart -bin $(BIN) $(BENCH_RESTART_FLAGS)

# Steering executions on nova dev: cancel to the program's process gone,
# CPU and memory while 1000 executions wait for a signal, lateness of 200
# sleeps of 2 s, each beside a baseline (BENCH_CONTROL_FLAGS="-idle 10s").
# Branches: a fan-out of 10 sleeps beside the same nodes in a row, a map of
# 1000 items at concurrency 16 beside 1000 one-node executions, and the
# 3-node sequential throughput beside the commit before branches
# (BENCH_PARALLEL_BASE), built here from its tree.
BENCH_PARALLEL_BASE ?= 8601b4f
.PHONY: bench-parallel
bench-parallel: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchparallel ./parallel
	$(call base-nova,$(BENCH_PARALLEL_BASE),$(BIN)/base-parallel)
	$(BIN)/nova-benchparallel -bin $(BIN) -base-bin $(BIN)/base-parallel $(BENCH_PARALLEL_FLAGS)

# Throughput as nova dev gets more cores and as the production shape gets
# more engine and sandbox replicas (each part pinned with taskset, the load
# on the last cores; the shapes that do not fit the machine are listed as
# skipped), and the fast path at 1 and 32 in flight beside the commit
# before the sandbox ran one program per CPU (BENCH_SCALE_BASE).
BENCH_SCALE_BASE ?= 89e9ece~1
.PHONY: bench-scale
bench-scale: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchscale ./scale
	$(call base-nova,$(BENCH_SCALE_BASE),$(BIN)/base-scale)
	$(BIN)/nova-benchscale -bin $(BIN) -base-bin $(BIN)/base-scale $(BENCH_SCALE_FLAGS)

# bench-scale-pack writes $(BIN)/bench-scale-pack.tgz for a machine without
# network or Go (a many-core one): static binaries, bubblewrap and the
# libraries it links beyond libc, and the script that runs it
# (bench/scale/packed.sh TARBALL OUTDIR).
.PHONY: bench-scale-pack
bench-scale-pack:
	rm -rf $(BIN)/bench-scale-pack && mkdir -p $(BIN)/bench-scale-pack/lib
	for s in nova graph-engine sandbox audit; do \
		(cd services/$$s && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/$(BIN)/bench-scale-pack/$$s .) || exit 1; done
	cd bench && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/$(BIN)/bench-scale-pack/nova-benchscale ./scale
	cp "$$(command -v bwrap)" bench/scale/packed.sh $(BIN)/bench-scale-pack/
	ldd "$$(command -v bwrap)" | awk '/=> \// && $$1 !~ /^libc\.so/ {print $$3}' | xargs -I{} cp -L {} $(BIN)/bench-scale-pack/lib/
	tar -C $(BIN)/bench-scale-pack -czf $(BIN)/bench-scale-pack.tgz .
	@ls -l $(BIN)/bench-scale-pack.tgz $(BIN)/bench-scale-pack/lib

# base-nova builds nova from another commit's tree into a directory, for
# the benchmarks that compare with it: $(call base-nova,REV,DIR).
define base-nova
	rm -rf $(2) && mkdir -p $(2)/src
	git archive $(1) | tar -x -C $(2)/src
	cd $(2)/src/services/nova && CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/$(2)/nova .
	rm -rf $(2)/src
endef

.PHONY: bench-control
bench-control: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchcontrol ./control
	$(BIN)/nova-benchcontrol -bin $(BIN) $(BENCH_CONTROL_FLAGS)

# The audit store as its history grows, on the embedded FerretDB: write time
# and CPU per execution and reads of one execution at several history sizes,
# beside FerretDB as shipped in the same run (BENCH_STORE_FLAGS="-sizes 500,5000").
BENCH_STORE_FLAGS ?=
.PHONY: bench-store
bench-store:
	cd bench && $(GO) run ./store $(BENCH_STORE_FLAGS)

# The archive export of the chain of work on the embedded FerretDB: 1000
# and 100,000 executions exported, side by side: executions/s, the peak Go
# heap and the peak RSS growth during the export (BENCH_EXPORT_FLAGS="-executions 20000").
BENCH_EXPORT_FLAGS ?=
.PHONY: bench-export
bench-export:
	cd bench && $(GO) run ./export $(BENCH_EXPORT_FLAGS)

# The console's first paint: the executions list (and its API reads) and
# the workflows page, in headless Chromium with chromium, with 100 and
# 10,000 executions stored, beside the gateway of BENCH_CONSOLE_BASELINE
# (built from a git worktree of it) in the same run, with ratios. The
# default baseline is the commit before the executions list's totals, whole
# ids, parent links and batch actions; BENCH_CONSOLE_BASELINE= measures
# this build alone.
BENCH_CONSOLE_BASELINE ?= 6d5d177
BENCH_CONSOLE_FLAGS ?=
.PHONY: bench-console
bench-console:
	cd bench && $(GO) run ./console $(if $(BENCH_CONSOLE_BASELINE),-baseline $(BENCH_CONSOLE_BASELINE)) $(BENCH_CONSOLE_FLAGS)

.PHONY: bench-gateway
bench-gateway: build
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchgateway ./gateway
	$(BIN)/nova-benchgateway -bin $(BIN) $(BENCH_GATEWAY_FLAGS)

# The generated-code cache: examples/ai-orders.yaml run
# 100 times one at a time on the in-process stack with the scripted model
# over HTTP, beside its AI nodes pinned to the cached code, alternately.
# Exits 1 when a run after the first calls the model (BENCH_CACHE_FLAGS="-runs 20").
BENCH_CACHE_FLAGS ?=
.PHONY: bench-cache
bench-cache:
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/nova-benchcache ./cache
	$(BIN)/nova-benchcache -workflow examples/ai-orders.yaml $(BENCH_CACHE_FLAGS)

.PHONY: bench-sandbox
bench-sandbox:
	cd services/sandbox && $(GO) run ./cmd/bench-sandbox $(BENCH_SANDBOX_FLAGS)

# Container images, with podman (make deps-images) or a Docker engine;
# deploy/images/images.sh says how. make base-images makes local stand-ins
# of the Dockerfiles' base images where the registry cannot be reached.
# What deps-images installs: the container engine and its tools, only for
# the image targets (make deps does not).
IMAGE_DEB_PACKAGES := podman buildah podman-compose debootstrap runc uidmap slirp4netns golang-github-containernetworking-plugin-dnsname catatonit
.PHONY: deps-images base-images images
deps-images:
	PACKAGES="$(IMAGE_DEB_PACKAGES)" deploy/images/images.sh deps
base-images:
	deploy/images/images.sh base
images:
	PREFIX=$(IMAGE_PREFIX) TAG=$(IMAGE_TAG) SERVICES="nova $(SERVICES)" deploy/images/images.sh build
# The images' tests (deploy/test/images), on images built from this tree.
.PHONY: images-test
images-test: base-images images
	cd deploy/test && IMAGE_PREFIX=$(IMAGE_PREFIX) IMAGE_TAG=$(IMAGE_TAG) NOVA_IMAGES_TEST=1 $(GO) test -count=1 -v ./images
# deploy/compose.yaml brought up with podman-compose on the images built
# from this tree (deploy/test/compose says what it changes to run offline).
.PHONY: compose-test
compose-test: base-images images
	cd deploy/test && IMAGE_PREFIX=$(IMAGE_PREFIX) IMAGE_TAG=$(IMAGE_TAG) NOVA_COMPOSE_TEST=1 $(GO) test -count=1 -v ./compose
# The chart's pods played with podman kube play (deploy/test/kube says
# what kube play cannot run and how each is checked instead).
.PHONY: kube-test
kube-test: helm base-images images
	cd deploy/test && HELM=$(HELM) IMAGE_PREFIX=$(IMAGE_PREFIX) IMAGE_TAG=$(IMAGE_TAG) NOVA_KUBE_TEST=1 $(GO) test -count=1 -v ./kube

# Helm is built from the Go module proxy (no prebuilt binary), at the version
# deploy/test requires: its chart test renders and lints with the same Helm.
HELM_VERSION = $(shell cd deploy/test && GOWORK=off $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM = $(CURDIR)/$(BIN)/tools/helm-$(HELM_VERSION)/helm
CHART := helm/nova
# Value sets that lint and render must accept.
HELM_VALUE_SETS := default: keda-off:--set=keda.enabled=false external-nats:--set=nats.enabled=false
# helm template only (helm lint cannot be told the cluster's APIs): the
# default install on a cluster that serves KEDA's API.
HELM_TEMPLATE_SETS := keda:--api-versions=keda.sh/v1alpha1/ScaledObject

.PHONY: helm
helm:
	@test -x "$(HELM)" || { echo "building helm $(HELM_VERSION) from the Go module proxy"; \
		GOWORK=off GOBIN="$(dir $(HELM))" $(GO) install -trimpath \
			-ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" \
			helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); }
	@"$(HELM)" version --short

.PHONY: helm-lint
helm-lint: helm
	@for set in $(HELM_VALUE_SETS); do \
		echo "helm lint --strict $(CHART) $${set#*:}"; \
		"$(HELM)" lint --strict $(CHART) $${set#*:} | grep -v '^$$'; \
	done

.PHONY: helm-template
helm-template: helm
	@mkdir -p $(BIN)/helm-template
	@for set in $(HELM_VALUE_SETS) $(HELM_TEMPLATE_SETS); do \
		out=$(BIN)/helm-template/$${set%%:*}.yaml; \
		"$(HELM)" template nova $(CHART) --namespace nova $${set#*:} > "$$out"; \
		echo "$$out: $$(grep -c '^kind:' "$$out") objects ($$(grep '^kind:' "$$out" | sort | uniq -c | awk '{printf "%s %s, ", $$1, $$3}' | sed 's/, $$//'))"; \
	done

.PHONY: deps
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' && continue; \
		for sat in $(DEB_SATISFIED_BY); do \
			if [ "$${sat%%:*}" = "$$p" ] && command -v "$${sat#*:}" >/dev/null; then continue 2; fi; \
		done; \
		missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "system packages: all present"; else \
	command -v apt-get >/dev/null || { echo "missing system packages:$$missing (install them with your package manager)" >&2; exit 1; }; \
	sudo=""; if [ "$$(id -u)" != 0 ]; then sudo=sudo; fi; \
	echo "installing system packages:$$missing"; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; fi
	@# axios and cheerio for JavaScript nodes, pinned by the lock file; installed
	@# again when the lock file changed since the last install.
	@if [ ! -f $(JS_RUNTIME)/node_modules/.package-lock.json ] || \
		[ $(JS_RUNTIME)/package-lock.json -nt $(JS_RUNTIME)/node_modules/.package-lock.json ]; then \
		echo "npm ci --prefix $(JS_RUNTIME)"; \
		npm ci --prefix $(JS_RUNTIME) --omit=dev --ignore-scripts --no-audit --no-fund; \
	fi
	@# TypeScript for the console, pinned by its lock file.
	@if [ ! -f $(CONSOLE)/node_modules/.package-lock.json ] || \
		[ $(CONSOLE)/package-lock.json -nt $(CONSOLE)/node_modules/.package-lock.json ]; then \
		echo "npm ci --prefix $(CONSOLE)"; \
		npm ci --prefix $(CONSOLE) --ignore-scripts --no-audit --no-fund; \
	fi
	@$(MAKE) --no-print-directory deps-check

# Proves that every tool and file the build, the checks and the tests use is
# there and works, and names each one that is not (with the package or step
# that provides it). Installs nothing.
.PHONY: deps-check
deps-check:
	@bad=0; \
	ok()   { printf '  ok       %-14s %s\n' "$$1" "$$2"; }; \
	fail() { printf '  MISSING  %-14s %s\n' "$$1" "$$2" >&2; bad=1; }; \
	echo "checking what the build, the checks and the tests use:"; \
	if command -v $(GO) >/dev/null; then ok go "$$($(GO) env GOVERSION)"; else fail go "Go 1.26 at /usr/local/go/bin or on PATH"; fi; \
	if ! command -v protoc >/dev/null; then fail protoc "Debian package protobuf-compiler"; \
	elif [ "$$(protoc --version)" != "$(PROTOC_VERSION)" ]; then fail protoc "is '$$(protoc --version)', the generated code is pinned to '$(PROTOC_VERSION)' (Debian 12 protobuf-compiler)"; \
	elif ! err=$$(cd proto && protoc -I . --descriptor_set_out=/dev/null nova/v1/*.proto 2>&1); then \
		fail protoc-includes "protoc cannot compile proto/nova/v1 ($$(echo "$$err" | head -1)); the well-known types are in Debian package libprotobuf-dev"; \
	else ok protoc "$$(protoc --version), well-known types found"; fi; \
	if gen=$$(cd proto && $(GO) tool -n protoc-gen-go 2>&1); then ok protoc-gen-go "$$gen"; else fail protoc-gen-go "go tool protoc-gen-go (proto/go.mod) failed: $$gen"; fi; \
	if [ ! -x /usr/bin/bwrap ]; then fail bwrap "/usr/bin/bwrap: Debian package bubblewrap"; \
	elif ! err=$$(/usr/bin/bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true 2>&1); then \
		fail bwrap "/usr/bin/bwrap cannot create namespaces: $$err (the sandbox needs unprivileged user namespaces, or root)"; \
	else ok bwrap "$$(/usr/bin/bwrap --version), namespaces work"; fi; \
	if [ ! -x $(PYTHON) ]; then fail python3 "$(PYTHON): Debian package python3"; else \
		for mp in $(PYTHON_MODULES); do \
			if $(PYTHON) -c "import $${mp%%:*}" 2>/dev/null; then ok "$${mp%%:*}" "$(PYTHON) imports it"; \
			else fail "$${mp%%:*}" "$(PYTHON) cannot import it: Debian package $${mp#*:}"; fi; \
		done; \
	fi; \
	if [ ! -x /usr/bin/node ]; then fail node "/usr/bin/node: Debian package nodejs"; else ok node "$$(/usr/bin/node --version)"; fi; \
	if command -v npm >/dev/null; then ok npm "$$(npm --version 2>/dev/null)"; else fail npm "Debian package npm"; fi; \
	for m in axios cheerio undici; do \
		if [ -x /usr/bin/node ] && (cd $(JS_RUNTIME) && /usr/bin/node -e "require.resolve('$$m')" 2>/dev/null); then ok "$$m" "$(JS_RUNTIME)/node_modules"; \
		else fail "$$m" "not in $(JS_RUNTIME)/node_modules: npm ci --prefix $(JS_RUNTIME)"; fi; \
	done; \
	if v=$$($(TSC) --version 2>/dev/null); then ok tsc "$$v, $(CONSOLE)/node_modules"; \
	else fail tsc "not in $(CONSOLE)/node_modules: npm ci --prefix $(CONSOLE)"; fi; \
	if [ -x /usr/bin/prlimit ]; then ok prlimit /usr/bin/prlimit; else fail prlimit "/usr/bin/prlimit: Debian package util-linux"; fi; \
	if command -v curl >/dev/null; then ok curl "$$(command -v curl)"; else fail curl "Debian package curl"; fi; \
	if [ ! -x /usr/bin/chromium ]; then fail chromium "/usr/bin/chromium: Debian package chromium (the console's browser test)"; \
	elif v=$$(/usr/bin/chromium --headless --no-sandbox --disable-gpu --version 2>/dev/null); then ok chromium "$$v"; \
	else fail chromium "/usr/bin/chromium does not start: Debian package chromium"; fi; \
	if [ "$$bad" != 0 ]; then echo "make deps-check: something the build or the tests need is missing (above); 'make deps' installs it" >&2; exit 1; fi; \
	echo "everything the build, the checks and the tests use is present"

.PHONY: clean
clean:
	rm -rf $(BIN) .nova .tilt
