package v1alpha1_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

var (
	env     *envtest.Environment
	k8s     client.Client
	kubectl *testenv.Kubectl
	ctx     = context.Background()
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "DownstreamQuota API against a real API server")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.New()
	Expect(err).NotTo(HaveOccurred())
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)

	scheme, err := testenv.Scheme()
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	kubectl, err = testenv.NewKubectl(env, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
})
