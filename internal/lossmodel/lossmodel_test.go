package lossmodel_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
)

// sample is the issue's measurement: 40 permits over 8 pods, 80 % load,
// lognormal latency of mean 220 ms and cv 0.5, a 40 ms waiting room.
func sample() lossmodel.Scenario {
	return lossmodel.Scenario{
		Permits:      40,
		Pods:         8,
		Load:         0.8,
		Latency:      lossmodel.Latency{Mean: 220 * time.Millisecond, CV: 0.5},
		MaxQueueWait: 40 * time.Millisecond,
	}
}

// operatorRooms sizes a pod's waiting room as the operator does for the
// sample: floor(permits × 40ms / 220ms).
func operatorRooms(permits int) int { return permits * 40 / 220 }

// erlangB is Erlang's loss formula by its recursion, the oracle for one
// pool without a waiting room under Poisson arrivals (whatever the latency
// distribution).
func erlangB(erlangs float64, servers int) float64 {
	b := 1.0
	for k := 1; k <= servers; k++ {
		b = erlangs * b / (float64(k) + erlangs*b)
	}
	return b
}

func within(t *testing.T, what string, got, want, tolerance float64) {
	t.Helper()
	if math.Abs(got-want) > tolerance {
		t.Errorf("%s = %.4f, want %.4f ± %.4f", what, got, want, tolerance)
	}
}

func simulate(t *testing.T, s lossmodel.Scenario) lossmodel.Result {
	t.Helper()
	r, err := lossmodel.Simulate(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func compare(t *testing.T, s lossmodel.Scenario) lossmodel.Comparison {
	t.Helper()
	c, err := lossmodel.Compare(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestErlangBTable checks one pool without a waiting room against the
// published Erlang-B table: the offered traffic at which N servers block
// 1 % or 5 % of the calls. Constant latencies and lognormal ones with a cv
// of 1.5 (neither exponential) test the formula's insensitivity to the
// distribution too.
func TestErlangBTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		servers int
		erlangs float64
		blocked float64
	}{
		{5, 1.361, 0.01},
		{5, 2.219, 0.05},
		{10, 4.461, 0.01},
		{10, 6.216, 0.05},
		{40, 29.007, 0.01},
		{40, 31.0, 0.02},
	} {
		for _, cv := range []float64{0, 1.5} {
			s := lossmodel.Scenario{
				Permits: c.servers, Pods: 1, Load: c.erlangs / float64(c.servers),
				Latency: lossmodel.Latency{Mean: 100 * time.Millisecond, CV: cv}, Seed: 7, Calls: 150_000,
			}
			r := simulate(t, s)
			within(t, "blocked", 1-r.AdmittedFraction(), c.blocked, 0.003+c.blocked/10)
		}
	}
}

// TestSplitPoolsAreErlangB: without a waiting room, a random balancer gives
// each pod Poisson arrivals of its own, so 8 pods of 5 at 80 % of 40
// permits lose what one pool of 5 at 4 Erlangs loses (19.9 %), and pinned
// connections lose Σ w_p B(w_p × 32, s_p) with the pod's weights and shares.
func TestSplitPoolsAreErlangB(t *testing.T) {
	t.Parallel()
	s := sample()
	s.MaxQueueWait = 0
	s.Balancer = lossmodel.Random
	within(t, "random, admitted", simulate(t, s).AdmittedFraction(), 1-0.19907, 0.006)

	for _, sharing := range []lossmodel.Sharing{lossmodel.EqualShares, lossmodel.DemandShares} {
		s.Balancer, s.Skew, s.Seed, s.Sharing, s.Floor = lossmodel.Pinned, 0.8, 3, sharing, 1
		r := simulate(t, s)
		var want float64
		for p, w := range r.Weights {
			want += w * (1 - erlangB(w*32, r.Shares[p]))
		}
		within(t, "pinned "+string(sharing)+", admitted", r.AdmittedFraction(), want, 0.006)
	}
}

// TestFiniteWaitingRoomIsMMsK checks a waiting room without a time bound
// against the M/M/s/K formula (exponential latencies): 5 permits and room
// for 3 more calls at 90 % load.
func TestFiniteWaitingRoomIsMMsK(t *testing.T) {
	t.Parallel()
	const servers, room, load = 5, 3, 0.9
	s := lossmodel.Scenario{
		Permits: servers, Pods: 1, Load: load,
		Latency:       lossmodel.Latency{Mean: 100 * time.Millisecond, Shape: lossmodel.Exponential},
		MaxQueueWait:  time.Hour,
		QueueCapacity: func(int) int { return room },
		Seed:          11,
		Calls:         400_000,
	}
	a := load * servers
	p := make([]float64, servers+room+1)
	p[0] = 1
	for n := 1; n < len(p); n++ {
		p[n] = p[n-1] * a / float64(min(n, servers))
	}
	var sum float64
	for _, v := range p {
		sum += v
	}
	within(t, "blocked", 1-simulate(t, s).AdmittedFraction(), p[len(p)-1]/sum, 0.005)
}

// TestIssueTable checks the model against the table the issue measured
// with the project's gate (8 gates of 5 against one of 40, two 15 s runs).
// The waiting room there was bounded in time only. Agreement within a few
// points is what a model of a measured system can promise.
func TestIssueTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		balancer lossmodel.Balancer
		lo, hi   float64 // the measured range, widened by 2 points each way
	}{
		{lossmodel.RoundRobin, 0.926, 0.978},
		{lossmodel.Random, 0.83, 0.899},
	} {
		s := sample()
		s.Balancer, s.Calls = c.balancer, 100_000
		cmp := compare(t, s)
		if got := cmp.Scenario.AdmittedFraction(); got < c.lo || got > c.hi {
			t.Errorf("%s: 8 gates of 5 admit %.3f, the issue measured within [%.3f, %.3f]", c.balancer, got, c.lo, c.hi)
		}
		if got := cmp.Global.AdmittedFraction(); got < 0.985 {
			t.Errorf("%s: one gate of 40 admits %.3f, the issue measured 98.7–100 %%", c.balancer, got)
		}
	}
}

