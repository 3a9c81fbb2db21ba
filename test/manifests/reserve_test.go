package manifests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

const (
	// sampleBroker is the permit server's Deployment and ServiceAccount in
	// config/samples/reserve.
	sampleBroker = "search-gateway-broker"
	// reserveNamespace is where TestReserveSampleBroker applies the sample
	// with its reserve: a namespace of its own, so that its quota starts
	// with no division of the other tests'.
	reserveNamespace = "shop-reserve"
)

// The sample with its reserve component is the sample plus a permit server
// that lends the quota's reserve to the gateway's sidecars: the quota asks
// for a reserve held by the broker's Deployment, the broker reads its slice
// of that quota from the gateway's ConfigMap and acknowledges it, is Ready
// on its gRPC health, its Service reaches the port the sidecars borrow
// from, and its Role is the sidecar's. make deploy-sample-reserve applies
// it with both images replaced.
func TestReserveSampleRuns(t *testing.T) {
	objs := decode(t, kustomizeWithReserve(t))
	var quota v1alpha1.DownstreamQuota
	fromUnstructured(t, one(t, objs, "DownstreamQuota"), &quota)
	deployments := map[string]*appsv1.Deployment{}
	for _, o := range find(objs, "Deployment") {
		var d appsv1.Deployment
		fromUnstructured(t, o, &d)
		deployments[d.Name] = &d
	}
	gateway, broker := deployments[quota.Spec.WorkloadRef.Name], deployments[sampleBroker]
	if gateway == nil || broker == nil || len(deployments) != 2 {
		t.Fatalf("Deployments %v, want the workload %s and the permit server %s", slices.Collect(maps.Keys(deployments)), quota.Spec.WorkloadRef.Name, sampleBroker)
	}
	if r := quota.Spec.Reserve; r == nil || r.BrokerRef.Name != broker.Name || r.Permits.String() != "20%" {
		t.Fatalf("the quota's spec.reserve is %+v, want 20%% held by Deployment %s", r, broker.Name)
	}
	if broker.Spec.Replicas == nil || *broker.Spec.Replicas != 2 {
		t.Errorf("the broker runs %v replicas, want 2", broker.Spec.Replicas)
	}

	pod := broker.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("the broker's pod has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "backpressure-broker:latest" {
		t.Errorf("the broker's image is %q, want backpressure-broker:latest, the name make docker-build-broker builds and make deploy-sample-reserve replaces", c.Image)
	}
	args := argMap(c.Args)
	if args["--gate"] != quota.Name || args["--configmap"] != quota.Spec.WorkloadRef.Name+"-backpressure" {
		t.Errorf("the broker's --gate %q and --configmap %q, want the quota %s and its ConfigMap", args["--gate"], args["--configmap"], quota.Name)
	}
	if _, ok := args["--acknowledge"]; !ok {
		t.Errorf("the broker does not acknowledge: %q", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if diff := cmp.Diff(map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}, env); diff != "" {
		t.Errorf("the broker's downward-API environment (-want +got):\n%s", diff)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	_, grpcPort, _ := net.SplitHostPort(args["--listen-address"])
	if p := c.ReadinessProbe; p == nil || p.GRPC == nil || p.GRPC.Port != ports["grpc"] || grpcPort != "9443" || ports["grpc"] != 9443 {
		t.Errorf("readiness probe %+v on --listen-address %q (ports %v): want gRPC health on the grpc port 9443", p, args["--listen-address"], ports)
	}
	_, metricsPort, _ := net.SplitHostPort(args["--metrics-listen"])
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || ports[p.HTTPGet.Port.StrVal] == 0 || metricsPort != "8080" || ports["metrics"] != 8080 {
		t.Errorf("liveness probe %+v on --metrics-listen %q (ports %v): want GET /healthz on the metrics port 8080", p, args["--metrics-listen"], ports)
	}
	maxLease, err := time.ParseDuration(args["--max-lease"])
	if err != nil || pod.TerminationGracePeriodSeconds == nil ||
		time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second < maxLease+time.Second+2*10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v with --max-lease %q: want room for the drain (--max-lease and a second) and twice the 10s shutdown timeout",
			pod.TerminationGracePeriodSeconds, args["--max-lease"])
	}

	// The Service the sidecars borrow through.
	var svc corev1.Service
	fromUnstructured(t, one(t, objs, "Service"), &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "grpc" || !cmp.Equal(svc.Spec.Selector, broker.Spec.Selector.MatchLabels) {
		t.Errorf("the Service %+v does not reach the broker's grpc port", svc.Spec)
	}
	proxy := gateway.Spec.Template.Spec.InitContainers
	if len(proxy) != 1 || proxy[0].Name != "backpressure-proxy" {
		t.Fatalf("the gateway's init containers %+v, want its sidecar", proxy)
	}
	wantAddress := net.JoinHostPort(svc.Name, "9443")
	if got := argMap(proxy[0].Args)["--reserve-address"]; got != wantAddress || svc.Spec.Ports[0].Port != 9443 {
		t.Errorf("the sidecar's --reserve-address %q, want the broker's Service %s", got, wantAddress)
	}

	// Its own ServiceAccount, bound to a Role with the sidecar's rules.
	roles := map[string]rbacv1.Role{}
	for _, o := range find(objs, "Role") {
		var r rbacv1.Role
		fromUnstructured(t, o, &r)
		roles[r.Name] = r
	}
	if diff := cmp.Diff(roles["search-gateway-backpressure"].Rules, roles[sampleBroker].Rules); diff != "" || len(roles) != 2 {
		t.Errorf("the broker's Role's rules differ from the sidecar's (-sidecar +broker), of Roles %v:\n%s", slices.Collect(maps.Keys(roles)), diff)
	}
	bound := false
	for _, o := range find(objs, "RoleBinding") {
		var b rbacv1.RoleBinding
		fromUnstructured(t, o, &b)
		bound = bound || b.RoleRef.Name == sampleBroker && slices.Contains(b.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: pod.ServiceAccountName, Namespace: "shop"})
	}
	if pod.ServiceAccountName != sampleBroker || !bound {
		t.Errorf("the broker runs as %q, want %s bound to the Role %s", pod.ServiceAccountName, sampleBroker, sampleBroker)
	}

	// make deploy-sample-reserve applies it with both images replaced.
	_, kubectl := controlPlane(t)
	ensureNamespace(t, "shop")
	cmd := exec.Command("make", "--no-print-directory", "deploy-sample-reserve",
		"PROXY_IMG=registry.example.com/platform/backpressure-proxy:v0.1.0",
		"BROKER_IMG=registry.example.com/platform/backpressure-broker@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"KUBECTL="+kubectl.Path+" --kubeconfig "+kubectl.Kubeconfig)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deploy-sample-reserve: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(repoRoot, "_output", "deploy-sample-reserve")) })
	for name, want := range map[string]string{
		gateway.Name: "registry.example.com/platform/backpressure-proxy:v0.1.0",
		broker.Name:  "registry.example.com/platform/backpressure-broker@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	} {
		out, stderr, err := kubectl.Run("get", "deployment", name, "-n", "shop", "-o", "yaml")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		var applied appsv1.Deployment
		if err := yaml.Unmarshal([]byte(out), &applied); err != nil {
			t.Fatal(err)
		}
		spec := applied.Spec.Template.Spec
		images := []string{}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			images = append(images, c.Image)
		}
		if !slices.Contains(images, want) {
			t.Errorf("after make deploy-sample-reserve Deployment %s runs %q, want %s", name, images, want)
		}
	}
}

