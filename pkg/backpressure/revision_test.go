package backpressure_test

import (
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// TestRuntimeRefusesAnOlderRevision puts back an older revision of the
// epoch the pod enforces, as a deposed operator's late write, a restored
// backup or a GitOps copy of the ConfigMap would: the pod keeps the newer
// plan, whose smaller share the operator already counts as given up, and
// takes the next newer revision.
func TestRuntimeRefusesAnOlderRevision(t *testing.T) {
	dir := t.TempDir()
	current := sharetest.Doc("logistics-api", 3) // revision 4
	sharetest.WritePlan(t, dir, current)
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{Gates: []string{"logistics-api"}, OnApplied: events.Hook})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	sharetest.Start(t, rt)

	older := sharetest.WithRevision(sharetest.Doc("logistics-api", 9), 2)
	sharetest.WritePlan(t, dir, older)
	events.Quiet(t, 500*time.Millisecond)
	if got := sharetest.MustShare(t, rt, "logistics-api"); got != backpressure.ShareOf(current) {
		t.Fatalf("after an older revision was put back the pod enforces %+v, want revision 4's %+v", got, backpressure.ShareOf(current))
	}

	newer := sharetest.WithRevision(sharetest.Doc("logistics-api", 2), 5)
	sharetest.WritePlan(t, dir, newer)
	if x := events.Next(t); x.Share != backpressure.ShareOf(newer) {
		t.Fatalf("Applied after a newer revision = %+v, want %+v", x, backpressure.ShareOf(newer))
	}
}
