// Package reserve borrows, for this pod's gates, permits of a downstream's
// reserve: the part of the contract that the operator does not divide over
// pods but pools in a permit server (backpressure-broker), which lends it
// one call at a time over gRPC (the protocol in module api/reserve).
//
// A Client's Lender for a gate is a gate.Lender: set on the gate
// (gate.Gate.SetLender, or Options.Reserve of package backpressure, which
// does it for every gate), it is asked only when the pod's own permits are
// all taken, and only for calls with a deadline. The gate's documentation
// says when: beside the wait, for a call that waits in its waiting room;
// and alone, as long as the room would have kept it, for a call the room
// cannot take.
//
// # Never worse than the pod's own share
//
// A borrow gets the time it may wait for a permit (the call's wait, or 0
// when the gate has no waiting room) and Options.Budget (1ms by default)
// for the round trip: past it, or when the server is unreachable, the call
// goes on as if there were no reserve. Only a gate without a waiting room
// answers at once, so the budget bounds what a slow server costs its
// calls; a call that may wait anyway is not shed for a round trip that
// misses it. After the server says it is learning (restarted,
// waiting out its earlier leases) or does not know the gate, the Lender
// does not ask again for the time it said, or a second; after the server
// was unreachable, for Options.Backoff. Every outcome is counted by the
// gate (backpressure_gate_borrows_total).
//
// # Leases
//
// A lent permit is held for the call and returned when the call ends, in
// the background: Return never makes the call wait for a round trip. The
// lease the server grants lasts the call's remaining time plus the
// server's margin from when it was granted, so a Return that is lost costs
// the reserve that permit until then, and nothing more. The Lender asks
// for the call's remaining time: the call ends by its deadline, and so
// within the lease, whatever the clocks say.
//
// Every borrow carries a random ticket. A Lend that gives up on its answer
// (the budget ran out, or the call's context ended while it waited) cannot
// tell whether the server lent meanwhile, its answer on the way, so it
// returns the borrow by its ticket in the background: the server ends
// such a lease at once, rather than keeping the permit from every pod
// until the lease's time is up.
//
// # Offering idle permits
//
// Client.Offer offers the permits a gate of this pod has idle (a
// gate.Offerer) to the server, over one stream per gate: when a borrow
// finds the reserve lent out, the server asks an offering pod for one of
// its own permits and lends that to the borrower as a lease. The pod holds
// such a permit in its gate, where it counts like a call of its own, until
// the server releases it or the ask's ttl has passed since the ask
// arrived; a broken stream or a restarted server costs the pod that
// permit for at most the ttl, and Offer opens a new stream after
// Options.Backoff. The pod tells the server its spare permits in every
// message and whenever they change (read every Options.SpareInterval).
//
// A Client uses one connection; every Return goes back on it. Behind a
// Service of several permit servers, connect so that one connection
// reaches one server (the default pick_first over a ClusterIP Service
// does): a Return that reaches another server is refused, and the permit
// comes back only when its lease ends.
package reserve
