# The manager image: a static binary on a distroless base that runs as the
# non-root user 65532. Build it with `make docker-build IMG=<image>`.
#
# The Go version matches go.mod's toolchain; BUILDPLATFORM, TARGETOS and
# TARGETARCH are set by BuildKit, so `docker buildx build --platform ...`
# cross-compiles without emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download

COPY api/ api/
COPY cmd/manager/ cmd/manager/
COPY internal/ internal/
COPY pkg/ pkg/

RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532

ENTRYPOINT ["/manager"]