// TestPinnedDependsOnTheDraw: with pinned connections the loss depends on
// which weights the seed draws. The issue measured 59.9–61.9 % for one
// draw of σ 0.8; over 16 draws the model ranges from about 60 % to 78 %,
// and the measured figure is among its more skewed draws.
func TestPinnedDependsOnTheDraw(t *testing.T) {
	t.Parallel()
	var admitted []float64
	for seed := range uint64(16) {
		s := sample()
		s.Balancer, s.Skew, s.Seed, s.Calls = lossmodel.Pinned, 0.8, seed, 50_000
		admitted = append(admitted, simulate(t, s).AdmittedFraction())
	}
	slices.Sort(admitted)
	if admitted[0] > 0.62 || admitted[len(admitted)-1] < 0.75 {
		t.Errorf("pinned σ 0.8 over 16 draws ranges over [%.3f, %.3f], want from below 0.62 (the issue's draw) to above 0.75", admitted[0], admitted[len(admitted)-1])
	}
}

// TestOnePodIsTheGlobalGate: a single pod holding every permit is the
// global gate, call for call.
func TestOnePodIsTheGlobalGate(t *testing.T) {
	t.Parallel()
	s := sample()
	s.Pods, s.Calls = 1, 20_000
	c := compare(t, s)
	if diff := cmp.Diff(c.Global, c.Scenario); diff != "" {
		t.Errorf("one pod of 40 and the global gate differ (-global +pod):\n%s", diff)
	}
}

// TestAllReserveIsTheGlobalGate: with every permit in the reserve and the
// waiting rooms unbounded in size, every call borrows, a call that cannot
// waits at the permit server in arrival order, and the reserve is one gate
// of A fed the same calls: the same calls are admitted.
func TestAllReserveIsTheGlobalGate(t *testing.T) {
	t.Parallel()
	for _, b := range lossmodel.Balancers {
		s := sample()
		s.Reserve, s.Balancer, s.Skew, s.Calls = 40, b, 0.8, 20_000
		c := compare(t, s)
		if c.Scenario.Admitted != c.Global.Admitted || c.Scenario.Borrowed != c.Scenario.Admitted {
			t.Errorf("%s: all reserve admitted %d (%d borrowed), the global gate %d", b, c.Scenario.Admitted, c.Scenario.Borrowed, c.Global.Admitted)
		}
	}
}

// TestNeverAboveThePermits: whatever the scenario, the calls in flight never
// exceed A.
func TestNeverAboveThePermits(t *testing.T) {
	t.Parallel()
	for _, r := range []int{0, 7, 40} {
		for _, b := range lossmodel.Balancers {
			for _, rule := range []string{"today's", "loans given back early", "loans kept and held", "idle permits offered"} {
				s := sample()
				s.Load, s.Reserve, s.Balancer, s.Skew, s.Calls = 1.5, r, b, 1.2, 10_000
				s.Sharing, s.Floor = lossmodel.DemandShares, 1
				switch rule {
				case "loans given back early":
					s.GiveLoansBack, s.AskAfter = true, 10*time.Millisecond
				case "loans kept and held":
					s.KeepLoans, s.HoldLoans = true, 20*time.Millisecond
				case "idle permits offered":
					s.GiveLoansBack, s.AskAfter, s.OfferIdle = true, 10*time.Millisecond, true
				}
				res := simulate(t, s)
				if res.PeakInFlight != 40 {
					t.Errorf("reserve %d, %s at 150 %% load, %s rule: peak in flight %d, want 40 (full, never above)", r, b, rule, res.PeakInFlight)
				}
				if res.OverShare != 0 {
					t.Errorf("reserve %d, %s at 150 %% load, %s rule: a pod's permits in use went above its share %d times", r, b, rule, res.OverShare)
				}
			}
		}
	}
}

