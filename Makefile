# backpressure-operator: build, generate, test.
#
# Every tool runs through the go command at a version pinned in
# hack/tools/*/go.mod; the control plane for tests is built from Go modules by
# hack/setup-envtest.sh and cached outside the repository, unless
# KUBEBUILDER_ASSETS already names one.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

GO ?= go
CONTROLLER_GEN := $(GO) tool -modfile=hack/tools/controller-gen/go.mod controller-gen
GOLANGCI_LINT := $(GO) tool -modfile=$(CURDIR)/hack/tools/golangci-lint/go.mod golangci-lint
BENCHSTAT := $(GO) tool -modfile=hack/tools/benchstat/go.mod benchstat
# The protobuf compiler: hack/tools/protoc, a module of its own (protocompile
# and the pinned protoc-gen-go and protoc-gen-go-grpc), run from its directory.
PROTOC := $(GO) -C hack/tools/protoc run . -root $(CURDIR)

# The library's modules: the plan document both sides read (api/plan, tag
# api/plan/vX.Y.Z), the permit server's protocol the library's borrowing
# client and the permit server speak (api/reserve, tag api/reserve/vX.Y.Z),
# the library an application requires (pkg/backpressure, tag
# pkg/backpressure/vX.Y.Z), and the library's tests that need an API
# server, which alone require this module for its test environment
# (pkg/backpressure/internal/apitest). An application that requires the
# library gets neither this module nor controller-runtime in its module
# graph (test/modgraph checks it).
LIBRARY_MODULES := api/plan api/reserve pkg/backpressure pkg/backpressure/internal/apitest

# The nested modules, each with a go.mod that replaces the modules it uses
# with the working tree: the library's, the dispatcher's comparison with
# ants (hack/bench), the storm's plotting command (hack/stormplot) and the
# protobuf compiler (hack/tools/protoc). The last three are modules of their
# own so that ants, gonum and protocompile stay out of every module graph but
# theirs; fmt, vet and lint run them all.
NESTED_MODULES := $(LIBRARY_MODULES) hack/bench hack/stormplot hack/tools/protoc

# Go test flags; `make test GOTESTFLAGS=-v` for more.
GOTESTFLAGS ?=
TEST_TIMEOUT ?= 45m

# The control plane the tests run against. A KUBEBUILDER_ASSETS given in the
# environment or on the command line is used as it is when it holds every
# binary the target runs: kube-apiserver, kube-controller-manager (the storm
# runs the real Deployment, ReplicaSet, HPA and garbage-collector
# controllers), etcd and kubectl; perf needs only kube-apiserver and etcd.
# Otherwise hack/setup-envtest.sh builds the control plane (once; it is
# cached) and its directory is used.
ENVTEST_BINARIES := kube-apiserver kube-controller-manager etcd kubectl
# assets_given is the absolute KUBEBUILDER_ASSETS when it holds every binary
# in $(1), else empty.
assets_given = $(if $(KUBEBUILDER_ASSETS),$(if $(strip $(foreach b,$(1),$(if $(wildcard $(KUBEBUILDER_ASSETS)/$(b)),,$(b)))),,$(abspath $(KUBEBUILDER_ASSETS))))
# assets_for is what a recipe that runs the binaries in $(1) sets
# KUBEBUILDER_ASSETS to: the given directory, or the shell running
# hack/setup-envtest.sh, which builds only what is not cached.
assets_for = $(or $(call assets_given,$(1)),$$(hack/setup-envtest.sh))

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRDs and the manager's RBAC from the markers, and copy them into the Helm chart.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(MAKE) --no-print-directory chart-sync

.PHONY: generate
generate: ## Generate the deepcopy methods of the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."

.PHONY: proto
proto: ## Generate the Go code of the permit server's protocol from api/reserve/v1/reserve.proto.
	$(PROTOC) backpressure/reserve/v1/reserve.proto=api/reserve/v1/reserve.proto

