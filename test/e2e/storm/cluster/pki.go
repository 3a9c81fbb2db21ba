package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pkiCA is a certificate authority of the harness's own, made for one run.
type pkiCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// newCA makes a self-signed CA named cn, valid for a day.
func newCA(cn string) (*pkiCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pkiCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// issue signs a leaf certificate for cn: a client certificate when dnsNames
// is empty, else a serving certificate for those names and 127.0.0.1. It
// returns the certificate and key in PEM.
func (ca *pkiCA) issue(cn string, dnsNames ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(dnsNames) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = dnsNames
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// AggregationPKI is what API aggregation needs: the front proxy's CA and
// client certificate, which the API server presents to an aggregated API
// server (which trusts that CA for the X-Remote-User headers), and the
// aggregated server's own serving certificate and the CA the APIService's
// caBundle names.
type AggregationPKI struct {
	// FrontProxyCAFile is --requestheader-client-ca-file.
	FrontProxyCAFile string
	// ProxyClientCertFile and ProxyClientKeyFile are --proxy-client-cert-file
	// and --proxy-client-key-file.
	ProxyClientCertFile string
	ProxyClientKeyFile  string
	// ProxyClientName is the front proxy client's common name,
	// --requestheader-allowed-names.
	ProxyClientName string
	// ServingCABundle is the APIService's caBundle.
	ServingCABundle []byte
	// Serving is the aggregated server's certificate.
	Serving tls.Certificate
	// FrontProxyCAs verify the front proxy's client certificate.
	FrontProxyCAs *x509.CertPool
}

// NewAggregationPKI makes the certificates for an aggregated API server
// reached as service.namespace.svc, and writes the API server's files into
// dir.
func NewAggregationPKI(dir, service, namespace string) (*AggregationPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	front, err := newCA("storm-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	p := &AggregationPKI{
		FrontProxyCAFile:    filepath.Join(dir, "front-proxy-ca.crt"),
		ProxyClientCertFile: filepath.Join(dir, "front-proxy-client.crt"),
		ProxyClientKeyFile:  filepath.Join(dir, "front-proxy-client.key"),
		ProxyClientName:     "front-proxy-client",
		FrontProxyCAs:       x509.NewCertPool(),
	}
	p.FrontProxyCAs.AddCert(front.cert)
	clientCert, clientKey, err := front.issue(p.ProxyClientName)
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{p.FrontProxyCAFile: front.certPEM, p.ProxyClientCertFile: clientCert, p.ProxyClientKeyFile: clientKey} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	serving, err := newCA("storm-metrics-serving-ca")
	if err != nil {
		return nil, err
	}
	// The aggregator verifies the name <service>.<namespace>.svc.
	name := fmt.Sprintf("%s.%s.svc", service, namespace)
	certPEM, keyPEM, err := serving.issue(name, name, "localhost")
	if err != nil {
		return nil, err
	}
	if p.Serving, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	p.ServingCABundle = serving.certPEM
	if len(p.ServingCABundle) == 0 {
		return nil, errors.New("storm: empty serving CA")
	}
	return p, nil
}

// APIServerArgs are the kube-apiserver flags that turn on the aggregation
// layer's authentication to aggregated servers.
func (p *AggregationPKI) APIServerArgs() map[string]string {
	return map[string]string{
		"requestheader-client-ca-file":       p.FrontProxyCAFile,
		"requestheader-allowed-names":        p.ProxyClientName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             p.ProxyClientCertFile,
		"proxy-client-key-file":              p.ProxyClientKeyFile,
	}
}
