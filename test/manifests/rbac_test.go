package manifests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	quotametrics "github.com/backpressure-dev/backpressure-operator/internal/metrics"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

const (
	// operatorUser is the manager's identity as config/default installs it.
	operatorUser = "system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount
	// appUser is the sample application's identity (config/samples/app).
	appUser = "system:serviceaccount:shop:search-gateway"
	// sampleQuota, sampleConfigMap and samplePod are the sample quota, the
	// ConfigMap its plan is published to, and a pod of its workload.
	sampleQuota     = "logistics-api"
	sampleConfigMap = "search-gateway-backpressure"
	samplePod       = "search-gateway-6d5f8c9b7-x2k4q"
)

// The RBAC config/default installs is enough for the manager to elect a
// leader and reconcile the sample quota, impersonating its ServiceAccount,
// and grants nothing the manager does not use. The Role config/samples/app
// installs is enough for a pod to follow its ConfigMap (and, with ack/, to
// acknowledge the plan on its own pod), and grants nothing else.
func TestRBACIsSufficientAndLeast(t *testing.T) {
	admin, kubectl := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k8s, err := client.New(admin, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}

	// The operator, installed for real, and the sample workload with one
	// pod (nothing schedules pods here; the object is what counts).
	ensureNamespace(t, operatorNamespace)
	ensureNamespace(t, "shop")
	apply(t, kubectl, kustomize(t, "config/default"))
	apply(t, kubectl, kustomize(t, "config/samples"))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: samplePod,
			Labels: map[string]string{"app.kubernetes.io/name": "search-gateway"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "registry.example.com/shop/search-gateway:1.14.2"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// As the kubelet would once the pod passes its readiness probe: the
	// usable permits are divided over the Ready pods.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := k8s.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// The manager runs for the whole test: the last step reconciles again.
	reconcile, quotaMetrics := startOperator(ctx, t, impersonate(admin, operatorUser), k8s, "shop")
	if !t.Run("manager reconciles the sample quota as its ServiceAccount", func(t *testing.T) {
		q := reconcile(t)
		if q.Status.PerPod == nil || q.Status.PerPod.Permits != 40 {
			t.Fatalf("status.perPod = %+v, want 40 permits: 50 × 80%% over the one Ready pod", q.Status.PerPod)
		}
		ready := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue {
			t.Fatalf("Ready = %+v, want True", ready)
		}
		var cm corev1.ConfigMap
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: "shop", Name: sampleConfigMap}, &cm); err != nil {
			t.Fatalf("the published ConfigMap: %v", err)
		}
		doc, err := plan.Parse([]byte(cm.Data[plan.KeyFor(sampleQuota)]))
		if err != nil {
			t.Fatalf("the published plan: %v", err)
		}
		if got := doc.For(samplePod).Permits; got != 40 || doc.Hash != q.Status.ConfigMap.Hash {
			t.Errorf("published plan gives the pod %d permits and has hash %s, want 40 and status's %s", got, doc.Hash, q.Status.ConfigMap.Hash)
		}
		// The PlanChanged event proves the events.k8s.io grant.
		waitFor(ctx, t, "a PlanChanged event about the quota", func() (bool, error) {
			var events eventsv1.EventList
			if err := k8s.List(ctx, &events, client.InNamespace("shop")); err != nil {
				return false, err
			}
			for _, e := range events.Items {
				if e.Regarding.Name == sampleQuota && e.Reason == controller.EventReasonPlanChanged {
					return true, nil
				}
			}
			return false, nil
		})
	}) {
		return
	}

	t.Run("the leader exports the quota's metrics", func(t *testing.T) {
		waitFor(ctx, t, "backpressure_quota_permits from the manager's cache", func() (bool, error) {
			return gaugeValue(quotaMetrics, "backpressure_quota_permits", map[string]string{"namespace": "shop", "quota": sampleQuota}) == 40, nil
		})
	})

	t.Run("manager can do no more than it needs", func(t *testing.T) {
		for _, c := range []canI{
			{true, "watch downstreamquotas.backpressure.dev -A"},
			{true, "patch downstreamquotas.backpressure.dev --subresource=status -n shop"},
			{true, "create configmaps -n shop"},
			{true, "list pods -A"},
			{true, "watch horizontalpodautoscalers.autoscaling -A"},
			{true, "create tokenreviews.authentication.k8s.io"},
			{true, "create subjectaccessreviews.authorization.k8s.io"},
			{true, "update leases.coordination.k8s.io -n " + operatorNamespace},
			{true, "list validatingadmissionpolicybindings.admissionregistration.k8s.io"},
			{true, "create events.events.k8s.io -n " + operatorNamespace},

			{false, "get secrets -n shop"},
			{false, "list secrets -A"},
			{false, "update deployments.apps -n shop"},
			{false, "patch deployments.apps -n shop"},
			{false, "delete deployments.apps -n shop"},
			{false, "patch deployments.apps --subresource=scale -n shop"},
			{false, "patch statefulsets.apps -n shop"},
			{false, "patch horizontalpodautoscalers.autoscaling -n shop"},
			{false, "update downstreamquotas.backpressure.dev -n shop"},
			{false, "delete downstreamquotas.backpressure.dev -n shop"},
			{false, "patch pods -n shop"},
			{false, "delete pods -n shop"},
			{false, "create pods -n shop"},
			{false, "update configmaps -n shop"},
			{false, "create leases.coordination.k8s.io -n shop"},
			{false, "create rolebindings.rbac.authorization.k8s.io -n shop"},
			// It checks its admission policies, and cannot loosen them.
			{false, "delete validatingadmissionpolicybindings.admissionregistration.k8s.io"},
			{false, "update validatingadmissionpolicies.admissionregistration.k8s.io"},
			{false, "create validatingadmissionpolicybindings.admissionregistration.k8s.io"},
		} {
			c.check(t, kubectl, operatorUser)
		}
	})

	apply(t, kubectl, kustomize(t, "config/samples/app"))
	app := impersonate(admin, appUser)
	t.Run("application follows its ConfigMap as its ServiceAccount", func(t *testing.T) {
		s := followConfigMap(ctx, t, app, nil)
		if s.Limits.Permits != 40 {
			t.Errorf("the application enforces %d permits for %s, want 40", s.Limits.Permits, sampleQuota)
		}
	})
	appDenials := []canI{
		{false, "get configmaps/kube-root-ca.crt -n shop"},
		{false, "list configmaps -n shop"},
		{false, "create configmaps -n shop"},
		{false, "update configmaps/" + sampleConfigMap + " -n shop"},
		{false, "get configmaps/" + sampleConfigMap + " -n default"},
		{false, "get secrets -n shop"},
		{false, "get pods -n shop"},
		{false, "delete pods -n shop"},
		{false, "get downstreamquotas.backpressure.dev -n shop"},
	}
	t.Run("application can read its ConfigMap and nothing else", func(t *testing.T) {
		for _, c := range append([]canI{
			{true, "get configmaps/" + sampleConfigMap + " -n shop"},
			{true, "list configmaps/" + sampleConfigMap + " -n shop"},
			{true, "watch configmaps/" + sampleConfigMap + " -n shop"},
			{false, "patch pods -n shop"},
		}, appDenials...) {
			c.check(t, kubectl, appUser)
		}
	})

	apply(t, kubectl, kustomize(t, "config/samples/app/ack"))
	t.Run("application with ack/ acknowledges the plan on its pod", func(t *testing.T) {
		for _, c := range append([]canI{
			{true, "watch configmaps/" + sampleConfigMap + " -n shop"},
			{true, "patch pods -n shop"},
		}, appDenials...) {
			c.check(t, kubectl, appUser)
		}
		// With the token the pod mounts, bound to it: config/default's
		// pod-writes policy applies to shop, as to every namespace, and lets
		// the pod acknowledge on its own pod and nothing more.
		bound := podIdentity(admin, "shop", "search-gateway", samplePod, pod.UID)
		s := followConfigMap(ctx, t, bound, &backpressure.AckOptions{})
		want := plan.Ack{Epoch: s.Epoch, Revision: s.Revision}.String()
		waitFor(ctx, t, "the pod's acknowledgement", func() (bool, error) {
			var p corev1.Pod
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
				return false, err
			}
			return p.Annotations[v1alpha1.AppliedAnnotationPrefix+sampleQuota] == want, nil
		})
		other := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: samplePod + "-other"},
			Spec:       pod.Spec,
		}
		if err := k8s.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		_, err := kubernetes.NewForConfigOrDie(bound).CoreV1().Pods("shop").Patch(ctx, other.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AppliedAnnotationPrefix+sampleQuota+`":"`+want+`"}}}`), metav1.PatchOptions{})
		denied(t, err, "own-pod-only")
		unbound := impersonate(admin, appUser)
		_, err = kubernetes.NewForConfigOrDie(unbound).CoreV1().Pods("shop").Patch(ctx, samplePod, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+v1alpha1.AppliedAnnotationPrefix+sampleQuota+`":"`+want+`"}}}`), metav1.PatchOptions{})
		denied(t, err, "pod-bound-token-only")
		// The operator counts the acknowledgement in the rollout status.
		waitFor(ctx, t, "status.rollout to count the acknowledgement", func() (bool, error) {
			r := reconcile(t).Status.Rollout
			return r != nil && r.Acknowledged == 1 && r.Total == 1, nil
		})
	})
}

