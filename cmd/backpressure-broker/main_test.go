package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

// noEnv is an environment without POD_NAME or POD_NAMESPACE.
func noEnv(string) string { return "" }

func TestConfig(t *testing.T) {
	cfg, err := parseConfig([]string{"--capacity", "a=3", "--capacity", "b=0", "--max-lease", "2s"}, noEnv, io.Discard)
	if err != nil || cfg.capacity["a"] != 3 || cfg.capacity["b"] != 0 || cfg.maxLease != 2*time.Second {
		t.Errorf("parsed %+v, %v", cfg, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--gate: name at least one quota whose slice the plan gives this pod (with --configmap or --plan-dir), or give --capacity GATE=PERMITS"},
		{[]string{"--capacity", "a=1", "--gate", "a", "--plan-dir", "/plans"}, "--capacity and --gate/--configmap/--plan-dir/--acknowledge: give the slices either by hand"},
		{[]string{"--capacity", "a=1", "--configmap", "c", "--namespace", "shop"}, "--capacity and --gate/--configmap/--plan-dir/--acknowledge"},
		{[]string{"--gate", "a"}, "exactly one of --configmap and --plan-dir is required"},
		{[]string{"--gate", "a", "--gate", "a"}, `gate "a" given twice`},
		{[]string{"--gate", "a", "--plan-dir", "/plans"}, "--gate: the plan names this pod's slice by its name, and $POD_NAME is empty"},
		{[]string{"--capacity", "a"}, `invalid value "a" for flag -capacity: want GATE=PERMITS with PERMITS at least 0, such as logistics-api=8, got "a"`},
		{[]string{"--capacity", "a=-1"}, `got "a=-1"`},
		{[]string{"--capacity", "a=1", "--capacity", "a=2"}, `gate "a" given twice`},
		{[]string{"--capacity", "a=1", "--listen-address", "9443"}, `--listen-address: "9443" is not host:port`},
		{[]string{"--capacity", "a=1", "--max-lease", "1s", "--lease-margin", "1s"}, "--lease-margin: must be at least 0 and below --max-lease 1s, got 1s"},
		{[]string{"--capacity", "a=1", "--max-wait", "0s"}, "--max-wait: must be positive, got 0s"},
	} {
		if _, err := parseConfig(c.args, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// borrowAfterLearning borrows until the server has learned, waiting as
// long as its refusals say, and returns the lease.
func borrowAfterLearning(ctx context.Context, t testing.TB, c reservev1.ReserveClient) *reservev1.Lease {
	t.Helper()
	for {
		resp, err := c.Borrow(ctx, &reservev1.BorrowRequest{Gate: "g", Pod: "pod", Hold: durationpb.New(100 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		if l := resp.GetLease(); l != nil {
			return l
		}
		if r := resp.GetRefusal(); r.GetReason() != reservev1.Reason_REASON_LEARNING {
			t.Fatalf("refused: %v", r)
		}
		time.Sleep(resp.GetRefusal().GetRetryAfter().AsDuration())
	}
}

// serveInProcess runs the broker with args until stop is called; done
// receives run's result.
func serveInProcess(ctx context.Context, t testing.TB, args ...string) (s *server, stop context.CancelFunc, done <-chan error) {
	t.Helper()
	cfg, err := parseConfig(args, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return startInProcess(ctx, t, cfg)
}

// startInProcess runs the broker with cfg until stop is called; done
// receives run's result (a test that takes it may put it back for a
// cleanup that waits for it).
func startInProcess(ctx context.Context, t testing.TB, cfg config) (s *server, stop context.CancelFunc, done chan error) {
	t.Helper()
	serving, stop := context.WithCancel(ctx)
	started := make(chan *server, 1)
	result := make(chan error, 1)
	go func() {
		result <- run(serving, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(s *server) { started <- s })
	}()
	select {
	case s = <-started:
	case err := <-result:
		t.Fatalf("the broker did not start: %v", err)
	}
	return s, stop, result
}

// TestServe runs the broker in-process on free ports of 127.0.0.1: it
// learns, lends, reports health and metrics, and stops when its context
// ends.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	launched := time.Now() // the server learns from a later instant
	s, stop, done := serveInProcess(ctx, t, "--capacity", "g=1", "--max-lease", "300ms", "--lease-margin", "10ms",
		"--listen-address", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	conn := dial(t, s.addr())
	// Not Ready while it learns, Ready once it may lend.
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		health, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		return health.GetStatus()
	}
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while learning: %s, want NOT_SERVING", got)
	}
	c := reservev1.NewReserveClient(conn)
	borrowAfterLearning(ctx, t, c)
	if waited := time.Since(launched); waited < 300*time.Millisecond {
		t.Errorf("lent %s after it was launched, before the longest lease of 300ms had passed", waited)
	}
	for check() != healthpb.HealthCheckResponse_SERVING {
		if time.Since(launched) > 10*time.Second {
			t.Fatal("health: not SERVING 10s after it was launched, with a longest lease of 300ms")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + s.metricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`backpressure_broker_leases{gate="g"} 1`, `backpressure_broker_borrows_total{gate="g",pod="pod",result="granted"} 1`, "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop within 30s of its context's end")
	}
}

// TestKilledAndRestarted kills the built binary (SIGKILL) while it has a
// lease out, starts it again on the same port, and checks that the new run
// lends nothing until the longest lease has passed and takes nothing back
// from the old one.
func TestKilledAndRestarted(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the binary with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "backpressure-broker")
	if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	start := func(addr string) (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, "--capacity", "g=1", "--max-lease", "1s", "--lease-margin", "10ms",
			"--listen-address", addr, "--metrics-listen", "")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			var entry struct{ Msg, Address string }
			if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == "Serving" {
				go func() { _, _ = io.Copy(io.Discard, stderr) }()
				return cmd, entry.Address
			}
		}
		t.Fatalf("the broker exited before serving: %v", lines.Err())
		return nil, ""
	}

	first, addr := start("127.0.0.1:0")
	old := borrowAfterLearning(ctx, t, reservev1.NewReserveClient(dial(t, addr)))
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	restarted := time.Now()
	_, addr = start(addr)
	c := reservev1.NewReserveClient(dial(t, addr))
	ret, err := c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: old.GetIncarnation(), Id: old.GetId()})
	if err != nil || ret.GetReturned() {
		t.Errorf("returning the killed run's lease to the new one: %v, %v, want not returned", ret, err)
	}
	borrowAfterLearning(ctx, t, c)
	if waited := time.Since(restarted); waited < time.Second {
		t.Errorf("the restarted broker lent %s after it was launched, before the longest lease (1s) had passed", waited)
	}

	// SIGTERM ends it cleanly.
	cmd, _ := start("127.0.0.1:0")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}

// TestGateWaitsForALentPermit runs the library's gate, with the library's
// borrowing client, against this server: a call that waits in the gate's
// waiting room waits at the server too, and runs on the permit another pod
// returns there, before its own gate frees one.
func TestGateWaitsForALentPermit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, stop, _ := serveInProcess(ctx, t, "--capacity", "g=1", "--max-lease", "2s", "--lease-margin", "10ms",
		"--listen-address", "127.0.0.1:0", "--metrics-listen", "")
	defer stop()
	conn := dial(t, s.addr())
	other := borrowAfterLearning(ctx, t, reservev1.NewReserveClient(conn)) // another pod holds the reserve

	client, err := reserve.New(conn, reserve.Options{Pod: "pod-b", Budget: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gate.New("g", gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g.SetLender(client.Lender("g"))
	own, err := g.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release()
	done := make(chan error, 1)
	var lent gate.Permit
	call, endCall := context.WithTimeout(ctx, 1500*time.Millisecond) // within the longest lease
	defer endCall()
	go func() {
		var err error
		lent, err = g.Acquire(call)
		done <- err
	}()
	waitUntil(t, "the call waits at the gate and at the server", func() bool {
		return g.Stats().Queued == 1 && s.broker.Stats()[0].Waiting == 1
	})
	ret, err := reservev1.NewReserveClient(conn).Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: other.GetIncarnation(), Id: other.GetId()})
	if err != nil || !ret.GetReturned() {
		t.Fatalf("returning the other pod's lease: %v, %v", ret, err)
	}
	if err := <-done; err != nil || !lent.Borrowed() {
		t.Fatalf("the waiting call: %v (borrowed %v), want the lent permit", err, lent.Borrowed())
	}
	if st := g.Stats(); st.Queued != 0 || st.Borrowed != 1 {
		t.Errorf("gate after the loan: queued %d, borrowed %d", st.Queued, st.Borrowed)
	}
	lent.Release()
	waitUntil(t, "the lent permit is back", func() bool { return s.broker.Stats()[0].Leases == 0 })
}

// waitUntil polls cond for up to ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
