package reserve

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Flags are the part of a program's command line that says whether and
// how the pod borrows from the permit server, and whether it offers its
// idle permits to it: --reserve-address, --reserve-budget,
// --reserve-return-early, --reserve-ask-after, --reserve-offer and
// --reserve-offer-keep, the flags of the sidecar proxy and of the example
// gateway.
//
//	var rf reserve.Flags
//	rf.Register(flag.CommandLine)
//	flag.Parse()
//	if err := errors.Join(rf.Check(pod)...); err != nil { ... }
//	client, conn, err := rf.Dial(pod) // nil without --reserve-address
//	opts := backpressure.Options{Lender: client.Lender, LendRules: rf.LendRules}
//	if rf.Offer {
//		opts.Offer, opts.OfferKeep = client.OfferFunc(ctx), rf.OfferKeep
//	}
type Flags struct {
	// Address is the permit server's host:port; "" borrows nothing.
	Address string
	// Budget is Options.Budget.
	Budget time.Duration
	// LendRules are the rules the gates borrow by.
	LendRules gate.LendRules
	// Offer says to offer the gates' idle permits to the permit server
	// (backpressure.Options.Offer, with Client.OfferFunc).
	Offer bool
	// OfferKeep is backpressure.Options.OfferKeep: the permits each gate
	// keeps for its own calls when it offers.
	OfferKeep int
}

// Register defines the flags on fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Address, "reserve-address", "", "the permit server (backpressure-broker) to borrow a permit of the downstream's reserve from when the pod's own share is full, host:port (empty: no borrowing)")
	fs.DurationVar(&f.Budget, "reserve-budget", DefaultBudget, "longest a borrow's round trip may take beyond its wait for a permit before the call goes on without it")
	fs.BoolVar(&f.LendRules.ReturnEarly, "reserve-return-early", false, "return a borrowed permit as soon as one of the pod's own is free for its call, rather than when the call ends: the same reserve admits more calls, and more calls borrow")
	fs.DurationVar(&f.LendRules.AskAfter, "reserve-ask-after", 0, "how long a call with a place in the waiting room waits for one of the pod's own permits before it asks the permit server too (0: at once): fewer calls borrow")
	fs.BoolVar(&f.Offer, "reserve-offer", false, "offer this pod's idle permits to the permit server, which lends them to other pods when the reserve is lent out (needs --reserve-address)")
	fs.IntVar(&f.OfferKeep, "reserve-offer-keep", 0, "permits each gate keeps for its own calls when it offers: it lends only while more are free")
}

// Check returns the mistakes in the flags, each naming its flag. pod is
// the pod's name ($POD_NAME), which the permit server counts borrows by.
func (f *Flags) Check(pod string) []error {
	var errs []error
	if f.Budget <= 0 {
		errs = append(errs, fmt.Errorf("--reserve-budget %v must be positive", f.Budget))
	}
	if f.LendRules.AskAfter < 0 {
		errs = append(errs, fmt.Errorf("--reserve-ask-after %v must not be negative", f.LendRules.AskAfter))
	}
	if f.OfferKeep < 0 {
		errs = append(errs, fmt.Errorf("--reserve-offer-keep %d must not be negative", f.OfferKeep))
	}
	if f.Address == "" {
		if f.Offer {
			errs = append(errs, errors.New("--reserve-offer needs --reserve-address, the permit server to offer to"))
		}
		return errs
	}
	if _, _, err := net.SplitHostPort(f.Address); err != nil {
		errs = append(errs, fmt.Errorf("--reserve-address %q is not host:port", f.Address))
	}
	if pod == "" {
		errs = append(errs, errors.New("--reserve-address needs $POD_NAME, the pod's name, which the permit server counts borrows by"))
	}
	return errs
}

// Dial returns a Client of the permit server of --reserve-address, as pod,
// and its connection, which the caller closes; without --reserve-address,
// none. grpc.NewClient connects lazily, so an unreachable server only
// makes borrows fail (the calls go on with the pod's own share) and offers
// wait for it.
func (f *Flags) Dial(pod string) (*Client, *grpc.ClientConn, error) {
	if f.Address == "" {
		return nil, nil, nil
	}
	conn, err := grpc.NewClient(f.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("--reserve-address: %w", err)
	}
	c, err := New(conn, Options{Pod: pod, Budget: f.Budget})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("--reserve-address: %w", err)
	}
	return c, conn, nil
}
