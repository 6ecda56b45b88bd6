# dra-driver-swap. `make test` runs everything; see README.md.
SHELL := /bin/bash
GO ?= go
OUT_DIR ?= $(CURDIR)/_output/bin
KUBE_VERSION ?= v1.37.1
# Fuzz time per fuzz target in `make fuzz`.
FUZZTIME ?= 30s
BENCHTIME ?= 1s

GO_PACKAGES := ./api/... ./pkg/... ./cmd/...
COMMANDS := dra-swap-kubeletplugin dra-swap-hook dra-swap-controller

.PHONY: all build test unit integration e2e e2e-v2 demo demo-down verify fuzz bench k8s-binaries deps clean

all: build

build:
	@mkdir -p $(OUT_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(OUT_DIR)/ $(addprefix ./cmd/,$(COMMANDS))

## test: everything a change must pass: static checks, unit tests,
## integration tests, then end-to-end tests on a real cluster, on this host's
## cgroups (v1 here) and on cgroup v2 in an emulated guest (E2E=skip skips both).
test: verify unit integration e2e e2e-v2

verify:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -count=1 -race $(GO_PACKAGES)

deps:
	hack/install-deps.sh etcd-server

k8s-binaries:
	OUT_DIR=$(OUT_DIR) KUBE_VERSION=$(KUBE_VERSION) hack/build-k8s.sh kube-apiserver

## integration: the kubelet plugin against a real kube-apiserver and etcd.
integration: deps k8s-binaries
	KUBE_APISERVER=$(OUT_DIR)/kube-apiserver $(GO) test -count=1 -v ./test/integration/... 2>&1 | tee $(CURDIR)/_output/integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' ; exit $${PIPESTATUS[0]}

## e2e: a real single-node cluster (kubelet, containerd, runc, swap file) and the e2e suite.
e2e:
	@mkdir -p _output
	hack/e2e.sh

## e2e-v2: the same suite on a cgroup v2 node: a Debian guest (kernel 6.1) under QEMU emulation.
e2e-v2:
	@mkdir -p _output
	hack/e2e-v2.sh

## demo: bring up the local cluster with the driver and show swap limits applied.
demo:
	hack/cluster/build.sh
	hack/cluster/up.sh
	$(GO) run ./test/e2e/demo
	@echo; echo "The cluster keeps running: KUBECONFIG=$$(. $${CLUSTER_DIR:-/var/lib/dra-swap-e2e}/env; echo $$KUBECONFIG). Tear it down with: make demo-down"

demo-down:
	hack/cluster/down.sh

## fuzz: run each fuzz target for FUZZTIME.
fuzz:
	@set -e; for target in $$(grep -rl --include='*_test.go' '^func Fuzz' api pkg cmd | xargs -n1 dirname | sort -u); do \
		for f in $$(grep -h '^func Fuzz' $$target/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
			echo "fuzz $$target $$f"; $(GO) test ./$$target -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME); \
		done; \
	done

## bench: prepare latency (1 and 110 claims), the hook's run time, and the
## controller labeling 5000 pods on 100 nodes against a real kube-apiserver.
bench: deps k8s-binaries
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./pkg/prepare/ ./pkg/hook/
	set -o pipefail; KUBE_APISERVER=$(OUT_DIR)/kube-apiserver $(GO) test -run='^$$' -bench=BenchmarkReconcileLabels -benchtime=1x -timeout 20m ./test/integration/ | grep -E '^(Benchmark|ok|FAIL|PASS)'

clean:
	rm -rf _output
