package v1alpha1_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// invalidCase is a file under testdata/invalid whose header names the field
// the API server must reject and a part of the message it must give.
type invalidCase struct {
	path, field, message string
}

func loadInvalidCases() []invalidCase {
	paths, err := filepath.Glob(filepath.Join("testdata", "invalid", "*.yaml"))
	if err != nil {
		panic(err)
	}
	var cases []invalidCase
	for _, p := range paths {
		c := invalidCase{path: p}
		f, err := os.Open(p)
		if err != nil {
			panic(err)
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "# field: "); ok {
				c.field = v
			}
			if v, ok := strings.CutPrefix(s.Text(), "# message: "); ok {
				c.message = v
			}
		}
		_ = f.Close()
		if c.field == "" || c.message == "" {
			panic(p + ": header must give '# field:' and '# message:'")
		}
		cases = append(cases, c)
	}
	return cases
}

var _ = Describe("kubectl apply", Ordered, func() {
	BeforeAll(func() {
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "validation"}})).To(Succeed())
	})

	It("accepts the sample quota with its namespace, Deployment and HPA", func() {
		out, stderr, err := kubectl.Run("apply", "-k", filepath.Join("..", "..", "config", "samples"))
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(out).To(ContainSubstring("downstreamquota.backpressure.dev/logistics-api created"))
		Expect(out).To(ContainSubstring("deployment.apps/search-gateway created"))
		Expect(out).To(ContainSubstring("horizontalpodautoscaler.autoscaling/search-gateway created"))

		var dq v1alpha1.DownstreamQuota
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "logistics-api"}, &dq)).To(Succeed())
		Expect(dq.Spec.Contract.Concurrency).To(BeEquivalentTo(50))
		Expect(dq.Spec.Latency.Worst.Duration).To(Equal(1800 * time.Millisecond))
		Expect(dq.Spec.Deadline.Duration).To(Equal(300 * time.Millisecond))
	})

	It("applies the defaults to a minimal quota", func() {
		_, stderr, err := kubectl.Run("apply", "-n", "validation", "-f", filepath.Join("testdata", "minimal.yaml"))
		Expect(err).NotTo(HaveOccurred(), stderr)

		var dq v1alpha1.DownstreamQuota
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: "validation", Name: "minimal"}, &dq)).To(Succeed())
		Expect(dq.Spec.SafetyPercent).To(BeEquivalentTo(80))
		Expect(dq.Spec.BelowOne).To(Equal(v1alpha1.BelowOneStrict))
		Expect(dq.Spec.WorkloadRef.APIVersion).To(Equal("apps/v1"))
		Expect(dq.Spec.Retry).To(Equal(v1alpha1.RetryPolicy{MaxRetries: 0, BudgetPerSecond: 0}))
	})

	It("accepts a reserve given as a percentage, and as a count", func() {
		_, stderr, err := kubectl.Run("apply", "-n", "validation", "-f", filepath.Join("testdata", "reserve.yaml"))
		Expect(err).NotTo(HaveOccurred(), stderr)
		var dq v1alpha1.DownstreamQuota
		key := types.NamespacedName{Namespace: "validation", Name: "reserve"}
		Expect(k8s.Get(ctx, key, &dq)).To(Succeed())
		Expect(dq.Spec.Reserve.Permits.String()).To(Equal("20%"))
		Expect(dq.Spec.Reserve.BrokerRef.Name).To(Equal("search-gateway-broker"))

		dq.Spec.Reserve.Permits = intstr.FromInt32(8)
		Expect(k8s.Update(ctx, &dq)).To(Succeed())
		Expect(k8s.Get(ctx, key, &dq)).To(Succeed())
		Expect(dq.Spec.Reserve.Permits.IntValue()).To(Equal(8))
	})

	It("accepts shares that follow demand, and defaults the policy to Equal", func() {
		_, stderr, err := kubectl.Run("apply", "-n", "validation", "-f", filepath.Join("testdata", "shares.yaml"))
		Expect(err).NotTo(HaveOccurred(), stderr)
		var dq v1alpha1.DownstreamQuota
		key := types.NamespacedName{Namespace: "validation", Name: "shares"}
		Expect(k8s.Get(ctx, key, &dq)).To(Succeed())
		Expect(dq.Spec.Shares.Policy).To(Equal(v1alpha1.SharesDemand))
		Expect(dq.Spec.Shares.Metric).To(BeEmpty())

		dq.Spec.Shares = &v1alpha1.Shares{}
		Expect(k8s.Update(ctx, &dq)).To(Succeed())
		Expect(k8s.Get(ctx, key, &dq)).To(Succeed())
		Expect(dq.Spec.Shares.Policy).To(Equal(v1alpha1.SharesEqual))
	})

	It("shows the printer columns", func() {
		out, stderr, err := kubectl.Run("get", "dq", "-n", "shop")
		Expect(err).NotTo(HaveOccurred(), stderr)
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		Expect(header).To(Equal([]string{"NAME", "DOWNSTREAM", "CONCURRENCY", "DIVISOR", "PERMITS/POD", "HANDED-OUT", "USABLE", "READY", "AGE"}))
		Expect(out).To(ContainSubstring("logistics.example.com"))
	})

	cases := loadInvalidCases()
	It("has at least one invalid object per validation rule", func() {
		Expect(len(cases)).To(BeNumerically(">=", 10))
	})
	for _, c := range cases {
		It("rejects "+filepath.Base(c.path)+" naming "+c.field, func() {
			_, stderr, err := kubectl.Run("apply", "-n", "validation", "-f", c.path)
			GinkgoWriter.Print(stderr)
			Expect(err).To(HaveOccurred(), "kubectl apply accepted an invalid object")
			Expect(stderr).To(ContainSubstring(c.field+":"), "the error must name the field")
			Expect(stderr).To(ContainSubstring(c.message))
		})
	}
})
