package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
)

// TestOffersIdlePermits: with --reserve-offer, the proxy offers its gate's
// idle permits to the permit server, which lends one to another pod's
// borrow when the reserve has none; the permit counts in the gate's calls
// in flight until the borrower returns its lease.
func TestOffersIdlePermits(t *testing.T) {
	b, brokerAddr := startBroker(t, 0)
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(2).Deadline(2*time.Second).Obj())
	u := startUpstream(t, 0)
	cfg, err := parseConfig([]string{"--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate=" + testGate + ",upstream=" + u.URL,
		"--metrics-listen", "", "--probe-listen", "", "--reserve-address", brokerAddr, "--reserve-budget", "2s", "--reserve-offer"},
		func(k string) string { return map[string]string{"POD_NAME": "gateway-0"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src, _, err := cfg.Open(userAgent)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProxy(t.Context(), cfg, src, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the proxy stopped with: %v", err)
		}
	})
	eventually(t, 10*time.Second, "the proxy offers its permits", func() bool { return b.Stats()[0].OfferingPods == 1 })

	conn, err := grpc.NewClient(brokerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	rpc := reservev1.NewReserveClient(conn)
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer bcancel()
	// The proxy tells the server its spare as its plan takes effect: ask
	// until the server knows it.
	var lease *reservev1.Lease
	var ticket uint64
	eventually(t, 10*time.Second, "another pod's borrow is lent the proxy's idle permit", func() bool {
		ticket++
		resp, err := rpc.Borrow(bctx, &reservev1.BorrowRequest{Gate: testGate, Pod: "gateway-1", Hold: durationpb.New(time.Second), Ticket: ticket})
		if err != nil {
			t.Fatal(err)
		}
		lease = resp.GetLease()
		return lease != nil
	})
	g, err := p.rt.Gate(testGate)
	if err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.LentOutInFlight != 1 || st.InFlight != 1 {
		t.Errorf("gate stats: lent out %d, in flight %d; want the lent permit in both", st.LentOutInFlight, st.InFlight)
	}
	if _, err := rpc.Return(bctx, &reservev1.ReturnRequest{Gate: testGate, Incarnation: lease.GetIncarnation(), Id: lease.GetId()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the lent permit is back in the gate", func() bool { return g.Stats().InFlight == 0 })
}
