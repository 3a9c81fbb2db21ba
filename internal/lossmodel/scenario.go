package lossmodel

import (
	"fmt"
	"math"
	"time"
)

// Balancer says how each call is sent to a pod.
type Balancer string

const (
	// RoundRobin sends the calls to the pods in turn: an ideal L4 balancer.
	RoundRobin Balancer = "round-robin"
	// Random sends each call to a pod chosen uniformly: kube-proxy's
	// iptables mode.
	Random Balancer = "random"
	// Pinned sends each call to pod p with probability w_p, the pod's
	// weight: long-lived gRPC or HTTP/2 connections, each pinned to one pod,
	// carry unequal parts of the load. The weights are lognormal with
	// parameter Scenario.Skew (see Weights).
	Pinned Balancer = "pinned"
)

// Balancers lists the balancers in the order the plugin documents them.
var Balancers = []Balancer{RoundRobin, Random, Pinned}

// Sharing says how the permits outside the reserve are divided over the
// pods.
type Sharing string

const (
	// EqualShares is the exact division: every pod holds floor(S/P) of the
	// S permits outside the reserve, and S mod P of them one more.
	EqualShares Sharing = "equal"
	// DemandShares follows each pod's long-run demand: max-min fairness
	// over the pods capped at each pod's offered in-flight, the surplus
	// split evenly, no pod below Scenario.Floor.
	DemandShares Sharing = "demand"
)

// Borrowing says when a call whose pod is full is lent a reserve permit.
type Borrowing string

const (
	// BorrowWaiting lends a call whose pod is full a reserve permit at once
	// if one is free; otherwise the call waits for one at the permit server
	// (first come, first served over all pods) for as long as its pod's
	// waiting room would keep it (MaxQueueWait). A call the waiting room
	// takes runs on whichever permit comes first, its pod's or the
	// reserve's; a call it cannot take waits for the reserve's alone. This
	// is what the library does.
	BorrowWaiting Borrowing = "waiting"
	// BorrowInRoom is BorrowWaiting for the calls the waiting room takes
	// only: a call its pod's waiting room cannot take, and that finds no
	// reserve permit free, is shed at once. The library did this before
	// calls without a place in the room waited at the permit server.
	BorrowInRoom Borrowing = "in-room"
	// BorrowOnce lends a reserve permit only to a call that finds one free
	// when it arrives; a call refused then waits for its pod's permits
	// only.
	BorrowOnce Borrowing = "once"
)

// WaitingRoom says which permits a pod's waiting room is sized for.
type WaitingRoom string

const (
	// RoomWithReserve sizes the waiting room of a pod holding p ≥ 1
	// permits for p + R: under the library's borrowing a waiter is served
	// by whichever comes first, a permit of its pod or one of the R the
	// permit server lends, so R more permits can free up for it within its
	// wait (Little's law over p + R). A pod holding no permits keeps the
	// room of 0 permits: the published plan gives a pod without permits no
	// waiting room. Without a reserve it is RoomOwnPermits. This is what
	// the operator publishes.
	RoomWithReserve WaitingRoom = "with-reserve"
	// RoomOwnPermits sizes every pod's waiting room for its own permits p
	// only, as if the reserve's permits could not serve its waiters: the
	// operator's rule before the reserve counted.
	RoomOwnPermits WaitingRoom = "own-permits"
)

// Shape is the family of the latency distribution.
type Shape string

const (
	// Lognormal latencies have the given mean and coefficient of variation;
	// a CV of 0 makes every call take the mean.
	Lognormal Shape = "lognormal"
	// Exponential latencies have the given mean (their CV is 1, and
	// Latency.CV is ignored). They are here for the closed-form checks.
	Exponential Shape = "exponential"
)

// Latency is the distribution of the time a call holds its permit.
type Latency struct {
	// Mean is the mean latency; it must be positive.
	Mean time.Duration
	// CV is the coefficient of variation (standard deviation over mean) of
	// a lognormal latency, at least 0.
	CV float64
	// Shape is Lognormal when empty.
	Shape Shape
}

// DefaultCalls is the number of calls a Scenario simulates when Calls is 0:
// enough for the admitted fraction to be within about half a point of its
// limit at the loads the plugin is asked about.
const DefaultCalls = 200_000