// TestDemandShares: shares that follow demand give pinned pods permits in
// the order of their weights, never below the floor, summing to A − R, and
// admit more than equal shares; with equal weights they are the exact
// division.
func TestDemandShares(t *testing.T) {
	t.Parallel()
	s := sample()
	s.Balancer, s.Skew, s.Seed, s.Sharing, s.Floor, s.Reserve, s.Calls = lossmodel.Pinned, 0.8, 5, lossmodel.DemandShares, 2, 4, 100_000
	shares := s.Shares()
	w := lossmodel.Weights(5, 8, 0.8)
	var sum int
	for p := range shares {
		sum += shares[p]
		if shares[p] < 2 {
			t.Errorf("pod %d: share %d below the floor 2", p, shares[p])
		}
		for q := range shares {
			if w[p] > w[q] && shares[p] < shares[q] {
				t.Errorf("pod %d (weight %.3f) holds %d, pod %d (weight %.3f) %d", p, w[p], shares[p], q, w[q], shares[q])
			}
		}
	}
	if sum != 36 {
		t.Errorf("shares %v sum to %d, want A − R = 36", shares, sum)
	}

	equal := s
	equal.Sharing = lossmodel.EqualShares
	if d, e := simulate(t, s).AdmittedFraction(), simulate(t, equal).AdmittedFraction(); d < e+0.05 {
		t.Errorf("pinned: demand shares admit %.3f, equal shares %.3f: want at least 5 points more", d, e)
	}

	s.Balancer = lossmodel.Random
	if diff := cmp.Diff([]int{5, 5, 5, 5, 4, 4, 4, 4}, s.Shares()); diff != "" {
		t.Errorf("random balancer: demand shares are not the exact division (-want +got):\n%s", diff)
	}
}

// TestBorrowWaitingAdmitsMore: a call that waits for a reserve permit while
// it waits in its pod's waiting room is admitted more often than one that
// tries the reserve only when it arrives.
func TestBorrowWaitingAdmitsMore(t *testing.T) {
	t.Parallel()
	s := sample()
	s.Balancer, s.Reserve, s.Calls = lossmodel.Random, 16, 100_000
	once := s
	once.Borrowing = lossmodel.BorrowOnce
	waiting, single := compare(t, s).Ratio(), compare(t, once).Ratio()
	if waiting < single+0.01 {
		t.Errorf("reserve 16, random: waiting borrows reach %.3f of the global gate, single tries %.3f: want at least a point more", waiting, single)
	}
}

// TestBorrowWithoutARoomAdmitsMore: a call its pod's waiting room cannot
// take waits for a reserve permit at the permit server as long as the room
// would have kept it (BorrowWaiting, the library's rule), and is admitted
// more often than when only the calls in a room wait there (BorrowInRoom).
// Sized for their own permits (RoomOwnPermits, the operator's rule before
// its rooms counted the reserve), the sample's pods of 3 with a reserve of
// 16 have rooms of floor(3 × 40ms / 220ms) = 0, so every call that found
// its pod full and the reserve taken was shed at once.
func TestBorrowWithoutARoomAdmitsMore(t *testing.T) {
	t.Parallel()
	for _, b := range []lossmodel.Balancer{lossmodel.Random, lossmodel.Pinned} {
		s := sample()
		s.Balancer, s.Skew, s.Seed, s.Reserve, s.Sharing, s.Floor, s.Calls = b, 0.8, 1, 16, lossmodel.DemandShares, 1, 100_000
		s.QueueCapacity, s.WaitingRoom = operatorRooms, lossmodel.RoomOwnPermits
		inRoom := s
		inRoom.Borrowing = lossmodel.BorrowInRoom
		waiting, room := compare(t, s), compare(t, inRoom)
		if waiting.Ratio() < room.Ratio()+0.02 {
			t.Errorf("%s, reserve 16: waiting without a room reaches %.3f of the global gate, in a room only %.3f: want at least 2 points more", b, waiting.Ratio(), room.Ratio())
		}
		if f := waiting.Scenario.BorrowedFraction(); f > 0.5 {
			t.Errorf("%s, reserve 16: %.3f of the admitted calls borrowed, want at most half", b, f)
		}
	}
}

// TestReserveOfEveryPermitIsOneGate: with every permit in the reserve and
// no pod holding any, the permit server's queue is the one waiting room:
// a call waits there for up to MaxQueueWait, first come first served, as
// at one gate whose room is bounded in time only. The model must then
// admit exactly what that gate admits, call for call; a call that waits
// only in its pod's room (of no place) is shed instead.
func TestReserveOfEveryPermitIsOneGate(t *testing.T) {
	t.Parallel()
	s := sample()
	s.Reserve, s.Calls, s.Load = 40, 50_000, 0.95
	s.QueueCapacity = operatorRooms
	pooled := simulate(t, s)
	one := s.GlobalGate()
	one.QueueCapacity = nil // bounded by MaxQueueWait only, as the server's queue
	global := simulate(t, one)
	if pooled.Admitted != global.Admitted || pooled.Borrowed != pooled.Admitted || pooled.Waited != global.Waited {
		t.Errorf("all in the reserve: admitted %d (borrowed %d, waited %d), one gate %d (waited %d): want the same calls",
			pooled.Admitted, pooled.Borrowed, pooled.Waited, global.Admitted, global.Waited)
	}
	s.Borrowing = lossmodel.BorrowInRoom
	if r := simulate(t, s); r.Admitted >= global.Admitted || r.Waited != 0 {
		t.Errorf("in a room only: admitted %d (waited %d), want fewer than one gate's %d and none waited", r.Admitted, r.Waited, global.Admitted)
	}
}

