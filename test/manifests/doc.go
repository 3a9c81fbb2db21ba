// Package manifests tests what a user installs: the kustomize configuration
// (config/default, config/prometheus, config/samples/app), the Helm chart
// (charts/backpressure-operator), the alerting rules and the Grafana
// dashboard.
//
// The tests render the manifests with the kubectl built beside the control
// plane (kustomize is built into it) and with Helm, then check them against a
// real API server (internal/testenv): every object applies with
// --dry-run=server; the manager's RBAC is enough to reconcile the sample
// quota while impersonating its ServiceAccount, and no more; the application
// Role lets a pod follow its own ConfigMap and nothing else. Helm and promtool
// run through the go command at the versions pinned in hack/tools; the first
// run builds them, which takes minutes (`make tools` does it ahead).
package manifests
