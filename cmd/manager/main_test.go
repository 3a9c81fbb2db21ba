package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.leaderElect || o.metricsAddr != ":8443" || !o.metricsSecure || o.probeAddr != ":8081" || o.enableHTTP2 || o.workers != 4 {
		t.Errorf("defaults: %+v", o)
	}
	if o.leaseDuration != 15*time.Second || o.renewDeadline != 10*time.Second || o.retryPeriod != 2*time.Second {
		t.Errorf("leader election defaults: lease %v, renew %v, retry %v; want client-go's 15s, 10s, 2s", o.leaseDuration, o.renewDeadline, o.retryPeriod)
	}
	o, err = parseFlags([]string{"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.leaseDuration != 4*time.Second || o.renewDeadline != 3*time.Second || o.retryPeriod != time.Second {
		t.Errorf("leader election timings: lease %v, renew %v, retry %v; want 4s, 3s, 1s", o.leaseDuration, o.renewDeadline, o.retryPeriod)
	}
	o, err = parseFlags([]string{"--kubeconfig=/tmp/kc", "--metrics-bind-address=0", "--health-probe-bind-address=0", "--leader-elect=false", "--zap-log-level=debug"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.kubeconfig != "/tmp/kc" || o.metricsAddr != "0" || o.probeAddr != "0" || o.leaderElect {
		t.Errorf("parsed: %+v", o)
	}
	if !slices.Equal(o.policies, []string{"operator-configmaps", "pod-writes"}) || o.policyCheckInterval != time.Minute {
		t.Errorf("admission policies %q checked every %s, want both every minute", o.policies, o.policyCheckInterval)
	}
	o, err = parseFlags([]string{"--admission-policies=", "--admission-policy-check-interval=10s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.policies) != 0 || o.policyCheckInterval != 10*time.Second {
		t.Errorf("--admission-policies= gives %q every %s, want none every 10s", o.policies, o.policyCheckInterval)
	}
	for _, args := range [][]string{
		{"--admission-policies=configmaps"},
		{"--admission-policy-check-interval=0s"},
		{"--max-concurrent-reconciles=0"},
		{"--conflict-recheck=0s"},
		{"--leader-election-retry-period=0s"},
		{"--leader-election-renew-deadline=1s", "--leader-election-retry-period=1s"},
		{"--leader-election-lease-duration=3s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s"},
		{"stray"},
		{"--no-such-flag"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

func TestLeaderElectionNamespace(t *testing.T) {
	dir := t.TempDir()
	write := func(name, namespace string) string {
		ns := ""
		if namespace != "" {
			ns = "\n    namespace: " + namespace
		}
		path := filepath.Join(dir, name)
		data := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx
  context:
    cluster: c
    user: u` + ns + `
current-context: ctx
`
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	withNamespace, withoutNamespace := write("ops", "ops"), write("plain", "")

	tests := []struct {
		name, flag, kubeconfig, want, wantErr string
	}{
		{name: "flag wins", flag: "leases", kubeconfig: withNamespace, want: "leases"},
		{name: "context namespace", kubeconfig: withNamespace, want: "ops"},
		{name: "context without namespace, as kubectl", kubeconfig: withoutNamespace, want: "default"},
		{name: "unreadable kubeconfig", kubeconfig: filepath.Join(dir, "missing"), wantErr: "pass --leader-election-namespace, or --leader-elect=false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := leaderElectionNamespace(tt.flag, tt.kubeconfig)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("leaderElectionNamespace = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// freePort returns a loopback address with a port that was free a moment
// ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRunAgainstAPIServer runs the manager as `go run ./cmd/manager` would,
// with a kubeconfig, against a real API server: it elects itself, serves
// probes and authorized metrics, reconciles, and releases its lease on
// shutdown.
func TestRunAgainstAPIServer(t *testing.T) {
	env, cfg := testenv.Start(t)
	kubectl, err := testenv.NewKubectl(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k8s := testenv.NewClient(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	metricsAddr, probeAddr := freePort(t), freePort(t)
	certDir, roots := servingCertificate(t, "127.0.0.1")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{
			"--kubeconfig=" + kubectl.Kubeconfig,
			"--leader-election-namespace=default",
			"--metrics-bind-address=" + metricsAddr,
			"--metrics-cert-dir=" + certDir,
			"--health-probe-bind-address=" + probeAddr,
		}, io.Discard)
	}()
	stopped := false
	defer func() {
		if !stopped {
			stop()
			if err := <-done; err != nil {
				t.Errorf("run returned %v", err)
			}
		}
	}()

	eventually(t, "readyz/informers", func() error {
		return httpStatus(http.DefaultClient, "http://"+probeAddr+"/readyz/informers", "", http.StatusOK)
	})
	if err := httpStatus(http.DefaultClient, "http://"+probeAddr+"/healthz", "", http.StatusOK); err != nil {
		t.Error(err)
	}
	// No admission policy is installed here, and the kubeconfig's user is
	// no ServiceAccount: the manager is not ready, and says why.
	eventually(t, "readyz/admission-policies", func() error {
		return httpBody(http.DefaultClient, "http://"+probeAddr+"/readyz/admission-policies", http.StatusInternalServerError,
			"admission policy operator-configmaps is not enforced", "admission policy pod-writes is not enforced",
			"no ValidatingAdmissionPolicy labelled backpressure.dev/policy=operator-configmaps exists")
	})
	if err := httpStatus(http.DefaultClient, "http://"+probeAddr+"/readyz", "", http.StatusInternalServerError); err != nil {
		t.Error(err)
	}

	lease := &coordinationv1.Lease{}
	eventually(t, "leader election lease", func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "backpressure-operator.backpressure.dev"}, lease); err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" {
			return errString("lease has no holder")
		}
		return nil
	})

	// The manager reconciles under the kubeconfig's identity.
	d := builders.MakeDeployment("default", "api").Replicas(2).Obj()
	if err := k8s.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	q := builders.MakeQuota("default", "payments").Workload("Deployment", "api").Downstream("payments.example.com").
		Concurrency(10).Latency(100 * time.Millisecond).Deadline(time.Second).Obj()
	if err := k8s.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	eventually(t, "quota Ready", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return errString("not Ready yet")
		}
		return nil
	})

	// Metrics: HTTPS with the certificate of --metrics-cert-dir, which a
	// scraper verifies before it sends its token, and only for callers the
	// API server authenticates and authorizes.
	verifying := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	metricsURL := "https://" + metricsAddr + "/metrics"
	if err := httpStatus(verifying, metricsURL, "", http.StatusUnauthorized); err != nil {
		t.Error(err)
	}
	otherName := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "elsewhere.example.com", MinVersion: tls.VersionTLS12}}}
	if err := httpStatus(otherName, metricsURL, "", http.StatusUnauthorized); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a scraper expecting another name got %v, want a certificate error", err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	grantMetrics(ctx, t, k8s, "scraper")
	if err := httpStatus(verifying, metricsURL, serviceAccountToken(ctx, t, k8s, cs, "stranger"), http.StatusForbidden); err != nil {
		t.Error(err)
	}
	scraper := serviceAccountToken(ctx, t, k8s, cs, "scraper")
	eventually(t, "authorized metrics", func() error { return httpStatus(verifying, metricsURL, scraper, http.StatusOK) })

	stop()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after its context ended")
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("lease still held by %q after shutdown", h)
	}
}

// servingCertificate writes tls.crt and tls.key for ip, issued by a CA of
// its own, as cert-manager writes them into the metrics Secret, and returns
// their directory and a pool holding the CA.
func servingCertificate(t *testing.T, ip string) (string, *x509.CertPool) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metrics CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ip},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP(ip)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, block := range map[string]*pem.Block{"tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return dir, pool
}

type errString string

func (e errString) Error() string { return string(e) }

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpStatus(c *http.Client, url, token string, want int) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return errString(url + ": status " + resp.Status + ", want " + http.StatusText(want) + ": " + string(body))
	}
	if want == http.StatusOK && strings.HasSuffix(url, "/metrics") {
		// The controller's own metrics, and the per-quota ones the dashboard
		// and alerts query, served once this manager leads.
		for _, series := range []string{"controller_runtime_reconcile_total", `backpressure_quota_permits{namespace="default",quota="payments"}`,
			`backpressure_admission_policy_enforced{policy="operator-configmaps"} 0`} {
			if !strings.Contains(string(body), series) {
				return errString("metrics lack " + series)
			}
		}
	}
	return nil
}

// httpBody checks that GET url answers with status want and a body that
// holds every one of parts.
func httpBody(c *http.Client, url string, want int, parts ...string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return errString(url + ": status " + resp.Status + ", want " + http.StatusText(want) + ": " + string(body))
	}
	for _, p := range parts {
		if !strings.Contains(string(body), p) {
			return errString(url + ": body lacks " + strconv.Quote(p) + ": " + string(body))
		}
	}
	return nil
}

// serviceAccountToken creates a service account in default and returns a
// token of it.
func serviceAccountToken(ctx context.Context, t *testing.T, k8s client.Client, cs kubernetes.Interface, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := k8s.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// grantMetrics lets the service account default/name get /metrics.
func grantMetrics(ctx context.Context, t *testing.T, k8s client.Client, name string) {
	t.Helper()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}