.PHONY: verify-generated
verify-generated: ## Fail when a generated file is stale.
	hack/verify-generated.sh manifests generate docs proto

.PHONY: fmt
fmt: ## Format the Go code.
	$(GO) fmt ./...
	for m in $(NESTED_MODULES); do (cd $$m && $(GO) fmt ./...); done

.PHONY: vet
vet: ## Run go vet, here and in the nested modules.
	$(GO) vet ./...
	for m in $(NESTED_MODULES); do (cd $$m && $(GO) vet ./...); done

.PHONY: lint
lint: ## Run golangci-lint (formatting, vet, staticcheck, doc comments, ...), here and in the nested modules, and govulncheck (skipped offline unless GOVULNDB_DIR names a copy of its database).
	$(GOLANGCI_LINT) run ./...
	for m in $(NESTED_MODULES); do (cd $$m && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...); done
	hack/govulncheck.sh

.PHONY: envtest
envtest: ## Build the control plane for tests (kube-apiserver, kube-controller-manager, etcd, kubectl) if not cached nor given as KUBEBUILDER_ASSETS.
ifneq ($(call assets_given,$(ENVTEST_BINARIES)),)
	@echo "envtest: using KUBEBUILDER_ASSETS=$(call assets_given,$(ENVTEST_BINARIES))" >&2
else
	@if [[ -n "$(KUBEBUILDER_ASSETS)" ]]; then echo "envtest: KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS) lacks one of $(ENVTEST_BINARIES); using hack/setup-envtest.sh's control plane" >&2; fi
	hack/setup-envtest.sh >/dev/null
endif

##@ Test

.PHONY: test
test: verify-generated vet lint envtest ## The test command: generated files, vet, lint, unit and envtest suites under -race, the nested modules' tests, then e2e.
	KUBEBUILDER_ASSETS="$(call assets_for,$(ENVTEST_BINARIES))" $(GO) test -race -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...
	$(MAKE) --no-print-directory test-library
	$(MAKE) --no-print-directory test-nested
	$(MAKE) --no-print-directory e2e

# The library's modules' tests, under -race like the operator's; the API
# server tests need kube-apiserver and etcd only.
.PHONY: test-library
test-library: ## The library's and the plan document's tests under -race, their API server tests included.
	assets="$(call assets_for,kube-apiserver etcd)"; \
	for m in $(LIBRARY_MODULES); do (cd $$m && KUBEBUILDER_ASSETS="$$assets" $(GO) test -race -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...); done

# The plotting command has tests; the benchmark module has benchmarks only,
# each run once so that a change to the dispatcher that breaks them fails
# here and not at the next `make bench`. Neither runs concurrent code of its
# own, so neither needs -race (which would build gonum and ants again).
.PHONY: test-nested
test-nested: ## The nested modules' tests (hack/stormplot) and one iteration of each benchmark of hack/bench.
	cd hack/stormplot && $(GO) test $(GOTESTFLAGS) ./...
	cd hack/bench && $(GO) test -run '^$$' -bench . -benchtime 1x $(GOTESTFLAGS) ./...

# The e2e suite runs without -race: the race detector would slow the load
# generator on two cores; the harness's own tests run under -race in test,
# and not here again, where their API server and stress test would compete
# with the storm for the same two cores.
.PHONY: e2e
e2e: envtest ## The end-to-end suite: the 429 storm with and without the operator, the laggard, two callers, the sidecar, the faults, the partial load and a new pod's first call, goals asserted (about 17 minutes).
	KUBEBUILDER_ASSETS="$(call assets_for,$(ENVTEST_BINARIES))" $(GO) test -tags e2e -count=1 -timeout 29m $(GOTESTFLAGS) ./test/e2e/

##@ Demo

