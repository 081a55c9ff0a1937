# sandboxd — the front door. `make help` lists the targets.
#
# Two commands matter on a fresh Debian machine (as root):
#   make run    sets up what is missing, builds, and starts a local daemon
#   make test   sets up what is missing and runs every test
#   make test-unit  runs the tests that need no engine, under a minute, no setup

SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO          ?= go
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X github.com/sandboxd/sandboxd/internal/version.Version=$(VERSION)
DATA_DIR    ?= $(CURDIR)/.sandboxd
LISTEN      ?= 127.0.0.1:7070
TEST_TIMEOUT ?= 30m

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-8s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## install what is missing (Docker engine, images, npm SDKs); idempotent
	@scripts/setup.sh

.PHONY: build
build: ## build bin/sandboxd, bin/toolboxd and bin/sbx
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/ ./cmd/...

.PHONY: run
run: setup build ## start a local daemon in the background (data in .sandboxd/)
	@scripts/run-local.sh "$(DATA_DIR)" "$(LISTEN)"

.PHONY: stop
stop: ## stop the local daemon started by `make run`
	@scripts/run-local.sh --stop "$(DATA_DIR)"

.PHONY: cluster
cluster: setup build ## start a 3-node cluster on loopback (API on 7071-7073, data in .sandboxd-cluster/)
	@scripts/cluster.sh

.PHONY: cluster-stop
cluster-stop: ## stop the cluster started by `make cluster`
	@scripts/cluster.sh --stop

.PHONY: test
test: setup build ## run every test (unit, integration on real Docker, SDK compatibility)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	python3 -m unittest discover -s images/code-interpreter -p '*_test.py'
	@scripts/test-compat.sh

.PHONY: test-unit
test-unit: ## tests that need no engine (go test -short), under a minute; no setup
	$(GO) test -short -count=1 -timeout 5m ./...

.PHONY: bench
bench: setup build ## print benchmark figures beside their baselines
	@scripts/bench.sh

.PHONY: check
check: ## gofmt, go vet, staticcheck, race tests, generated-code diff
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^internal/gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^internal/gen/'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) tool -modfile=tools/go.mod staticcheck ./...
	@tools/gencheck.sh
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: gen
gen: ## regenerate code from spec/ into internal/gen/
	@tools/gen.sh