// Scenario is one configuration of pods, shares, reserve and load. The zero
// values of the optional fields mean: no reserve, equal shares, round-robin,
// no waiting room, seed 0, DefaultCalls calls.
type Scenario struct {
	// Permits is A, the usable permits: the reserve plus what the pods
	// hold.
	Permits int
	// Pods is P, the pods the calls are balanced over.
	Pods int
	// Reserve is R, the permits pooled rather than divided: 0 ≤ R ≤ A.
	Reserve int
	// Sharing divides the A − R other permits over the pods.
	Sharing Sharing
	// PodShares, when set, are the permits each pod holds, in place of
	// Sharing's division: a division measured elsewhere (the operator's,
	// in the storm) to see what the model makes of it. They must be one
	// per pod, none negative, and sum to A − R.
	PodShares []int
	// Floor is the fewest permits DemandShares gives a pod, so that an
	// idle pod can still serve its next call; it is lowered when A − R
	// cannot give every pod that many.
	Floor int
	// Load is the offered load as a fraction of what A permits serve:
	// calls arrive at Load × A / Latency.Mean per second.
	Load float64
	// Latency is the distribution of the calls' latencies.
	Latency Latency
	// Balancer sends each call to a pod; RoundRobin when empty.
	Balancer Balancer
	// Skew is σ of the pinned weights' lognormal, at least 0; only Pinned
	// uses it.
	Skew float64
	// MaxQueueWait is the longest a call waits in its pod's waiting room; 0
	// means no waiting room.
	MaxQueueWait time.Duration
	// QueueCapacity gives the size of a waiting room sized for the given
	// permits (WaitingRoom says which: a pod's own, or its own and the
	// reserve's); nil means unbounded (the wait is still bounded by
	// MaxQueueWait). The operator's rule is floor(permits × MaxQueueWait
	// / typical latency).
	QueueCapacity func(permits int) int
	// WaitingRoom says which permits QueueCapacity is given for a pod;
	// RoomWithReserve when empty.
	WaitingRoom WaitingRoom
	// Borrowing says when a call whose pod is full runs on a reserve
	// permit; BorrowWaiting when empty.
	Borrowing Borrowing
	// GiveLoansBack, the library's gate.LendRules.ReturnEarly (off by
	// default; --reserve-return-early of the gateway and the proxy), gives
	// a loan back
	// as soon as one of its pod's own permits frees and no call of the pod
	// waits for it: the borrowed call goes on on the pod's permit (the
	// calls in flight do not change), and the reserve's permit serves
	// another call. A loan then lasts until its pod has room again rather
	// than for its call's whole latency.
	GiveLoansBack bool
	// AskAfter, the library's gate.LendRules.AskAfter (0 by default;
	// --reserve-ask-after), is how long a call with a place in its pod's
	// waiting room waits there before it asks the permit server too (0: at
	// once), so that a permit
	// of its own pod freeing soon serves it without a loan. A call without
	// a place asks at once. BorrowOnce does not take it.
	AskAfter time.Duration
	// KeepLoans, a rule the library does not have, passes a loan whose
	// call ends to its own pod's first waiter rather than back to the
	// reserve: that call is decided in the pod, without asking the permit
	// server (the library would need a lease long enough for it).
	KeepLoans bool
	// HoldLoans, with KeepLoans, is how long a loan whose call ends with no
	// waiter at its pod stays there, idle, for the pod's next call that
	// finds the pod's own permits taken (decided in the pod too), before it
	// goes back: a Doorman-style lease of capacity rather than of one call.
	HoldLoans time.Duration
	// OfferIdle, the library's Options.Offer (--reserve-offer of the
	// gateway and the proxy; off by default), has every pod offer its idle
	// permits to the permit server: a call that asks the server when the
	// reserve is lent out is lent one of another pod's own permits, of the
	// pod with the most to spare (free permits beyond OfferKeep, none while
	// a call of its own waits). The permit counts in that pod's calls in
	// flight until the borrowed call ends or, under GiveLoansBack, moves
	// onto a permit of its own pod. It cannot be used with KeepLoans.
	OfferIdle bool
	// OfferKeep is the permits a pod keeps for its own calls under
	// OfferIdle (Options.OfferKeep; --reserve-offer-keep), at least 0.
	OfferKeep int
	// Seed chooses the arrivals, latencies, routing and pinned weights.
	Seed uint64
	// Calls is the number of calls simulated; DefaultCalls when 0. The
	// first 2 % are a warm-up and not counted.
	Calls int
}

