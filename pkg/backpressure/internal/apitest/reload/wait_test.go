package reload_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

// A ConfigMap created after the wait, read under the narrow Role a pod is
// given, is delivered by the informer.
func TestConfigMapSourceWaitForPlanThenFollows(t *testing.T) {
	admin, ns := testNamespace(t)
	client := restrictedClient(t, admin, ns, "app", "plans")
	rec := sourcetest.NewRecorder[reload.Update]()
	s, err := reload.NewConfigMapSource(context.Background(), client, ns, "plans", reload.Options{
		Subscriber: rec.Subscribe, WaitForPlan: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Plans()) != 0 {
		t.Fatalf("Plans = %v, want none", s.Plans())
	}
	sourcetest.Start(t, s.Start)
	if u := rec.Next(t); len(u.Plans) != 0 {
		t.Fatalf("first update = %+v, want an empty one", u)
	}

	a := sourcetest.Doc("a", 4)
	cm := sourcetest.ConfigMap("plans", map[string]string{"a.json": sourcetest.Encode(t, a)})
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := rec.WaitFor(t, func(u reload.Update) bool { return len(u.Plans) > 0 })
	if diff := cmp.Diff(map[string]plan.Document{"a": a}, u.Plans); diff != "" {
		t.Errorf("plans once the ConfigMap exists (-want +got):\n%s", diff)
	}
}