// The permit server of the reserve sample, run as it is deployed (the
// Deployment's arguments, as its pod's bound ServiceAccount token, under
// config/default's policies), reads the slice the operator publishes for
// its pod from the gateway's ConfigMap, lends exactly that, acknowledges
// it on its own pod, and annotates the pod released when it stops; its
// Role grants it nothing more.
func TestReserveSampleBroker(t *testing.T) {
	admin, kubectl := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k8s, err := client.New(admin, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	ensureNamespace(t, operatorNamespace)
	ensureNamespace(t, reserveNamespace)
	apply(t, kubectl, kustomize(t, "config/default"))
	apply(t, kubectl, inNamespace(t, kustomizeWithReserve(t), reserveNamespace))

	// One Ready pod of the gateway and one of the broker, as the kubelet
	// would report them (nothing runs pods here).
	ready := func(name, app, sa string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: reserveNamespace, Name: name, Labels: map[string]string{"app.kubernetes.io/name": app}},
			Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10.2"}}},
		}
		if err := k8s.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := k8s.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ready(samplePod, "search-gateway", "search-gateway")
	brokerPod := ready(sampleBroker+"-5c8d7f9b6-q7w2z", sampleBroker, sampleBroker)

	reconcile, _ := startOperator(ctx, t, impersonate(admin, operatorUser), k8s, reserveNamespace)
	// 50 × 80 % = 40 usable; the reserve is 20 % of them, 8, all the one
	// broker replica's; the gateway's pod gets the other 32.
	q := reconcile(t)
	if r := q.Status.Reserve; r == nil || r.Permits != 8 || r.HandedOut != 8 || len(r.Replicas) != 1 ||
		r.Replicas[0].Name != brokerPod.Name || r.Replicas[0].Permits != 8 {
		t.Fatalf("status.reserve = %+v, want 8 permits handed out to %s", r, brokerPod.Name)
	}
	var cm corev1.ConfigMap
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: reserveNamespace, Name: sampleConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	doc, err := plan.Parse([]byte(cm.Data[plan.KeyFor(sampleQuota)]))
	if err != nil {
		t.Fatal(err)
	}
	if doc.For(samplePod).Permits != 32 || doc.For(brokerPod.Name).Permits != 8 {
		t.Fatalf("the plan gives the gateway's pod %d and the broker's %d permits, want 32 and 8", doc.For(samplePod).Permits, doc.For(brokerPod.Name).Permits)
	}

	brokerUser := "system:serviceaccount:" + reserveNamespace + ":" + sampleBroker
	t.Run("broker can read its ConfigMap and patch pods, and nothing else", func(t *testing.T) {
		for _, c := range []canI{
			{true, "get configmaps/" + sampleConfigMap + " -n " + reserveNamespace},
			{true, "list configmaps/" + sampleConfigMap + " -n " + reserveNamespace},
			{true, "watch configmaps/" + sampleConfigMap + " -n " + reserveNamespace},
			{true, "patch pods -n " + reserveNamespace},
			{false, "list configmaps -n " + reserveNamespace},
			{false, "get configmaps/kube-root-ca.crt -n " + reserveNamespace},
			{false, "update configmaps/" + sampleConfigMap + " -n " + reserveNamespace},
			{false, "get secrets -n " + reserveNamespace},
			{false, "get pods -n " + reserveNamespace},
			{false, "delete pods -n " + reserveNamespace},
			{false, "get downstreamquotas.backpressure.dev -n " + reserveNamespace},
			{false, "get configmaps/" + sampleConfigMap + " -n shop"},
		} {
			c.check(t, kubectl, brokerUser)
		}
	})

	// The broker as its Deployment runs it, with loopback ports, a short
	// --max-lease so that it learns for a second only, and the bound token
	// of its pod (a kubeconfig that impersonates it).
	var d appsv1.Deployment
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: reserveNamespace, Name: sampleBroker}, &d); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "backpressure-broker")
	run(t, "go", "build", "-o", bin, "./cmd/backpressure-broker")
	args := append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
		"--listen-address=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--max-lease=1s",
		"--kubeconfig="+podKubeconfig(t, kubectl.Kubeconfig, podIdentity(admin, reserveNamespace, sampleBroker, brokerPod.Name, brokerPod.UID)))
	addr, stop := startBroker(t, bin, args, []string{"POD_NAME=" + brokerPod.Name, "POD_NAMESPACE=" + reserveNamespace})

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Run("ready on its gRPC health once it has learned", func(t *testing.T) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gRPC health: %v, %v; want SERVING within 10s, learning for --max-lease=1s", resp, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("lends its slice, 8 permits, and no more", func(t *testing.T) {
		rpc := reservev1.NewReserveClient(conn)
		borrow := func() (*reservev1.BorrowResponse, error) {
			return rpc.Borrow(ctx, &reservev1.BorrowRequest{Gate: sampleQuota, Pod: samplePod, Hold: durationpb.New(500 * time.Millisecond)})
		}
		// It learns for --max-lease after its start.
		waitFor(ctx, t, "the first lease", func() (bool, error) {
			resp, err := borrow()
			return resp.GetLease() != nil, err
		})
		lent := 1
		for ; lent < 20; lent++ {
			resp, err := borrow()
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetLease() == nil {
				if r := resp.GetRefusal().GetReason(); r != reservev1.Reason_REASON_EXHAUSTED {
					t.Errorf("refused for %s, want exhausted", r)
				}
				break
			}
		}
		if lent != 8 {
			t.Errorf("lent %d permits at once, want the slice of 8", lent)
		}
	})
	annotation := func() (string, error) {
		var p corev1.Pod
		err := k8s.Get(ctx, client.ObjectKeyFromObject(brokerPod), &p)
		return p.Annotations[v1alpha1.AppliedAnnotationPrefix+sampleQuota], err
	}
	t.Run("acknowledges its slice on its pod", func(t *testing.T) {
		want := plan.Ack{Epoch: doc.Epoch, Revision: doc.Revision}.String()
		waitFor(ctx, t, "the broker's acknowledgement "+want, func() (bool, error) {
			got, err := annotation()
			return got == want, err
		})
	})
	t.Run("annotates its pod released when it stops", func(t *testing.T) {
		if err := stop(); err != nil {
			t.Errorf("the broker's exit: %v", err)
		}
		got, err := annotation()
		if want := (plan.Ack{Epoch: doc.Epoch, Released: true}).String(); err != nil || got != want {
			t.Errorf("the broker's pod is annotated %q (%v) after it stopped, want %q", got, err, want)
		}
	})
}

