#!/usr/bin/env bash
# Builds a release of backpressure-operator into dist/, with no network but
# the Go module proxy:
#
#   backpressure-operator-manager_<version>_<os>_<arch>.tar.gz   the manager
#   kubectl-backpressure_<version>_<os>_<arch>.tar.gz            the kubectl plugin
#   backpressure-proxy_<version>_<os>_<arch>.tar.gz              the sidecar for any language
#   backpressure-broker_<version>_<os>_<arch>.tar.gz             the permit server of a quota's reserve
#   install.yaml            CRDs, RBAC and the manager (config/default), image tagged <version>
#   backpressure-operator-<version without v>.tgz                the Helm chart
#   backpressure.yaml       the krew manifest of the plugin, from its archives
#   <archive without .tar.gz>.cdx.json                           the SBOM of each archive's binary (CycloneDX)
#   provenance.intoto.json  the build's provenance: an in-toto Statement of SLSA provenance over every file above
#   checksums.txt           sha256 of every file above
#   <file>.minisig          a minisign signature of every file above, checksums.txt included
#
# Each archive holds the binary, LICENSE and README.md. The binaries are
# static (CGO_ENABLED=0), built with -trimpath, and carry the version and the
# commit in internal/version; `--version` prints them. The SBOMs list the
# modules each binary was built from, as its build information records them
# (cyclonedx-gomod bin); the signatures are made with the release's secret
# key (minisign); both tools run at the versions pinned in hack/tools. A user
# verifies a download with the release's public key:
#
#   minisign -Vm backpressure-proxy_v0.1.0_linux_amd64.tar.gz -P <public key>
#
# The Go modules are released by their git tags, not by this script: the
# root module by vX.Y.Z, and the three nested modules an application
# requires by their own tag prefixes, pkg/backpressure/vX.Y.Z (the library),
# api/plan/vX.Y.Z (the plan document) and api/reserve/vX.Y.Z (the permit
# server's protocol), both of which the library requires; tag those first
# when they changed.
#
# Usage: hack/release.sh VERSION        (make release VERSION=v0.1.0)
#
# VERSION is a semantic version with a leading v, as krew requires.
# RELEASE_SIGNING_KEY must name the minisign secret key that signs the
# release; the release fails without it, rather than publish unsigned files.
# The environment may set:
#   RELEASE_SIGNING_PASSWORD  the password of that key, when it has one (read
#                      from the environment, never from a file here)
#   RELEASE_BUILDER    who runs the build, for the provenance: a CI job's URL
#                      (default: the user and host)
#   DIST               output directory, emptied first (default: dist)
#   RELEASE_PLATFORMS  GOOS/GOARCH pairs to build (default: linux and darwin on
#                      amd64 and arm64)
#   RELEASE_IMAGE      the manager image's repository; its tag is VERSION
#                      (default: ghcr.io/backpressure-dev/backpressure-operator)
#   RELEASE_URL        where the archives will be downloaded from, for the krew
#                      manifest (default: the GitHub release of VERSION)
#   RELEASE_COMMIT     the commit to stamp (default: git's HEAD, "-dirty" when
#                      the tree has changes)
#   KUBEBUILDER_ASSETS a directory holding kubectl, whose built-in kustomize
#                      renders install.yaml (default: hack/setup-envtest.sh's)
set -euo pipefail
# A relative KUBEBUILDER_ASSETS or RELEASE_SIGNING_KEY is relative to where
# the script was called.
if [[ -n "${KUBEBUILDER_ASSETS:-}" && -d "${KUBEBUILDER_ASSETS}" ]]; then
  KUBEBUILDER_ASSETS="$(cd "${KUBEBUILDER_ASSETS}" && pwd)"
fi
if [[ -n "${RELEASE_SIGNING_KEY:-}" && -f "${RELEASE_SIGNING_KEY}" ]]; then
  RELEASE_SIGNING_KEY="$(cd "$(dirname "${RELEASE_SIGNING_KEY}")" && pwd)/$(basename "${RELEASE_SIGNING_KEY}")"
fi
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

VERSION="${1:-${VERSION:-}}"
SEMVER='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
if [[ ! "${VERSION}" =~ ${SEMVER} ]]; then
  echo "release: VERSION must be a semantic version with a leading v, such as v0.1.0; got '${VERSION}'" >&2
  exit 2
fi

