package grpcmw

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

// Behaviours of the test service, named by the body of a request's payload.
const (
	behaveOK    = ""
	behaveHold  = "hold"  // wait for release or the end of the call
	behaveSleep = "sleep" // take a millisecond
	behaveError = "error" // fail with codes.Aborted
	behavePanic = "panic" // panic with "boom"
	behaveEnd   = "end"   // (streams) end the stream successfully
)

// service is a grpc.testing.TestService whose calls count how many run at
// once and behave as their payload says.
type service struct {
	testpb.UnimplementedTestServiceServer
	calls   atomic.Int64
	running gatetest.Concurrency
	release chan struct{}
}

func newService() *service { return &service{release: make(chan struct{})} }

func (s *service) behave(ctx context.Context, p *testpb.Payload) error {
	switch string(p.GetBody()) {
	case behaveHold:
		select {
		case <-s.release:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	case behaveSleep:
		time.Sleep(time.Millisecond)
	case behaveError:
		return status.Error(codes.Aborted, "told to fail")
	case behavePanic:
		panic("boom")
	}
	return nil
}

func (s *service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.calls.Add(1)
	s.running.Enter()
	defer s.running.Exit()
	if err := s.behave(ctx, req.GetPayload()); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

// FullDuplexCall answers every message with one response, after behaving as
// the message says, until the client closes its side or sends "end".
func (s *service) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	s.calls.Add(1)
	s.running.Enter()
	defer s.running.Exit()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if string(req.GetPayload().GetBody()) == behaveEnd {
			return nil
		}
		if err := s.behave(stream.Context(), req.GetPayload()); err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// StreamingOutputCall sends one response per response parameter.
func (s *service) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	s.calls.Add(1)
	s.running.Enter()
	defer s.running.Exit()
	if err := s.behave(stream.Context(), req.GetPayload()); err != nil {
		return err
	}
	for range req.GetResponseParameters() {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
	return nil
}

// StreamingInputCall counts the bytes of the payloads it receives.
func (s *service) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	s.calls.Add(1)
	s.running.Enter()
	defer s.running.Exit()
	var size int32
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: size})
		}
		if err != nil {
			return err
		}
		size += int32(len(req.GetPayload().GetBody()))
	}
}

// serve starts a gRPC server for svc on 127.0.0.1 and returns its address.
func serve(t *testing.T, svc *service, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial returns a client of the test service at addr.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) testServiceClient {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// testServiceClient is the generated client of the test service.
type testServiceClient = testpb.TestServiceClient

func payload(behaviour string) *testpb.Payload { return &testpb.Payload{Body: []byte(behaviour)} }

func newStreamRequest(behaviour string) *testpb.StreamingOutputCallRequest {
	return &testpb.StreamingOutputCallRequest{Payload: payload(behaviour)}
}

func unary(ctx context.Context, c testServiceClient, behaviour string) error {
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: payload(behaviour)})
	return err
}

// bidi sends one message that behaves as told, reads its response, and then
// closes its side and reads the end of the stream. It returns the error the
// stream ended with, nil for a clean end.
func bidi(ctx context.Context, c testServiceClient, behaviour string) error {
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(newStreamRequest(behaviour)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// recoverer stands for the panic recovery an application puts outside the
// gate: it turns a handler's panic into codes.Internal and reports the value
// and the gate's in-flight count at that moment.
type recoverer struct {
	g      *gate.Gate
	panics chan recovered
}

type recovered struct {
	Value    any
	InFlight int
}

func newRecoverer(g *gate.Gate) *recoverer {
	return &recoverer{g: g, panics: make(chan recovered, 16)}
}

func (r *recoverer) recover(err *error) {
	if v := recover(); v != nil {
		r.panics <- recovered{v, r.g.Stats().InFlight}
		*err = status.Errorf(codes.Internal, "panic: %v", v)
	}
}

func (r *recoverer) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
	defer r.recover(&err)
	return handler(ctx, req)
}

func (r *recoverer) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer r.recover(&err)
	return handler(srv, ss)
}
