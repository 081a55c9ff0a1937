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
BUILD_DIR   ?= bin

# make install / uninstall (DESTDIR honoured) and make dist.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
SHAREDIR    ?= $(PREFIX)/share/sandboxd
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR  ?= /etc
LOCALSTATEDIR ?= /var
DIST_DIR    ?= dist
ARCH        ?= $(shell $(GO) env GOARCH)
DIST_NAME   := sandboxd-$(VERSION)-linux-$(ARCH)
# Archive timestamps: the last commit's, so the same tree gives the same bytes.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BINARIES    := sandboxd sbx toolboxd
# What the daemon needs beside its binaries at run time: the scripts that
# set up the engine and build the images, and the images' recipes.
SHARE_SCRIPTS := scripts/build-images.sh scripts/setup-docker.sh scripts/setup-gvisor.sh scripts/setup-oci.sh
SHARE_IMAGES   = $(shell find images -type f ! -path '*/__pycache__/*' | LC_ALL=C sort)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-8s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## install what is missing (Docker engine, images, npm SDKs); idempotent
	@scripts/setup.sh

.PHONY: build
build: ## build bin/sandboxd, bin/toolboxd and bin/sbx
	@mkdir -p $(BUILD_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BUILD_DIR)/ ./cmd/...

.PHONY: install
install: build ## install the binaries, the systemd unit and /etc/sandboxd/sandboxd.conf (when missing) under DESTDIR, PREFIX (/usr/local)
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SHAREDIR)/scripts $(DESTDIR)$(SYSCONFDIR)/sandboxd
	install -m 0755 $(addprefix $(BUILD_DIR)/,$(BINARIES)) $(DESTDIR)$(BINDIR)/
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' packaging/sandboxd.service.in >$(DESTDIR)$(UNITDIR)/.sandboxd.service.tmp
	chmod 0644 $(DESTDIR)$(UNITDIR)/.sandboxd.service.tmp
	mv -f $(DESTDIR)$(UNITDIR)/.sandboxd.service.tmp $(DESTDIR)$(UNITDIR)/sandboxd.service
	install -m 0755 $(SHARE_SCRIPTS) $(DESTDIR)$(SHAREDIR)/scripts/
	for f in $(SHARE_IMAGES); do install -D -m 0644 "$$f" "$(DESTDIR)$(SHAREDIR)/$$f"; done
	install -m 0644 packaging/sandboxd.conf $(DESTDIR)$(SHAREDIR)/sandboxd.conf.example
	@# The config is the operator's once there: never overwritten.
	[ -e $(DESTDIR)$(SYSCONFDIR)/sandboxd/sandboxd.conf ] || install -m 0600 packaging/sandboxd.conf $(DESTDIR)$(SYSCONFDIR)/sandboxd/sandboxd.conf
	install -d -m 0700 $(DESTDIR)$(LOCALSTATEDIR)/lib/sandboxd
	@[ -n "$(DESTDIR)" ] || echo "installed; next: systemctl daemon-reload && systemctl enable --now sandboxd (images: $(SHAREDIR)/scripts/build-images.sh; the oci runtime's crun and disk: $(SHAREDIR)/scripts/setup-oci.sh)"

.PHONY: uninstall
uninstall: ## remove what install put; never the data (/var/lib/sandboxd) or the config
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(BINARIES)) $(DESTDIR)$(UNITDIR)/sandboxd.service
	rm -f $(addprefix $(DESTDIR)$(SHAREDIR)/,$(SHARE_SCRIPTS) $(SHARE_IMAGES) sandboxd.conf.example)
	for d in $(sort $(dir $(addprefix $(DESTDIR)$(SHAREDIR)/,$(SHARE_SCRIPTS) $(SHARE_IMAGES)))); do rmdir -p --ignore-fail-on-non-empty "$$d" 2>/dev/null || true; done
	@[ -n "$(DESTDIR)" ] || echo "uninstalled; $(SYSCONFDIR)/sandboxd and /var/lib/sandboxd are kept (systemctl disable --now sandboxd first if it runs)"

.PHONY: dist
dist: ## release archive dist/sandboxd-VERSION-linux-ARCH.tar.gz and dist/SHA256SUMS
	rm -rf $(DIST_DIR)/.stage $(DIST_DIR)/$(DIST_NAME)
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(DIST_DIR))/.stage PREFIX=/usr/local >/dev/null
	mkdir -p $(DIST_DIR)/$(DIST_NAME)
	cp -a $(DIST_DIR)/.stage/usr/local/bin $(DIST_DIR)/.stage/usr/local/share $(DIST_DIR)/$(DIST_NAME)/
	install -m 0644 $(DIST_DIR)/.stage/usr/local/lib/systemd/system/sandboxd.service packaging/sandboxd.conf README.md $(DIST_DIR)/$(DIST_NAME)/
	[ ! -f LICENSE ] || install -m 0644 LICENSE $(DIST_DIR)/$(DIST_NAME)/
	tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner --format=gnu \
		-C $(DIST_DIR) -cf - $(DIST_NAME) | gzip -n >$(DIST_DIR)/$(DIST_NAME).tar.gz
	rm -rf $(DIST_DIR)/.stage $(DIST_DIR)/$(DIST_NAME)
	cd $(DIST_DIR) && sha256sum $(DIST_NAME).tar.gz >SHA256SUMS
	@echo "$(DIST_DIR)/$(DIST_NAME).tar.gz"

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
test: setup build ## run every test (unit, integration on the default engine-free runtime and on Docker, SDK compatibility)
	@# The daemon-level packages (test/e2e, test/adversarial, test/cluster,
	@# test/conformance) run the binaries just built instead of each building
	@# its own (internal/testenv/daemontest), on the daemon's default engine
	@# (--engine oci). test/cluster, the longest package by far (~5 min, its
	@# tests one after another), is named first so that go test starts it
	@# first; the others share the second slot beside it.
	SANDBOXD_TEST_BIN_DIR=$(abspath $(BUILD_DIR)) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/cluster/ ./...
	@# The same daemon-level tests against the Docker engine (--engine
	@# docker): lifecycle, faults, SIGKILL recovery and the attacks.
	SANDBOXD_TEST_ENGINE=docker SANDBOXD_TEST_BIN_DIR=$(abspath $(BUILD_DIR)) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/e2e/ ./test/adversarial/ ./test/conformance/
	python3 -m unittest discover -s images/code-interpreter -p '*_test.py'
	@# The SDK suites on the default engine: a single daemon, then a 3-node cluster.
	@scripts/test-compat.sh
	@# The SDK suites once more, on a single daemon of --engine docker.
	@SANDBOXD_COMPAT_ENGINE=docker SANDBOXD_COMPAT_CLUSTER=0 scripts/test-compat.sh

.PHONY: test-unit
test-unit: ## tests that need no engine (go test -short), under a minute; no setup
	$(GO) test -short -count=1 -timeout 5m ./...

.PHONY: bench
bench: setup build ## print benchmark figures beside their baselines (BENCH_ENGINES="docker oci": the engines createbench measures)
	@BENCH_ENGINES="$(BENCH_ENGINES)" scripts/bench.sh

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
