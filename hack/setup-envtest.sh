#!/usr/bin/env bash
# Builds the control plane that envtest and the e2e harness run against —
# kube-apiserver, kube-controller-manager, etcd and kubectl — from Go modules through the module proxy,
# at pinned versions, into a per-user cache keyed by those versions. Prebuilt
# downloads of these binaries are not used. A cache that is already complete is
# reused in well under a second. The last line printed on stdout is the
# directory to use as KUBEBUILDER_ASSETS.
#
# Usage: hack/setup-envtest.sh            build if needed, print the directory
#        hack/setup-envtest.sh --print    print the directory, build nothing
set -euo pipefail

KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.37.2}"
# The staging modules (k8s.io/api, client-go, kubectl, ...) are published as
# v0.MINOR.PATCH of the Kubernetes release they come from.
STAGING_VERSION="v0.${KUBERNETES_VERSION#v1.}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"

CACHE_ROOT="${BACKPRESSURE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/backpressure-operator}"
ASSETS="${CACHE_ROOT}/envtest/kube-${KUBERNETES_VERSION}-etcd-${ETCD_VERSION}-$(go env GOOS)-$(go env GOARCH)"

log() { echo "setup-envtest: $*" >&2; }

complete() {
  local bin
  for bin in kube-apiserver kube-controller-manager etcd kubectl; do
    [[ -f "${ASSETS}/${bin}" && -x "${ASSETS}/${bin}" ]] || return 1
  done
}

if [[ "${1:-}" == "--print" ]]; then
  echo "${ASSETS}"
  exit 0
fi

if complete; then
  echo "${ASSETS}"
  exit 0
fi

mkdir -p "${CACHE_ROOT}"
# One build at a time per cache: a second caller waits, then finds it complete.
exec 9>"${CACHE_ROOT}/.envtest.lock"
if command -v flock >/dev/null; then flock 9; fi
if complete; then
  echo "${ASSETS}"
  exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/backpressure-envtest.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
mkdir -p "${ASSETS}" "${WORK}/bin"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off
VERSION_PKG=k8s.io/component-base/version
minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
KUBE_LDFLAGS="-s -w -X ${VERSION_PKG}.gitVersion=${KUBERNETES_VERSION} -X ${VERSION_PKG}.gitMajor=1 -X ${VERSION_PKG}.gitMinor=${minor} -X ${VERSION_PKG}.gitTreeState=clean"

# build_into NAME PACKAGE: go build PACKAGE from the module in the current
# directory and move the binary into the cache only once it is whole.
build_into() {
  local name="$1" pkg="$2" ldflags="$3" start=$SECONDS
  log "building ${name} (${pkg}) ..."
  go build -trimpath -ldflags "${ldflags}" -o "${WORK}/bin/${name}" "${pkg}"
  mv -f "${WORK}/bin/${name}" "${ASSETS}/${name}"
  log "built ${name} in $((SECONDS - start))s"
}

# etcd: a main that calls etcdmain.Main, as etcd's own main does.
if [[ ! -f "${ASSETS}/etcd" ]]; then
  mkdir -p "${WORK}/etcd" && cd "${WORK}/etcd"
  cat > go.mod <<MOD
module backpressure.dev/hack/etcd

go 1.26
MOD
  cat > main.go <<'SRC'
// Command etcd runs the etcd server.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
SRC
  go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
  go mod tidy >&2
  build_into etcd . "-s -w"
fi

# kube-apiserver and kube-controller-manager: k8s.io/kubernetes is not meant
# to be imported, because its go.mod points every staging module at ./staging.
# A wrapper module replaces each of them with its published release instead;
# both commands build from that one module, so they share one download.
kube_wrapper() {
  [[ -f "${WORK}/kubernetes/go.mod" ]] && { cd "${WORK}/kubernetes"; return; }
  mkdir -p "${WORK}/kubernetes" && cd "${WORK}/kubernetes"
  local kmod
  kmod="$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module backpressure.dev/hack/kubernetes"
    echo
    echo "go 1.26"
    echo
    grep -E '^godebug' "${kmod}" || true
    echo
    echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
    echo
    echo "replace ("
    sed -n "s#^[[:space:]]*\(k8s.io/[a-z0-9.-]*\) => ./staging/src/k8s.io/.*#\t\1 => \1 ${STAGING_VERSION}#p" "${kmod}"
    echo ")"
  } > go.mod
}

for cmd in kube-apiserver kube-controller-manager; do
  [[ -f "${ASSETS}/${cmd}" ]] && continue
  kube_wrapper
  go get "k8s.io/kubernetes/cmd/${cmd}@${KUBERNETES_VERSION}" >&2
  build_into "${cmd}" "k8s.io/kubernetes/cmd/${cmd}" "${KUBE_LDFLAGS}"
done

# kubectl: the published k8s.io/kubectl command tree behind a main, as the
# kubectl binary itself is built.
if [[ ! -f "${ASSETS}/kubectl" ]]; then
  mkdir -p "${WORK}/kubectl" && cd "${WORK}/kubectl"
  cat > go.mod <<MOD
module backpressure.dev/hack/kubectl

go 1.26
MOD
  cat > main.go <<'SRC'
// Command kubectl is the Kubernetes command-line client.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
SRC
  go get "k8s.io/kubectl@${STAGING_VERSION}" "k8s.io/component-base@${STAGING_VERSION}" >&2
  go mod tidy >&2
  build_into kubectl . "${KUBE_LDFLAGS}"
fi

complete || { log "incomplete cache at ${ASSETS}"; exit 1; }
echo "${ASSETS}"