# The storm program builds the control plane itself when KUBEBUILDER_ASSETS
# is unset, and says so; a given directory that lacks a binary is not passed on.
.PHONY: demo
demo: ## Reproduce the 429 storm and watch the operator prevent it: a table, _output/storm/report.json and storm.png.
	$(if $(call assets_given,$(ENVTEST_BINARIES)),KUBEBUILDER_ASSETS="$(call assets_given,$(ENVTEST_BINARIES))",env -u KUBEBUILDER_ASSETS) $(GO) run ./test/e2e/cmd/storm

BENCH_COUNT ?= 10

.PHONY: bench
bench: ## Benchmark the gate and the dispatcher against their peers (_output/bench.txt); the dispatcher's run in hack/bench, beside ants.
	@mkdir -p _output
	cd pkg/backpressure && $(GO) test -run '^$$' -bench . -benchmem -count=$(BENCH_COUNT) ./gate/ | tee $(CURDIR)/_output/bench.txt
	cd hack/bench && $(GO) test -run '^$$' -bench . -benchmem -count=$(BENCH_COUNT) ./... | tee -a $(CURDIR)/_output/bench.txt
	$(BENCHSTAT) _output/bench.txt

# Each round runs the three vias, each in a process of its own, in an order
# that rotates from round to round, so that neither a change in the
# machine's load nor the one before it in the same process favours one of
# them; the rounds are the samples.
PROXY_BENCH_ROUNDS ?= 8
PROXY_BENCH_TIME ?= 2s

.PHONY: bench-proxy
bench-proxy: ## Measure the sidecar proxy beside a direct call and a plain httputil.ReverseProxy at 2 cores (_output/bench-proxy.txt).
	@mkdir -p _output
	$(GO) test -c -o _output/backpressure-proxy.test ./cmd/backpressure-proxy/
	@rm -f _output/bench-proxy.txt
	@set -- direct reverseproxy backpressure; \
	for i in $$(seq $(PROXY_BENCH_ROUNDS)); do \
		for via in "$$@"; do \
			(cd cmd/backpressure-proxy && ../../_output/backpressure-proxy.test -test.run '^$$' \
				-test.bench "BenchmarkProxy/mode=.*/via=$$via\$$" -test.cpu 2 -test.count 1 \
				-test.benchtime $(PROXY_BENCH_TIME)) | tee -a _output/bench-proxy.txt; \
		done; \
		set -- "$${@:2}" "$$1"; \
	done
	$(BENCHSTAT) -col '/via@(reverseproxy backpressure direct)' _output/bench-proxy.txt

# perf runs no kubectl, so a KUBEBUILDER_ASSETS with kube-apiserver and etcd
# alone will do.
.PHONY: perf
perf: ## Measure the controller: Ready-pods-to-ConfigMap latency, a 2,000-quota cold start, pod churn (asserts its p99) and pod cache memory.
	BACKPRESSURE_PERF=1 KUBEBUILDER_ASSETS="$(call assets_for,kube-apiserver etcd)" $(GO) test -count=1 -run . -v -timeout 60m ./test/perf

##@ Build

.PHONY: build
build: ## Build the binaries into bin/.
	$(GO) build -o bin/ ./cmd/...

# Flags for the manager that make run starts, such as
# RUN_ARGS="--metrics-bind-address=0 --health-probe-bind-address=0" when its
# ports are taken.
RUN_ARGS ?=

.PHONY: run
run: ## Run the manager against the current kubeconfig, such as the dev cluster's (hack/dev-cluster.sh env).
	$(GO) run ./cmd/manager $(RUN_ARGS)

.PHONY: dev-cluster
dev-cluster: ## Start a local cluster in the background (kube-apiserver, etcd, kube-controller-manager; the CRDs and policies) and say how to use it.
	hack/dev-cluster.sh start

.PHONY: dev-cluster-stop
dev-cluster-stop: ## Stop the local cluster of make dev-cluster.
	hack/dev-cluster.sh stop

##@ Release