// TestDeterministic: the same scenario gives the same result; another seed
// another one.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	s := sample()
	s.Balancer, s.Reserve, s.Calls = lossmodel.Random, 8, 20_000
	a, b := simulate(t, s), simulate(t, s)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two runs differ (-first +second):\n%s", diff)
	}
	s.Seed++
	if c := simulate(t, s); c.Admitted == a.Admitted && c.Borrowed == a.Borrowed {
		t.Errorf("seeds 0 and 1 gave the same result %+v", c)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		edit func(*lossmodel.Scenario)
		want string
	}{
		{func(s *lossmodel.Scenario) { s.Permits = 0 }, "lossmodel: permits: must be at least 1, got 0"},
		{func(s *lossmodel.Scenario) { s.Pods = -1 }, "lossmodel: pods: must be at least 1, got -1"},
		{func(s *lossmodel.Scenario) { s.Reserve = 41 }, "lossmodel: reserve: must be between 0 and the 40 permits, got 41"},
		{func(s *lossmodel.Scenario) { s.Load = math.NaN() }, "lossmodel: load: must be a positive fraction of A / latency, got NaN"},
		{func(s *lossmodel.Scenario) { s.Latency.Mean = 0 }, "lossmodel: latency: mean must be positive, got 0s"},
		{func(s *lossmodel.Scenario) { s.Balancer = "sticky" }, `lossmodel: balancer: must be round-robin, random or pinned, got "sticky"`},
		{func(s *lossmodel.Scenario) { s.Skew = -1 }, "lossmodel: skew: must be at least 0, got -1"},
		{func(s *lossmodel.Scenario) { s.Borrowing = "later" }, `lossmodel: borrowing: must be waiting, in-room or once, got "later"`},
		{func(s *lossmodel.Scenario) { s.MaxQueueWait = -time.Second }, "lossmodel: max queue wait: must be at least 0, got -1s"},
		{func(s *lossmodel.Scenario) { s.AskAfter = -time.Millisecond }, "lossmodel: ask after: must be at least 0, got -1ms"},
		{func(s *lossmodel.Scenario) { s.AskAfter, s.Borrowing = time.Millisecond, lossmodel.BorrowOnce }, "lossmodel: ask after: must be 0 when borrowing is once, got 1ms"},
		{func(s *lossmodel.Scenario) { s.HoldLoans = time.Millisecond }, "lossmodel: hold loans: must be 0, or at least 0 with keep loans, got 1ms"},
		{func(s *lossmodel.Scenario) { s.HoldLoans, s.KeepLoans = -time.Millisecond, true }, "lossmodel: hold loans: must be 0, or at least 0 with keep loans, got -1ms"},
		{func(s *lossmodel.Scenario) { s.OfferKeep = -1 }, "lossmodel: offer keep: must be at least 0, got -1"},
		{func(s *lossmodel.Scenario) { s.OfferIdle, s.KeepLoans = true, true }, "lossmodel: offer idle: must be false with keep loans, whose loans stay at their pod"},
		{func(s *lossmodel.Scenario) { s.WaitingRoom = "shared" }, `lossmodel: waiting room: must be with-reserve or own-permits, got "shared"`},
	} {
		s := sample()
		c.edit(&s)
		_, err := lossmodel.Simulate(s)
		if err == nil || err.Error() != c.want {
			t.Errorf("got error %v, want %q", err, c.want)
		}
	}
}

// goalScenario is the sample as the partial-load goals run it: behind
// balancer (pinned with σ 0.8 from seed), with shares that follow demand
// and a floor of 1.
func goalScenario(balancer lossmodel.Balancer, seed uint64) lossmodel.Scenario {
	s := sample()
	s.Balancer, s.Skew, s.Seed, s.Sharing, s.Floor, s.Calls = balancer, 0.8, seed, lossmodel.DemandShares, 1, 100_000
	return s
}

