package broker_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
)

// TestOfferOverGRPC: over real gRPC on 127.0.0.1, a pod's Offer stream is
// asked for a permit when a borrow finds the reserve lent out, its grant
// is the borrower's lease, and the lease's return releases the permit on
// the stream; malformed and unknown offers end with a status naming the
// field or the gate; the pod's end of the stream forgets it, and a server
// shutting down ends the stream Unavailable.
func TestOfferOverGRPC(t *testing.T) {
	b, _ := offerBroker(t, 0, 10*time.Second)
	c, _ := serve(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	refused := func(first *reservev1.OfferMessage, code codes.Code, says string) {
		t.Helper()
		stream, err := c.Offer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(first); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
			t.Errorf("offer %v: %v, want %s saying %q", first, err, code, says)
		}
	}
	refused(&reservev1.OfferMessage{Gate: "g"}, codes.InvalidArgument, "pod: must not be empty")
	refused(&reservev1.OfferMessage{Pod: "p"}, codes.InvalidArgument, "gate: must not be empty")
	refused(&reservev1.OfferMessage{Gate: "other", Pod: "p"}, codes.NotFound, `gate: no reserve for gate "other" here`)

	stream, err := c.Offer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reservev1.OfferMessage{Gate: "g", Pod: "lender", Spare: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod offers", func() bool { return stats(t, b).OfferingPods == 1 })

	type answer struct {
		resp *reservev1.BorrowResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := c.Borrow(ctx, &reservev1.BorrowRequest{Gate: "g", Pod: "borrower", Hold: durationpb.New(time.Second)})
		done <- answer{resp, err}
	}()
	ask, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ask.GetAsk() == 0 || ask.GetTtl().AsDuration() != time.Second+margin {
		t.Fatalf("the pod was sent %v, want an ask with the lease's ttl", ask)
	}
	if err := stream.Send(&reservev1.OfferMessage{Ask: ask.GetAsk(), Granted: true, Spare: 1}); err != nil {
		t.Fatal(err)
	}
	var got answer
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("no answer to the borrow")
	}
	l := got.resp.GetLease()
	if got.err != nil || l == nil || l.GetTtl().AsDuration() != time.Second+margin {
		t.Fatalf("borrow with the pod granting: %v, %v, want a lease", got.resp, got.err)
	}
	ret, err := c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: l.GetIncarnation(), Id: l.GetId()})
	if err != nil || !ret.GetReturned() {
		t.Fatalf("return of the offered lease: %v, %v", ret, err)
	}
	release, err := stream.Recv()
	if err != nil || release.GetRelease() != ask.GetAsk() || release.GetAsk() != 0 {
		t.Fatalf("the pod was sent %v, %v after the return, want the release of ask %d", release, err, ask.GetAsk())
	}

	// The pod's end of the stream: it is forgotten, and the stream ends
	// cleanly.
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("the stream after the pod's end: %v, want io.EOF", err)
	}
	waitFor(t, "the pod is forgotten", func() bool { return stats(t, b).OfferingPods == 0 })

	// A server shutting down ends the streams open.
	stream, err = c.Offer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reservev1.OfferMessage{Gate: "g", Pod: "lender", Spare: 2}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod offers again", func() bool { return stats(t, b).OfferingPods == 1 })
	b.CloseOffers()
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the stream of a server shutting down: %v, want Unavailable", err)
	}
}
