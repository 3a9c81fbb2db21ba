package division

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Even is the exact division of usable permits over the pods as a sum (the
// arithmetic Exact hands out, before it names the pods), and the one source
// of the text that states it: sizing's diagnostics (and so the quota's
// status), kubectl-backpressure's table and the controller's events all
// quote its methods, so that they cannot disagree.
type Even struct {
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

// Equation states the division as an equation: "40 usable permits = 4 × 9
// + 4" (Base × N + Extra), or how AtLeastOne changed it, or that no pod
// holds the permits.
func (d Even) Equation() string {
	switch {
	case d.Pods == 0:
		return fmt.Sprintf("%d usable permits, no Ready pod to hold them", d.Usable)
	case d.RaisedToOne:
		return fmt.Sprintf("%d usable permits / %d = %s per pod, raised to 1 by AtLeastOne", d.Usable, d.Pods, d.PerPod())
	}
	return fmt.Sprintf("%d usable permits = %d × %d + %d", d.Usable, d.Base, d.Pods, d.Extra)
}

// Share returns A/N, the permits per pod before the division into whole
// permits; 0 without pods.
func (d Even) Share() float64 {
	if d.Pods == 0 {
		return 0
	}
	return float64(d.Usable) / float64(d.Pods)
}

// Holds states what the pods hold together: "2 permits × 19 replicas + 1
// permit × 2 replicas", the larger share first.
func (d Even) Holds() string {
	base := d.Base
	if d.RaisedToOne {
		base = 1
	}
	if d.Extra == 0 {
		return fmt.Sprintf("%s × %s", Permits(base), Replicas(d.Pods))
	}
	return fmt.Sprintf("%s × %s + %s × %s", Permits(base+1), Replicas(d.Extra), Permits(base), Replicas(d.Pods-d.Extra))
}

// InUse returns what the pods hold together: A, or N when AtLeastOne
// raised every pod to 1.
func (d Even) InUse() int64 {
	if d.RaisedToOne {
		return d.Pods
	}
	return d.Usable
}

// PerPod states Share cut, not rounded, to at most two decimals without
// trailing zeros, as permits are cut: 0.999 per pod is "0.99", not a
// misleading "1".
func (d Even) PerPod() string {
	s := strconv.FormatFloat(math.Floor(d.Share()*100)/100, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// Permits states a count of permits with its noun: "1 permit", "5 permits".
func Permits(n int64) string {
	if n == 1 {
		return "1 permit"
	}
	return fmt.Sprintf("%d permits", n)
}

// Replicas states a replica count with its noun: "1 replica", "5 replicas".
func Replicas(n int64) string {
	if n == 1 {
		return "1 replica"
	}
	return strconv.FormatInt(n, 10) + " replicas"
}
