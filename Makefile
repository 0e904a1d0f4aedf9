# NOVA: build, demo, test and the checks CI runs. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# Go is at /usr/local/go on the machines this repository targets.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go

BIN := bin
DEMO_DIR ?= .nova/demo
# Every module of go.work, as absolute directories.
MODULES = $(shell $(GO) list -m -f '{{.Dir}}')
# Binaries: the nova CLI and one per service.
SERVICES := graph-engine sandbox audit input-analyzer code-generator code-validator output-validator
# -bench flags of `make bench`, e.g. BENCH_FLAGS='-benchtime 200x -count 5'.
BENCH_FLAGS ?=
IMAGE_PREFIX ?= nova
IMAGE_TAG ?= dev

# Pinned proto toolchain: protoc from Debian 12's protobuf-compiler, and
# protoc-gen-go from the `tool` directive of proto/go.mod.
PROTOC_VERSION := libprotoc 3.21.12
PROTOS = $(wildcard proto/nova/v1/*.proto)

# System packages: bubblewrap and python3 with its libraries for the sandbox,
# protobuf-compiler for `make proto` and `make check`.
DEB_PACKAGES := bubblewrap python3 python3-fitz python3-pandas python3-requests \
	python3-pil python3-bs4 python3-lxml python3-openpyxl python3-pypdf protobuf-compiler

# The JavaScript runtime's packages (axios, cheerio), installed by `make deps`.
JS_RUNTIME := services/sandbox/jsrunner/runtime

.PHONY: help
help:
	@echo 'make demo    run the invoice-routing and ai-orders examples on the embedded NATS and store (installs system packages when missing)'
	@echo 'make test    make check, then go test -count=1 ./... in every module of go.work (make test-go: only the tests)'
	@echo 'make build   bin/nova, bin/graph-engine, bin/sandbox, bin/audit (static, CGO_ENABLED=0)'
	@echo 'make check   generated proto code up to date, gofmt, go vet'
	@echo 'make proto   regenerate proto/nova/v1/*.pb.go (protoc $(PROTOC_VERSION))'
	@echo 'make bench   benchmarks of services/nova and the sandbox runner (BENCH_FLAGS=...)'
	@echo 'make bench-sandbox  sandbox latency (p50, p99) and executions/s, warm Python and JavaScript, next to plain python3/node (BENCH_SANDBOX_FLAGS="-n 200")'
	@echo 'make images  docker build of every service (needs a Docker engine)'
	@echo 'make helm    build Helm from the Go module proxy (the version deploy/test requires) into $(BIN)/tools/'
	@echo 'make helm-lint      helm lint --strict helm/nova (defaults, KEDA off, external NATS)'
	@echo 'make helm-template  helm template helm/nova into $(BIN)/helm-template/ (same value sets)'
	@echo 'make deps    install missing Debian packages: $(DEB_PACKAGES)'
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
	@echo '=== invoice-routing with the built-in sample invoice (3 x 500 EUR): the manager_approval branch'
	@echo
	$(BIN)/nova run examples/invoice-routing.yaml --chain --data-dir "$(DEMO_DIR)"
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
test: deps check test-go

# go test in every module, without the checks.
.PHONY: test-go
test-go:
	@failed=""; \
	for m in $(MODULES); do \
		echo "=== go test -count=1 ./... in $${m#$(CURDIR)/}"; \
		(cd "$$m" && $(GO) test -count=1 ./...) || failed="$$failed $${m#$(CURDIR)/}"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed" >&2; exit 1; fi; \
	echo "all modules passed"

.PHONY: check
check: check-proto check-fmt vet check-modules

# Each module must build on its own (GOWORK=off), as the Dockerfiles build
# it: its go.mod and go.sum must be complete without the workspace.
.PHONY: check-modules
check-modules:
	@for m in $(MODULES); do \
		(cd "$$m" && GOWORK=off GOFLAGS=-mod=readonly $(GO) build ./...) || { echo "$${m#$(CURDIR)/}: does not build without go.work; run GOWORK=off go mod tidy there" >&2; exit 1; }; \
	done; \
	echo "modules: each builds on its own"

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
	@for m in $(MODULES); do \
		echo "go vet ./... in $${m#$(CURDIR)/}"; \
		(cd "$$m" && $(GO) vet ./...); \
	done

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
.PHONY: bench-sandbox
bench-sandbox:
	cd services/sandbox && $(GO) run ./cmd/bench-sandbox $(BENCH_SANDBOX_FLAGS)

.PHONY: images
images:
	@docker info >/dev/null 2>&1 || { echo "make images needs a running Docker engine; none is reachable on this machine" >&2; exit 1; }
	@for s in nova $(SERVICES); do \
		echo "docker build -f services/$$s/Dockerfile -t $(IMAGE_PREFIX)/$$s:$(IMAGE_TAG) ."; \
		docker build -f services/$$s/Dockerfile -t $(IMAGE_PREFIX)/$$s:$(IMAGE_TAG) .; \
	done

# Helm is built from the Go module proxy (no prebuilt binary), at the version
# deploy/test requires: its chart test renders and lints with the same Helm.
HELM_VERSION = $(shell cd deploy/test && GOWORK=off $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM = $(CURDIR)/$(BIN)/tools/helm-$(HELM_VERSION)/helm
CHART := helm/nova
# Value sets that lint and render must accept.
HELM_VALUE_SETS := default: keda-off:--set=keda.enabled=false external-nats:--set=nats.enabled=false

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
	@for set in $(HELM_VALUE_SETS); do \
		out=$(BIN)/helm-template/$${set%%:*}.yaml; \
		"$(HELM)" template nova $(CHART) --namespace nova $${set#*:} > "$$out"; \
		echo "$$out: $$(grep -c '^kind:' "$$out") objects ($$(grep '^kind:' "$$out" | sort | uniq -c | awk '{printf "%s %s, ", $$1, $$3}' | sed 's/, $$//'))"; \
	done

.PHONY: deps
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "system packages: all present"; else \
	command -v apt-get >/dev/null || { echo "missing system packages:$$missing (install them with your package manager)" >&2; exit 1; }; \
	sudo=""; if [ "$$(id -u)" != 0 ]; then sudo=sudo; fi; \
	echo "installing system packages:$$missing"; \
	$$sudo apt-get update; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; fi
	@# Node.js for JavaScript nodes: any packaging of node and npm will do
	@# (Debian's nodejs and npm, or NodeSource's nodejs that carries npm).
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
		sudo=""; if [ "$$(id -u)" != 0 ]; then sudo=sudo; fi; \
		$$sudo apt-get update; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm; \
	fi
	@# axios and cheerio for JavaScript nodes, pinned by the lock file.
	@if [ ! -d $(JS_RUNTIME)/node_modules ]; then \
		echo "npm ci --prefix $(JS_RUNTIME)"; \
		npm ci --prefix $(JS_RUNTIME) --omit=dev --ignore-scripts --no-audit --no-fund; \
	fi

.PHONY: clean
clean:
	rm -rf $(BIN) .nova .tilt