// startOperator starts a manager as the operator's identity cfg, with the
// leader election and cache the manager uses, and returns a function that
// reconciles the sample quota in namespace with the controller's reconciler and returns
// the quota as the admin client k8s reads it, and a registry holding the
// quota metrics collector, reading the manager's cache.
func startOperator(ctx context.Context, t *testing.T, cfg *rest.Config, k8s client.Client, namespace string) (func(*testing.T) *v1alpha1.DownstreamQuota, prometheus.Gatherer) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme(t),
		Cache:                         controller.CacheOptions(),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              "backpressure-operator.backpressure.dev",
		LeaderElectionNamespace:       operatorNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(quotametrics.NewQuotaCollector(mgr.GetClient(), quotametrics.WithElected(mgr.Elected()))); err != nil {
		t.Fatal(err)
	}
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("the manager stopped before it was elected: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the manager was not elected leader within a minute: can it write its Lease?")
	}

	r := controller.NewDownstreamQuotaReconciler(controller.NewPublisher(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("backpressure-operator")))
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: sampleQuota}}
	reconcile := func(t *testing.T) *v1alpha1.DownstreamQuota {
		t.Helper()
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("reconcile as %s: %v", operatorUser, err)
		}
		var q v1alpha1.DownstreamQuota
		if err := k8s.Get(ctx, req.NamespacedName, &q); err != nil {
			t.Fatal(err)
		}
		return &q
	}
	return reconcile, reg
}