# make release VERSION=v0.1.0 writes dist/; the environment may narrow it
# (RELEASE_PLATFORMS="linux/amd64"), or name the image repository
# (RELEASE_IMAGE) and where the archives will be downloaded from
# (RELEASE_URL) — hack/release.sh says more.
# The release is signed with the minisign secret key RELEASE_SIGNING_KEY
# names (and RELEASE_SIGNING_PASSWORD, when it has one); without it the
# release fails.
.PHONY: release
release: ## Build release VERSION into dist/: archives of the binaries, their SBOMs, install.yaml, chart, krew manifest, provenance, checksums, signatures.
	@if [[ -z "$(VERSION)" ]]; then echo "release: give the version, such as make release VERSION=v0.1.0" >&2; exit 2; fi
	$(if $(call assets_given,kubectl),KUBEBUILDER_ASSETS="$(call assets_given,kubectl)") DIST=dist hack/release.sh "$(VERSION)"

##@ Deploy and document

# The manager image that docker-build builds and deploy installs.
IMG ?= backpressure-operator:latest
CONTAINER_TOOL ?= docker
# What the images' binaries say with --version: VERSION when given (as for
# make release), else "dev"; the commit of the checkout.
IMAGE_BUILD_ARGS = --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(shell git rev-parse HEAD 2>/dev/null)
# The kubectl of the cluster to deploy to (the current kubeconfig context).
KUBECTL ?= kubectl
CRD_REF_DOCS := $(GO) tool -modfile=hack/tools/crd-ref-docs/go.mod crd-ref-docs
HELM := $(GO) tool -modfile=hack/tools/helm/go.mod helm
PROMTOOL := $(GO) tool -modfile=hack/tools/promtool/go.mod promtool
CHART := charts/backpressure-operator

.PHONY: docs
docs: ## Generate the API reference, docs/reference/api.md, from the API types, and the plan bounds, docs/reference/plan-bounds.md, from the plan's field table.
	$(CRD_REF_DOCS) --source-path=api/v1alpha1 --config=docs/reference/config.yaml \
		--renderer=markdown --output-path=docs/reference/api.md --log-level=WARN
	$(GO) run ./internal/quota/boundsdoc > docs/reference/plan-bounds.md

# The Kubernetes version an offline helm template renders the chart for:
# helm's own default (1.20) is below the chart's kubeVersion (>=1.30), so
# without one it renders nothing. By default the version of the control
# plane the tests run against (hack/setup-envtest.sh).
HELM_KUBE_VERSION ?= $(shell sed -n 's/^KUBERNETES_VERSION="$${KUBERNETES_VERSION:-v\([0-9.]*\)}"$$/\1/p' hack/setup-envtest.sh)
# More helm template flags, such as HELM_ARGS="--set image.tag=v0.1.0".
HELM_ARGS ?=

.PHONY: helm-template
helm-template: ## Render the Helm chart without a cluster (CRDs included) for Kubernetes HELM_KUBE_VERSION, with HELM_ARGS.
	@$(HELM) template backpressure-operator $(CHART) --namespace backpressure-system --include-crds \
		--kube-version $(HELM_KUBE_VERSION) $(HELM_ARGS)

