package controller

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/handover"
)

// deploymentPodName names the i-th pod of a Deployment as its ReplicaSet
// does: <deployment>-<10-character hash>-<5 characters>, 37 characters for
// the search gateway.
func deploymentPodName(i int) string { return fmt.Sprintf("search-gateway-7d9f8c6b5d-%05x", i) }

// recordOfPods returns the division status recording n pods told 3 or 4
// permits, each keyed by prefix and its name.
func recordOfPods(n int, prefix string) *v1alpha1.DivisionStatus {
	records := make(map[string]handover.Record, n)
	for i := range n {
		permits := int64(3 + i%2)
		records[prefix+deploymentPodName(i)] = handover.Record{Told: permits, Holds: permits}
	}
	st := &v1alpha1.DivisionStatus{}
	st.Told, st.Holding = recordOf(records)
	return st
}

// maxRecorded returns the most pods keyed by prefix whose record fits.
func maxRecorded(prefix string) int {
	lo, hi := 0, 200000
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if recordTooLarge(recordOfPods(mid, prefix)) == "" {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// TestRecordLimit measures how many pods a division's record holds within
// maxRecordBytes: a quota's own division keys them by name, a shared
// contract by namespace/quota/name; and checks that one pod more is
// refused with the numbers.
func TestRecordLimit(t *testing.T) {
	own, shared := maxRecorded(""), maxRecorded(callerPrefix("storefront", "logistics-api"))
	t.Logf("pods of 37-character names per record within %d bytes: a quota's own division %d, a shared contract's %d", maxRecordBytes, own, shared)
	if own < 25000 || shared < 15000 {
		t.Errorf("records hold %d and %d pods, want at least 25,000 and 15,000", own, shared)
	}
	if why := recordTooLarge(recordOfPods(own+1, "")); why == "" {
		t.Errorf("a record of %d pods fits, want it refused", own+1)
	} else {
		t.Log(why)
	}
}

// TestManyPodsArePublishedCompact divides over more pods than a version 2
// document can name within the ConfigMap's 1 MiB: the operator publishes
// the compact version 3, and the pods read their shares from it.
func TestManyPodsArePublishedCompact(t *testing.T) {
	const pods = 12000
	objs := []client.Object{guardDeployment("shop", "api", pods)}
	for i := range pods {
		objs = append(objs, guardPod("shop", "api", deploymentPodName(i)))
	}
	q := fakeQuota(inlineGate, "Deployment", "api")
	q.Spec.Contract.Concurrency = 60000 // 48,000 usable: 4 each
	q.Spec.Demand = nil
	objs = append(objs, q)
	env := newFakeEnv(objs...)
	env.reconcileInline(t)
	st := quotaStatus(t, env, inlineGate)
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v, want True", c)
	}
	d, cm := inlineDocument(t, env)
	if d.Version != plan.CompactVersion || len(d.Pods) != pods || d.For(deploymentPodName(7)).Permits != 4 {
		t.Errorf("published version %d naming %d pods, pod 7 told %d; want version 3 naming %d, 4 each", d.Version, len(d.Pods), d.For(deploymentPodName(7)).Permits, pods)
	}
	if n := len(cm.Data[plan.KeyFor(inlineGate)]); n > maxConfigMapBytes {
		t.Errorf("the document takes %d bytes", n)
	}
	if st.Division == nil || recordPods(st.Division) != pods || len(st.Division.Pods) != v1alpha1.MaxListedPods || st.Division.PodsNotListed != pods-v1alpha1.MaxListedPods {
		t.Errorf("status.division records %d pods, lists %d and leaves %d out; want %d, %d and %d",
			recordPods(st.Division), len(st.Division.Pods), st.Division.PodsNotListed, pods, v1alpha1.MaxListedPods, pods-v1alpha1.MaxListedPods)
	}
}

// TestContractListsAtMostMaxListedCallers shares a contract between more
// quotas than its status lists: it lists the first MaxListedCallers and
// counts the rest; every quota's status still has its part.
func TestContractListsAtMostMaxListedCallers(t *testing.T) {
	const callers = v1alpha1.MaxListedCallers + 5
	objs := []client.Object{guardNamespace("shop", map[string]string{"team": "checkout"}), guardContract()}
	for i := range callers {
		w := fmt.Sprintf("app-%03d", i)
		objs = append(objs, guardDeployment("shop", w, 1), guardPod("shop", w, w+"-0"), sharedQuota("shop", "q-"+w, w, 0))
	}
	dc := guardContract()
	dc.Spec.Contract.Concurrency = 1000
	objs[1] = dc
	env := newFakeEnv(objs...)
	env.reconcileContract(t)
	got := &v1alpha1.DownstreamContract{}
	if err := env.client.Get(context.Background(), client.ObjectKey{Name: "logistics"}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Callers) != v1alpha1.MaxListedCallers || got.Status.CallersNotListed != 5 {
		t.Errorf("the contract lists %d callers and leaves %d out, want %d and 5", len(got.Status.Callers), got.Status.CallersNotListed, v1alpha1.MaxListedCallers)
	}
	last := quotaStatus(t, env, fmt.Sprintf("q-app-%03d", callers-1))
	if last.Division == nil || last.Division.Usable != 7 { // 800 over 105 callers: 7 each, the first 65 get 8
		t.Errorf("the last caller's division %+v, want its part of 7", last.Division)
	}
}
