# listproxy — the two set-up commands are 'make run' and 'make test'.
SHELL := /usr/bin/env bash
GO ?= go
OUT := _output
BIN := $(OUT)/bin

# The control-plane release `make run`, the e2e suite and `make bench` run
# against (KUBE_VERSION=1.31.14 make test-e2e), and the old release the
# compatibility stage of `make test` runs against. Defaults: hack/kube-versions.
KUBE_VERSION ?= $(shell awk '$$1 == "default" {print $$2}' hack/kube-versions)
KUBE_COMPAT_VERSION ?= $(shell awk '$$1 == "compat" {print $$2}' hack/kube-versions)
export KUBE_VERSION

.PHONY: test-stages-reset all build deps control-plane control-plane-compat prometheus e2e-binary run test test-unit test-table-oracle test-e2e test-compat verify bench fuzz soak soak-ha conformance clean

all: build

## build: compile listproxy into _output/bin
build:
	$(GO) build -o $(BIN)/listproxy ./cmd/listproxy

## deps: build everything the tests need: both control planes into _output/kube-vVERSION/bin, Prometheus into _output/bin (no-op when current)
deps: control-plane control-plane-compat prometheus

## control-plane: the pinned etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of KUBE_VERSION (no-op when current)
control-plane:
	$(STAGE) deps:control-plane-$(KUBE_VERSION) hack/build-deps.sh $(KUBE_VERSION)

## control-plane-compat: the same for KUBE_COMPAT_VERSION, the old release of the compatibility stage
control-plane-compat:
	$(STAGE) deps:control-plane-$(KUBE_COMPAT_VERSION) hack/build-deps.sh $(KUBE_COMPAT_VERSION)

## prometheus: the pinned Prometheus server and promtool the tests use (no-op when current)
prometheus:
	$(STAGE) deps:prometheus hack/build-prometheus.sh

## run: local etcd + kube-apiserver + controllers, demo data, listproxy in front
run: control-plane build
	$(GO) run ./hack/localup

## test: unit tests with -race, e2e against the KUBE_VERSION control plane, then the compatibility stage against KUBE_COMPAT_VERSION; prints each stage's time at the end
test: test-stages-reset deps test-unit test-e2e test-compat
	@hack/stage-time.sh print

# STAGE NAME COMMAND runs COMMAND and records its wall time for make test's
# table (hack/stage-time.sh).
STAGE := $(abspath hack/stage-time.sh) run

test-stages-reset:
	@hack/stage-time.sh reset

test-unit: test-table-oracle
	$(STAGE) unit $(GO) test -race -count=1 ./pkg/... ./cmd/... ./test/imports/

# pkg/table against the apiserver's own printers of each pinned release,
# linked only into these test modules.
test-table-oracle:
	cd hack/tableoracle/kube-1.37 && $(STAGE) table-oracle:1.37 $(GO) test -count=1 ./...
	cd hack/tableoracle/kube-1.36 && $(STAGE) table-oracle:1.36 $(GO) test -count=1 ./...
	cd hack/tableoracle/kube-1.35 && $(STAGE) table-oracle:1.35 $(GO) test -count=1 ./...
	cd hack/tableoracle/kube-1.34 && $(STAGE) table-oracle:1.34 $(GO) test -count=1 ./...
	cd hack/tableoracle/kube-1.33 && $(STAGE) table-oracle:1.33 $(GO) test -count=1 ./...
	cd hack/tableoracle/kube-1.32 && $(STAGE) table-oracle:1.32 $(GO) test -count=1 ./...
	cd hack/tableoracle/kube-1.31 && $(STAGE) table-oracle:1.31 $(GO) test -count=1 ./...

# The e2e package runs in four parts, each under its own timeout (and
# meant to stay under half of it): the watch and Table tests; the replica,
# store-lifecycle, load and no-etcd tests; kube-controller-manager and
# kube-scheduler through listproxy; then everything else (with the chart,
# framework and import tests).
E2E_PART1 := TestWatch|TestTable
E2E_PART2 := TestLinearizableReadsWithoutEtcd|TestConsistentWithoutEtcd|TestWarm|TestReplicas|TestDrain|TestManyWatchers|TestStalled|TestKubectlWait|TestAPIServerRestartMidWatch|TestOddResourceVersions|TestStore|TestLoad
E2E_PART3 := TestControlPlaneThroughListproxy

test-e2e:
	LISTPROXY_BIN_DIR=$(abspath $(BIN)) $(STAGE) e2e:part1 $(GO) test -race -count=1 -timeout 20m -run '^($(E2E_PART1))' ./test/e2e/
	LISTPROXY_BIN_DIR=$(abspath $(BIN)) $(STAGE) e2e:part2 $(GO) test -race -count=1 -timeout 20m -run '^($(E2E_PART2))' ./test/e2e/
	LISTPROXY_BIN_DIR=$(abspath $(BIN)) $(STAGE) e2e:part3 $(GO) test -race -count=1 -timeout 20m -run '^($(E2E_PART3))' ./test/e2e/
	LISTPROXY_BIN_DIR=$(abspath $(BIN)) $(STAGE) e2e:part4 $(GO) test -race -count=1 -timeout 20m -skip '^($(E2E_PART1)|$(E2E_PART2)|$(E2E_PART3))' ./test/...

