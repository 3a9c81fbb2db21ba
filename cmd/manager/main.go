// Command manager runs the backpressure-operator: the DownstreamQuota
// controller, which divides each downstream's global contract over the pods
// of the workload that calls it and publishes every pod's share in the
// workload's ConfigMap.
//
// It runs in a cluster under its service account, or outside one against a
// kubeconfig:
//
//	manager --kubeconfig=$HOME/.kube/config --leader-election-namespace=default
//
// With --watch-namespaces the manager reads and writes only in the namespaces
// listed, and needs permissions only there (config/namespaced).
//
// Leader election is on by default. Its lease lives in
// --leader-election-namespace, or else in the pod's own namespace, or else,
// outside a cluster, in the kubeconfig context's namespace. Metrics are
// served over HTTPS and only to callers the API server authenticates and
// authorizes (get on the /metrics non-resource URL). Give "0" as a bind
// address to turn that server off.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller"
	"github.com/backpressure-dev/backpressure-operator/internal/demand"
	quotametrics "github.com/backpressure-dev/backpressure-operator/internal/metrics"
	"github.com/backpressure-dev/backpressure-operator/internal/policycheck"
	"github.com/backpressure-dev/backpressure-operator/internal/version"
)

// The metrics server asks the API server to authenticate and authorize
// each scrape.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

const (
	// eventSource is the reporting controller of the operator's events.
	eventSource = "backpressure-operator"
	// serviceAccountNamespace holds the pod's namespace in a cluster.
	serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)

// errVersion is what parsing --version returns, so that main prints the
// version to stdout and exits 0 without starting anything.
var errVersion = errors.New("manager: version requested")

func main() {
	err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errVersion):
		fmt.Println("manager", version.Get())
	case errors.Is(err, flag.ErrHelp):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options are the manager's flags.
type options struct {
	kubeconfig              string
	metricsAddr             string
	metricsSecure           bool
	metricsCertDir          string
	probeAddr               string
	enableHTTP2             bool
	leaderElect             bool
	leaderElectionNamespace string
	leaderElectionID        string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	workers                 int
	conflictRecheck         time.Duration
	watchNamespaces         []string
	policies                []string
	policyCheckInterval     time.Duration
	zap                     zap.Options
}

// parseFlags parses args into options. The --kubeconfig flag is
// controller-runtime's, read by config.GetConfig.
func parseFlags(args []string, output io.Writer) (*options, error) {
	o := &options{zap: zap.Options{}}
	var printVersion bool
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(output)
	config.RegisterFlags(fs)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", `Address the metrics endpoint binds to, such as ":8443"; "0" turns it off.`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers the API server authenticates and authorizes; false serves plain HTTP to anyone.")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory holding tls.crt and tls.key for the metrics server; empty uses a self-signed certificate.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", `Address the /healthz and /readyz probes bind to; "0" turns them off.`)
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Allow HTTP/2 on the metrics server; off by default against HTTP/2 stream-reset attacks.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so that one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; default: the pod's namespace in a cluster, else the kubeconfig context's namespace.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "backpressure-operator.backpressure.dev", "Name of the leader election lease.")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", defaultLeaseDuration, "How long a lease holds without renewal: how long the other replicas wait before taking over from a leader that died.")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", defaultRenewDeadline, "How long the leader keeps trying to renew before it gives up leading (and exits); less than the lease duration.")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", defaultRetryPeriod, "How often the replicas try to acquire or renew the lease.")
	fs.IntVar(&o.workers, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "Quotas reconciled at once.")
	fs.DurationVar(&o.conflictRecheck, "conflict-recheck", controller.DefaultConflictRecheck, "How often a quota whose ConfigMap name is taken by a ConfigMap the operator does not own checks again.")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose quotas the manager reconciles, and the only ones it reads and writes; default: every namespace. The leader election lease is not affected.", func(v string) error {
		namespaces, err := parseNamespaces(v)
		o.watchNamespaces = namespaces
		return err
	})
	o.policies = policycheck.Policies
	fs.Func("admission-policies", "Comma-separated admission policies the install holds, which the manager checks at start and every --admission-policy-check-interval and reports in its readiness, a metric and events: "+strings.Join(policycheck.Policies, ", ")+"; empty checks none.", func(v string) error {
		policies, err := parsePolicies(v)
		o.policies = policies
		return err
	})
	fs.DurationVar(&o.policyCheckInterval, "admission-policy-check-interval", policycheck.DefaultInterval, "How often the manager checks the admission policies.")
	fs.BoolVar(&printVersion, "version", false, "Print the version and exit.")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if printVersion {
		return nil, errVersion
	}
	o.kubeconfig = fs.Lookup(config.KubeconfigFlagName).Value.String()
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("manager: unexpected arguments %q", fs.Args())
	}
	if o.workers < 1 {
		return nil, fmt.Errorf("manager: --max-concurrent-reconciles must be at least 1, got %d", o.workers)
	}
	if err := checkLeaseTimings(o.leaseDuration, o.renewDeadline, o.retryPeriod); err != nil {
		return nil, err
	}
	if o.conflictRecheck <= 0 {
		return nil, fmt.Errorf("manager: --conflict-recheck must be positive, got %s", o.conflictRecheck)
	}
	if o.policyCheckInterval <= 0 {
		return nil, fmt.Errorf("manager: --admission-policy-check-interval must be positive, got %s", o.policyCheckInterval)
	}
	return o, nil
}

