# dra-driver-swap. `make test` runs everything; see README.md.
SHELL := /bin/bash
GO ?= go
OUT_DIR ?= $(CURDIR)/_output/bin
KUBE_VERSION ?= v1.37.1
# Fuzz time per fuzz target in `make fuzz`.
FUZZTIME ?= 30s
BENCHTIME ?= 1s
# The driver image's tag and version label (the chart's appVersion), its
# revision label, and the registry `make push` and `make release` push to
# (HOST[:PORT][/PATH]).
VERSION ?= 0.2.0
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
REGISTRY ?=
IMAGES_DIR ?= $(CURDIR)/_output/images
# Every binary reports VERSION and REVISION (--version, dra_swap_build_info).
VERSION_LDFLAGS := -X github.com/dra-driver-swap/dra-driver-swap/internal/version.version=$(VERSION) \
	-X github.com/dra-driver-swap/dra-driver-swap/internal/version.revision=$(REVISION)

GO_PACKAGES := ./api/... ./cmd/... ./internal/... ./test/monitoring/... ./test/docs/... ./test/manifest/... ./test/e2e/cluster/... ./test/e2e/conformance/...
# The image and release builder, dra-swap-images: a package of the tools
# module (tools/; go-containerregistry and docker/cli stay out of the
# driver's go.mod); its unit tests, vet and lint run beside the driver's.
IMAGE_TOOL := tools/images
# Every Go build of this module but the race unit tests uses one build
# configuration, static and path-free like the images' binaries, so that a
# cold `make test` compiles the dependencies twice (this and -race), not four
# times (with and without cgo, with and without -trimpath).
NOCGO := CGO_ENABLED=0 GOFLAGS=-trimpath
COMMANDS := dra-swap-kubeletplugin dra-swap-hook dra-swap-controller

.PHONY: all build image-tool images push release test unit integration e2e e2e-cluster e2e-crio e2e-conformance conformance-docs demo demo-down verify lint fuzz bench bench-e2e bench-scale k8s-binaries helm manifests chart-docs chart-schema deps clean unit-compile fmt-check

all: build

