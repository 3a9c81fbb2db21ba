package controller

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/writecount"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// The suite runs the manager against a real API server, as a user bound to
// nothing but config/rbac/role.yaml, so a missing RBAC marker fails it.
const operatorUser = "system:serviceaccount:backpressure-system:backpressure-operator"

var (
	// k8s is the tests' own client, with every permission; it plays the
	// HPA, the kubelet, the runtime library in the pods and the user, and
	// watches what the operator writes.
	k8s client.WithWatch
	// operatorCache is the manager's cache: what the reconciler reads. A
	// spec waits for it to see the pods it set up before it creates a
	// quota, so that the first division is made over all of them.
	operatorCache client.Reader
	// reconciler is the reconciler the manager runs, for direct calls.
	reconciler *DownstreamQuotaReconciler
	// publisher is what the manager's reconcilers share.
	publisher *Publisher
	// writes counts the manager's API writes.
	writes writecount.Counter
	// fakeClock stamps condition transitions and is the handover's clock:
	// spec.handover's delays pass only when a spec advances it (advance).
	fakeClock = clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	// conflictRecheck is short so a conflict's resolution is seen quickly.
	conflictRecheck = time.Second
	// testEnv is the running control plane, for specs that run kubectl
	// against it as a user would.
	testEnv *envtest.Environment
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "DownstreamQuota controller against a real API server")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	// The machine is shared with the API server and etcd; give them time.
	SetDefaultEventuallyTimeout(10 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)

	env, err := testenv.New()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	testEnv = env
	cfg.QPS = -1 // as config.GetConfig: no client-side rate limit

	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	operatorCfg := bindOperatorRole(ctx, env, cfg)
	mgr, err := ctrl.NewManager(operatorCfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		NewClient:              writes.NewClient,
	})
	Expect(err).NotTo(HaveOccurred())
	operatorCache = mgr.GetCache()
	publisher = NewPublisher(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("backpressure-operator"),
		WithClock(fakeClock), WithConflictRecheck(conflictRecheck), WithClockID("envtest"), WithDemandSource(testDemand))
	reconciler, _, err = Setup(ctx, mgr, publisher, controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)})
	Expect(err).NotTo(HaveOccurred())

	mgrCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done).WithTimeout(30 * time.Second).Should(Receive(Not(HaveOccurred())))
	})
	Expect(mgr.GetCache().WaitForCacheSync(ctx)).To(BeTrue())
})

// bindOperatorRole creates the generated ClusterRole and binds it to a new
// user, and returns that user's config.
func bindOperatorRole(ctx context.Context, env *envtest.Environment, cfg *rest.Config) *rest.Config {
	root, err := testenv.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var role rbacv1.ClusterRole
	Expect(yaml.Unmarshal(data, &role)).To(Succeed())
	Expect(k8s.Create(ctx, &role)).To(Succeed())
	Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: operatorUser}},
	})).To(Succeed())
	user, err := env.AddUser(envtest.User{Name: operatorUser}, cfg)
	Expect(err).NotTo(HaveOccurred())
	operatorCfg := user.Config()
	operatorCfg.QPS = -1
	return operatorCfg
}