# The e2e tests whose answers depend most on the apiserver's version: the
# differential and linearizability checks, paging and continue tokens, bad
# input, informers, watch serving, and Tables (whose printers change with
# the release). They run in two parts, each under its own timeout (and
# meant to stay under half of it): watches and Tables, then the rest.
COMPAT_PART1 := TestWatchThroughListproxy|TestWatchDifferential|TestWatchListInformers|TestWatchFollowsFeatureGates|TestWatchBookmarksDifferential|TestTableDifferential|TestTableKubectl|TestTableWatchDifferential|TestTableRowsFromAPIServer|TestWatchListInformersWithoutEtcd
COMPAT_PART2 := TestDifferentialAgainstAPIServer|TestLinearizableReads|TestPagingConformance|TestCompactedContinueToken|TestBadContinueTokens|TestTokenSharedAcrossReplicas|TestBadInputCatalogue|TestInformerThroughListproxy|TestKubectlThroughListproxy|TestDiscoveryFollowsCRDs|TestWarmStartFromPeer|TestWarmStartFromPeerServiceMode|TestOddResourceVersions|TestLinearizableReadsWithoutEtcd|TestConsistentWithoutEtcdDelayedFeed|TestConsistentWithoutEtcdTwoAPIServers|TestConsistentWithoutEtcdCRD|TestShardSelectorDifferential|TestShardSelectorInformers

## test-compat: the version-sensitive e2e tests against KUBE_COMPAT_VERSION
test-compat:
	KUBE_VERSION=$(KUBE_COMPAT_VERSION) LISTPROXY_BIN_DIR=$(abspath $(BIN)) \
		$(STAGE) compat:part1 $(GO) test -race -count=1 -timeout 15m -run '^($(COMPAT_PART1))$$' ./test/e2e/
	KUBE_VERSION=$(KUBE_COMPAT_VERSION) LISTPROXY_BIN_DIR=$(abspath $(BIN)) \
		$(STAGE) compat:part2 $(GO) test -race -count=1 -timeout 15m -run '^($(COMPAT_PART2))$$' ./test/e2e/

verify:
	hack/verify-gofmt.sh
	hack/verify-govet.sh
	hack/verify-imports.sh
	hack/verify-golangci-lint.sh

clean:
	rm -rf $(OUT)

## soak: three replicas, real clients and faults on a schedule for LISTPROXY_SOAK_DURATION (default 10m), then a summary table; TOPOLOGY=ha runs them on an HA control plane
soak: control-plane
	LISTPROXY_BIN_DIR=$(abspath $(BIN)) LISTPROXY_SOAK_DURATION=$${LISTPROXY_SOAK_DURATION:-10m} LISTPROXY_SOAK_TOPOLOGY=$(TOPOLOGY) \
		$(GO) test -count=1 -timeout 0 -run '^TestReplicas$$' -v ./test/e2e/

## soak-ha: make soak on an HA control plane (3 etcd members, 3 kube-apiservers behind a balancer) with its faults: etcd leader killed, kube-apiservers killed and paused, connections dropped
soak-ha:
	$(MAKE) soak TOPOLOGY=ha

## e2e-binary: upstream's e2e test binary of KUBE_VERSION into _output/e2e-vKUBE_VERSION (about 200 MB; no-op when current)
e2e-binary:
	hack/build-e2e.sh $(KUBE_VERSION)

## conformance: upstream's API machinery conformance, watch, watch-list and chunking specs, directly and through listproxy (sidecar and service mode); fails when listproxy passes fewer (see hack/conformance)
conformance: control-plane build e2e-binary
	$(GO) run ./hack/conformance

## bench: listproxy side by side with the apiserver on the same data (BENCH_PODS, BENCH_CHURN, BENCH_REPS, BENCH_OUT; see hack/bench)
bench: control-plane build
	$(GO) run ./hack/bench

## fuzz: every fuzz target in turn for FUZZTIME each (default 30s); `make test` already runs their seed corpora
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	pkg/paging:FuzzOpen \
	pkg/lists:FuzzParseCollection \
	pkg/lists:FuzzParseListQuery \
	pkg/lists:FuzzNegotiateFormat \
	pkg/lists:FuzzSelectorDigest \
	pkg/wire:FuzzDecodeList \
	pkg/wire:FuzzWatchDecoderJSON \
	pkg/wire:FuzzWatchDecoderProtobuf \
	pkg/gzstitch:FuzzStitch
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done
