package httpmw

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
)

// Metrics counts the responses downstreams send through Transports:
//
//	backpressure_downstream_http_responses_total{gate, code}
//
// where gate is the name of the Transport's gate and code the HTTP status
// code. Calls the gate rejected are not sent and not counted here (the
// gate's own metrics count them), nor are calls that failed before a
// response arrived. The share of code="429" is how often the downstream
// refused calls this pod was allowed to make.
//
// One Metrics may serve several Transports. A Metrics is safe for concurrent
// use by multiple goroutines.
type Metrics struct {
	responses *prometheus.CounterVec
}

// NewMetrics returns Metrics registered with reg; nil reg means not
// registered. If reg already holds the same collector (another call to
// NewMetrics with the same registerer), the returned Metrics shares it.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	responses, err := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "backpressure_downstream_http_responses_total",
		Help: "Responses from the downstream to calls a gate admitted, by gate and HTTP status code.",
	}, []string{"gate", "code"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{responses: responses}, nil
}

// ObserveResponse counts one response with status code from the downstream
// behind the gate named gateName. A Transport calls it for every response;
// a program that sends a gate's admitted calls some other way (a reverse
// proxy with a transport of its own) calls it so that the downstream's
// answers are counted in the same series.
func (m *Metrics) ObserveResponse(gateName string, code int) {
	m.responses.WithLabelValues(gateName, strconv.Itoa(code)).Inc()
}
