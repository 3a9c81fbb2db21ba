// Package broker is the permit server: it holds a slice of the reserve of
// one or more gates (the permits of a contract that are not divided over
// pods) and lends them one call at a time to pods whose own share is full.
// cmd/backpressure-broker serves it over gRPC (api/reserve/v1).
//
// # Leases
//
// Borrow lends one permit of a gate for one call: a lease that lasts the
// call's hold (the time left before its deadline) plus Options.Margin, from
// when it is granted. The caller returns it when its call ends (Return);
// a lease that is not returned ends on its own, and its permit is free
// again. So a lost Return, a crashed pod or a network partition costs the
// reserve one permit for at most the lease, and never lets more calls run
// than the reserve holds: the caller must be done with a lease before its
// ttl has passed since it asked. A hold whose lease would exceed
// Options.MaxLease is refused.
//
// A borrow may carry a ticket, the borrower's random name for it. A
// borrower that gave up on the answer cannot tell whether a lease was
// granted meanwhile; Withdraw with the ticket ends that lease, withdraws
// the borrow while it waits (it is refused REASON_WITHDRAWN), or, when
// it comes first, makes the borrow refused on arrival (the ticket is kept
// for Options.MaxLease, at most 4,096 per gate). A borrow whose caller
// has already gone when the server takes it up is not lent.
//
// A borrow that finds no permit free may wait for one (Request.Wait, at
// most Options.MaxWait): the waiting borrows of a gate are served first
// come, first served as permits come back. A caller waits only while its
// call would wait in its own pod's waiting room anyway, so the wait costs
// it nothing; internal/lossmodel shows that a reserve lent this way admits
// more calls than one tried only on arrival.
//
// # Offers
//
// A borrow that finds the reserve lent out may still be served while
// other pods of the gate have permits of their own idle. Each pod may
// offer them (Offer, the Offer stream of api/reserve/v1): it names its
// gate and itself, and says how many permits it could lend (its spare:
// free permits beyond those it keeps, 0 while a call of its own waits),
// in every answer and whenever that changes. When a borrow finds no
// reserve permit free, the server asks the gate's offering pods other
// than the borrower's own, most spare first (less the asks each has not
// answered yet), one at a time, at most Options.OfferAsks of them, each
// for at most Options.OfferAskTimeout and all within the borrow's
// context. The first pod that grants lends one of its own permits,
// acquired in its gate, and the borrower gets it as an ordinary lease of
// hold + margin (the ttl the ask carried). When none grants, the borrow
// waits for the reserve as any other; a borrow waiting for the reserve is
// not served by later offers. Nothing is asked while learning.
//
// The lease ends as any other: Return and Withdraw end it and tell the
// pod to release the permit; at its ttl the server only forgets it. A pod
// holds a permit it lent until the release, or until the ask's ttl has
// passed since the ask arrived, whichever comes first. That is safe: the
// borrower must be done with a lease before its ttl has passed since it
// sent its borrow, which was before the server asked the pod. So a lost
// release, a broken stream or a restarted server costs the pod that
// permit for at most the ttl, and the pod never releases one early
// because its stream broke. When a stream ends the pod is forgotten: its
// asks still waited on are given up (their borrows ask the next pod) and
// its lent permits stay with their borrowers. A grant that arrives after
// its ask was given up (the ask timeout, the borrow's end, its
// withdrawal) is released at once, since nobody will return it.
//
// A lent permit counts in its pod's gate as the pod's own calls do, so a
// shrink of the pod's share waits for it; an offered lease is not a lease
// of the reserve and is never counted against the capacity, which
// SetCapacity does not touch. "Permits enforceable by pods + reserve
// leases outstanding ≤ the contract" is untouched.
//
// A pod's offers reach only the replica its stream is connected to: with
// several replicas of the server, a borrower whose borrow goes to another
// replica does not see them.
//
// # Capacity
//
// SetCapacity puts a gate's capacity in force, in the way the gate resizes
// its limit: a larger capacity serves waiting borrows at once; a smaller
// one revokes no lease and lends nothing until the leases outstanding are
// below it (shrinking by attrition). A lease is granted only while the
// leases outstanding are below the capacity in force at that instant.
//
// # Restarts (learning)
//
// A Broker keeps its leases in memory. A new Broker cannot know what an
// earlier run of the server lent, and those leases may still be in use, so
// it lends nothing for Options.MaxLease after it starts: by then every
// lease any earlier run granted has ended. This is Doorman's learning mode
// (go/server/doorman: a new master serves from the clients' reported
// holdings for one lease length before it trusts its own arithmetic) in
// its simplest form: a borrower reports nothing, so the server lends
// nothing. Borrowers are refused with REASON_LEARNING and the time left,
// and go on with their own shares meanwhile. Leases carry the run's
// incarnation, so a restarted server never takes back, and so never
// double-counts, a permit an earlier run lent.
//
// # What the designs it follows taught
//
// Sentinel's cluster flow control asks its token server for every call,
// and when the server fails the rule falls back to the local threshold or,
// if so configured, lets every call pass; its concurrency tokens are swept
// by a task that removes a token held longer than the resource timeout
// even if the call still runs, and a restarted token server starts from
// zero while clients still hold tokens. Here a pod asks only when its own
// share is full, so most calls never reach the server; the fallback is
// always the pod's own share (the division stays within the contract
// without the server); a lease ends by the caller's own deadline, never
// while its call may run; and a restarted server waits its leases out.
// Doorman's server lends capacity for a lease length and learns after a
// master change; its leases are rates held for minutes, not permits held
// per call, and it trusts what clients say they hold. Here leases are per
// call and nothing a client says enlarges what it gets.
//
// # Demand
//
// Every borrow is counted per gate and pod (granted, refused): a pod that
// borrows often needs a larger share, which is the signal shares that
// follow demand read (Borrowers, and the backpressure_broker_borrows_total
// metric); a lease lent from an offer is a grant like any other. A pod's
// counts are forgotten Options.PodRetention after its last borrow, so
// that pods that come and go do not grow the server's memory.
package broker
