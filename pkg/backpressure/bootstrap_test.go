package backpressure_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// inForce fails the test unless the gate and dispatcher "payments" have
// permits and workers, the metric says which plan (bootstrap or
// published), and the log has line.
func inForce(t *testing.T, rt *backpressure.Runtime, reg *prometheus.Registry, logs *syncBuffer, which string, permits int, line string) {
	t.Helper()
	if got := sharetest.MustGate(t, rt, "payments").Limits().Permits; got != permits {
		t.Errorf("gate permits %d on the %s plan, want %d", got, which, permits)
	}
	if got := sharetest.MustDispatcher(t, rt, "payments").Stats().Limits.Workers; got != permits {
		t.Errorf("dispatcher workers %d on the %s plan, want %d", got, which, permits)
	}
	if got := sharetest.BootstrapGauge(t, reg, "payments"); got != which {
		t.Errorf("metric says %s, want %s", got, which)
	}
	if !strings.Contains(logs.String(), line) {
		t.Errorf("the log has no %q:\n%s", line, logs.String())
	}
}

// With no plan in the mounted directory, the pod starts on its bootstrap
// share once the wait has passed, says so in its metrics and log, and the
// published plan replaces it as soon as fsnotify sees the file (the poll
// backstop is 10s, beyond the test's wait).
func TestBootstrapFromAnEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewPedanticRegistry()
	var logs syncBuffer
	events := sharetest.NewRecorder()
	const bound = 300 * time.Millisecond
	began := time.Now()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Gates: []string{"payments"}, Dispatchers: []string{"payments"},
		Registerer: reg, OnApplied: events.Hook,
		Logger:        logr.FromSlogHandler(slog.NewTextHandler(&logs, nil)),
		Bootstrap:     []backpressure.Share{sharetest.BootShare("payments", 2)},
		BootstrapWait: bound,
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < bound {
		t.Errorf("New returned after %v, before the %v bound", took, bound)
	}
	first := events.Next(t)
	if first.Share.Epoch != "" || first.Share.Limits.Permits != 2 {
		t.Fatalf("first plan: epoch %q, permits %d; want the bootstrap share of 2", first.Share.Epoch, first.Share.Limits.Permits)
	}
	inForce(t, rt, reg, &logs, "bootstrap", 2, "enforcing the bootstrap plan")

	sharetest.Start(t, rt)
	published := sharetest.Doc("payments", 7)
	sharetest.WritePlan(t, dir, published)
	x := events.Next(t)
	if x.Share.Epoch != published.Epoch || x.Share.Limits.Permits != 7 {
		t.Fatalf("after publishing: epoch %q, permits %d; want %q, 7", x.Share.Epoch, x.Share.Limits.Permits, published.Epoch)
	}
	inForce(t, rt, reg, &logs, "published", 7, "Published plan replaced the bootstrap plan")
	want := `
# HELP backpressure_config_gate_bootstrap 1 while the gate enforces the application's bootstrap plan because no published plan was read when the pod started (the pod acknowledges nothing meanwhile), 0 once it enforces a published plan.
# TYPE backpressure_config_gate_bootstrap gauge
backpressure_config_gate_bootstrap{gate="payments"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "backpressure_config_gate_bootstrap"); err != nil {
		t.Error(err)
	}
}

// A published plan read within the bound wins; the bootstrap share is not
// used, and a gate only the bootstrap names starts on it.
func TestBootstrapOnlyForGatesWithoutAPublishedPlan(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("payments", 5))
	reg := prometheus.NewPedanticRegistry()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Gates:      []string{"payments", "search"},
		Registerer: reg,
		Bootstrap:  []backpressure.Share{sharetest.BootShare("payments", 1), sharetest.BootShare("search", 3)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := sharetest.MustGate(t, rt, "payments").Limits().Permits; got != 5 {
		t.Errorf("payments permits %d, want the published 5", got)
	}
	if got := sharetest.MustGate(t, rt, "search").Limits().Permits; got != 3 {
		t.Errorf("search permits %d, want the bootstrap 3", got)
	}
	if p := sharetest.MustShare(t, rt, "search"); p.Epoch != "" || p.Hash == "" {
		t.Errorf("search's plan: epoch %q, hash %q; want no epoch and a hash computed by New", p.Epoch, p.Hash)
	}
	if a, b := sharetest.BootstrapGauge(t, reg, "payments"), sharetest.BootstrapGauge(t, reg, "search"); a != "published" || b != "bootstrap" {
		t.Errorf("metric says payments %s, search %s; want published, bootstrap", a, b)
	}
}

func TestBootstrapIsChecked(t *testing.T) {
	withEpoch := sharetest.BootShare("payments", 1)
	withEpoch.Epoch, withEpoch.Revision = "epoch-1", 2
	withRevision := sharetest.BootShare("payments", 1)
	withRevision.Revision = 1
	badRate := sharetest.BootShare("payments", 1)
	badRate.Limits.RatePerSecond = 5 // burst 0
	tests := []struct {
		name        string
		opts        backpressure.Options
		wantNoPlan  bool
		wantMessage string
	}{{
		name:        "an epoch",
		opts:        backpressure.Options{Bootstrap: []backpressure.Share{withEpoch}},
		wantMessage: "Options.Bootstrap[0]: Epoch and Revision must be unset",
	}, {
		name:        "a revision",
		opts:        backpressure.Options{Bootstrap: []backpressure.Share{sharetest.BootShare("search", 1), withRevision}},
		wantMessage: "Options.Bootstrap[1]: Epoch and Revision must be unset",
	}, {
		name:        "an invalid limit",
		opts:        backpressure.Options{Bootstrap: []backpressure.Share{badRate}},
		wantMessage: "Options.Bootstrap[0]: plan: burst: must be at least 1 when ratePerSecond is set",
	}, {
		name:        "a gate twice",
		opts:        backpressure.Options{Bootstrap: []backpressure.Share{sharetest.BootShare("payments", 1), sharetest.BootShare("payments", 2)}},
		wantMessage: `Options.Bootstrap[1]: gate "payments" has a bootstrap plan already`,
	}, {
		name:        "a negative wait",
		opts:        backpressure.Options{Bootstrap: []backpressure.Share{sharetest.BootShare("payments", 1)}, BootstrapWait: -time.Second},
		wantMessage: "Options.BootstrapWait -1s must not be negative",
	}, {
		name: "a named gate with neither plan",
		opts: backpressure.Options{
			Gates: []string{"payments", "search"}, Bootstrap: []backpressure.Share{sharetest.BootShare("payments", 1)},
			BootstrapWait: 10 * time.Millisecond,
		},
		wantNoPlan:  true,
		wantMessage: `gate "search"; the source holds plans for [], Options.Bootstrap for ["payments"]`,
	}, {
		name:        "no bootstrap: an empty source fails as before",
		opts:        backpressure.Options{Gates: []string{"payments"}},
		wantNoPlan:  true,
		wantMessage: "no valid plan document",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := sharetest.NewRecorder()
			tt.opts.OnApplied = events.Hook
			began := time.Now()
			_, err := backpressure.New(t.Context(), backpressure.FromDir(t.TempDir()), tt.opts)
			if err == nil {
				t.Fatal("New succeeded")
			}
			if got := errors.Is(err, backpressure.ErrNoPlan); got != tt.wantNoPlan {
				t.Errorf("errors.Is(err, backpressure.ErrNoPlan) = %v, want %v; err: %v", got, tt.wantNoPlan, err)
			}
			if !strings.Contains(err.Error(), tt.wantMessage) || !strings.HasPrefix(err.Error(), "backpressure: ") {
				t.Errorf("err = %q, want it to start with %q and contain %q", err, "backpressure: ", tt.wantMessage)
			}
			if took := time.Since(began); !tt.wantNoPlan && took > time.Second {
				t.Errorf("a bad option took %v to report: it must fail before the source is read", took)
			}
			events.Quiet(t, 0)
		})
	}
}

// A pod on its bootstrap plan acknowledges nothing, and releases nothing
// when it stops: the operator never counted it in a division.
func TestBootstrapAcknowledgesAndReleasesNothing(t *testing.T) {
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ackPod, Namespace: "shop"}})
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(t.TempDir()), backpressure.Options{
		Gates:         []string{ackGate},
		Bootstrap:     []backpressure.Share{sharetest.BootShare(ackGate, 2)},
		BootstrapWait: 10 * time.Millisecond,
		PodName:       ackPod,
		PodNamespace:  "shop",
		Ack: &backpressure.AckOptions{
			Client:  client,
			Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Cap: 50 * time.Millisecond},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Start(ctx) }()
	time.Sleep(settle)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	for _, a := range client.Actions() {
		if a.Matches("patch", "pods") {
			t.Errorf("a pod on its bootstrap plan patched itself: %s", a.(k8stesting.PatchAction).GetPatch())
		}
	}
}