// Validate returns an error naming the first field that is out of range.
func (s Scenario) Validate() error {
	switch {
	case s.Permits < 1:
		return fmt.Errorf("lossmodel: permits: must be at least 1, got %d", s.Permits)
	case s.Pods < 1:
		return fmt.Errorf("lossmodel: pods: must be at least 1, got %d", s.Pods)
	case s.Reserve < 0 || s.Reserve > s.Permits:
		return fmt.Errorf("lossmodel: reserve: must be between 0 and the %d permits, got %d", s.Permits, s.Reserve)
	case s.Sharing != "" && s.Sharing != EqualShares && s.Sharing != DemandShares:
		return fmt.Errorf("lossmodel: sharing: must be %s or %s, got %q", EqualShares, DemandShares, s.Sharing)
	case s.Borrowing != "" && s.Borrowing != BorrowWaiting && s.Borrowing != BorrowInRoom && s.Borrowing != BorrowOnce:
		return fmt.Errorf("lossmodel: borrowing: must be %s, %s or %s, got %q", BorrowWaiting, BorrowInRoom, BorrowOnce, s.Borrowing)
	case s.AskAfter < 0:
		return fmt.Errorf("lossmodel: ask after: must be at least 0, got %s", s.AskAfter)
	case s.HoldLoans < 0 || s.HoldLoans > 0 && !s.KeepLoans:
		return fmt.Errorf("lossmodel: hold loans: must be 0, or at least 0 with keep loans, got %s", s.HoldLoans)
	case s.OfferKeep < 0:
		return fmt.Errorf("lossmodel: offer keep: must be at least 0, got %d", s.OfferKeep)
	case s.OfferIdle && s.KeepLoans:
		return fmt.Errorf("lossmodel: offer idle: must be false with keep loans, whose loans stay at their pod")
	case s.AskAfter > 0 && s.Borrowing == BorrowOnce:
		return fmt.Errorf("lossmodel: ask after: must be 0 when borrowing is %s, got %s", BorrowOnce, s.AskAfter)
	case s.WaitingRoom != "" && s.WaitingRoom != RoomWithReserve && s.WaitingRoom != RoomOwnPermits:
		return fmt.Errorf("lossmodel: waiting room: must be %s or %s, got %q", RoomWithReserve, RoomOwnPermits, s.WaitingRoom)
	case s.Floor < 0:
		return fmt.Errorf("lossmodel: floor: must be at least 0, got %d", s.Floor)
	case !(s.Load > 0) || math.IsInf(s.Load, 1):
		return fmt.Errorf("lossmodel: load: must be a positive fraction of A / latency, got %v", s.Load)
	case s.Latency.Mean <= 0:
		return fmt.Errorf("lossmodel: latency: mean must be positive, got %s", s.Latency.Mean)
	case !(s.Latency.CV >= 0) || math.IsInf(s.Latency.CV, 1):
		return fmt.Errorf("lossmodel: latency: cv must be at least 0, got %v", s.Latency.CV)
	case s.Latency.Shape != "" && s.Latency.Shape != Lognormal && s.Latency.Shape != Exponential:
		return fmt.Errorf("lossmodel: latency: shape must be %s or %s, got %q", Lognormal, Exponential, s.Latency.Shape)
	case s.Balancer != "" && s.Balancer != RoundRobin && s.Balancer != Random && s.Balancer != Pinned:
		return fmt.Errorf("lossmodel: balancer: must be %s, %s or %s, got %q", RoundRobin, Random, Pinned, s.Balancer)
	case !(s.Skew >= 0) || math.IsInf(s.Skew, 1):
		return fmt.Errorf("lossmodel: skew: must be at least 0, got %v", s.Skew)
	case s.MaxQueueWait < 0:
		return fmt.Errorf("lossmodel: max queue wait: must be at least 0, got %s", s.MaxQueueWait)
	case s.Calls < 0:
		return fmt.Errorf("lossmodel: calls: must be at least 0, got %d", s.Calls)
	}
	if s.PodShares != nil {
		sum := 0
		for _, p := range s.PodShares {
			if p < 0 {
				return fmt.Errorf("lossmodel: pod shares: must not be negative, got %v", s.PodShares)
			}
			sum += p
		}
		if len(s.PodShares) != s.Pods || sum != s.Permits-s.Reserve {
			return fmt.Errorf("lossmodel: pod shares: must be one per pod (%d) summing to the %d permits outside the reserve, got %v", s.Pods, s.Permits-s.Reserve, s.PodShares)
		}
	}
	return nil
}

// GlobalGate returns the ideal s is compared with: one gate of all A
// permits, no reserve, its waiting room sized by the same rule, fed the
// same calls with the same latencies.
func (s Scenario) GlobalGate() Scenario {
	g := s
	g.Pods, g.Reserve, g.Sharing, g.Balancer, g.Skew, g.PodShares = 1, 0, EqualShares, RoundRobin, 0, nil
	return g
}

func (s Scenario) calls() int {
	if s.Calls == 0 {
		return DefaultCalls
	}
	return s.Calls
}

func (s Scenario) borrowing() Borrowing {
	if s.Borrowing == "" {
		return BorrowWaiting
	}
	return s.Borrowing
}

// roomFor returns the size of the waiting room of a pod holding permits.
func (s Scenario) roomFor(permits int) int {
	switch {
	case s.MaxQueueWait == 0:
		return 0
	case s.QueueCapacity == nil:
		return math.MaxInt
	case permits > 0 && s.WaitingRoom != RoomOwnPermits:
		return max(0, s.QueueCapacity(permits+s.Reserve))
	default:
		return max(0, s.QueueCapacity(permits))
	}
}

func (s Scenario) balancer() Balancer {
	if s.Balancer == "" {
		return RoundRobin
	}
	return s.Balancer
}
