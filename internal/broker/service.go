package broker

import (
	"context"
	"errors"

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
