package writecount

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestCounter(t *testing.T) {
	ctx := context.Background()
	var c Counter
	cl := c.Wrap(fake.NewClientBuilder().WithStatusSubresource(&corev1.Pod{}).Build())

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x"}}
	if err := cl.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data = map[string]string{"k": "v"}
	if err := cl.Patch(ctx, cm, patch); err != nil {
		t.Fatal(err)
	}
	if err := cl.Apply(ctx, corev1ac.ConfigMap("y", "b").WithData(map[string]string{"k": "v"}), client.FieldOwner("test")); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}}
	if err := cl.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodRunning
	if err := cl.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := cl.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	// Reads are not writes.
	if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	if err := cl.List(ctx, &corev1.ConfigMapList{}); err != nil {
		t.Fatal(err)
	}

	want := map[string]int{
		"create ConfigMap": 1, "patch ConfigMap": 1, "apply ConfigMap": 1, "delete ConfigMap": 1,
		"create Pod": 1, "update Pod/status": 1,
	}
	if diff := cmp.Diff(want, c.Counts()); diff != "" {
		t.Errorf("Counts (-want +got):\n%s", diff)
	}
	if c.Total() != 6 || c.TotalIn("a") != 5 || c.TotalIn("b") != 1 || c.TotalIn("c") != 0 {
		t.Errorf("Total %d, in a %d, in b %d, in c %d; want 6, 5, 1, 0", c.Total(), c.TotalIn("a"), c.TotalIn("b"), c.TotalIn("c"))
	}
	if got := c.String(); got != "apply ConfigMap=1 create ConfigMap=1 create Pod=1 delete ConfigMap=1 patch ConfigMap=1 update Pod/status=1" {
		t.Errorf("String() = %q", got)
	}
}

func TestCounterConcurrent(t *testing.T) {
	var c Counter
	cl := c.Wrap(fake.NewClientBuilder().Build())
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%d-%d", w, i)}}
				if err := cl.Create(context.Background(), cm); err != nil {
					t.Error(err)
					return
				}
				_ = c.Counts()
			}
		})
	}
	wg.Wait()
	if c.Total() != workers*each || c.TotalIn("ns") != workers*each {
		t.Errorf("counted %d writes (%d in ns), want %d", c.Total(), c.TotalIn("ns"), workers*each)
	}
}
