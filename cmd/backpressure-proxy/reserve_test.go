package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// startBroker serves a permit server lending permits of testGate, past its
// learning time, on a free port of 127.0.0.1 until the test ends.
func startBroker(t *testing.T, permits int) (*broker.Broker, string) {
	t.Helper()
	clock := clocktesting.NewFakePassiveClock(time.Now())
	b, err := broker.New(broker.Options{MaxLease: time.Minute, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetCapacity(testGate, permits); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(b.LearningUntil())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reservev1.RegisterReserveServer(srv, broker.NewService(b))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return b, lis.Addr().String()
}

// TestBorrowsFromThePermitServer: with --reserve-address, a call that finds
// the pod's share full runs on a permit the permit server lends, and the
// permit goes back when the call ends; with the reserve empty too, the call
// is refused as before.
func TestBorrowsFromThePermitServer(t *testing.T) {
	b, brokerAddr := startBroker(t, 1)
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Deadline(2*time.Second).Obj())
	u := startUpstream(t, 0)
	env := map[string]string{"POD_NAME": "gateway-0"}
	cfg, err := parseConfig([]string{"--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate=" + testGate + ",upstream=" + u.URL,
		"--metrics-listen", "127.0.0.1:0", "--reserve-address", brokerAddr, "--reserve-budget", "2s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src, _, err := cfg.Open(userAgent)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logFile.Close() })
	p, err := newProxy(t.Context(), cfg, src, nil, slog.New(slog.NewJSONHandler(logFile, nil)))
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
	running := &running{proxy: p}
	route := "http://" + p.addr(testGate)

	codes := hold(t, u, route, 2) // one on the pod's share, one lent
	if code, body, _ := get(t, route+"/echo"); code != 503 || strings.TrimSpace(body) != "queue_full" {
		t.Errorf("with the share and the reserve taken: %d %q, want 503 queue_full", code, body)
	}
	u.releaseAll()
	for range 2 {
		if code := <-codes; code != 200 {
			t.Errorf("a held call ended with %d", code)
		}
	}
	eventually(t, 10*time.Second, "the lent permit is back", func() bool { return b.Stats()[0].Leases == 0 && b.Stats()[0].Returned == 1 })
	if got := b.Borrowers(); len(got) != 1 || got[0].Pod != "gateway-0" || got[0].Granted != 1 || got[0].Refused != 1 {
		t.Errorf("the permit server's borrowers: %+v, want gateway-0 granted 1, refused 1", got)
	}
	if v, _ := running.metric(t, `backpressure_gate_borrows_total{gate="`+testGate+`",result="borrowed"}`); v != "1" {
		t.Errorf("backpressure_gate_borrows_total borrowed = %q, want 1", v)
	}
}

func TestReserveFlags(t *testing.T) {
	cfg, err := parseConfig([]string{"--plan-dir", t.TempDir(), "--route", "listen=127.0.0.1:0,gate=g,upstream=http://127.0.0.1:1",
		"--reserve-address", "broker:9443", "--reserve-return-early", "--reserve-ask-after", "5ms"}, func(string) string { return "p" }, io.Discard)
	if want := (gate.LendRules{ReturnEarly: true, AskAfter: 5 * time.Millisecond}); err != nil || cfg.lendRules != want {
		t.Errorf("the lending rules' flags: %+v, %v; want %+v", cfg.lendRules, err, want)
	}

	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--reserve-address", "broker:9443"}, nil, "--reserve-address needs $POD_NAME"},
		{[]string{"--reserve-address", "broker"}, map[string]string{"POD_NAME": "p"}, `--reserve-address "broker" is not host:port`},
		{[]string{"--reserve-address", "broker:9443", "--reserve-budget", "0s"}, map[string]string{"POD_NAME": "p"}, "--reserve-budget 0s must be positive"},
		{[]string{"--reserve-address", "broker:9443", "--reserve-ask-after", "-1ms"}, map[string]string{"POD_NAME": "p"}, "--reserve-ask-after -1ms must not be negative"},
	} {
		args := append([]string{"--plan-dir", t.TempDir(), "--route", "listen=127.0.0.1:0,gate=g,upstream=http://127.0.0.1:1"}, c.args...)
		_, err := parseConfig(args, func(k string) string { return c.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
