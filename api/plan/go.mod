// The plan document, its acknowledgement and the ConfigMap and annotation
// contract: the leaf that the operator and the library both import, a
// module of its own so that the library's module graph holds only what the
// document needs. Tagged api/plan/vX.Y.Z.
module github.com/backpressure-dev/backpressure-operator/api/plan

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	k8s.io/apimachinery v0.37.2
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
)
