// Package lossmodel predicts how many calls per-pod shares admit compared
// with one global gate of the same permits: the loss that dividing one
// semaphore of A into P semaphores costs when the load on the pods is not
// perfectly even, and what a pooled reserve and shares that follow demand
// win back. It is the calculator behind `kubectl backpressure plan
// --offered-load` and the oracle the storm's partial-load measurement is
// checked against, so it shares no code with the gate, the division or the
// sizing: it is a model of them, written from their documented behaviour.
//
// # Why a simulation
//
// It is a seeded discrete-event simulation, not Erlang arithmetic. Erlang's
// loss formula (B) is exact for one pool without a waiting room under
// Poisson arrivals, whatever the latency distribution, and so for a random
// balancer or pinned connections without a waiting room (each pod then sees
// Poisson arrivals of its own). It says nothing exact about what the
// operator actually runs: a waiting room bounded in time (a call leaves
// after MaxQueueWait) and in size, a round-robin balancer (each pod sees
// regular, not Poisson, arrivals), a reserve that only the overflow of full
// pods reaches (overflow traffic is burstier than Poisson; Hayward's and
// Wilkinson's approximations exist but not for waiting rooms). A
// simulation handles all of them with one small loop; its price is sampling
// noise, which the default run length keeps below half a point, and a
// run time of tens of milliseconds. The tests check it against Erlang's B
// and the M/M/s/K formula where those are exact.
//
// # What it models
//
//   - Arrivals are Poisson at Load × A / mean latency calls per second:
//     Load is the offered load as a fraction of what A permits serve.
//   - Latencies are lognormal with a mean and a coefficient of variation
//     (or exponential, for the closed-form checks), drawn per call.
//   - A balancer sends each call to a pod: RoundRobin (an ideal L4
//     balancer), Random (kube-proxy's iptables mode), or Pinned (long-lived
//     connections: pod p receives a fixed part w_p of the calls, the weights
//     lognormal with parameter Skew, drawn from the seed by Weights).
//   - Each pod holds a share of the A − R permits outside the reserve:
//     EqualShares (the exact division: floor and one more), or DemandShares
//     (idealised shares that follow demand: every pod's long-run offered
//     in-flight, w_p × Load × A, known exactly; max-min fairness capped at
//     that demand, the surplus split evenly, no pod below Floor). Measured
//     demand in a real cluster lags and is noisy, so DemandShares is what
//     demand-following approaches, not what it achieves.
//   - A call is admitted at once if its pod has a permit free and nobody
//     waits there. Otherwise it is lent one of the R reserve permits if one
//     is free. Otherwise it waits in its pod's FIFO waiting room, if there
//     is room, for at most MaxQueueWait, and under BorrowWaiting (the
//     library's rule) and BorrowInRoom it waits for a reserve permit at
//     the same time: a permit freed at its pod goes to the pod's first
//     waiter, a reserve permit going back goes to the call that has waited
//     longest, and the call runs on whichever comes first. Otherwise, under
//     BorrowWaiting, it waits at the permit server alone for at most
//     MaxQueueWait, and under BorrowInRoom it is shed. Under BorrowOnce a
//     call tries the reserve only on arrival.
//   - A pod's waiting room holds QueueCapacity(n) calls, n the permits
//     that can free up for its waiters: under RoomWithReserve (what the
//     operator publishes) a pod holding p ≥ 1 permits counts the reserve
//     too, n = p + R, since a waiter runs on whichever permit comes first;
//     a pod holding none has no waiting room, as its published plan gives
//     it none. Under RoomOwnPermits, n = p. The operator's QueueCapacity
//     is floor(n × MaxQueueWait / typical latency).
//   - Two rules the library has as options (gate.LendRules, off by
//     default) are modelled: GiveLoansBack (its ReturnEarly: a loan goes
//     back as soon as its pod has a permit free, the borrowed call going
//     on on it) and AskAfter (a call with a place in its room waits that
//     long before it asks the permit server). Two it does not have are
//     modelled to size what they would win: KeepLoans (a loan whose call
//     ends serves its own pod's next waiter, decided in the pod) and
//     HoldLoans (a loan with no waiter stays idle at its pod that long for
//     the pod's next call).
//   - OfferIdle is the library's Options.Offer (off by default): every pod
//     offers the permits it has free beyond OfferKeep, and a call that asks
//     the permit server when the reserve is lent out runs on a permit of
//     the pod with the most to spare. That is the first rule modelled that
//     lifts the admitted calls to one global gate's without lending most
//     of them: permits idle at one pod no longer shed another's calls.
//     The server's knowledge of what each pod has to spare is taken as
//     exact; the library's is a few milliseconds old.
//   - SmallestReserve looks no further than A − P: the operator cuts a
//     larger reserve so that every pod keeps a permit of its own.
//
// What it leaves out: the token bucket, deadlines (DeadlineTooShort), the
// borrow's round trip (a millisecond against latencies of hundreds), the
// lease margin (a permit returned to the reserve a little after its call
// ended), and the time demand-following takes to follow.
//
// # Reproducibility
//
// The same Scenario gives the same Result. Arrivals and latencies, routing,
// and the pinned weights come from three streams of the seed, so a scenario
// and its GlobalGate see the same calls with the same latencies (common
// random numbers: their ratio is less noisy than either figure).
package lossmodel