// podKubeconfig writes a copy of kubeconfig whose users act as cfg's
// impersonated identity (podIdentity's: a pod's bound ServiceAccount
// token), and returns its path.
func podKubeconfig(t *testing.T, kubeconfig string, cfg *rest.Config) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range kc.AuthInfos {
		auth.Impersonate = cfg.Impersonate.UserName
		auth.ImpersonateGroups = cfg.Impersonate.Groups
		auth.ImpersonateUserExtra = cfg.Impersonate.Extra
	}
	path := filepath.Join(t.TempDir(), "pod-kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBroker starts the permit server bin with args and env and returns
// its gRPC address, once it logs that it serves, and a function that stops
// it with SIGTERM and returns its exit's error; the test's cleanup kills it
// if it still runs.
func startBroker(t *testing.T, bin string, args, env []string) (string, func() error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	var (
		mu     sync.Mutex
		logged strings.Builder
	)
	log := func() string {
		mu.Lock()
		defer mu.Unlock()
		return logged.String()
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logged.WriteString(sc.Text() + "\n")
			mu.Unlock()
			var line struct{ Msg, Address string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "Serving" {
				addr <- line.Address
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("the broker's log:\n%s", log())
		}
	})
	stop := func() error {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("the broker did not exit within 30s of SIGTERM")
		}
	}
	select {
	case a := <-addr:
		return a, stop
	case err := <-exited:
		t.Fatalf("the broker exited before it served: %v\n%s", err, log())
	case <-time.After(time.Minute):
		t.Fatal("the broker did not serve within a minute")
	}
	return "", nil
}
