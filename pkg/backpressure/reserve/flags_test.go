package reserve_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

func parseFlags(t *testing.T, args ...string) reserve.Flags {
	t.Helper()
	var f reserve.Flags
	fs := flag.NewFlagSet("app", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFlagsDefaults(t *testing.T) {
	f := parseFlags(t)
	if want := (reserve.Flags{Budget: reserve.DefaultBudget}); f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	if errs := f.Check(""); len(errs) != 0 {
		t.Errorf("Check of the defaults: %v", errs)
	}
}

func TestFlagsEvery(t *testing.T) {
	f := parseFlags(t, "--reserve-address", "broker:9443", "--reserve-budget", "5ms", "--reserve-return-early",
		"--reserve-ask-after", "2ms", "--reserve-offer", "--reserve-offer-keep", "3")
	want := reserve.Flags{
		Address: "broker:9443", Budget: 5 * time.Millisecond,
		LendRules: gate.LendRules{ReturnEarly: true, AskAfter: 2 * time.Millisecond},
		Offer:     true, OfferKeep: 3,
	}
	if f != want {
		t.Errorf("flags %+v, want %+v", f, want)
	}
	if errs := f.Check("pod-a"); len(errs) != 0 {
		t.Errorf("Check: %v", errs)
	}
}

func TestFlagsCheckNamesTheMistake(t *testing.T) {
	for _, tt := range []struct {
		args []string
		pod  string
		want string
	}{
		{[]string{"--reserve-budget", "0s", "--reserve-ask-after", "-1ms", "--reserve-offer-keep", "-1"}, "",
			"--reserve-budget 0s must be positive; --reserve-ask-after -1ms must not be negative; --reserve-offer-keep -1 must not be negative"},
		{[]string{"--reserve-offer"}, "p", "--reserve-offer needs --reserve-address, the permit server to offer to"},
		{[]string{"--reserve-address", "broker"}, "p", `--reserve-address "broker" is not host:port`},
		{[]string{"--reserve-address", "broker:9443"}, "", "--reserve-address needs $POD_NAME, the pod's name, which the permit server counts borrows by"},
	} {
		f := parseFlags(t, tt.args...)
		got := errors.Join(f.Check(tt.pod)...)
		if got == nil || strings.ReplaceAll(got.Error(), "\n", "; ") != tt.want {
			t.Errorf("Check of %q = %v, want %q", tt.args, got, tt.want)
		}
	}
}

// Dial makes no Client without --reserve-address, and one that borrows
// from the server of the flag with it.
func TestFlagsDial(t *testing.T) {
	f := parseFlags(t)
	if c, conn, err := f.Dial("p"); c != nil || conn != nil || err != nil {
		t.Errorf("Dial without an address = %v, %v, %v; want nothing", c, conn, err)
	}

	s := &server{permits: 1}
	addr := serve(t, s)
	f = parseFlags(t, "--reserve-address", addr, "--reserve-budget", "2s")
	c, conn, err := f.Dial("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	loan, err := c.Lender("g").Lend(context.Background(), time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	loan.Return()
	s.mu.Lock()
	req := s.last
	s.mu.Unlock()
	if req.GetPod() != "pod-a" || req.GetGate() != "g" {
		t.Errorf("the server was asked %v, want pod-a's borrow for g", req)
	}
	eventually(t, "the loan is back", func() bool { return s.returned.Load() == 1 })
}

// OfferFunc runs Offer for a gate until its stop, which ends the stream.
func TestOfferFunc(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	stop := c.OfferFunc(context.Background())("g", newOfferer(2))
	conn := s.accept(t)
	if conn.first.GetGate() != "g" || conn.first.GetSpare() != 2 {
		t.Errorf("first message %v, want gate g, spare 2", conn.first)
	}
	stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, open := <-conn.msgs:
			if !open {
				return // the stream ended
			}
		case <-deadline:
			t.Fatal("the stream did not end within 10s of stop")
		}
	}
}