// TestReserveForTheIssueGoals sizes the reserve for the partial-load goals
// (the sample at 80 %, shares that follow demand): 99 % of the global gate
// with a random balancer, 98 % with pinned connections. With waiting rooms
// bounded in time only it takes about 23 of the 40 permits for random and
// about 21 for pinned; with the rooms the operator sizes, floor(p × 40ms /
// 220ms), and the library's rule (a call without a place in its room
// waits at the permit server), about 27 and 25; with those rooms counting
// the reserve, floor((p + R) × 40ms / 220ms) as the operator publishes
// them, about 23 and 20. Each way more than half of the admitted calls
// then borrow: the goal of at most half borrowed
// cannot be met together with these ratios by a reserve alone. Lent only
// to calls that find a reserve permit free on arrival, even all 40 in the
// reserve stay below both ratios.
func TestReserveForTheIssueGoals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		balancer lossmodel.Balancer
		seed     uint64
		target   float64
		rooms    func(int) int
		room     lossmodel.WaitingRoom
		lo, hi   int
	}{
		{lossmodel.Random, 0, 0.99, nil, lossmodel.RoomOwnPermits, 21, 26},
		{lossmodel.Pinned, 2, 0.98, nil, lossmodel.RoomOwnPermits, 18, 24},
		{lossmodel.Random, 0, 0.99, operatorRooms, lossmodel.RoomOwnPermits, 25, 29},
		{lossmodel.Pinned, 2, 0.98, operatorRooms, lossmodel.RoomOwnPermits, 22, 27},
		{lossmodel.Random, 0, 0.99, operatorRooms, lossmodel.RoomWithReserve, 21, 25},
		{lossmodel.Pinned, 2, 0.98, operatorRooms, lossmodel.RoomWithReserve, 18, 23},
	} {
		s := goalScenario(c.balancer, c.seed)
		s.QueueCapacity, s.WaitingRoom = c.rooms, c.room
		z, err := lossmodel.SmallestReserve(s, c.target)
		if err != nil {
			t.Fatal(err)
		}
		if !z.Found || z.Reserve < c.lo || z.Reserve > c.hi {
			t.Errorf("%s (rooms by the operator's rule: %v, %s): smallest reserve for %.2f of the global gate: %d (found %v), want within [%d, %d]", c.balancer, c.rooms != nil, c.room, c.target, z.Reserve, z.Found, c.lo, c.hi)
		}
		if b := z.Comparison.Scenario.BorrowedFraction(); b <= 0.5 {
			t.Errorf("%s (rooms by the operator's rule: %v, %s): reserve %d borrows %.3f of the admitted calls, want above 0.5", c.balancer, c.rooms != nil, c.room, z.Reserve, b)
		}
		s.Borrowing, s.Reserve = lossmodel.BorrowOnce, 40
		if r := compare(t, s).Ratio(); r >= c.target {
			t.Errorf("%s, borrowing once: all 40 in the reserve reach %.3f of the global gate, want below %.2f", c.balancer, r, c.target)
		}
	}
}

func TestSmallestReserveTarget(t *testing.T) {
	t.Parallel()
	for _, target := range []float64{0, -1, 1.01, math.NaN()} {
		if _, err := lossmodel.SmallestReserve(sample(), target); err == nil {
			t.Errorf("target %v: no error", target)
		}
	}
}

// TestTheOperatorsPinnedShares: the storm's pinned runs held shares other
// than the model's, and the model given them predicts what the storm
// measured, within half a point: the pinned gap to the model is the
// shares'. Given its own shares as PodShares the model admits exactly what
// it does without. Two earlier runs' shares admit within half a point of
// the model's own. While the storm's demand left out the calls run on lent
// permits, the heavy pods read low and the light ones got more than they
// used: the rounded mean shares of such a run, {3, 4, 3, 2, 3, 3, 3, 3},
// admit a point less (the storm measured 0.959 of the global gate, 0.451
// borrowed). Counting them, two runs held {4, 4, 3, 3, 4, 1, 2, 3} and
// {4, 3, 4, 4, 3, 2, 1, 3} (measured 0.966 and 0.961): closer to the
// model's, but pods whose demands lie within a permit of the water level
// are ordered by a noisy reading. Equal shares of the 24 admit 1.5 points
// less: the shares do matter.
func TestTheOperatorsPinnedShares(t *testing.T) {
	s := lossmodel.Scenario{Permits: 40, Pods: 8, Reserve: 16, Sharing: lossmodel.DemandShares, Floor: 1, Load: 0.8,
		Latency: lossmodel.Latency{Mean: 220 * time.Millisecond, CV: 0.5}, Balancer: lossmodel.Pinned, Skew: 0.8,
		MaxQueueWait: 40 * time.Millisecond, QueueCapacity: operatorRooms, Seed: 1}
	own := compare(t, s)
	s.PodShares = s.Shares()
	if got := compare(t, s); !cmp.Equal(got.Scenario, own.Scenario) {
		t.Errorf("the model's own shares as PodShares: %+v, want %+v", got.Scenario, own.Scenario)
	}
	for _, shares := range [][]int{{5, 5, 3, 2, 3, 1, 3, 2}, {2, 6, 3, 3, 3, 2, 2, 3}} {
		s.PodShares = shares
		if got := compare(t, s).Ratio(); got < own.Ratio()-0.005 {
			t.Errorf("the operator's shares %v: %.3f of the global gate, the model's own %.3f", shares, got, own.Ratio())
		}
	}
	// below bounds how far each run's shares admit below the model's own
	// (in points of the ratio; nil: not bounded).
	type bound struct{ lo, hi float64 }
	for _, c := range []struct {
		name               string
		shares             []int
		measured, borrowed float64
		below              *bound
	}{
		{"borrowed calls left out of demand", []int{3, 4, 3, 2, 3, 3, 3, 3}, 0.959, 0.451, &bound{0.008, math.Inf(1)}},
		{"borrowed calls in demand", []int{4, 4, 3, 3, 4, 1, 2, 3}, 0.966, 0.443, &bound{math.Inf(-1), 0.0025}},
		{"borrowed calls in demand, another run", []int{4, 3, 4, 4, 3, 2, 1, 3}, 0.961, 0.456, nil},
	} {
		s.PodShares = c.shares
		got := compare(t, s)
		within(t, c.name+": ratio to the global gate", got.Ratio(), c.measured, 0.005)
		within(t, c.name+": borrowed fraction", got.Scenario.BorrowedFraction(), c.borrowed, 0.01)
		if below := own.Ratio() - got.Ratio(); c.below != nil && (below < c.below.lo || below > c.below.hi) {
			t.Errorf("%s: %.3f of the global gate, %.4f below the model's own %.3f; want within [%v, %v] below", c.name, got.Ratio(), below, own.Ratio(), c.below.lo, c.below.hi)
		}
	}
	s.PodShares = []int{3, 3, 3, 3, 3, 3, 3, 3}
	if got := compare(t, s).Ratio(); got > own.Ratio()-0.01 {
		t.Errorf("equal shares of the 24: %.3f of the global gate, want at least a point below the model's own %.3f", got, own.Ratio())
	}
	for _, bad := range [][]int{{3, 3, 3}, {4, 3, 3, 3, 3, 3, 3, 3}, {-1, 4, 3, 3, 3, 3, 3, 6}} {
		s.PodShares = bad
		if _, err := lossmodel.Simulate(s); err == nil || !strings.Contains(err.Error(), "pod shares") {
			t.Errorf("PodShares %v: %v, want an error naming the pod shares", bad, err)
		}
	}
}