// run parses args and runs the manager until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	o.zap.DestWriter = stderr
	logger := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	log := logger.WithName("setup")
	v := version.Get()
	log.Info("Starting backpressure-operator", "version", v.Version, "commit", v.Commit)

	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("manager: load kubeconfig: %w", err)
	}
	leNamespace := ""
	if o.leaderElect {
		if leNamespace, err = leaderElectionNamespace(o.leaderElectionNamespace, o.kubeconfig); err != nil {
			return err
		}
		log.Info("Leader election enabled", "namespace", leNamespace, "lease", o.leaderElectionID)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}

	cacheOptions := controller.CacheOptions()
	if len(o.watchNamespaces) > 0 {
		// Every cached kind, and the ByObject entries, default to these.
		cacheOptions.DefaultNamespaces = make(map[string]cache.Config, len(o.watchNamespaces))
		for _, ns := range o.watchNamespaces {
			cacheOptions.DefaultNamespaces[ns] = cache.Config{}
		}
		log.Info("Watching only some namespaces", "namespaces", o.watchNamespaces)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOptions,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       leNamespace,
		LeaderElectionReleaseOnCancel: true, // run returns right after the manager stops
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
	})
	if err != nil {
		return fmt.Errorf("manager: create: %w", err)
	}

	// Quotas whose shares follow demand read it from the custom metrics
	// API, as the HPA does; the reader finds the API when first asked, so
	// a cluster without one starts as well.
	demandReader, err := demand.NewReader(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("manager: custom metrics reader: %w", err)
	}
	pub := controller.NewPublisher(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(eventSource),
		controller.WithConflictRecheck(o.conflictRecheck), controller.WithDemandSource(demandReader))
	if _, _, err := controller.Setup(ctx, mgr, pub, ctrlcontroller.Options{MaxConcurrentReconciles: o.workers}); err != nil {
		return err
	}
	if err := quotametrics.Register(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("manager: add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("informers", informersSynced(mgr)); err != nil {
		return fmt.Errorf("manager: add readiness check: %w", err)
	}
	if err := addPolicyCheck(mgr, cfg, o, probeNamespace(o, leNamespace)); err != nil {
		return err
	}

	log.Info("Starting manager", "metrics", o.metricsAddr, "probes", o.probeAddr, "workers", o.workers)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// The leader election timings of client-go's leaderelection package, which
// controller-runtime uses when none are given.
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
	defaultRetryPeriod   = 2 * time.Second
)

// checkLeaseTimings reports timings that client-go's leader election would
// refuse when the manager starts, naming the flag, so that the error comes
// at once: lease duration > renew deadline > retry period × 1.2 (its jitter),
// all positive.
func checkLeaseTimings(lease, renew, retry time.Duration) error {
	switch {
	case retry <= 0:
		return fmt.Errorf("manager: --leader-election-retry-period must be positive, got %s", retry)
	case renew <= time.Duration(1.2*float64(retry)):
		return fmt.Errorf("manager: --leader-election-renew-deadline (%s) must be greater than 1.2 × --leader-election-retry-period (%s)", renew, retry)
	case lease <= renew:
		return fmt.Errorf("manager: --leader-election-lease-duration (%s) must be greater than --leader-election-renew-deadline (%s)", lease, renew)
	}
	return nil
}

// parseNamespaces parses the value of --watch-namespaces: namespace names
// separated by commas, each a DNS-1123 label, without repeats.
func parseNamespaces(v string) ([]string, error) {
	var namespaces []string
	for ns := range strings.SplitSeq(v, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		if slices.Contains(namespaces, ns) {
			return nil, fmt.Errorf("namespace %q is listed twice", ns)
		}
		namespaces = append(namespaces, ns)
	}
	return namespaces, nil
}

// probeNamespace is where the admission policy check may try a ConfigMap:
// the first watched namespace, else the leader election lease's, else the
// pod's or the kubeconfig context's.
func probeNamespace(o *options, leNamespace string) string {
	if len(o.watchNamespaces) > 0 {
		return o.watchNamespaces[0]
	}
	if leNamespace != "" {
		return leNamespace
	}
	if ns, err := leaderElectionNamespace(o.leaderElectionNamespace, o.kubeconfig); err == nil {
		return ns
	}
	return "default"
}

// metricsOptions configures the metrics server from the flags.
func metricsOptions(o *options) metricsserver.Options {
	m := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.metricsSecure,
		CertDir:       o.metricsCertDir,
	}
	if !o.enableHTTP2 {
		m.TLSOpts = append(m.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	if o.metricsSecure {
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return m
}

// informersSynced is a readiness check that passes once the manager's
// informers have synced, so a replica is not ready while it still reads a
// partial cache.
func informersSynced(mgr manager.Manager) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informers not synced")
		}
		return nil
	}
}

// leaderElectionNamespace returns the namespace of the leader election
// lease: flagValue when set; in a cluster (no kubeconfig given), the pod's
// namespace; else the namespace of the kubeconfig's current context, which
// is "default" when the context names none, as with kubectl.
func leaderElectionNamespace(flagValue, kubeconfig string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		if ns, err := os.ReadFile(serviceAccountNamespace); err == nil && len(strings.TrimSpace(string(ns))) > 0 {
			return strings.TrimSpace(string(ns)), nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil {
		return "", fmt.Errorf("manager: leader election needs a namespace for its lease: pass --leader-election-namespace, or --leader-elect=false; the kubeconfig gave none: %w", err)
	}
	if ns == "" {
		return "", errors.New("manager: leader election needs a namespace for its lease: pass --leader-election-namespace, or --leader-elect=false; the kubeconfig gave none")
	}
	return ns, nil
}