build:
	@mkdir -p $(OUT_DIR)
	$(NOCGO) $(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(OUT_DIR)/ $(addprefix ./cmd/,$(COMMANDS))

## image-tool: dra-swap-images (tools/images), which builds, pushes
## and serves the images.
image-tool:
	@mkdir -p $(OUT_DIR)
	cd $(IMAGE_TOOL) && $(NOCGO) $(GO) build -o $(abspath $(OUT_DIR))/dra-swap-images .

## images: the driver's image dra-driver-swap:$(VERSION) and the e2e tests'
## images (pause:3.10, swap-workload:v1), as an OCI image layout in
## $(IMAGES_DIR); no Docker engine needed. The same sources give the same digests.
## IMAGE_SET=test builds the tests' images only (driver: the driver's only).
IMAGE_SET ?= all
images: image-tool
	$(OUT_DIR)/dra-swap-images build -out $(IMAGES_DIR) -version $(VERSION) -revision $(REVISION) -set $(IMAGE_SET)

## push: push the images of $(IMAGES_DIR) to REGISTRY (HOST[:PORT][/PATH]) as
## $(REGISTRY)/<name>:<tag>, with the docker config's credentials for
## HOST[:PORT] (DOCKER_CONFIG, its credential helpers); loopback registries
## are reached over plain http.
push: image-tool
	@if [ -z "$(REGISTRY)" ]; then echo "make push needs REGISTRY=HOST[:PORT][/PATH]" >&2; exit 1; fi
	$(OUT_DIR)/dra-swap-images push -from $(IMAGES_DIR) -registry $(REGISTRY)

## release: the release of VERSION (x.y.z, required) in RELEASE_DIR: the
## driver's image as a multi-arch OCI image index (linux/amd64, linux/arm64)
## with its SBOM as an OCI referrer (an OCI layout tar), the packaged chart,
## and SHA256SUMS; with REGISTRY=HOST[:PORT][/PATH] also pushed there, the
## image as $(REGISTRY)/dra-driver-swap:VERSION and the chart to
## oci://$(REGISTRY)/charts, with the docker config's credentials
## (hack/release.sh).
RELEASE_DIR ?= $(CURDIR)/_output/release
release:
	@if [ "$(origin VERSION)" = file ]; then echo "make release needs VERSION=x.y.z" >&2; exit 1; fi
	VERSION=$(VERSION) REVISION=$(REVISION) REGISTRY=$(REGISTRY) RELEASE_DIR=$(RELEASE_DIR) OUT_DIR=$(OUT_DIR) hack/release.sh

## test: everything a change must pass: static checks, unit tests,
## integration tests, and end-to-end tests on a real two-node cluster, this
## host's node (cgroup v1 here) and a cgroup v2 node in an emulated guest
## (E2E=skip skips them): `make verify unit integration e2e-cluster`, with
## the guest image built while the cluster's binaries compile, and vet and
## the unit tests' compile in the CPU time the e2e run leaves idle
## (hack/test.sh).
test:
	hack/test.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## verify: gofmt, the linters (make lint), go vet, the driver's and tools
## modules requiring the same versions of what both compile
## (hack/check-modules.sh), and the import rules (test/layers: no program
## links another program's packages, shared packages link none of them, the
## contract depends on nothing internal, the hook on no k8s.io package).
verify: fmt-check lint
	$(NOCGO) $(GO) vet ./...
	cd $(IMAGE_TOOL) && $(NOCGO) $(GO) vet ./...
	hack/check-modules.sh
	$(NOCGO) $(GO) test -count=1 ./test/layers/

## lint: golangci-lint with logcheck compiled in (.golangci.yml says which
## linters and why) on the driver's module and the image builder; built
## from tools/lint (hack/build-tools.sh golangci-lint).
lint:
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh golangci-lint
	$(NOCGO) $(abspath $(OUT_DIR))/golangci-lint run ./...
	cd $(IMAGE_TOOL) && $(NOCGO) $(abspath $(OUT_DIR))/golangci-lint run ./...

## unit: the unit tests with the race detector; with UNIT_BIN=DIR, the
## binaries that make unit-compile linked there, run without linking them
## again (hack/run-tests.sh; make test does this).
UNIT := CGO_ENABLED=1 $(GO) test -race
unit:
ifdef UNIT_BIN
	hack/run-tests.sh $(UNIT_BIN) -C $(IMAGE_TOOL) $(if $(UNIT_SKIP),-skip '$(UNIT_SKIP)') ./... -C . -skip '' $(GO_PACKAGES)
else
	$(UNIT) -count=1 $(GO_PACKAGES)
	cd $(IMAGE_TOOL) && $(UNIT) -count=1 $(if $(UNIT_SKIP),-skip '$(UNIT_SKIP)') ./...
endif

## unit-compile: the unit tests compiled and linked into UNIT_BIN, not run
## (make test compiles them at idle priority while the e2e legs run).
unit-compile:
	@if [ -z "$(UNIT_BIN)" ]; then echo "make unit-compile needs UNIT_BIN=DIR" >&2; exit 1; fi
	$(UNIT) -c -o $(abspath $(UNIT_BIN))/ $(GO_PACKAGES)
	cd $(IMAGE_TOOL) && $(UNIT) -c -o $(abspath $(UNIT_BIN))/ ./...

deps:
	hack/install-deps.sh etcd-server

## k8s-binaries, helm: kube-apiserver, and the helm v4 CLI, from the tools
## module (tools/; hack/build-tools.sh).
k8s-binaries:
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh kube-apiserver

helm:
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh helm

CHART := deployments/helm/dra-driver-swap

## manifests: deployments/static/dra-driver-swap.yaml, the chart rendered
## with its default values (for `kubectl apply` without helm), without the
## helm hooks (the uninstall's node label cleanup), which only helm runs.
manifests: helm
	@mkdir -p deployments/static
	@{ echo "# Generated by \`make manifests\` from $(CHART) with its default values"; \
	   echo "# (release dra-driver-swap, namespace dra-swap); do not edit, change the chart."; \
	   $(OUT_DIR)/helm template dra-driver-swap $(CHART) --namespace dra-swap --no-hooks; } > deployments/static/dra-driver-swap.yaml

## chart-docs: $(CHART)/README.md from the comments of its values.yaml
## (helm-docs' `# --` form) and README.md.gotmpl, and its values.schema.json
## (make chart-schema); the integration tests TestChartREADME and
## TestChartSchema fail while either is stale.
chart-docs: chart-schema
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh helm-docs
	$(OUT_DIR)/helm-docs --chart-search-root $(CHART) --sort-values-order file --log-level warning

## chart-schema: $(CHART)/values.schema.json from its values.yaml: the types
## of the defaults, the `# @schema` annotations (helm-values-schema-json's)
## and the `# --` descriptions. Every object is closed (an unknown key fails
## helm install) where values.yaml says `additionalProperties: false`; the
## test's schemaArgs (test/integration/helm_docs_test.go) repeat these flags.
CHART_SCHEMA_ARGS := --draft 7 --indent 2 --use-helm-docs --schema-root.title "dra-driver-swap values" --schema-root.additional-properties=false
chart-schema:
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh helm-values-schema-json
	$(OUT_DIR)/helm-values-schema-json --values $(CHART)/values.yaml --output $(CHART)/values.schema.json $(CHART_SCHEMA_ARGS)

## integration: the kubelet plugin, the controller and the chart against a
## real kube-apiserver and etcd; the scale harness's small run (test/scale:
## 100 simulated nodes, a real kube-scheduler).
integration: deps
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh kube-apiserver kube-scheduler helm helm-docs helm-values-schema-json
	HELM=$(OUT_DIR)/helm HELM_DOCS=$(OUT_DIR)/helm-docs HELM_VALUES_SCHEMA_JSON=$(OUT_DIR)/helm-values-schema-json KUBE_APISERVER=$(OUT_DIR)/kube-apiserver KUBE_SCHEDULER=$(OUT_DIR)/kube-scheduler $(NOCGO) $(GO) test -count=1 -timeout 40m -v ./test/integration/... ./test/scale/... 2>&1 | tee $(CURDIR)/_output/integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' ; exit $${PIPESTATUS[0]}

## e2e: a real single-node cluster (kubelet, containerd, runc, swap file) and the e2e suite.
e2e:
	@mkdir -p _output
	hack/e2e.sh

## e2e-cluster: the suite on a two-node cluster: this host's node and a
## cgroup v2 node, a Debian 13 guest (kernel 6.12) under QEMU emulation, each
## node's tests pinned to it, then the tests of both nodes (make test runs this).
e2e-cluster:
	@mkdir -p _output
	hack/e2e-cluster.sh

## e2e-crio: the v2 node's tests on its second configuration, CRI-O (built
## from tools/crio) with Debian's crun, NRI on: the guest phase of
## hack/e2e-cluster.sh with GUEST_RUNTIME=crio. Not part of make test (its
## time is in docs/development.md); run it before a change to the node path.
e2e-crio:
	@mkdir -p _output
	E2E_PHASES=guest GUEST_RUNTIME=crio hack/e2e-cluster.sh

## e2e-conformance: the portable e2e suite against the cluster of
## KUBECONFIG where the driver is installed, through the API only: what it
## checks and what it skips, and why, is in docs/conformance.md
## (hack/e2e-conformance.sh: E2E_WORKLOAD_IMAGE, E2E_NODE, E2E_RUN, ...).
e2e-conformance:
	@mkdir -p _output
	KUBECONFIG="$(KUBECONFIG)" hack/e2e-conformance.sh

## conformance-docs: docs/conformance.md's list of the conformance suite's
## tests, from the suite's source (test/docs TestConformanceList fails
## while it is stale; e2e.test -list-conformance prints it).
conformance-docs:
	UPDATE_GOLDEN=1 $(NOCGO) $(GO) test -count=1 -run '^TestConformanceList$$' ./test/docs/

## monitoring-check: every expression of the chart's PrometheusRule and
## dashboard through Prometheus's PromQL engine (tools/promql, a module
## of its own) over series that the e2e test TestScrapeForRules scraped from
## both components (E2E_SCRAPE_OUT): SCRAPED=<that file>, or the committed
## capture tools/promql/testdata/scraped.prom.
.PHONY: monitoring-check
monitoring-check:
	@test -n "$(SCRAPED)" || { echo "monitoring-check: set SCRAPED to a file of scraped series (E2E_SCRAPE_OUT of the e2e run, or tools/promql/testdata/scraped.prom)" >&2; exit 1; }
	cd tools/promql && SCRAPED=$(abspath $(SCRAPED)) $(NOCGO) $(GO) test -count=1 -v . 2>&1 | grep -E '^(--- |PASS|FAIL|ok|panic)|would fire|_test.go:[0-9]+: [^ ]+: ' ; exit $${PIPESTATUS[0]}

## demo: bring up the local cluster with the driver and show swap limits applied.
demo:
	hack/cluster/build.sh
	hack/cluster/up.sh
	$(NOCGO) $(GO) run ./test/e2e/demo
	@echo; echo "The cluster keeps running: KUBECONFIG=$$(. $${CLUSTER_DIR:-/var/lib/dra-swap-e2e}/env; echo $$KUBECONFIG). Tear it down with: make demo-down"

demo-down:
	hack/cluster/down.sh

## fuzz: run each fuzz target for FUZZTIME.
fuzz:
	@set -e; for target in $$(grep -rl --include='*_test.go' '^func Fuzz' api internal cmd | xargs -n1 dirname | sort -u); do \
		for f in $$(grep -h '^func Fuzz' $$target/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "fuzz $$target $$f"; $(GO) test ./$$target -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME); \
		done; \
	done

## bench: the prepare path and the hook in process, prepare over the
## plugin's gRPC socket against a real kube-apiserver (1 claim, 12 pods at
## once, 110 claims in one call; each prints its target), and the
## controller labeling 5000 pods on 100 nodes; then, as root, bench-e2e.
bench: deps k8s-binaries
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./internal/kubeletplugin/prepare/ ./internal/hook/
	set -o pipefail; KUBE_APISERVER=$(OUT_DIR)/kube-apiserver $(GO) test -run='^$$' -bench=BenchmarkPrepareAPIServer -benchtime=200x -timeout 20m ./test/integration/ | grep -E '^(Benchmark|ok|FAIL|PASS)|target:'
	set -o pipefail; KUBE_APISERVER=$(OUT_DIR)/kube-apiserver $(GO) test -run='^$$' -bench=BenchmarkPrepare110Claims -benchtime=20x -timeout 20m ./test/integration/ | grep -E '^(Benchmark|ok|FAIL|PASS)|target:'
	set -o pipefail; KUBE_APISERVER=$(OUT_DIR)/kube-apiserver $(GO) test -run='^$$' -bench=BenchmarkReconcileLabels -benchtime=1x -timeout 20m ./test/integration/ | grep -E '^(Benchmark|ok|FAIL|PASS)'
	@if [ "$$(id -u)" = 0 ] && [ "$${E2E:-}" != skip ]; then $(MAKE) bench-e2e; else echo "bench: bench-e2e skipped (needs root; E2E=skip)"; fi

## bench-e2e: pod create->Ready without a claim, with a no-op DRA driver's
## claim and with a swap claim, in rotating order, on a fresh local
## cluster, with the kubelet's NodePrepareResources time per driver; then
## bursts of 12 pods at once of each kind (3 rounds, rotating order) with
## the time until all are Ready and the kubelet's prepare time per driver.
bench-e2e:
	hack/cluster/build.sh
	hack/cluster/up.sh
	set -o pipefail; trap 'hack/cluster/down.sh' EXIT; BENCH_REPORT=$(CURDIR)/_output/bench-e2e.txt $(GO) test -run='^$$' -bench=BenchmarkPodStartup -benchtime=1x -timeout 30m ./test/e2e/ | grep -vE '^\s*$$'; cat $(CURDIR)/_output/bench-e2e.txt

## bench-offload: what offload saves, on the two-node cluster's cgroup v2
## node (the emulated guest): from this host, BenchmarkOffload runs the
## hot/cold workload without a claim, with a claim and with an offload claim
## side by side (BENCH_OFFLOAD_* set its sizes, rounds and budget) and the
## density with and without offload (BENCH_DENSITY_*); in the guest,
## BenchmarkPodStartup with BENCH_OFFLOAD_PODS pods offloading. Reports in
## _output/bench-nodes.txt and _output/bench-guest.txt. Not in make test;
## over an hour of emulation. On a shared machine, under the e2e lock.
## The guest gets 3 GiB of swap: the density's offloaded copies hold their
## cold memory there. The guest's pod start measures one pod at a time: its
## bursts of 12 (BENCH_OFFLOAD_BURST_ROUNDS) take minutes each beside 20
## offloading pods under emulation. The loop runs as the e2e cluster has it
## (a pass every 2 s, steps up to 10 %); OFFLOAD_INTERVAL=6s
## OFFLOAD_MAX_STEP_PERCENT=1 gives it the chart's defaults, on both nodes
## (then give BENCH_OFFLOAD_SECONDS the time that takes: 1 % of
## memory.current a pass). BENCH_OFFLOAD_IDLE=1 gives the guest's 20 pods
## claims without offload: the same node's pod start with the loop idle.
BENCH_OFFLOAD_PODS ?= 20
BENCH_OFFLOAD_BURST_ROUNDS ?= 0
BENCH_ROUNDS ?= 10
GUEST_SWAP_MIB ?= 3072
bench-offload:
	@mkdir -p _output
	E2E_PHASES="guest nodes" E2E_RUN='^$$' E2E_BENCH='^BenchmarkOffload$$' E2E_GUEST_BENCH='^BenchmarkPodStartup$$' GUEST_SWAP_MIB=$(GUEST_SWAP_MIB) \
		BENCH_OFFLOAD_PODS=$(BENCH_OFFLOAD_PODS) BENCH_ROUNDS=$(BENCH_ROUNDS) BENCH_BURST_ROUNDS=$(BENCH_OFFLOAD_BURST_ROUNDS) hack/e2e-cluster.sh
	@cat _output/bench-nodes.txt _output/bench-guest.txt

## bench-scale: the scale harness (test/scale): a real etcd, kube-apiserver,
## kube-scheduler and dra-swap-controller with simulated nodes, at each
## NODES:PODS of SCALE_RUNS (pods per mode: no claim, no-op claim, swap
## claim); prints markdown tables with the machine, also to
## _output/bench-scale.txt (log: _output/bench-scale.log). Not in make test.
## The default takes about 40 minutes on a 2-core machine (27 of them at 5,000 nodes).
SCALE_RUNS ?= 100:2000,1000:5000,5000:10000
bench-scale: deps build
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-tools.sh kube-apiserver kube-scheduler
	@mkdir -p _output
	SCALE_RUNS=$(SCALE_RUNS) BENCH_SCALE_REPORT=$(CURDIR)/_output/bench-scale.txt KUBE_APISERVER=$(OUT_DIR)/kube-apiserver \
		KUBE_SCHEDULER=$(OUT_DIR)/kube-scheduler DRA_SWAP_CONTROLLER=$(OUT_DIR)/dra-swap-controller \
		$(NOCGO) $(GO) test -run='^$$' -bench=BenchmarkScale -benchtime=1x -timeout 180m ./test/scale/ > _output/bench-scale.log 2>&1 \
		|| { grep -vE 'stats.go:[0-9]+\]' _output/bench-scale.log | tail -80; exit 1; }
	@cat _output/bench-scale.txt

clean:
	rm -rf _output