// TestWaitingRoomCountsTheReserve: at the sample's settings a pod of 4 or
// 5 permits has a waiting room of floor(5 × 40 / 220) = 0 sized by its own
// permits, so a call that finds its pod full and no reserve permit free
// waits at the permit server alone, and only a reserve permit can serve
// it. Counting the reserve, floor((p + R) × 40 / 220) is 2 to 3 (R = 8) or
// 3 (R = 16), and the calls that wait there are served by the first
// permit to come back, the pod's or the reserve's: the admitted calls rise
// by 1.5 to 3 points, while the part of them that borrows does not.
func TestWaitingRoomCountsTheReserve(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		balancer   lossmodel.Balancer
		sharing    lossmodel.Sharing
		seed       uint64
		reserve    int
		own, with  float64 // the ratios to the global gate, ± 0.01
		lessBorrow float64 // the borrowed fraction with the reserve counted, at most
	}{
		{"random, reserve 8", lossmodel.Random, lossmodel.EqualShares, 0, 8, 0.910, 0.941, 0.25},
		{"pinned, demand shares, reserve 8", lossmodel.Pinned, lossmodel.DemandShares, 1, 8, 0.932, 0.951, 0.25},
		{"random, reserve 16", lossmodel.Random, lossmodel.EqualShares, 0, 16, 0.963, 0.978, 0.45},
	} {
		s := sample()
		s.Balancer, s.Sharing, s.Seed, s.Reserve, s.Calls = c.balancer, c.sharing, c.seed, c.reserve, 100_000
		s.Skew, s.Floor, s.QueueCapacity = 0.8, 1, operatorRooms
		own := s
		own.WaitingRoom = lossmodel.RoomOwnPermits
		before, after := compare(t, own), compare(t, s)
		t.Logf("%s: rooms of own permits %.4f of the global gate (%.3f borrowed), counting the reserve %.4f (%.3f borrowed)",
			c.name, before.Ratio(), before.Scenario.BorrowedFraction(), after.Ratio(), after.Scenario.BorrowedFraction())
		within(t, c.name+": ratio with rooms of own permits", before.Ratio(), c.own, 0.01)
		within(t, c.name+": ratio with rooms counting the reserve", after.Ratio(), c.with, 0.01)
		if after.Ratio() < before.Ratio()+0.015 {
			t.Errorf("%s: counting the reserve admits %.4f of the global gate, own permits %.4f: want at least 1.5 points more", c.name, after.Ratio(), before.Ratio())
		}
		if b, a := before.Scenario.BorrowedFraction(), after.Scenario.BorrowedFraction(); a > c.lessBorrow || a > b+0.02 {
			t.Errorf("%s: borrowed fraction %.4f with the reserve counted, %.4f without: want at most %.2f and within 2 points", c.name, a, b, c.lessBorrow)
		}
	}
}

// TestWaitingRoomWithoutReserveOrPermits: without a reserve both rules are
// the same; a pod holding no permits has no waiting room under either
// (its published plan gives it none), so with every permit in the reserve
// they admit the same calls too.
func TestWaitingRoomWithoutReserveOrPermits(t *testing.T) {
	t.Parallel()
	for _, r := range []int{0, 40} {
		s := sample()
		s.Balancer, s.Reserve, s.Calls, s.QueueCapacity = lossmodel.Random, r, 20_000, operatorRooms
		own := s
		own.WaitingRoom = lossmodel.RoomOwnPermits
		if diff := cmp.Diff(simulate(t, own), simulate(t, s)); diff != "" {
			t.Errorf("reserve %d: the rules differ (-own permits +with the reserve):\n%s", r, diff)
		}
	}
}

// TestLargestReserve: the operator keeps every pod a permit of its own.
func TestLargestReserve(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ permits, pods, want int }{{40, 8, 32}, {8, 8, 0}, {5, 8, 0}, {1, 1, 0}} {
		if got := lossmodel.LargestReserve(c.permits, c.pods); got != c.want {
			t.Errorf("LargestReserve(%d, %d) = %d, want %d", c.permits, c.pods, got, c.want)
		}
	}
}