MODULE="$(go list -m)"
DIST="${DIST:-dist}"
PLATFORMS="${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
IMAGE="${RELEASE_IMAGE:-ghcr.io/backpressure-dev/backpressure-operator}"
URL="${RELEASE_URL:-https://github.com/backpressure-dev/backpressure-operator/releases/download/${VERSION}}"
URL="${URL%/}"
if [[ -z "${RELEASE_COMMIT:-}" ]]; then
  RELEASE_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  if [[ "${RELEASE_COMMIT}" != unknown && -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    RELEASE_COMMIT+="-dirty"
  fi
fi
# Archive entries carry the commit's time, so the same commit gives the
# same archives.
EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
if [[ -z "${RELEASE_SIGNING_KEY:-}" || ! -f "${RELEASE_SIGNING_KEY}" ]]; then
  echo "release: RELEASE_SIGNING_KEY must name the minisign secret key that signs the release (got '${RELEASE_SIGNING_KEY:-}'); see docs/installing.md#verifying-a-release" >&2
  exit 2
fi
STARTED="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for platform in ${PLATFORMS}; do
  if [[ ! "${platform}" =~ ^[a-z0-9]+/[a-z0-9]+$ ]]; then
    echo "release: RELEASE_PLATFORMS holds '${platform}', not GOOS/GOARCH" >&2
    exit 2
  fi
done
CHART_DIR=charts/backpressure-operator
PLUGIN=kubectl-backpressure
PROXY=backpressure-proxy
BROKER=backpressure-broker

log() { echo "release: [${SECONDS}s] $*" >&2; }

case "$(uname -s)" in
  Darwin) sha256() { shasum -a 256 "$@"; } ;;
  *) sha256() { sha256sum "$@"; } ;;
esac
# sha256_of FILE prints the hex sha256 of FILE.
sha256_of() { sha256 "$1" | cut -d' ' -f1; }

mkdir -p "${DIST}"
DIST="$(cd "${DIST}" && pwd)"
if [[ "${DIST}" == / || "${DIST}" == "${ROOT}" || "${DIST}" == "${HOME:-}" ]]; then
  echo "release: DIST=${DIST} would be emptied; give a directory of its own" >&2
  exit 2
fi
find "${DIST}" -mindepth 1 -delete
WORK="$(mktemp -d "${TMPDIR:-/tmp}/backpressure-release.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

# archive DIR OUT FILE...: a gzipped tar of DIR's FILEs, at the top level.
# GNU tar drops the builder's user and times.
if tar --version 2>/dev/null | grep -q 'GNU tar'; then
  archive() { local dir="$1" out="$2"; shift 2; tar --owner=0 --group=0 --numeric-owner --mtime="@${EPOCH}" -C "${dir}" -cf - "$@" | gzip -9n > "${out}"; }
else
  archive() { local dir="$1" out="$2"; shift 2; tar -C "${dir}" -cf - "$@" | gzip -9n > "${out}"; }
fi

MINISIGN=(go tool -modfile=hack/tools/minisign/go.mod minisign)
CYCLONEDX=(go tool -modfile=hack/tools/cyclonedx-gomod/go.mod cyclonedx-gomod)

# 1. The binaries, one archive per binary and platform, and the SBOM of each
# binary, from the build information the go command recorded in it.
LDFLAGS="-s -w -X ${MODULE}/internal/version.Version=${VERSION} -X ${MODULE}/internal/version.Commit=${RELEASE_COMMIT}"
for platform in ${PLATFORMS}; do
  os="${platform%/*}" arch="${platform#*/}"
  log "building manager, ${PLUGIN}, ${PROXY} and ${BROKER} for ${os}/${arch}"
  # One go build for all: they share its up-to-date check and link at once.
  CGO_ENABLED=0 GOOS="${os}" GOARCH="${arch}" go build -trimpath -ldflags "${LDFLAGS}" \
    -o "${WORK}/bin_${os}_${arch}/" ./cmd/manager "./cmd/${PLUGIN}" "./cmd/${PROXY}" "./cmd/${BROKER}"
  for bin in manager "${PLUGIN}" "${PROXY}" "${BROKER}"; do
    dir="${WORK}/${bin}_${os}_${arch}"
    mkdir -p "${dir}"
    mv "${WORK}/bin_${os}_${arch}/${bin}" "${dir}/"
    cp LICENSE README.md "${dir}/"
    name="${bin}"
    [[ "${bin}" == manager ]] && name=backpressure-operator-manager
    archive "${dir}" "${DIST}/${name}_${VERSION}_${os}_${arch}.tar.gz" "${bin}" LICENSE README.md
    # No timestamp and no random serial number: the same binary gives the
    # same SBOM.
    "${CYCLONEDX[@]}" bin -json -noserial -notimestamp -version "${VERSION}" \
      -output "${DIST}/${name}_${VERSION}_${os}_${arch}.cdx.json" "${dir}/${bin}" 2>"${WORK}/cyclonedx.log" \
      || { cat "${WORK}/cyclonedx.log" >&2; exit 1; }
  done
done

