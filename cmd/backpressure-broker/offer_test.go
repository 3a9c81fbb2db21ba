package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// TestOfferFlags: --offer-ask-timeout and --offer-asks, their defaults and
// the errors that name them.
func TestOfferFlags(t *testing.T) {
	cfg, err := parseConfig([]string{"--capacity", "g=1"}, noEnv, io.Discard)
	if err != nil || cfg.offerAskTimeout != broker.DefaultOfferAskTimeout || cfg.offerAsks != broker.DefaultOfferAsks {
		t.Errorf("defaults: %+v, %v, want an ask timeout of %s and %d asks", cfg, err, broker.DefaultOfferAskTimeout, broker.DefaultOfferAsks)
	}
	cfg, err = parseConfig([]string{"--capacity", "g=1", "--offer-ask-timeout", "2ms", "--offer-asks", "5"}, noEnv, io.Discard)
	if err != nil || cfg.offerAskTimeout != 2*time.Millisecond || cfg.offerAsks != 5 {
		t.Errorf("parsed %+v, %v, want an ask timeout of 2ms and 5 asks", cfg, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--offer-ask-timeout", "0s"}, "--offer-ask-timeout: must be positive, got 0s"},
		{[]string{"--offer-ask-timeout", "-1ms"}, "--offer-ask-timeout: must be positive, got -1ms"},
		{[]string{"--offer-ask-timeout", "soon"}, `invalid value "soon" for flag -offer-ask-timeout`},
		{[]string{"--offer-asks", "0"}, "--offer-asks: must be at least 1, got 0"},
		{[]string{"--offer-asks", "three"}, `invalid value "three" for flag -offer-asks`},
	} {
		args := append([]string{"--capacity", "g=1"}, c.args...)
		if _, err := parseConfig(args, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestABorrowServedByAnOffer runs the broker in-process on free ports of
// 127.0.0.1 with an empty reserve: a pod offers over its Offer stream, and
// another pod's borrow is lent that pod's permit, whose return releases
// it at the pod. A shutdown ends the stream at once (Unavailable) rather
// than waiting for it until --shutdown-timeout.
func TestABorrowServedByAnOffer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, stop, done := serveInProcess(ctx, t, "--capacity", "g=0", "--max-lease", "300ms", "--lease-margin", "10ms",
		"--offer-ask-timeout", "10s", "--shutdown-timeout", "50s", "--listen-address", "127.0.0.1:0", "--metrics-listen", "")
	defer stop()
	c := reservev1.NewReserveClient(dial(t, s.addr()))
	stream, err := c.Offer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reservev1.OfferMessage{Gate: "g", Pod: "lender", Spare: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the pod offers", func() bool { return s.broker.Stats()[0].OfferingPods == 1 })
	waitUntil(t, "the server has learned", func() bool { return !time.Now().Before(s.broker.LearningUntil()) })

	type answer struct {
		resp *reservev1.BorrowResponse
		err  error
	}
	borrowed := make(chan answer, 1)
	go func() {
		resp, err := c.Borrow(ctx, &reservev1.BorrowRequest{Gate: "g", Pod: "borrower", Hold: durationpb.New(100 * time.Millisecond)})
		borrowed <- answer{resp, err}
	}()
	ask, err := stream.Recv()
	if err != nil || ask.GetAsk() == 0 || ask.GetTtl().AsDuration() != 110*time.Millisecond {
		t.Fatalf("the pod was sent %v, %v, want an ask for a lease of hold + margin", ask, err)
	}
	if err := stream.Send(&reservev1.OfferMessage{Ask: ask.GetAsk(), Granted: true}); err != nil {
		t.Fatal(err)
	}
	got := <-borrowed
	l := got.resp.GetLease()
	if got.err != nil || l == nil {
		t.Fatalf("a borrow with the reserve empty and a pod offering: %v, %v, want the pod's permit", got.resp, got.err)
	}
	if st := s.broker.Stats()[0]; st.Leases != 0 || st.OfferedLeases != 1 {
		t.Errorf("stats %+v: want the lease offered, none of the reserve", st)
	}
	ret, err := c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: l.GetIncarnation(), Id: l.GetId()})
	if err != nil || !ret.GetReturned() {
		t.Fatalf("return: %v, %v", ret, err)
	}
	if m, err := stream.Recv(); err != nil || m.GetRelease() != ask.GetAsk() {
		t.Fatalf("the pod was sent %v, %v after the return, want the release of ask %d", m, err, ask.GetAsk())
	}

	stopped := time.Now()
	stop()
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the Offer stream of a server shutting down: %v, want Unavailable", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop within 30s with an Offer stream open")
	}
	if took := time.Since(stopped); took > 10*time.Second {
		t.Errorf("the shutdown took %s with an Offer stream open", took)
	}
}
