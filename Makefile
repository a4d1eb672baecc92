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


all: build

## build: compile listproxy into _output/bin
build:
	$(GO) build -o $(BIN)/listproxy ./cmd/listproxy

## deps: build everything the tests need: both control planes into _output/kube-vVERSION/bin, Prometheus into _output/bin (no-op when current)
deps: control-plane control-plane-compat prometheus

## control-plane: the pinned etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl of KUBE_VERSION (no-op when current)
control-plane:
	$(STAGE) deps:control-plane-$(KUBE_VERSION) hack/build-deps.sh $(KUBE_VERSION)

## control-plane-compat: the same for KUBE_COMPAT_VERSION, the old release of the compatibility stage, without the scheduler it never runs
control-plane-compat:
	KUBE_COMMANDS="kube-apiserver kube-controller-manager kubectl" \
		$(STAGE) deps:control-plane-$(KUBE_COMPAT_VERSION) hack/build-deps.sh $(KUBE_COMPAT_VERSION)

## prometheus: the pinned Prometheus server and promtool the tests use (no-op when current)
prometheus:
	$(STAGE) deps:prometheus hack/build-prometheus.sh

## run: local etcd + kube-apiserver + controllers, demo data, listproxy in front
run: control-plane build
	$(GO) run ./hack/localup

## test: deps and the test binaries, then side by side (TEST_JOBS at a time, longest first) the unit tests with -race, the e2e parts against KUBE_VERSION, the compatibility parts against KUBE_COMPAT_VERSION and the table oracles; prints each stage's start and time, and the wall time, at the end
test: test-stages-reset
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_BUILDS)
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_PARTS)
	@hack/stage-time.sh print

# What the stages need, built side by side first, longest first: on a
# fresh machine one build's module downloads and links overlap another's
# compiles. test-build-listproxy fills the build cache for the tests that
# run listproxy as a process (they `go build` it themselves), so that parts
# starting together do not each compile it cold; it follows the control
# plane, whose module shares listproxy's dependency versions
# (hack/update-kube-module.sh), so that it compiles little more than
# listproxy's own packages. test-build-helm builds the pinned helm the
# chart tests would otherwise build on first use.
TEST_BUILDS = control-plane control-plane-compat e2e-test-binary prometheus test-build-helm test-build-listproxy

test-build-listproxy: control-plane
	$(STAGE) build:listproxy $(GO) build -o $(BIN)/listproxy ./cmd/listproxy
test-build-helm:
	$(STAGE) build:helm hack/install-tools.sh helm

# The stages after the builds, longest first (as measured alone), so that
# the last to start are short ones.
TEST_PARTS = e2e-controlplane e2e-rest e2e-reads compat-clients e2e-replicas e2e-noetcd compat-reads \
	e2e-watch test-unit-only e2e-table e2e-others compat-table compat-watch $(TABLE_ORACLES)

# TEST_JOBS is how many test stages run at once. An e2e part spends much
# of its time waiting for its control plane (0.4-1.6 cores measured on 2
# cores), so three keep two cores busy.
TEST_JOBS ?= 3

# STAGE NAME COMMAND runs COMMAND and records its start and wall time for
# make test's table (hack/stage-time.sh).
STAGE := $(abspath hack/stage-time.sh) run

test-stages-reset:
	@hack/stage-time.sh reset

## test-unit: the unit tests with -race and the table oracles
test-unit: test-unit-only test-table-oracle

test-unit-only:
	$(STAGE) unit $(GO) test -race -count=1 ./pkg/... ./cmd/... ./test/imports/

# pkg/table against the apiserver's own printers of each pinned release,
# linked only into these test modules.
TABLE_ORACLES := table-oracle-1.37 table-oracle-1.36 table-oracle-1.35 table-oracle-1.34 table-oracle-1.33 table-oracle-1.32 table-oracle-1.31
test-table-oracle: $(TABLE_ORACLES)
$(TABLE_ORACLES): table-oracle-%:
	cd hack/tableoracle/kube-$* && $(STAGE) table-oracle:$* $(GO) test -count=1 ./...

# The e2e tests run from one test binary built with -race, in parts that
# run side by side, each under its own timeout (and meant to stay under
# half of it). Each part is a set of test-name prefixes; e2e-rest runs
# every test no other part names, e2e-others the tests of the other
# packages under test/ (chart, framework; the import graph is a unit
# test). Longest first, so that the last part to start is a short one.
E2E_TEST := $(abspath $(OUT))/e2e.test
E2E_ENV := LISTPROXY_BIN_DIR=$(abspath $(BIN))
E2E_CONTROLPLANE := TestControlPlaneThroughListproxy
E2E_NOETCD := TestLinearizableReadsWithoutEtcd|TestConsistentWithoutEtcd
E2E_REPLICAS := TestReplicas|TestWarm|TestDrain|TestLoad
E2E_WATCH := TestWatch|TestManyWatchers|TestStalled|TestKubectlWait|TestAPIServerRestartMidWatch
E2E_TABLE := TestTable|TestOddResourceVersions|TestStore
E2E_READS := TestLinearizableReads$$|TestDifferential|TestPaging|TestCompacted|TestBadContinueTokens|TestBadInput|TestConsistency|TestEtcdDown|TestColdStoreStorm|TestShardSelector
E2E_NAMED := $(E2E_CONTROLPLANE)|$(E2E_NOETCD)|$(E2E_REPLICAS)|$(E2E_WATCH)|$(E2E_TABLE)|$(E2E_READS)
E2E_PARTS := e2e-controlplane e2e-rest e2e-reads e2e-replicas e2e-noetcd e2e-watch e2e-table e2e-others