# 2. install.yaml: config/default with the image tagged VERSION, rendered by
# the kustomize built into the pinned kubectl, as test/manifests renders it.
if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kubectl" ]]; then
  KUBECTL="${KUBEBUILDER_ASSETS}/kubectl"
else
  KUBECTL="$(hack/setup-envtest.sh | tail -n 1)/kubectl"
fi
# kustomize takes no absolute path to a base, so the overlay goes beside a
# copy of config/.
cp -R config "${WORK}/config"
mkdir -p "${WORK}/config/release"
cat > "${WORK}/config/release/kustomization.yaml" <<KUSTOMIZATION
resources:
- ../default
images:
- name: backpressure-operator
  newName: ${IMAGE}
  newTag: ${VERSION}
KUSTOMIZATION
log "rendering install.yaml"
{
  echo "# backpressure-operator ${VERSION}: the CRD, RBAC and the manager (config/default)."
  echo "#   kubectl apply -f install.yaml"
  "${KUBECTL}" kustomize "${WORK}/config/release"
} > "${DIST}/install.yaml"

# 3. The Helm chart, its version VERSION without the v and its appVersion
# (the default image tag) VERSION, pointing at the release image.
log "packaging the Helm chart"
cp -R "${CHART_DIR}" "${WORK}/chart"
values="${WORK}/chart/values.yaml"
if [[ "$(grep -c '^  repository: backpressure-operator$' "${values}")" != 1 ]]; then
  echo "release: ${CHART_DIR}/values.yaml no longer has one 'image.repository: backpressure-operator' line to point at ${IMAGE}" >&2
  exit 1
fi
sed -i.orig "s|^  repository: backpressure-operator\$|  repository: ${IMAGE}|" "${values}"
rm -f "${values}.orig"
go tool -modfile=hack/tools/helm/go.mod helm package "${WORK}/chart" \
  --version "${VERSION#v}" --app-version "${VERSION}" --destination "${DIST}" >&2

# 4. The krew manifest of the plugin, from its archives.
log "writing the krew manifest"
{
  cat <<HEADER
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: backpressure
spec:
  version: ${VERSION}
  homepage: https://github.com/backpressure-dev/backpressure-operator
  shortDescription: Size per-pod shares of a downstream's global limit
  description: |
    Computes what backpressure-operator computes: the per-pod share of a
    DownstreamQuota over a replica count or an HPA's range, and the checks
    behind it (an existing pool against a deadline, retry amplification,
    backlog growth), with the formula behind every number.
  platforms:
HEADER
  for platform in ${PLATFORMS}; do
    os="${platform%/*}" arch="${platform#*/}"
    file="${PLUGIN}_${VERSION}_${os}_${arch}.tar.gz"
    cat <<PLATFORM
  - selector:
      matchLabels:
        os: ${os}
        arch: ${arch}
    uri: ${URL}/${file}
    sha256: $(sha256_of "${DIST}/${file}")
    bin: ${PLUGIN}
    files:
    - from: ${PLUGIN}
      to: .
    - from: LICENSE
      to: .
PLATFORM
  done
} > "${DIST}/backpressure.yaml"

# 5. The provenance of every file so far, then the checksums, in the format
# sha256sum -c reads, then a signature of each.
log "writing the provenance"
go run ./hack/provenance -version "${VERSION}" -commit "${RELEASE_COMMIT}" -started "${STARTED}" \
  -platforms "${PLATFORMS}" -image "${IMAGE}" -builder "${RELEASE_BUILDER:-}" -out "${DIST}/provenance.intoto.json" \
  "${DIST}"/*.tar.gz "${DIST}"/*.cdx.json "${DIST}"/*.tgz "${DIST}/install.yaml" "${DIST}/backpressure.yaml"
(cd "${DIST}" && sha256 *.tar.gz *.cdx.json *.tgz install.yaml backpressure.yaml provenance.intoto.json > checksums.txt)
log "signing"
# minisign reads the key's password, when it has one, from stdin; each
# signature's trusted comment names the file it signs. One file a run: the
# Go minisign signs only the first file -m names, whatever follows it.
for file in "${DIST}"/*.tar.gz "${DIST}"/*.cdx.json "${DIST}"/*.tgz "${DIST}/install.yaml" "${DIST}/backpressure.yaml" \
  "${DIST}/provenance.intoto.json" "${DIST}/checksums.txt"; do
  printf '%s\n' "${RELEASE_SIGNING_PASSWORD:-}" | "${MINISIGN[@]}" -S -s "${RELEASE_SIGNING_KEY}" -m "${file}" >/dev/null
done
log "release ${VERSION} (${RELEASE_COMMIT}) in ${DIST}:"
ls -1 "${DIST}" >&2