// followConfigMap runs the library on the sample ConfigMap as cfg's
// identity and as the sample pod, the way an application does, with ack
// given, and returns the share it enforces on the sample quota's gate.
func followConfigMap(ctx context.Context, t *testing.T, cfg *rest.Config, ack *backpressure.AckOptions) backpressure.Share {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := backpressure.New(ctx, backpressure.FromConfigMap(cs, "shop", sampleConfigMap), backpressure.Options{
		Gates:        []string{sampleQuota},
		PodName:      samplePod,
		PodNamespace: "shop",
		Ack:          ack,
	})
	if err != nil {
		t.Fatalf("open the ConfigMap as %s: %v", cfg.Impersonate.UserName, err)
	}
	rtCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Start(rtCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the library as %s: %v", cfg.Impersonate.UserName, err)
		}
	})
	s, err := rt.Share(sampleQuota)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// canI is one `kubectl auth can-i` question and its expected answer.
type canI struct {
	allowed  bool
	question string
}

func (c canI) check(t *testing.T, kubectl kubectlRunner, user string) {
	t.Helper()
	args := append([]string{"auth", "can-i"}, strings.Fields(c.question)...)
	out, stderr, err := kubectl.Run(append(args, "--as="+user)...)
	answer := strings.TrimSpace(out)
	if answer != "yes" && answer != "no" {
		t.Fatalf("kubectl auth can-i %s: %v\n%s%s", c.question, err, out, stderr)
	}
	if got := answer == "yes"; got != c.allowed {
		t.Errorf("%s: can-i %s = %s, want %v", user, c.question, answer, c.allowed)
	}
}

// kubectlRunner runs kubectl against the control plane.
type kubectlRunner interface {
	Run(args ...string) (stdout, stderr string, err error)
}

// apply creates or updates the rendered objects.
func apply(t *testing.T, kubectl kubectlRunner, data []byte) {
	t.Helper()
	dir, err := os.MkdirTemp("", "manifests-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := kubectl.Run("apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, out, stderr)
	}
}

// impersonate returns cfg acting as user; the API server adds a service
// account's groups.
func impersonate(cfg *rest.Config, user string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	return c
}

// waitFor polls cond every 100ms until it holds, failing the test after 30s.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok && err == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

// gaugeValue returns the value of the gauge name with labels in reg, or -1
// when there is none.
func gaugeValue(reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
