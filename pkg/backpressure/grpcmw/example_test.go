package grpcmw_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/grpcmw"
)

// echo is a service to gate.
type echo struct {
	testpb.UnimplementedTestServiceServer
}

func (echo) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

// serve starts srv on 127.0.0.1 and returns its address.
func serve(srv *grpc.Server) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String()
}

func ExampleUnaryServerInterceptor() {
	// Sixteen calls at once, and one a minute: the second call is rate
	// limited.
	g, err := gate.New("ledger", gate.Limits{Permits: 16, RatePerSecond: 1.0 / 60, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpcmw.UnaryServerInterceptor(grpcmw.Fixed(g))),
		grpc.ChainStreamInterceptor(grpcmw.StreamServerInterceptor(grpcmw.Fixed(g))),
	)
	testpb.RegisterTestServiceServer(srv, echo{})
	addr := serve(srv)
	defer srv.Stop()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	for range 2 {
		_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		st := status.Convert(err)
		fmt.Println(st.Code())
		// What a client can read from the rejection.
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				fmt.Println(d.GetReason(), d.GetDomain(), d.GetMetadata()["gate"], d.GetMetadata()["permits"])
			case *errdetails.RetryInfo:
				fmt.Println("retry in", d.GetRetryDelay().AsDuration().Round(time.Minute))
			}
		}
	}
	// Output:
	// OK
	// ResourceExhausted
	// RATE_LIMITED backpressure.dev ledger 16
	// retry in 1m0s
}

func ExampleUnaryClientInterceptor() {
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, echo{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	addr := serve(srv)
	defer srv.Stop()

	// Four calls at once to the downstream, and one a minute.
	g, err := gate.New("ledger", gate.Limits{Permits: 4, RatePerSecond: 1.0 / 60, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	// Gate the downstream's work, not its health checks.
	sel := func(_ context.Context, method string) (*gate.Gate, bool) {
		if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
			return nil, false // ungated, on purpose
		}
		return g, true
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcmw.UnaryClientInterceptor(sel)),
		grpc.WithChainStreamInterceptor(grpcmw.StreamClientInterceptor(sel)),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	for range 2 {
		_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		fmt.Println(status.Code(err))
		// A local rejection was never sent, and says so.
		if rej, ok := errors.AsType[*gate.Rejection](err); ok {
			fmt.Println("shed locally:", rej.Reason)
		}
	}
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("health:", resp.GetStatus(), err)
	// Output:
	// OK
	// ResourceExhausted
	// shed locally: rate_limited
	// health: SERVING <nil>
}
