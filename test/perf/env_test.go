package perf

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bpcontroller "github.com/backpressure-dev/backpressure-operator/internal/controller"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/writecount"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/metricstest"
)

// managerLog is where controller-runtime logs: into the log file of the
// manager the running test started, or nowhere. controller-runtime keeps the
// first logger a process sets (a later SetLogger is ignored) and, when none
// is set within 30 s, prints a stack and drops every log line after, so a
// test's check of its manager's log would read nothing. TestMain sets the
// logger once; each manager points it at its own file.
var managerLog = &switchWriter{w: io.Discard}

// switchWriter is an io.Writer whose destination can change while loggers
// write to it.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(managerLog)))
	os.Exit(m.Run())
}

// requirePerf skips the test unless BACKPRESSURE_PERF=1.
func requirePerf(t *testing.T) {
	t.Helper()
	if os.Getenv("BACKPRESSURE_PERF") != "1" {
		t.Skip("a measurement; set BACKPRESSURE_PERF=1 to run it")
	}
}

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// newScheme returns testenv's scheme, failing the test on error.
func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

// startAPIServer starts envtest and returns its config (without a
// client-side rate limit, as config.GetConfig) and a client for the test.
func startAPIServer(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()
	_, cfg := testenv.Start(t)
	cfg.QPS = -1
	return cfg, testenv.NewClient(t, cfg)
}

// runningManager is a manager built as cmd/manager builds it, with its
// writes counted and its log in a file.
type runningManager struct {
	manager.Manager
	writes *writecount.Counter
	log    string
	stop   func()
}

// startManager starts the controller's manager and waits for its caches.
func startManager(ctx context.Context, t *testing.T, cfg *rest.Config, opts ...bpcontroller.Option) *runningManager {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	managerLog.set(logFile)
	writes := &writecount.Counter{}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 newScheme(t),
		Cache:                  bpcontroller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewClient:              writes.NewClient,
	})
	if err != nil {
		t.Fatal(err)
	}
	// BACKPRESSURE_PERF_EVENTS=off drops the reconciler's events, to measure
	// what they cost the API server.
	var recorder events.EventRecorder = mgr.GetEventRecorder("backpressure-operator")
	switch v := os.Getenv("BACKPRESSURE_PERF_EVENTS"); v {
	case "", "on":
	case "off":
		recorder = &events.FakeRecorder{} // no channel: every event is dropped
	default:
		t.Fatalf("BACKPRESSURE_PERF_EVENTS=%q: want on or off", v)
	}
	pub := bpcontroller.NewPublisher(mgr.GetClient(), mgr.GetAPIReader(), recorder, opts...)
	// The workers cmd/manager starts by default, unless the measurement
	// asks for another number.
	workers := envInt(t, "BACKPRESSURE_PERF_WORKERS", bpcontroller.DefaultMaxConcurrentReconciles)
	if _, _, err := bpcontroller.Setup(ctx, mgr, pub, controller.Options{MaxConcurrentReconciles: workers, SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		managerLog.set(io.Discard)
		_ = logFile.Close()
	}
	t.Cleanup(stop)
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	return &runningManager{Manager: mgr, writes: writes, log: logPath, stop: stop}
}

// logErrors returns the error lines of the manager's log, and fails the
// test when the log is empty.
func (m *runningManager) logErrors(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(m.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	// A manager logs at least its controllers' start: an empty file means
	// the log went elsewhere, and no error could have been seen.
	if len(data) == 0 {
		t.Fatalf("the manager's log %s is empty", m.log)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, `"level":"error"`) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// controllerMetric sums the samples of a metric family of the global
// registry that belong to the controller (see metricstest.Sum).
func controllerMetric(t *testing.T, family, label string) float64 {
	t.Helper()
	sum, _, err := metricstest.Sum(family, label, bpcontroller.ControllerName)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// percentile returns the p-th percentile (0..100) of sorted durations, by
// the nearest-rank method.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
