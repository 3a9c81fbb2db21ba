# backpressure-operator: build, generate, test.
#
# Every tool runs through the go command at a version pinned in
# hack/tools/*/go.mod; the control plane for tests is built from Go modules by
# hack/setup-envtest.sh and cached outside the repository.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

GO ?= go
CONTROLLER_GEN := $(GO) tool -modfile=hack/tools/controller-gen/go.mod controller-gen
GOLANGCI_LINT := $(GO) tool -modfile=hack/tools/golangci-lint/go.mod golangci-lint

# Go test flags; `make test GOTESTFLAGS=-v` for more.
GOTESTFLAGS ?=
TEST_TIMEOUT ?= 45m

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CRDs and the manager's RBAC from the markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: ## Generate the deepcopy methods of the API types.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: verify-generated
verify-generated: ## Fail when a generated file is stale.
	hack/verify-generated.sh manifests generate

.PHONY: fmt
fmt: ## Format the Go code.
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: lint
lint: ## Run golangci-lint (formatting, vet, staticcheck, doc comments, ...).
	$(GOLANGCI_LINT) run ./...

.PHONY: envtest
envtest: ## Build the control plane for tests (kube-apiserver, etcd, kubectl) if not cached.
	hack/setup-envtest.sh >/dev/null

##@ Test

.PHONY: test
test: verify-generated vet lint envtest ## The test command: generated files, vet, lint, unit and envtest suites under -race.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" $(GO) test -race -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...

##@ Build

.PHONY: build
build: ## Build the binaries into bin/.
	$(GO) build -o bin/ ./cmd/...

.PHONY: run
run: ## Run the manager against the current kubeconfig.
	$(GO) run ./cmd/manager
