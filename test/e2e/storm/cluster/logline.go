package cluster

import (
	"encoding/json"
	"time"
)

// The log messages of examples/gateway that the harness acts on.
const (
	// MsgServing is logged once the listener is open and a plan is in force.
	MsgServing = "Serving"
	// MsgAppliedPlan is logged each time a plan is put in force on a gate,
	// and each time the plan's source lapses or confirms it again, with the
	// same hash: its permits are always those the gate enforces from then.
	MsgAppliedPlan = "Applied plan"
	// MsgStopped is logged after a graceful shutdown.
	MsgStopped = "Stopped"
	// MsgServingMetrics is logged once the /metrics listener is open, with
	// its address.
	MsgServingMetrics = "Serving metrics"
)

// LogLine is one JSON log line (log/slog's JSON handler) with the keys the
// harness reads.
type LogLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Msg     string    `json:"msg"`
	Address string    `json:"address,omitempty"`
	// Metrics is the /metrics listener's address, where a program logs it
	// with MsgServing (the permit server does).
	Metrics string `json:"metrics,omitempty"`
	Gate    string `json:"gate,omitempty"`
	Hash    string `json:"hash,omitempty"`
	Permits *int   `json:"permits,omitempty"`
}

// ParseLogLine parses one line; ok is false for a line that is not a JSON
// log object with a message.
func ParseLogLine(b []byte) (l LogLine, ok bool) {
	if len(b) == 0 || b[0] != '{' {
		return LogLine{}, false
	}
	if err := json.Unmarshal(b, &l); err != nil || l.Msg == "" {
		return LogLine{}, false
	}
	return l, true
}