.PHONY: chart-sync
chart-sync: ## Copy the CRDs, the manager's role, the alerts and the dashboard into the Helm chart.
	rm -f $(CHART)/crds/*.yaml
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/manager-role.yaml
	cp config/prometheus/alerts.yaml $(CHART)/files/alerts.yaml
	cp config/prometheus/dashboard.json $(CHART)/files/dashboard.json

.PHONY: tools
tools: ## Build the pinned tools the manifest and release tests run (helm and promtool take minutes the first time).
	$(HELM) version >/dev/null
	$(PROMTOOL) --version >/dev/null
	$(CRD_REF_DOCS) --version >/dev/null
	$(GO) tool -modfile=hack/tools/minisign/go.mod minisign -v >/dev/null
	$(GO) tool -modfile=hack/tools/cyclonedx-gomod/go.mod cyclonedx-gomod version >/dev/null
	$(GO) tool -modfile=hack/tools/govulncheck/go.mod govulncheck -version >/dev/null

.PHONY: docker-build
docker-build: ## Build the manager image IMG (needs a Docker engine, or CONTAINER_TOOL=podman).
	$(CONTAINER_TOOL) build $(IMAGE_BUILD_ARGS) -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the manager image IMG.
	$(CONTAINER_TOOL) push $(IMG)

# The sidecar's image, the Dockerfile's proxy target.
PROXY_IMG ?= backpressure-proxy:latest

.PHONY: docker-build-proxy
docker-build-proxy: ## Build the sidecar image PROXY_IMG, backpressure-proxy (the Dockerfile's proxy target).
	$(CONTAINER_TOOL) build $(IMAGE_BUILD_ARGS) --target proxy -t $(PROXY_IMG) .

.PHONY: docker-push-proxy
docker-push-proxy: ## Push the sidecar image PROXY_IMG.
	$(CONTAINER_TOOL) push $(PROXY_IMG)

# The permit server's image, the Dockerfile's broker target.
BROKER_IMG ?= backpressure-broker:latest

.PHONY: docker-build-broker
docker-build-broker: ## Build the permit server's image BROKER_IMG, backpressure-broker (the Dockerfile's broker target).
	$(CONTAINER_TOOL) build $(IMAGE_BUILD_ARGS) --target broker -t $(BROKER_IMG) .

.PHONY: docker-push-broker
docker-push-broker: ## Push the permit server's image BROKER_IMG.
	$(CONTAINER_TOOL) push $(BROKER_IMG)

# overlay writes _output/$(1)/kustomization.yaml: the kustomization
# config/$(2) with the image named $(3) replaced by $(4) (name:tag or
# name@digest).
define overlay
	@mkdir -p _output/$(1)
	@printf '# Written by make $(1).\nresources:\n- ../../config/$(2)\nimages:\n' > _output/$(1)/kustomization.yaml
	$(call overlay_image,$(1),$(3),$(4))
endef

# overlay_image adds to the images of _output/$(1)/kustomization.yaml the
# image named $(2), replaced by $(3) (name:tag or name@digest).
define overlay_image
	@img='$(3)'; \
	case "$${img##*/}" in \
	  *@*) name="$${img%@*}"; ref="digest: $${img##*@}" ;; \
	  *:*) name="$${img%:*}"; ref="newTag: $${img##*:}" ;; \
	  *)   name="$$img"; ref="newTag: latest" ;; \
	esac; \
	printf -- '- name: $(2)\n  newName: %s\n  %s\n' "$$name" "$$ref" >> _output/$(1)/kustomization.yaml
endef

.PHONY: deploy
deploy: ## Install the operator (config/default) into the current kubeconfig's cluster, with IMG as the image.
	$(call overlay,deploy,default,backpressure-operator,$(IMG))
	$(KUBECTL) apply -k _output/deploy

.PHONY: deploy-sample
deploy-sample: ## Apply the sample (config/samples: the search gateway and its quota) with PROXY_IMG as its sidecar's image.
	$(call overlay,deploy-sample,samples,backpressure-proxy,$(PROXY_IMG))
	$(KUBECTL) apply -k _output/deploy-sample

.PHONY: deploy-sample-reserve
deploy-sample-reserve: ## Apply the sample with a pooled reserve (config/samples and its component config/samples/reserve: the permit server and its Service), with PROXY_IMG and BROKER_IMG as the images.
	$(call overlay,deploy-sample-reserve,samples,backpressure-proxy,$(PROXY_IMG))
	$(call overlay_image,deploy-sample-reserve,backpressure-broker,$(BROKER_IMG))
	@printf 'components:\n- ../../config/samples/reserve\n' >> _output/deploy-sample-reserve/kustomization.yaml
	$(KUBECTL) apply -k _output/deploy-sample-reserve

.PHONY: undeploy
undeploy: ## Remove the operator from the cluster, with its CRD and so every DownstreamQuota.
	$(KUBECTL) delete --ignore-not-found -k config/default
