# The images: static binaries on a distroless base that run as the non-root
# user 65532.
#
#   docker build -t <image> .                       the manager (the last stage)
#   docker build --target proxy -t <image> .        backpressure-proxy, the sidecar
#
# `make docker-build IMG=<image>` and `make docker-build-proxy
# PROXY_IMG=<image>` run them.
#
# The Go version matches go.mod's toolchain; BUILDPLATFORM, TARGETOS and
# TARGETARCH are set by BuildKit, so `docker buildx build --platform ...`
# cross-compiles without emulation. VERSION and COMMIT are stamped into the
# binaries as hack/release.sh stamps them (`--version`, and the manager logs
# them); the make targets pass them. Without them the binaries say "dev" and
# "unknown": the build context has no .git for the go command to read.
# test/release runs each stage's go build as written here, from a directory
# holding only what the stage copies.
FROM --platform=$BUILDPLATFORM golang:1.26 AS modules
WORKDIR /workspace
# Modules first, so that a source change does not download them again. The
# plan document and the library are modules of their own that go.mod
# replaces with their directories, so their go.mod files are part of the
# module graph.
COPY go.mod go.sum ./
COPY api/plan/go.mod api/plan/go.sum api/plan/
COPY pkg/backpressure/go.mod pkg/backpressure/go.sum pkg/backpressure/
RUN go mod download

FROM modules AS builder
ARG TARGETOS
ARG TARGETARCH
COPY api/ api/
COPY cmd/manager/ cmd/manager/
COPY internal/ internal/
ARG VERSION
ARG COMMIT
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Version=${VERSION} \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Commit=${COMMIT}" \
    -o manager ./cmd/manager

# The proxy needs the library (pkg/backpressure), the plan document
# (api/plan), internal/version and internal/httpshutdown only, so a change
# to the manager does not rebuild it.
FROM modules AS proxy-builder
ARG TARGETOS
ARG TARGETARCH
COPY cmd/backpressure-proxy/ cmd/backpressure-proxy/
COPY internal/version/ internal/version/
COPY internal/httpshutdown/ internal/httpshutdown/
COPY api/plan/ api/plan/
COPY pkg/backpressure/ pkg/backpressure/
ARG VERSION
ARG COMMIT
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Version=${VERSION} \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Commit=${COMMIT}" \
    -o backpressure-proxy ./cmd/backpressure-proxy

FROM gcr.io/distroless/static:nonroot AS proxy
WORKDIR /
COPY --from=proxy-builder /workspace/backpressure-proxy .
USER 65532:65532
# The metrics, /healthz and /readyz port; the routes' ports are loopback.
EXPOSE 9090
ENTRYPOINT ["/backpressure-proxy"]

# The manager stays the last stage: `docker build .` without --target
# builds it.
FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532

ENTRYPOINT ["/manager"]
