package storm

// ProxyVariantName is the key of the sidecar variant in the report.
const ProxyVariantName = "proxy"

// ProxyVariant returns the variant whose pods do not use the library: each
// pod is examples/gateway with a gate that never binds, calling the
// downstream through backpressure-proxy, its native sidecar, which reads the
// operator's plan through the API, enforces the pod's share with the same
// gate and acknowledges it (test/e2e/storm/proxypod). The gateway makes no
// retries: it cannot tell the proxy's local 503 from the downstream's, and
// a local rejection must not be retried. The goals are the operator's.
func ProxyVariant() Variant {
	return Variant{
		Name:        ProxyVariantName,
		Description: "the operator, with every pod calling the downstream through backpressure-proxy instead of the library's gate",
		Operator:    true,
		Sidecar:     true,
	}
}