e2e-test-binary:
	$(STAGE) e2e:build $(GO) test -race -c -o $(E2E_TEST) ./test/e2e/

# E2E_RUN NAME TIMEOUT RUN-REGEXP runs the test binary's tests matching
# RUN-REGEXP (against KUBE_VERSION, or what the caller's environment sets).
E2E_RUN = cd test/e2e && $(E2E_ENV) $(STAGE) $(1) $(E2E_TEST) -test.count=1 -test.timeout $(2) -test.run '^($(3))'

e2e-controlplane: ; $(call E2E_RUN,e2e:controlplane,20m,$(E2E_CONTROLPLANE))
e2e-noetcd: ; $(call E2E_RUN,e2e:noetcd,20m,$(E2E_NOETCD))
e2e-replicas: ; $(call E2E_RUN,e2e:replicas,20m,$(E2E_REPLICAS))
e2e-watch: ; $(call E2E_RUN,e2e:watch,20m,$(E2E_WATCH))
e2e-table: ; $(call E2E_RUN,e2e:table,20m,$(E2E_TABLE))
e2e-reads: ; $(call E2E_RUN,e2e:reads,20m,$(E2E_READS))
e2e-rest:
	cd test/e2e && $(E2E_ENV) $(STAGE) e2e:rest $(E2E_TEST) -test.count=1 -test.timeout 20m -test.skip '^($(E2E_NAMED))'
e2e-others:
	$(E2E_ENV) $(STAGE) e2e:others $(GO) test -race -count=1 -timeout 20m ./test/chart/ ./test/framework/...

## test-e2e: the e2e parts against KUBE_VERSION, TEST_JOBS at a time
test-e2e: e2e-test-binary
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(E2E_PARTS)

# The e2e tests whose answers depend most on the apiserver's version: the
# differential and linearizability checks, paging and continue tokens, bad
# input, informers, watch serving, and Tables (whose printers change with
# the release), run against KUBE_COMPAT_VERSION in parts like the e2e
# ones, each under a 15-minute timeout.
COMPAT_WATCH := TestWatchThroughListproxy|TestWatchDifferential|TestWatchListInformers|TestWatchFollowsFeatureGates|TestWatchBookmarksDifferential|TestWatchListInformersWithoutEtcd
COMPAT_TABLE := TestTableDifferential|TestTableKubectl|TestTableWatchDifferential|TestTableRowsFromAPIServer
COMPAT_READS := TestDifferentialAgainstAPIServer|TestLinearizableReads|TestPagingConformance|TestCompactedContinueToken|TestBadContinueTokens|TestBadInputCatalogue|TestOddResourceVersions|TestShardSelectorDifferential|TestShardSelectorInformers
COMPAT_CLIENTS := TestTokenSharedAcrossReplicas|TestInformerThroughListproxy|TestKubectlThroughListproxy|TestDiscoveryFollowsCRDs|TestWarmStartFromPeer|TestWarmStartFromPeerServiceMode|TestLinearizableReadsWithoutEtcd|TestConsistentWithoutEtcdDelayedFeed|TestConsistentWithoutEtcdTwoAPIServers|TestConsistentWithoutEtcdCRD
COMPAT_PARTS := compat-clients compat-reads compat-table compat-watch
COMPAT_RUN = cd test/e2e && KUBE_VERSION=$(KUBE_COMPAT_VERSION) $(E2E_ENV) $(STAGE) $(1) $(E2E_TEST) -test.count=1 -test.timeout 15m -test.run '^($(2))$$'

compat-watch: ; $(call COMPAT_RUN,compat:watch,$(COMPAT_WATCH))
compat-table: ; $(call COMPAT_RUN,compat:table,$(COMPAT_TABLE))
compat-reads: ; $(call COMPAT_RUN,compat:reads,$(COMPAT_READS))
compat-clients: ; $(call COMPAT_RUN,compat:clients,$(COMPAT_CLIENTS))

## test-compat: the version-sensitive e2e tests against KUBE_COMPAT_VERSION, TEST_JOBS at a time
test-compat: e2e-test-binary
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(COMPAT_PARTS)

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

## bench-scale: in-process benchmarks beyond what this machine's control plane holds: one store of BENCH_SCALE_OBJECTS (default 1,000,000) objects (page cost at the start and the end, memory per object, a change's cost) and node-scoped watchers at BENCH_SCALE_WATCHERS (default 100,000)
BENCH_SCALE_OBJECTS ?= 1000000
BENCH_SCALE_WATCHERS ?= 100000
bench-scale:
	LISTPROXY_BENCH_OBJECTS=$(BENCH_SCALE_OBJECTS) $(GO) test -run '^$$' -bench '^(BenchmarkPage|BenchmarkStoreMemory|BenchmarkApplyClone)$$' -benchtime 2s ./pkg/snapshot/
	LISTPROXY_BENCH_WATCHERS=$(BENCH_SCALE_WATCHERS) $(GO) test -run '^$$' -bench '^BenchmarkFanOutNodeScoped$$' -benchtime 20000x ./pkg/watch/

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

.PHONY: test-stages-reset test-build-listproxy test-build-helm all build deps control-plane control-plane-compat prometheus e2e-binary run test test-unit test-unit-only test-table-oracle $(TABLE_ORACLES) e2e-test-binary test-e2e $(E2E_PARTS) test-compat $(COMPAT_PARTS) verify bench bench-scale fuzz soak soak-ha conformance clean