// TestLoansGivenBackEarly models the library's two lending rules
// (gate.LendRules: ReturnEarly, AskAfter; off by default), to say how far
// the partial-load goals (0.99 of the global gate with a random balancer,
// 0.98 pinned, at most half of the admitted calls borrowed) are from the
// reserve's design rather than from its tuning. Giving a loan back
// as soon as its pod has a permit free wins 1.5 to 2 points at the storm's
// reserve of 16, but lends many more calls; waiting AskAfter in the room
// before asking lends fewer and admits less. Over every reserve from 8 to
// 16 and every wait up to 20 ms, random never reaches 0.99 while borrowing
// at most half: the trade-off between calls decided in the pod and calls
// admitted is the balancer's, not the rule's (about 0.985 at best, today's
// rule 0.984 at a reserve of 19). Pinned reaches 0.98 with loans given
// back, asking after 5 ms and a reserve of 10 (today's rule: 0.978 at
// best).
func TestLoansGivenBackEarly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		balancer lossmodel.Balancer
		seed     uint64
	}{{lossmodel.Random, 0}, {lossmodel.Pinned, 2}} {
		s := goalScenario(c.balancer, c.seed)
		s.QueueCapacity, s.Reserve = operatorRooms, 16
		today := compare(t, s)
		s.GiveLoansBack = true
		early := compare(t, s)
		if gain := early.Ratio() - today.Ratio(); gain < 0.015 {
			t.Errorf("%s, reserve 16: loans given back early admit %.3f of the global gate, %.3f today: want at least 1.5 points more", c.balancer, early.Ratio(), today.Ratio())
		}
		if b, b0 := early.Scenario.BorrowedFraction(), today.Scenario.BorrowedFraction(); b < b0+0.2 {
			t.Errorf("%s, reserve 16: loans given back early lend %.3f of the admitted calls, %.3f today: want at least 0.2 more", c.balancer, b, b0)
		}
		if early.Scenario.PeakInFlight > 40 {
			t.Errorf("%s: loans given back early: peak in flight %d, above the 40 permits", c.balancer, early.Scenario.PeakInFlight)
		}
	}

	best := 0.0
	for r := 8; r <= 16; r += 2 {
		for _, giveBack := range []bool{false, true} {
			for _, ask := range []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
				s := goalScenario(lossmodel.Random, 0)
				s.QueueCapacity, s.Reserve, s.GiveLoansBack, s.AskAfter = operatorRooms, r, giveBack, ask
				c := compare(t, s)
				if c.Scenario.BorrowedFraction() <= 0.5 {
					best = max(best, c.Ratio())
				}
			}
		}
	}
	if best >= 0.99 || best < 0.98 {
		t.Errorf("random: the best ratio to the global gate borrowing at most half is %.3f, want within [0.98, 0.99)", best)
	}

	s := goalScenario(lossmodel.Pinned, 2)
	s.QueueCapacity, s.Reserve, s.GiveLoansBack, s.AskAfter = operatorRooms, 10, true, 5*time.Millisecond
	if c := compare(t, s); c.Ratio() < 0.98 || c.Scenario.BorrowedFraction() > 0.5 {
		t.Errorf("pinned, reserve 10, loans given back early, asking after 5ms: %.3f of the global gate, %.3f borrowed; want at least 0.98 borrowing at most half", c.Ratio(), c.Scenario.BorrowedFraction())
	}
}

