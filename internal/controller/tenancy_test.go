package controller

import (
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

var _ = Describe("DownstreamContract tenancy", func() {
	It("gives a namespace editor's quota nothing from a contract that does not name its namespace, and keeps its quotas to one namespace's part of one that does", func(ctx SpecContext) {
		shop, tenant := newNamespace(ctx), newNamespace(ctx)

		// A namespace editor of the tenant namespace: the quota editor role
		// the install aggregates into edit and admin, bound there.
		root, err := testenv.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "downstreamquota_editor_role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		editor := &rbacv1.ClusterRole{}
		Expect(yaml.Unmarshal(data, editor)).To(Succeed())
		editor.Name = "quota-editor-" + tenant
		Expect(k8s.Create(ctx, editor)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, editor))).To(Succeed()) })
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "jane-edits"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editor.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "jane"}},
		})).To(Succeed())
		janeCfg := rest.CopyConfig(testEnv.Config)
		janeCfg.Impersonate = rest.ImpersonationConfig{UserName: "jane", Groups: []string{"system:authenticated"}}
		jane, err := client.New(janeCfg, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())

		// Two contracts: one names no namespace, one admits every namespace
		// and leaves each its default weight of 1.
		closed := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "closed-" + tenant},
			Spec:       v1alpha1.DownstreamContractSpec{Downstream: "closed-" + tenant + ".example.com", Contract: v1alpha1.Contract{Concurrency: 50}},
		}
		open := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "open-" + tenant},
			Spec: v1alpha1.DownstreamContractSpec{Downstream: "open-" + tenant + ".example.com", Contract: v1alpha1.Contract{Concurrency: 50}, // 40 usable
				NamespaceSelector: &metav1.LabelSelector{}},
		}
		for _, dc := range []*v1alpha1.DownstreamContract{closed, open} {
			Expect(k8s.Create(ctx, dc)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, dc))).To(Succeed()) })
		}
		fresh := &v1alpha1.DownstreamContract{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(open), fresh)).To(Succeed())
		Expect(fresh.Spec.MaxWeightPerNamespace).To(BeEquivalentTo(1), "the API's default")

		quota := func(ns, name, workload, contract string, weight int32) *v1alpha1.DownstreamQuota {
			return &v1alpha1.DownstreamQuota{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: v1alpha1.DownstreamQuotaSpec{
					WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: workload},
					Downstream:  contract + ".example.com",
					ContractRef: &v1alpha1.ContractReference{Name: contract},
					Weight:      weight,
					Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
					Deadline:    metav1.Duration{Duration: time.Second},
				},
			}
		}
		Expect(k8s.Create(ctx, newDeployment(shop, "search", 2))).To(Succeed())
		readyPod(ctx, shop, "search", "search-0")
		readyPod(ctx, shop, "search", "search-1")
		Expect(k8s.Create(ctx, quota(shop, "search", "search", open.Name, 1))).To(Succeed())
		Expect(k8s.Create(ctx, newDeployment(tenant, "batch", 1))).To(Succeed())
		readyPod(ctx, tenant, "batch", "batch-0")

		By("the editor's quota on the contract that names no namespace")
		// RBAC lets the editor create it; the contract gives it nothing.
		Expect(jane.Create(ctx, quota(tenant, "grab", "batch", closed.Name, 1000))).To(Succeed())
		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, tenant, "grab"))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractNotFound))
			g.Expect(c.Message).To(ContainSubstring("does not admit namespace " + tenant))
			dc := &v1alpha1.DownstreamContract{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(closed), dc)).To(Succeed())
			g.Expect(dc.Status.Callers).To(BeEmpty())
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(getQuota(ctx, g, tenant, "grab").Status.ConfigMap).To(BeNil())
		}).WithTimeout(time.Second).Should(Succeed())

		By("the editor's quotas on the contract that admits every namespace")
		// Three quotas at the API's largest weight hold the tenant's one
		// part: the shop keeps half of the 40 usable permits.
		for _, name := range []string{"a", "b", "c"} {
			Expect(k8s.Create(ctx, newDeployment(tenant, "batch-"+name, 1))).To(Succeed())
			readyPod(ctx, tenant, "batch-"+name, "batch-"+name+"-0")
			Expect(jane.Create(ctx, quota(tenant, name, "batch-"+name, open.Name, 1000))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			dc := &v1alpha1.DownstreamContract{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(open), dc)).To(Succeed())
			g.Expect(dc.Status.Callers).To(HaveLen(4))
			parts := map[string]int32{}
			for _, c := range dc.Status.Callers {
				parts[c.Namespace] += c.Permits
			}
			g.Expect(parts).To(Equal(map[string]int32{shop: 20, tenant: 20}))
		}).Should(Succeed())

		// The editor cannot raise its cap: contracts are the platform's.
		err = jane.Patch(ctx, open, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"maxWeightPerNamespace":1000}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a namespace editor patched a contract: %v", err)
	})
})
