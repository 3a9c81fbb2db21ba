#!/usr/bin/env bash
# Fails when a generated file differs from what its generator produces now:
# it snapshots every generated file, runs the given make targets, and compares.
# It does not ask git, so it gives the same answer before and after a commit.
# The regenerated files are left in place: they are the fix.
#
# Usage: hack/verify-generated.sh TARGET...   (e.g. manifests generate)
set -euo pipefail
cd "$(dirname "$0")/.."

# What the generators write; keep in step with the Makefile.
GENERATED=(api/v1alpha1/zz_generated.deepcopy.go config/crd/bases config/rbac/role.yaml docs/reference/api.md docs/reference/plan-bounds.md
  charts/backpressure-operator/crds charts/backpressure-operator/files api/reserve/v1/reserve.pb.go api/reserve/v1/reserve_grpc.pb.go)
for extra in ${VERIFY_GENERATED_EXTRA:-}; do GENERATED+=("$extra"); done

before="$(mktemp -d)"
trap 'rm -rf "$before"' EXIT
for path in "${GENERATED[@]}"; do
  if [[ -e "$path" ]]; then
    mkdir -p "$before/$(dirname "$path")"
    cp -a "$path" "$before/$path"
  fi
done

make --no-print-directory "$@" >/dev/null

stale=0
for path in "${GENERATED[@]}"; do
  if [[ -e "$path" || -e "$before/$path" ]]; then
    if ! diff -ruN "$before/$path" "$path" >&2; then
      stale=1
    fi
  fi
done
if (( stale )); then
  echo "verify-generated: generated files were stale; they are regenerated now, commit them (make $*)" >&2
  exit 1
fi
echo "verify-generated: up to date ($*)"
