package broker

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
)

// Service serves a Broker over gRPC as reservev1.ReserveServer.
type Service struct {
	reservev1.UnimplementedReserveServer
	b *Broker
}

var _ reservev1.ReserveServer = (*Service)(nil)

// NewService returns the gRPC service of b.
func NewService(b *Broker) *Service { return &Service{b: b} }

// Borrow lends one permit or refuses; a malformed request is
// InvalidArgument, and a caller that went away while its borrow waited
// gets its context's status.
func (s *Service) Borrow(ctx context.Context, req *reservev1.BorrowRequest) (*reservev1.BorrowResponse, error) {
	l, err := s.b.Borrow(ctx, Request{
		Gate:   req.GetGate(),
		Pod:    req.GetPod(),
		Hold:   req.GetHold().AsDuration(),
		Wait:   req.GetWait().AsDuration(),
		Ticket: req.GetTicket(),
	})
	var refusal *Refusal
	switch {
	case err == nil:
		return &reservev1.BorrowResponse{Outcome: &reservev1.BorrowResponse_Lease{Lease: &reservev1.Lease{
			Incarnation: l.Incarnation, Id: l.ID, Ttl: durationpb.New(l.TTL),
		}}}, nil
	case errors.As(err, &refusal):
		r := &reservev1.Refusal{Reason: refusal.Reason, Message: refusal.Message}
		if refusal.RetryAfter > 0 {
			r.RetryAfter = durationpb.New(refusal.RetryAfter)
		}
		return &reservev1.BorrowResponse{Outcome: &reservev1.BorrowResponse_Refusal{Refusal: r}}, nil
	case errors.Is(err, ErrInvalid):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	default:
		return nil, status.FromContextError(err).Err()
	}
}

// Return ends a lease, or, with no id, takes back the borrow with the
// request's ticket.
func (s *Service) Return(_ context.Context, req *reservev1.ReturnRequest) (*reservev1.ReturnResponse, error) {
	if req.GetId() == 0 && req.GetTicket() != 0 {
		return &reservev1.ReturnResponse{Returned: s.b.Withdraw(req.GetGate(), req.GetTicket())}, nil
	}
	return &reservev1.ReturnResponse{Returned: s.b.Return(req.GetGate(), req.GetIncarnation(), req.GetId())}, nil
}

// Offer serves one pod's Offer stream: its first message names the gate
// and the pod (an unknown gate is NotFound, a missing name
// InvalidArgument); the server then sends it asks and releases, and reads
// its answers and spare, until either side ends the stream, when the pod
// is forgotten. A server shutting down (Broker.CloseOffers) ends the
// stream Unavailable, and the pod offers to another replica.
func (s *Service) Offer(stream reservev1.Reserve_OfferServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	o, err := s.b.Offer(first.GetGate(), first.GetPod(), int(first.GetSpare()))
	switch {
	case errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrUnknownGate):
		return status.Error(codes.NotFound, err.Error())
	case err != nil:
		return status.Error(codes.Unavailable, err.Error())
	}
	defer o.Close()
	// This goroutine reads the pod's messages; the handler's sends the
	// server's. The reader closes the offering when the pod's side ends,
	// which ends Next below; after the handler returns, the stream's end
	// ends the reader's Recv.
	var podEnded atomic.Bool
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				podEnded.Store(true)
				o.Close()
				return
			}
			if id := m.GetAsk(); id != 0 {
				o.Answer(id, m.GetGranted(), int(m.GetSpare()))
			} else {
				o.SetSpare(int(m.GetSpare()))
			}
		}
	}()
	for {
		m, err := o.Next(stream.Context())
		switch {
		case errors.Is(err, ErrOfferEnded) && podEnded.Load():
			return nil
		case errors.Is(err, ErrOfferEnded):
			return status.Error(codes.Unavailable, "broker: the server is shutting down: offer to another replica")
		case err != nil:
			return status.FromContextError(err).Err()
		}
		msg := &reservev1.OfferAsk{Ask: m.Ask, Release: m.Release}
		if m.Ask != 0 {
			msg.Ttl = durationpb.New(m.TTL)
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
	}
}
