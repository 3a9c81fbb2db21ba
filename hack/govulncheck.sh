#!/usr/bin/env bash
# Runs govulncheck, at the version pinned in hack/tools/govulncheck/go.mod,
# over the module's packages: it reports the known vulnerabilities of the Go
# standard library and the dependencies that the code actually reaches, and
# fails when there is one.
#
# Its database is https://vuln.go.dev unless GOVULNDB_DIR names a local copy
# (the directory layout vuln.go.dev serves: index/db.json, index/modules.json,
# ID/GO-*.json; for example a checkout of https://go.dev/vulndb's output).
# Without GOVULNDB_DIR and without a connection to vuln.go.dev the check is
# skipped, saying so in one line: a machine without the network cannot know
# of new vulnerabilities, and a copy vendored here would go stale unnoticed.
set -euo pipefail
cd "$(dirname "$0")/.."

GOVULNCHECK=(go tool -modfile=hack/tools/govulncheck/go.mod govulncheck)

if [[ -n "${GOVULNDB_DIR:-}" ]]; then
  if [[ ! -f "${GOVULNDB_DIR}/index/db.json" && ! -f "${GOVULNDB_DIR}/index/db.json.gz" ]]; then
    echo "govulncheck: GOVULNDB_DIR=${GOVULNDB_DIR} holds no vulnerability database (index/db.json)" >&2
    exit 2
  fi
  exec "${GOVULNCHECK[@]}" -db "file://$(cd "${GOVULNDB_DIR}" && pwd)" ./...
fi

# Whether vuln.go.dev answers on its HTTPS port, within 10 seconds.
if ! timeout 10 bash -c '</dev/tcp/vuln.go.dev/443' 2>/dev/null; then
  echo "govulncheck: skipped: vuln.go.dev is not reachable; give GOVULNDB_DIR=<a copy of the database> to check offline" >&2
  exit 0
fi
exec "${GOVULNCHECK[@]}" ./...
