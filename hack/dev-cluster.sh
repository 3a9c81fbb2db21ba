#!/usr/bin/env bash
# A local cluster to try the operator on, in one command: kube-apiserver,
# etcd and kube-controller-manager from the control plane that
# hack/setup-envtest.sh builds and caches, run in the background on
# 127.0.0.1, with the CRDs (config/crd) and the admission policies
# (config/policies) installed. No scheduler or kubelet runs: the pods
# command (go run ./test/e2e/cmd/pods) plays them for the pods you create.
#
# Usage: hack/dev-cluster.sh [start]   start it (building the control plane
#                                      first if it is not cached), and print
#                                      how to use and stop it
#        hack/dev-cluster.sh env       print the shell lines that point
#                                      kubectl at it: eval "$(hack/dev-cluster.sh env)"
#        hack/dev-cluster.sh stop      stop it
#
# It keeps its kubeconfig, logs and binaries in DEV_CLUSTER_DIR
# (default: _output/dev-cluster under the repository's root), which the env
# lines export too. A KUBEBUILDER_ASSETS holding kube-apiserver, etcd,
# kube-controller-manager and kubectl is used instead of the cache.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${DEV_CLUSTER_DIR:-${ROOT}/_output/dev-cluster}"
mkdir -p "${DIR}"
DIR="$(cd "${DIR}" && pwd)"
PIDFILE="${DIR}/devcluster.pid"
KUBECONFIG_FILE="${DIR}/kubeconfig"

log() { echo "dev-cluster: $*" >&2; }

running() {
  [[ -f "${PIDFILE}" ]] && kill -0 "$(cat "${PIDFILE}")" 2>/dev/null
}

print_env() {
  printf 'export DEV_CLUSTER_DIR=%q\n' "${DIR}"
  printf 'export KUBECONFIG=%q\n' "${KUBECONFIG_FILE}"
  printf 'export PATH=%q:"$PATH"\n' "${DIR}/bin"
}

stop() {
  if ! running; then
    log "not running"
    rm -f "${PIDFILE}"
    return 0
  fi
  local pid
  pid="$(cat "${PIDFILE}")"
  kill -TERM "${pid}"
  for _ in $(seq 300); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${pid}" 2>/dev/null; then
    log "still running 30s after SIGTERM; killing it"
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  rm -f "${PIDFILE}"
  log "stopped"
}

start() {
  if running; then
    log "already running (pid $(cat "${PIDFILE}"))"
    print_usage
    return 0
  fi
  local assets bin
  # A KUBEBUILDER_ASSETS that holds every binary is used as it is, as the
  # Makefile does; otherwise the cached control plane, built if need be.
  assets="${KUBEBUILDER_ASSETS:-}"
  for bin in kube-apiserver etcd kube-controller-manager kubectl; do
    [[ -n "${assets}" && -x "${assets}/${bin}" ]] || assets=""
  done
  if [[ -z "${assets}" ]]; then
    assets="$("${ROOT}/hack/setup-envtest.sh" | tail -n 1)"
  fi
  mkdir -p "${DIR}/bin"
  log "building the plugin (kubectl backpressure) and the cluster's runner into ${DIR}/bin"
  (cd "${ROOT}" && go build -o "${DIR}/bin/" ./cmd/kubectl-backpressure ./test/e2e/cmd/devcluster)
  ln -sf "${assets}/kubectl" "${DIR}/bin/kubectl"

  rm -f "${KUBECONFIG_FILE}"
  # It puts itself in a session of its own, out of reach of the terminal's
  # Ctrl-C; hack/dev-cluster.sh stop ends it.
  (cd "${ROOT}" && KUBEBUILDER_ASSETS="${assets}" exec "${DIR}/bin/devcluster" -dir "${DIR}" \
    >"${DIR}/devcluster.log" 2>&1 </dev/null) &
  echo $! >"${PIDFILE}"
  log "starting kube-apiserver, etcd and kube-controller-manager (log: ${DIR}/devcluster.log)"
  for _ in $(seq 1200); do
    [[ -f "${KUBECONFIG_FILE}" ]] && break
    if ! running; then
      log "it stopped before it ran:"
      tail -n 20 "${DIR}/devcluster.log" >&2
      rm -f "${PIDFILE}"
      exit 1
    fi
    sleep 0.1
  done
  if [[ ! -f "${KUBECONFIG_FILE}" ]]; then
    log "not running after 2 minutes:"
    tail -n 20 "${DIR}/devcluster.log" >&2
    stop
    exit 1
  fi

  local kubectl=("${DIR}/bin/kubectl" --kubeconfig "${KUBECONFIG_FILE}")
  log "installing the CRDs and the admission policies"
  "${kubectl[@]}" apply -k "${ROOT}/config/crd" >&2
  # kubectl wait fails on a CRD that has no conditions yet instead of
  # waiting for them: try again until it waits.
  local tries=0
  until "${kubectl[@]}" wait --for=condition=Established --timeout=60s \
    crd/downstreamquotas.backpressure.dev crd/downstreamcontracts.backpressure.dev >&2 2>/dev/null; do
    tries=$((tries + 1))
    if ((tries == 60)); then
      log "the CRDs are not established after 30 s"
      stop
      exit 1
    fi
    sleep 0.5
  done
  "${kubectl[@]}" apply -k "${ROOT}/config/policies" >&2
  print_usage
}

print_usage() {
  cat >&2 <<EOF
dev-cluster: running; the kubeconfig is ${KUBECONFIG_FILE}.
Point this shell at it (kubectl and kubectl-backpressure on PATH):

  eval "\$(hack/dev-cluster.sh env)"

Then run the operator (make run) and the pods (go run ./test/e2e/cmd/pods -n NAMESPACE),
each in a shell pointed at it. Stop it with: make dev-cluster-stop
EOF
}

case "${1:-start}" in
  start) start ;;
  env) print_env ;;
  stop) stop ;;
  *) echo "usage: $0 [start|env|stop]" >&2; exit 2 ;;
esac
