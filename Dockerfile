# The images: static binaries on a distroless base that run as the non-root
# user 65532.
#
#   docker build -t <image> .                       the manager (the last stage)
#   docker build --target proxy -t <image> .        backpressure-proxy, the sidecar
#   docker build --target broker -t <image> .       backpressure-broker, the permit server
#
# `make docker-build IMG=<image>`, `make docker-build-proxy
# PROXY_IMG=<image>` and `make docker-build-broker BROKER_IMG=<image>` run
# them.
#
# Both base images are pinned by digest, the multi-platform index of the tag
# beside it, so that a build takes the very images that were reviewed;
# test/release fails on a FROM without one. A digest changes only here, in
# a commit of its own: `docker buildx imagetools inspect <image>:<tag>` shows
# the current one. golang:1.26.8 is the toolchain the project is built and
# tested with.
#
# BUILDPLATFORM, TARGETOS and TARGETARCH are set by BuildKit, so `docker
# buildx build --platform ...` cross-compiles without emulation. VERSION and COMMIT are stamped into the
# binaries as hack/release.sh stamps them (`--version`, and the manager logs
# them); the make targets pass them. Without them the binaries say "dev" and
# "unknown": the build context has no .git for the go command to read.
# test/release runs each stage's go build as written here, from a directory
# holding only what the stage copies.
FROM --platform=$BUILDPLATFORM golang:1.26.8@sha256:3c3e25a4da13fd0478eed2df1eb35a0e667094a7124d3993a6a1d30f71c17e79 AS modules
WORKDIR /workspace
# Modules first, so that a source change does not download them again. The
# plan document, the permit server's protocol and the library are modules
# of their own that go.mod replaces with their directories, so their go.mod
# files are part of the module graph.
COPY go.mod go.sum ./
COPY api/plan/go.mod api/plan/go.sum api/plan/
COPY api/reserve/go.mod api/reserve/go.sum api/reserve/
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
# (api/plan), the permit server's protocol (api/reserve, to borrow from the
# reserve), internal/version and internal/httpshutdown only, so a change to
# the manager does not rebuild it.
FROM modules AS proxy-builder
ARG TARGETOS
ARG TARGETARCH
COPY cmd/backpressure-proxy/ cmd/backpressure-proxy/
COPY internal/version/ internal/version/
COPY internal/httpshutdown/ internal/httpshutdown/
COPY api/plan/ api/plan/
COPY api/reserve/ api/reserve/
COPY pkg/backpressure/ pkg/backpressure/
ARG VERSION
ARG COMMIT
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Version=${VERSION} \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Commit=${COMMIT}" \
    -o backpressure-proxy ./cmd/backpressure-proxy

FROM gcr.io/distroless/static:nonroot@sha256:e2e927ec666bae08560abb3c55d0659eceabb657f56b6782ab500a9fc7f555e3 AS proxy
WORKDIR /
COPY --from=proxy-builder /workspace/backpressure-proxy .
USER 65532:65532
# The /healthz and /readyz port. The metrics listen on 127.0.0.1:9090 and
# the routes on loopback unless flags say otherwise.
EXPOSE 9091
ENTRYPOINT ["/backpressure-proxy"]

# The permit server needs what the proxy needs, less the proxy, and the
# lending itself (internal/broker).
FROM modules AS broker-builder
ARG TARGETOS
ARG TARGETARCH
COPY cmd/backpressure-broker/ cmd/backpressure-broker/
COPY internal/version/ internal/version/
COPY internal/httpshutdown/ internal/httpshutdown/
COPY internal/broker/ internal/broker/
COPY api/plan/ api/plan/
COPY api/reserve/ api/reserve/
COPY pkg/backpressure/ pkg/backpressure/
ARG VERSION
ARG COMMIT
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Version=${VERSION} \
      -X github.com/backpressure-dev/backpressure-operator/internal/version.Commit=${COMMIT}" \
    -o backpressure-broker ./cmd/backpressure-broker

FROM gcr.io/distroless/static:nonroot@sha256:e2e927ec666bae08560abb3c55d0659eceabb657f56b6782ab500a9fc7f555e3 AS broker
WORKDIR /
COPY --from=broker-builder /workspace/backpressure-broker .
USER 65532:65532
# The gRPC port (the Reserve service and gRPC health) and the /metrics and
# /healthz port.
EXPOSE 9443 8080
ENTRYPOINT ["/backpressure-broker"]

# The manager stays the last stage: `docker build .` without --target
# builds it.
FROM gcr.io/distroless/static:nonroot@sha256:e2e927ec666bae08560abb3c55d0659eceabb657f56b6782ab500a9fc7f555e3 AS manager
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532

ENTRYPOINT ["/manager"]
