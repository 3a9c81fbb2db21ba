package metrics

import "github.com/prometheus/client_golang/prometheus"

// NewDownstreamResponses returns the counter of the responses downstreams
// send to the calls a gate admitted,
//
//	backpressure_downstream_http_responses_total{gate, code}
//
// registered with reg (nil: not registered; a registry that already holds
// it: the one it holds). The library's HTTP transport and the egress proxy
// both count with it, so a dashboard reads one series whichever of the two
// a pod uses.
func NewDownstreamResponses(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backpressure_downstream_http_responses_total",
		Help: "Responses from the downstream to calls a gate admitted, by gate and HTTP status code.",
	}, []string{"gate", "code"}))
}
