package storm

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// FirstCallReport is the first-call scenario's figures, one run per
// variant. Its JSON form is the file report-first-call.json beside the
// storm's report.
type FirstCallReport struct {
	Runs []*FirstCallRun `json:"runs"`
}

// WriteJSON writes the report to path, creating its directory.
func (r *FirstCallReport) WriteJSON(path string) error { return report.WriteJSON(path, r) }

// FirstCallRun is one run of the first-call scenario: Pods pods under a
// steady load, then one more, NewPod, turns Ready and gets its part of the
// calls. Offsets in seconds.
type FirstCallRun struct {
	Variant string `json:"variant"`
	// Acknowledge says whether the pods acknowledge their plans.
	Acknowledge bool `json:"acknowledge"`
	// Reserve is the quota's reserve, lent by the permit server (0: none,
	// equal shares of every usable permit).
	Reserve int `json:"reserve"`
	// Pods ran before the new one; Usable and Contract are the quota's.
	Pods     int `json:"pods"`
	Usable   int `json:"usable"`
	Contract int `json:"contract"`
	// CallsPerSecond is the load, round-robin over the Ready pods.
	CallsPerSecond float64 `json:"callsPerSecond"`
	// UnacknowledgedDelaySeconds is the quota's while the load runs.
	UnacknowledgedDelaySeconds float64 `json:"unacknowledgedDelaySeconds"`
	NewPod                     string  `json:"newPod"`
	// ReadyAtSeconds is when the new pod turned Ready, from the start of
	// the load; MeasuredSeconds how long the load went on after that.
	ReadyAtSeconds  float64 `json:"readyAtSeconds"`
	MeasuredSeconds float64 `json:"measuredSeconds"`
	// FirstAdmittedSeconds is the time from the new pod's Ready to the
	// sending of its first call the downstream answered (nil: none within
	// the run); ShedBefore counts its calls answered by a fallback before
	// that one.
	FirstAdmittedSeconds *float64 `json:"firstAdmittedSeconds"`
	ShedBefore           int64    `json:"shedBefore"`
	// GrantedSeconds is the time from its Ready to its gate enforcing
	// permits of its own: a plan that gives it some applied, or a lapse of
	// its plan's source that held them back ended (nil: none within the
	// run).
	GrantedSeconds *float64 `json:"grantedSeconds"`
	// NewPodCalls were sent to it; NewPodAdmitted of them the downstream
	// answered; NewPodFailed got neither that nor a fallback.
	NewPodCalls    int64 `json:"newPodCalls"`
	NewPodAdmitted int64 `json:"newPodAdmitted"`
	NewPodFailed   int64 `json:"newPodFailed"`
	// PeakInFlight and Downstream429 are the downstream's, over the run.
	PeakInFlight  int64 `json:"peakInFlight"`
	Downstream429 int64 `json:"downstream429"`
}

// WriteFirstCallTable writes the first-call figures for a terminal.
func WriteFirstCallTable(w io.Writer, r *FirstCallReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pods acknowledge\treserve\tfirst admitted call after Ready\tcalls shed before it\town share after Ready\tpeak in flight\t429s")
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "%t\t%d\t%s\t%d\t%s\t%d (usable %d)\t%d\n", run.Acknowledge, run.Reserve, SecondsOrNone(run.FirstAdmittedSeconds),
			run.ShedBefore, SecondsOrNone(run.GrantedSeconds), run.PeakInFlight, run.Usable, run.Downstream429)
	}
	return tw.Flush()
}

// SecondsOrNone formats an optional figure in seconds, "never" when nil.
func SecondsOrNone(s *float64) string {
	if s == nil {
		return "never"
	}
	return fmt.Sprintf("%.2fs", *s)
}
