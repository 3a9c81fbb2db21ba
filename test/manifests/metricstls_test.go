package manifests

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// metricsTLS is what an install says about the metrics certificate: whom
// the ServiceMonitor verifies, with which Secret, and what the manager
// serves.
type metricsTLS struct {
	// serverName and caSecret, caKey are the ServiceMonitor's tlsConfig.
	serverName, caSecret, caKey string
	insecure                    bool
	// serviceHost is <service>.<namespace>.svc of the metrics Service.
	serviceHost string
	// certDNSNames and certSecret are the Certificate's, certIssuer its
	// issuer's name, issuers the Issuers the install creates.
	certDNSNames         []string
	certSecret           string
	certIssuer           string
	issuers              []string
	managerCertDir       string
	managerMountedSecret string
}

func readMetricsTLS(t *testing.T, objs []*unstructured.Unstructured) metricsTLS {
	t.Helper()
	var m metricsTLS
	sm := one(t, objs, "ServiceMonitor")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	tls, _, _ := unstructured.NestedMap(endpoints[0].(map[string]any), "tlsConfig")
	m.serverName, _, _ = unstructured.NestedString(tls, "serverName")
	m.caSecret, _, _ = unstructured.NestedString(tls, "ca", "secret", "name")
	m.caKey, _, _ = unstructured.NestedString(tls, "ca", "secret", "key")
	m.insecure, _, _ = unstructured.NestedBool(tls, "insecureSkipVerify")
	svc := one(t, objs, "Service")
	m.serviceHost = svc.GetName() + "." + svc.GetNamespace() + ".svc"
	cert := one(t, objs, "Certificate")
	m.certDNSNames, _, _ = unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	m.certSecret, _, _ = unstructured.NestedString(cert.Object, "spec", "secretName")
	m.certIssuer, _, _ = unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	for _, i := range find(objs, "Issuer") {
		m.issuers = append(m.issuers, i.GetName())
	}
	d := deployment(t, objs)
	c := d.Spec.Template.Spec.Containers[0]
	m.managerCertDir = argMap(c.Args)["--metrics-cert-dir"]
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != m.managerCertDir {
			continue
		}
		i := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i >= 0 && d.Spec.Template.Spec.Volumes[i].Secret != nil {
			m.managerMountedSecret = d.Spec.Template.Spec.Volumes[i].Secret.SecretName
		}
	}
	return m
}

// Prometheus verifies the manager's certificate before it sends its token:
// the ServiceMonitor names the metrics Service's DNS name and the CA of the
// Secret cert-manager issues the Service's certificate into, for that very
// name, and the manager serves that certificate from --metrics-cert-dir.
// No install skips verification.
func TestMetricsCertificateIsVerified(t *testing.T) {
	renders := map[string][]byte{
		"kustomize config/default with config/certmanager and config/prometheus": kustomizeWithMonitoring(t),
		"helm template, certManager and serviceMonitor":                          helmTemplate(t, "metrics.certManager.enabled=true", "metrics.serviceMonitor.enabled=true"),
	}
	for name, data := range renders {
		t.Run(name, func(t *testing.T) {
			if strings.Contains(string(data), "insecureSkipVerify") {
				t.Error("the install skips verifying a certificate somewhere")
			}
			m := readMetricsTLS(t, decode(t, data))
			switch {
			case m.insecure:
				t.Error("the ServiceMonitor skips verifying the manager's certificate")
			case m.serverName != m.serviceHost:
				t.Errorf("the ServiceMonitor verifies the name %q, want the metrics Service's %q", m.serverName, m.serviceHost)
			case !slices.Contains(m.certDNSNames, m.serviceHost):
				t.Errorf("the certificate is for %v, not the metrics Service's %q", m.certDNSNames, m.serviceHost)
			case m.caSecret != m.certSecret || m.caKey != "ca.crt":
				t.Errorf("the ServiceMonitor trusts %s/%s, want ca.crt of the certificate's Secret %s", m.caSecret, m.caKey, m.certSecret)
			case m.managerCertDir == "" || m.managerMountedSecret != m.certSecret:
				t.Errorf("the manager serves from --metrics-cert-dir=%q, a volume of Secret %q; want the certificate's Secret %s mounted there",
					m.managerCertDir, m.managerMountedSecret, m.certSecret)
			case !slices.Contains(m.issuers, m.certIssuer):
				t.Errorf("the certificate's issuer %q is none of the install's Issuers %v", m.certIssuer, m.issuers)
			}
		})
	}

	t.Run("the chart refuses a ServiceMonitor it cannot have verify", func(t *testing.T) {
		out, err := runErr("go", toolArgs("helm", "template", releaseName, chartDir, "--kube-version", kubeVersion,
			"--set", "metrics.serviceMonitor.enabled=true")...)
		if err == nil {
			t.Fatalf("helm template rendered a ServiceMonitor without a certificate to verify:\n%s", out)
		}
		if !strings.Contains(err.Error(), "needs a certificate Prometheus can verify") {
			t.Errorf("helm template failed for another reason: %v", err)
		}
	})
	t.Run("the chart serves an existing Secret's certificate", func(t *testing.T) {
		objs := decode(t, helmTemplate(t, "metrics.certSecret=metrics-tls", "metrics.serviceMonitor.enabled=true"))
		if n := len(find(objs, "Certificate")); n != 0 {
			t.Errorf("with metrics.certSecret the chart creates %d Certificates, want none", n)
		}
		d := deployment(t, objs)
		if dir := argMap(d.Spec.Template.Spec.Containers[0].Args)["--metrics-cert-dir"]; dir == "" ||
			len(d.Spec.Template.Spec.Volumes) != 1 || d.Spec.Template.Spec.Volumes[0].Secret.SecretName != "metrics-tls" {
			t.Errorf("with metrics.certSecret=metrics-tls the manager serves from %q, volumes %+v", dir, d.Spec.Template.Spec.Volumes)
		}
	})
}
