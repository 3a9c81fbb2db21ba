package sizing

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Division is how a plan divides its usable permits over the pods, and the
// one source of the text that states it: sizing's diagnostics (and so the
// quota's status), kubectl-backpressure's plan table and the controller's
// events all quote its methods, so that they cannot disagree.
type Division struct {
	// Usable is A, the permits divided.
	Usable int64
	// Pods is N, the pods they are divided over; 0 when no pod is there to
	// hold them.
	Pods int64
	// Base is the permits of every pod; Extra pods hold one more.
	Base, Extra int64
	// RaisedToOne is true when AtLeastOne raised every pod to 1 permit
	// because A < N.
	RaisedToOne bool
}

// Division returns the division of r over pods pods.
func (r PlanResult) Division(pods int) Division {
	return Division{
		Usable: r.Usable, Pods: int64(pods), Base: r.Base, Extra: r.Extra,
		RaisedToOne: r.TotalPermits > r.Usable,
	}
}

// Equation states the division as an equation: "40 usable permits = 4 × 9
// + 4" (Base × N + Extra), or how AtLeastOne changed it, or that no pod
// holds the permits.
func (d Division) Equation() string {
	switch {
	case d.Pods == 0:
		return fmt.Sprintf("%d usable permits, no Ready pod to hold them", d.Usable)
	case d.RaisedToOne:
		return fmt.Sprintf("%d usable permits / %d = %s per pod, raised to 1 by AtLeastOne", d.Usable, d.Pods, truncated(d.Share()))
	}
	return fmt.Sprintf("%d usable permits = %d × %d + %d", d.Usable, d.Base, d.Pods, d.Extra)
}

// Share returns A/N, the permits per pod before the division into whole
// permits; 0 without pods.
func (d Division) Share() float64 {
	if d.Pods == 0 {
		return 0
	}
	return float64(d.Usable) / float64(d.Pods)
}

// Holds states what the pods hold together: "2 permits × 19 replicas + 1
// permit × 2 replicas", the larger share first.
func (d Division) Holds() string {
	base := d.Base
	if d.RaisedToOne {
		base = 1
	}
	if d.Extra == 0 {
		return fmt.Sprintf("%s × %s", permitsText(base), replicas(d.Pods))
	}
	return fmt.Sprintf("%s × %s + %s × %s", permitsText(base+1), replicas(d.Extra), permitsText(base), replicas(d.Pods-d.Extra))
}

// InUse returns what the pods hold together: A, or N when AtLeastOne
// raised every pod to 1.
func (d Division) InUse() int64 {
	if d.RaisedToOne {
		return d.Pods
	}
	return d.Usable
}

// truncated renders f cut, not rounded, to at most two decimals without
// trailing zeros, as permits are cut: 0.999 per pod is "0.99", not a
// misleading "1".
func truncated(f float64) string {
	s := strconv.FormatFloat(math.Floor(f*100)/100, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
