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
# cross-compiles without emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS modules
WORKDIR /workspace
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download

FROM modules AS builder
ARG TARGETOS
ARG TARGETARCH
COPY api/ api/
COPY cmd/manager/ cmd/manager/
COPY internal/ internal/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o manager ./cmd/manager

# The proxy needs pkg/runtime, the library's internal packages and
# internal/version only, so a change to the manager does not rebuild it.
FROM modules AS proxy-builder
ARG TARGETOS
ARG TARGETARCH
COPY cmd/backpressure-proxy/ cmd/backpressure-proxy/
COPY internal/version/ internal/version/
COPY internal/plan/ internal/plan/
COPY internal/reload/ internal/reload/
COPY internal/runtimemetrics/ internal/runtimemetrics/
COPY internal/histogram/ internal/histogram/
COPY pkg/ pkg/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o backpressure-proxy ./cmd/backpressure-proxy

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