// TestLoansKeptInThePod models the other way to fewer calls asking the
// permit server: a pod keeps a loan for its next waiter (KeepLoans), or
// holds it idle for its next call (HoldLoans, a Doorman-style lease of
// capacity). At a reserve of 16, keeping lends 2 to 3 points fewer calls
// for at most half a point of admitted ones; holding lends fewer still but
// admits less, a loan idle at one pod being one another pod's call cannot
// have. Over reserves from 16 to 32, neither moves random's best ratio to
// the global gate, borrowing at most half, to 0.99, and pinned's stays
// about 0.98: the trade-off stays the balancer's.
func TestLoansKeptInThePod(t *testing.T) {
	t.Parallel()
	s := goalScenario(lossmodel.Random, 0)
	s.QueueCapacity, s.Reserve = operatorRooms, 16
	today := compare(t, s)
	s.KeepLoans = true
	kept := compare(t, s)
	s.HoldLoans = 50 * time.Millisecond
	held := compare(t, s)
	t.Logf("random, reserve 16: today %.4f (%.3f borrowed), kept %.4f (%.3f), held 50ms %.4f (%.3f)", today.Ratio(), today.Scenario.BorrowedFraction(),
		kept.Ratio(), kept.Scenario.BorrowedFraction(), held.Ratio(), held.Scenario.BorrowedFraction())
	if b, b0 := kept.Scenario.BorrowedFraction(), today.Scenario.BorrowedFraction(); b > b0-0.02 {
		t.Errorf("loans kept: %.3f of the admitted calls borrowed, %.3f today: want at least 2 points fewer", b, b0)
	}
	if r, r0 := kept.Ratio(), today.Ratio(); r < r0-0.005 {
		t.Errorf("loans kept: %.4f of the global gate, %.4f today: want within half a point", r, r0)
	}
	if b, b0 := held.Scenario.BorrowedFraction(), kept.Scenario.BorrowedFraction(); b > b0-0.05 {
		t.Errorf("loans held 50ms: %.3f of the admitted calls borrowed, %.3f kept: want at least 5 points fewer", b, b0)
	}
	if r, r0 := held.Ratio(), kept.Ratio(); r > r0-0.01 {
		t.Errorf("loans held 50ms: %.4f of the global gate, %.4f kept: want at least a point less", r, r0)
	}
	for _, p := range []int{held.Scenario.PeakInFlight, kept.Scenario.PeakInFlight} {
		if p > 40 {
			t.Errorf("peak in flight %d, above the 40 permits", p)
		}
	}

	for _, c := range []struct {
		balancer lossmodel.Balancer
		seed     uint64
		lo, hi   float64
	}{{lossmodel.Random, 0, 0.98, 0.99}, {lossmodel.Pinned, 2, 0.975, 0.99}} {
		best, at := 0.0, ""
		for r := 16; r <= 32; r += 2 {
			for _, hold := range []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond} {
				s := goalScenario(c.balancer, c.seed)
				s.QueueCapacity, s.Reserve, s.KeepLoans, s.HoldLoans = operatorRooms, r, true, hold
				if got := compare(t, s); got.Scenario.BorrowedFraction() <= 0.5 && got.Ratio() > best {
					best, at = got.Ratio(), fmt.Sprintf("reserve %d, held %s, %.3f borrowed", r, hold, got.Scenario.BorrowedFraction())
				}
			}
		}
		t.Logf("%s: best %.4f of the global gate borrowing at most half (%s)", c.balancer, best, at)
		if best < c.lo || best >= c.hi {
			t.Errorf("%s, loans kept or held: the best ratio to the global gate borrowing at most half is %.4f (%s), want within [%.3f, %.2f)", c.balancer, best, at, c.lo, c.hi)
		}
	}
}

// TestOfferedIdlePermits: when every pod offers its idle permits to the
// permit server (OfferIdle), a call that finds the reserve lent out runs on
// a permit another pod is not using, so the permits idle at one pod no
// longer shed the calls of another: with the library's lending rules and a
// reserve of 6, about 0.994 of the global gate behind a random balancer and
// 0.995 behind pinned connections, borrowing about 0.44 and 0.41 of the
// admitted calls; without offers the same reserve admits about 0.955 and
// 0.96. A pod that keeps a permit for its own calls lends less and admits
// less. No pod ever has more of its permits in use than its share.
func TestOfferedIdlePermits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		balancer lossmodel.Balancer
		seed     uint64
	}{{lossmodel.Random, 0}, {lossmodel.Pinned, 2}} {
		s := goalScenario(c.balancer, c.seed)
		s.QueueCapacity, s.Reserve, s.GiveLoansBack, s.AskAfter = operatorRooms, 6, true, 10*time.Millisecond
		without := compare(t, s)
		s.OfferIdle = true
		offered := compare(t, s)
		s.OfferKeep = 1
		kept := compare(t, s)
		t.Logf("%s, reserve 6: without offers %.4f (%.3f borrowed), offered %.4f (%.3f borrowed, %.3f offered), keeping 1 %.4f (%.3f borrowed)", c.balancer,
			without.Ratio(), without.Scenario.BorrowedFraction(), offered.Ratio(), offered.Scenario.BorrowedFraction(),
			ratioOf(offered.Scenario.Offered, offered.Scenario.Admitted), kept.Ratio(), kept.Scenario.BorrowedFraction())
		if r := without.Ratio(); r >= 0.97 {
			t.Errorf("%s, reserve 6 without offers: %.4f of the global gate, want below 0.97", c.balancer, r)
		}
		if r, b := offered.Ratio(), offered.Scenario.BorrowedFraction(); r < 0.99 || b > 0.5 {
			t.Errorf("%s, reserve 6, idle permits offered: %.4f of the global gate, %.3f borrowed; want at least 0.99 borrowing at most half", c.balancer, r, b)
		}
		if n := offered.Scenario.Offered; n == 0 || n >= offered.Scenario.Borrowed {
			t.Errorf("%s: %d calls ran on offered permits of %d borrowed, want some, and fewer than the borrowed", c.balancer, n, offered.Scenario.Borrowed)
		}
		if kept.Ratio() >= offered.Ratio() || kept.Scenario.BorrowedFraction() >= offered.Scenario.BorrowedFraction() {
			t.Errorf("%s: keeping a permit admits %.4f borrowing %.3f, offering all %.4f borrowing %.3f: want less of both", c.balancer,
				kept.Ratio(), kept.Scenario.BorrowedFraction(), offered.Ratio(), offered.Scenario.BorrowedFraction())
		}
		for _, r := range []lossmodel.Result{offered.Scenario, kept.Scenario} {
			if r.PeakInFlight > 40 || r.OverShare != 0 {
				t.Errorf("%s: peak in flight %d (at most 40), a pod above its share %d times (never)", c.balancer, r.PeakInFlight, r.OverShare)
			}
		}
	}
}

func ratioOf(a, b int) float64 { return float64(a) / float64(b) }
