package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

func TestPlanAppliedCondition(t *testing.T) {
	current := plan.Ack{Epoch: "uid-payments", Revision: 4}
	pod := func(name string, serving bool, ack string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if serving {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		if ack != "" {
			p.Annotations = map[string]string{appliedAnnotation("payments"): ack}
		}
		return p
	}
	terminating := func(p corev1.Pod) corev1.Pod {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		return p
	}
	const silentNote = "; a pod whose runtime has acknowledgement off, or reads a mounted volume without an API client, never acknowledges and keeps this condition False; a pod that has just started acknowledges within moments"
	const behindNote = " (not yet reloaded, or calls in flight still above a smaller share)"

	tests := []struct {
		name        string
		pods        []corev1.Pod
		wantApplied string
		want        metav1.Condition
	}{
		{
			name: "every Ready pod at the current revision or a newer one; starting and terminating pods do not count",
			pods: []corev1.Pod{
				pod("a", true, "uid-payments/4"), pod("b", true, "uid-payments/5"),
				pod("starting", false, ""), terminating(pod("leaving", true, "uid-payments/2")),
			},
			wantApplied: "2/2",
			want:        metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllPodsApplied, Message: "all 2 Ready pods applied revision 4"},
		},
		{
			name:        "no Ready pod",
			pods:        []corev1.Pod{pod("starting", false, "")},
			wantApplied: "0/0",
			want:        metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonNoReadyPods, Message: "no pod is Ready, so none enforces a plan older than revision 4"},
		},
		{
			name:        "a pod behind by a revision, one released while Ready",
			pods:        []corev1.Pod{pod("c", true, "uid-payments/3"), pod("a", true, "uid-payments/4"), pod("b", true, "uid-payments/released")},
			wantApplied: "1/3",
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPodsPending,
				Message: "1 of 3 Ready pods applied revision 4; still at an earlier revision: b, c" + behindNote},
		},
		{
			name: "pods without an acknowledgement of this epoch come first, the pods behind are named too",
			pods: []corev1.Pod{
				pod("a", true, "uid-payments/4"), pod("b", true, "uid-payments/3"), pod("off", true, ""),
				pod("earlier-quota", true, "uid-other/4"), pod("garbled", true, "0123abcd"),
			},
			wantApplied: "1/5",
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPodsNotAcknowledging,
				Message: "1 of 5 Ready pods applied revision 4; no acknowledgement of this plan (annotation applied.backpressure.dev/payments) from: earlier-quota, garbled, off" +
					silentNote + "; still at an earlier revision: b" + behindNote},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := countApplied(tt.pods, "payments", current)
			if got := a.text(); got != tt.wantApplied {
				t.Errorf("podsApplied = %q, want %q", got, tt.wantApplied)
			}
			tt.want.Type = v1alpha1.ConditionPlanApplied
			if diff := cmp.Diff(tt.want, planAppliedCondition(a, metav1.Condition{})); diff != "" {
				t.Errorf("PlanApplied (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("twelve pods without acknowledgement are named up to ten", func(t *testing.T) {
		var pods []corev1.Pod
		for _, name := range strings.Fields("p00 p01 p02 p03 p04 p05 p06 p07 p08 p09 p10 p11") {
			pods = append(pods, pod(name, true, ""))
		}
		c := planAppliedCondition(countApplied(pods, "payments", current), metav1.Condition{})
		if want := "from: p00, p01, p02, p03, p04, p05, p06, p07, p08, p09 and 2 more;"; !strings.Contains(c.Message, want) {
			t.Errorf("message %q, want it to contain %q", c.Message, want)
		}
	})

	t.Run("no plan published", func(t *testing.T) {
		ready := metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWorkloadNotFound}
		want := metav1.Condition{Type: v1alpha1.ConditionPlanApplied, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPlanNotPublished,
			Message: "the current plan is not published (Ready is False: WorkloadNotFound); pods keep the last plan they applied"}
		if diff := cmp.Diff(want, planAppliedCondition(nil, ready)); diff != "" {
			t.Errorf("PlanApplied (-want +got):\n%s", diff)
		}
	})
}

func TestWarnOnFindings(t *testing.T) {
	status := func(ready metav1.Condition, diags ...string) *v1alpha1.DownstreamQuotaStatus {
		st := &v1alpha1.DownstreamQuotaStatus{}
		for _, reason := range diags {
			st.Diagnostics = append(st.Diagnostics, v1alpha1.Diagnostic{Reason: reason, Message: reason + " with its arithmetic"})
		}
		ready.Type = v1alpha1.ConditionReady
		st.Conditions = []metav1.Condition{ready}
		return st
	}
	notReady := func(reason string) metav1.Condition {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: reason, Message: "Ready says " + reason}
	}
	published := metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished, Message: "published"}

	tests := []struct {
		name       string
		prev, next *v1alpha1.DownstreamQuotaStatus
		want       []string
	}{
		{
			name: "the workload goes: the note is Ready's message",
			prev: status(published),
			next: status(notReady(v1alpha1.ReasonWorkloadNotFound)),
			want: []string{"Warning WorkloadNotFound Ready says WorkloadNotFound"},
		},
		{
			name: "a finding appears: the note is its diagnostic",
			prev: status(published, v1alpha1.ReasonDemandExceedsQuota),
			next: status(notReady(v1alpha1.ReasonQuotaTooSmall), v1alpha1.ReasonDemandExceedsQuota, v1alpha1.ReasonQuotaTooSmall),
			want: []string{"Warning QuotaTooSmall QuotaTooSmall with its arithmetic"},
		},
		{
			name: "a finding that stays, with other numbers in Ready's message, is not repeated",
			prev: status(notReady(v1alpha1.ReasonQuotaTooSmall), v1alpha1.ReasonQuotaTooSmall),
			next: status(metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonQuotaTooSmall, Message: "other numbers"}, v1alpha1.ReasonQuotaTooSmall),
		},
		{
			name: "a finding behind a more important one warns too; the one that stays does not",
			prev: status(notReady(v1alpha1.ReasonOvercommitted), v1alpha1.ReasonOvercommitted),
			next: status(notReady(v1alpha1.ReasonContractOversubscribed), v1alpha1.ReasonOvercommitted, v1alpha1.ReasonContractOversubscribed),
			want: []string{"Warning ContractOversubscribed ContractOversubscribed with its arithmetic"},
		},
		{
			name: "findings that need no person raise nothing",
			prev: status(published),
			next: status(notReady(v1alpha1.ReasonDeadlineBelowLatency), v1alpha1.ReasonDeadlineBelowLatency, v1alpha1.ReasonDemandExceedsQuota),
		},
		{
			name: "a first status",
			prev: &v1alpha1.DownstreamQuotaStatus{},
			next: status(notReady(v1alpha1.ReasonOvercommitted), v1alpha1.ReasonOvercommitted),
			want: []string{"Warning Overcommitted Overcommitted with its arithmetic"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(10)
			r := NewPublisher(nil, nil, recorder)
			r.warnOnFindings(&v1alpha1.DownstreamQuota{}, tt.prev, tt.next)
			close(recorder.Events)
			var got []string
			for e := range recorder.Events {
				got = append(got, e)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

var _ = Describe("kubectl views", func() {
	It("lets kubectl wait for every Ready pod to apply the current plan, and times it out while a pod does not acknowledge", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		kubectl, err := testenv.NewKubectl(testEnv, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		wait := func(timeout string) (string, string, error) {
			return kubectl.Run("wait", "-n", ns, "--for=condition="+v1alpha1.ConditionPlanApplied, "dq/payments", "--timeout="+timeout)
		}
		expectTimeout := func() {
			GinkgoHelper()
			start := time.Now()
			_, stderr, err := wait("2s")
			Expect(err).To(HaveOccurred(), "kubectl wait ended without error")
			Expect(stderr).To(ContainSubstring("timed out waiting for the condition"))
			Expect(time.Since(start)).To(BeNumerically(">=", 2*time.Second))
		}
		// ackAll plays the runtime in every pod: each acknowledges the
		// revision published now.
		pods := createReadyPods(ctx, ns, "api", 3)
		starting := createPod(ctx, ns, "api", "api-03")
		ackAll := func(g Gomega) plan.Document {
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			annotateApplied(ctx, "payments", plan.AckFor(doc).String(), append(pods, starting)...)
			return doc
		}
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 4))).To(Succeed())
		waitCached(ctx, ns, "api", 4, 3)
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 30))).To(Succeed())

		By("no Ready pod has acknowledged yet; the pod still starting does not count")
		var current plan.Ack
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := planApplied(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPodsNotAcknowledging))
			g.Expect(c.Message).To(HavePrefix("0 of 3 Ready pods applied revision 1; no acknowledgement of this plan (annotation applied.backpressure.dev/payments) from: api-00, api-01, api-02;"))
			g.Expect(c.ObservedGeneration).To(Equal(q.Generation))
			g.Expect(q.Status.PodsApplied).To(Equal("0/3"))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			current = plan.AckFor(doc)
		}).Should(Succeed())
		expectTimeout()

		By("kubectl wait ends once the three acknowledge")
		waited := make(chan string, 1)
		go func() {
			defer GinkgoRecover()
			stdout, stderr, err := wait("60s")
			Expect(err).NotTo(HaveOccurred(), "kubectl wait: %s", stderr)
			waited <- stdout
		}()
		annotateApplied(ctx, "payments", current.String(), pods...)
		Eventually(waited).WithTimeout(60 * time.Second).Should(Receive(ContainSubstring("downstreamquota.backpressure.dev/payments condition met")))
		q := getQuota(ctx, Default, ns, "payments")
		Expect(planApplied(Default, q)).To(MatchFields(IgnoreExtras, Fields{
			"Status": Equal(metav1.ConditionTrue), "Reason": Equal(v1alpha1.ReasonAllPodsApplied),
			"Message": Equal("all 3 Ready pods applied revision 1"), "ObservedGeneration": Equal(q.Generation),
		}))
		Expect(q.Status.PodsApplied).To(Equal("3/3"))

		By("-o wide shows the workload, the divisor's source, the pods that applied the plan and Ready's reason")
		stdout, stderr, err := kubectl.Run("get", "dq", "-n", ns, "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "DOWNSTREAM", "CONCURRENCY", "DIVISOR", "PERMITS/POD", "HANDED-OUT", "USABLE", "READY", "AGE",
			"WORKLOAD", "DIVISOR-SOURCE", "APPLIED", "REASON"}))
		row := strings.Fields(lines[1])
		Expect(row[0]).To(Equal("payments"))
		Expect(row[len(row)-4:]).To(Equal([]string{"api", "ReadyPods", "3/3", "PlanPublished"}))
		stdout, _, err = kubectl.Run("get", "dq", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(stdout).NotTo(ContainSubstring("APPLIED"), "the columns for -o wide stay out of the default view")

		By("a fourth pod turns Ready without ever acknowledging: the condition stays False with PodsNotAcknowledging")
		setReady(ctx, starting)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := planApplied(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPodsNotAcknowledging))
			g.Expect(c.Message).To(MatchRegexp(`^0 of 4 Ready pods applied revision [2-9]; no acknowledgement of this plan \(annotation applied\.backpressure\.dev/payments\) from: api-03; .*; still at an earlier revision: api-00, api-01, api-02 \(`))
			g.Expect(q.Status.PodsApplied).To(Equal("0/4"))
		}).Should(Succeed())
		expectTimeout()

		By("once every pod acknowledges each revision published, the handover ends and so does kubectl wait")
		Eventually(func(g Gomega) {
			doc := ackAll(g)
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(divisionOf(g, q).Revision).To(Equal(doc.Revision))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(planApplied(g, q).Reason).To(Equal(v1alpha1.ReasonAllPodsApplied))
			g.Expect(q.Status.PodsApplied).To(Equal("4/4"))
		}).Should(Succeed())
		stdout, stderr, err = wait("30s")
		Expect(err).NotTo(HaveOccurred(), stderr)
		Expect(stdout).To(ContainSubstring("condition met"))

		By("a changed spec: kubectl wait waits for the new revision, at the new generation")
		q = getQuota(ctx, Default, ns, "payments")
		before := q.Status.Division.Revision
		patch := client.MergeFrom(q.DeepCopy())
		q.Spec.Contract.Concurrency = 40
		Expect(k8s.Patch(ctx, q, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := planApplied(g, q)
			g.Expect(c.ObservedGeneration).To(Equal(q.Generation))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPodsPending))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Revision).To(BeNumerically(">", before))
			g.Expect(c.Message).To(Equal(fmt.Sprintf("0 of 4 Ready pods applied revision %d; still at an earlier revision: api-00, api-01, api-02, api-03 (not yet reloaded, or calls in flight still above a smaller share)",
				doc.Revision)))
			g.Expect(q.Status.PodsApplied).To(Equal("0/4"))
		}).Should(Succeed())
		expectTimeout()
		Eventually(func(g Gomega) {
			ackAll(g)
			g.Expect(planApplied(g, getQuota(ctx, g, ns, "payments")).Reason).To(Equal(v1alpha1.ReasonAllPodsApplied))
		}).Should(Succeed())
		_, stderr, err = wait("30s")
		Expect(err).NotTo(HaveOccurred(), stderr)
	})

	It("shows a contract's handout, handover and reason with -o wide", func(ctx SpecContext) {
		name := "wide-" + newNamespace(ctx)
		dc := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.DownstreamContractSpec{NamespaceSelector: &metav1.LabelSelector{}, Downstream: name + ".example.com", Contract: v1alpha1.Contract{Concurrency: 50}},
		}
		Expect(k8s.Create(ctx, dc)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, dc))).To(Succeed()) })
		Eventually(func(g Gomega) { getContract(ctx, g, name) }).Should(Succeed())
		kubectl, err := testenv.NewKubectl(testEnv, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		stdout, stderr, err := kubectl.Run("get", "dc", name, "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		Expect(lines).To(HaveLen(2))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "DOWNSTREAM", "CONCURRENCY", "USABLE", "READY", "AGE", "HANDED-OUT", "HANDED-OVER", "REASON"}))
		row := strings.Fields(lines[1])
		Expect(row[len(row)-3:]).To(Equal([]string{"0", "HandedOver", "PlanPublished"}))
	})

	It("sets PlanApplied on a quota that shares a contract from its own pods' acknowledgements of the contract's epoch", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dc := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "applied-" + ns},
			Spec:       v1alpha1.DownstreamContractSpec{NamespaceSelector: &metav1.LabelSelector{}, Downstream: "applied-" + ns + ".example.com", Contract: v1alpha1.Contract{Concurrency: 50}},
		}
		Expect(k8s.Create(ctx, dc)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, dc))).To(Succeed()) })
		Expect(k8s.Create(ctx, newDeployment(ns, "search", 2))).To(Succeed())
		pods := []*corev1.Pod{readyPod(ctx, ns, "search", "search-0"), readyPod(ctx, ns, "search", "search-1")}
		waitCached(ctx, ns, "search", 2, 2)
		q := newQuota(ns, "ledger", "search", 1)
		q.Spec.Contract, q.Spec.Downstream = nil, dc.Spec.Downstream
		q.Spec.ContractRef = &v1alpha1.ContractReference{Name: dc.Name}
		Expect(k8s.Create(ctx, q)).To(Succeed())

		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "ledger")
			c := planApplied(g, q)
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPodsNotAcknowledging))
			g.Expect(c.Message).To(HavePrefix("0 of 2 Ready pods applied revision "))
			g.Expect(q.Status.PodsApplied).To(Equal("0/2"))
		}).Should(Succeed())
		// The pods acknowledge with the contract's epoch, as the runtime
		// does with the document's.
		Eventually(func(g Gomega) {
			doc, _ := publishedDocument(ctx, g, ns, "search-backpressure", "ledger")
			g.Expect(doc.Epoch).To(Equal(string(getContract(ctx, g, dc.Name).UID)))
			ackShared(ctx, "ledger", plan.AckFor(doc).String(), pods...)
			q := getQuota(ctx, g, ns, "ledger")
			g.Expect(planApplied(g, q)).To(MatchFields(IgnoreExtras, Fields{
				"Status": Equal(metav1.ConditionTrue), "Reason": Equal(v1alpha1.ReasonAllPodsApplied),
				"Message": Equal(fmt.Sprintf("all 2 Ready pods applied revision %d", doc.Revision)),
			}))
			g.Expect(q.Status.PodsApplied).To(Equal("2/2"))
		}).Should(Succeed())
	})

	It("warns once when WorkloadNotFound, QuotaTooSmall, Overcommitted or ContractOversubscribed appears, not on every status write while it stays", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		q := newQuota(ns, "ledger", "books", 5) // 5 × 80% = 4 permits
		Expect(k8s.Create(ctx, q)).To(Succeed())
		// settled waits until the quota's status describes its generation
		// and satisfies check, then holds the warnings of reason at want
		// for a while: a warning on every write would show there.
		settled := func(check func(Gomega, *v1alpha1.DownstreamQuota), reason string, want int) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				q := getQuota(ctx, g, ns, "ledger")
				g.Expect(q.Status.ObservedGeneration).To(Equal(q.Generation))
				check(g, q)
				g.Expect(warnings(ctx, g, ns, "ledger", reason)).To(HaveLen(want))
			}).Should(Succeed())
			Consistently(func(g Gomega) {
				g.Expect(warnings(ctx, g, ns, "ledger", reason)).To(HaveLen(want))
			}).WithTimeout(time.Second).Should(Succeed())
		}
		readyReason := func(reason string) func(Gomega, *v1alpha1.DownstreamQuota) {
			return func(g Gomega, q *v1alpha1.DownstreamQuota) { g.Expect(ready(g, q).Reason).To(Equal(reason)) }
		}
		update := func(change func(*v1alpha1.DownstreamQuota)) {
			GinkgoHelper()
			q := getQuota(ctx, Default, ns, "ledger")
			patch := client.MergeFrom(q.DeepCopy())
			change(q)
			Expect(k8s.Patch(ctx, q, patch)).To(Succeed())
		}

		By("WorkloadNotFound, once, although a spec change writes the status again")
		settled(readyReason(v1alpha1.ReasonWorkloadNotFound), v1alpha1.ReasonWorkloadNotFound, 1)
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonWorkloadNotFound)).To(Equal([]string{"Deployment books not found; a plan is published once it exists"}))
		update(func(q *v1alpha1.DownstreamQuota) { q.Spec.Retry.MaxRetries = 1 })
		settled(func(g Gomega, q *v1alpha1.DownstreamQuota) { g.Expect(q.Generation).To(BeEquivalentTo(2)) }, v1alpha1.ReasonWorkloadNotFound, 1)

		By("QuotaTooSmall: 4 permits for 6 Ready pods, once, although a seventh pod changes its numbers")
		pods := createReadyPods(ctx, ns, "books", 6)
		// The first step that finds the Deployment warns, once, with its
		// numbers: it must see all six pods, not those cached so far.
		waitCached(ctx, ns, "books", 6, 6)
		Expect(k8s.Create(ctx, newDeployment(ns, "books", 6))).To(Succeed())
		settled(readyReason(v1alpha1.ReasonQuotaTooSmall), v1alpha1.ReasonQuotaTooSmall, 1)
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonQuotaTooSmall)[0]).To(ContainSubstring("Strict gives 4 of the pods 1 permit each and leaves the other 2 at 0"))
		pods = append(pods, readyPod(ctx, ns, "books", "books-06"))
		settled(func(g Gomega, q *v1alpha1.DownstreamQuota) {
			g.Expect(ready(g, q).Message).To(ContainSubstring("leaves the other 3 at 0"))
		}, v1alpha1.ReasonQuotaTooSmall, 1)
		Expect(pods).To(HaveLen(7))

		By("QuotaTooSmall again once it went away and came back")
		update(func(q *v1alpha1.DownstreamQuota) { q.Spec.Contract.Concurrency = 10 }) // 8 permits for 7 pods
		settled(readyReason(v1alpha1.ReasonPlanPublished), v1alpha1.ReasonQuotaTooSmall, 1)
		update(func(q *v1alpha1.DownstreamQuota) { q.Spec.Contract.Concurrency = 5 })
		settled(readyReason(v1alpha1.ReasonQuotaTooSmall), v1alpha1.ReasonQuotaTooSmall, 2)
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonQuotaTooSmall)[1]).To(ContainSubstring("leaves the other 3 at 0"))

		By("Overcommitted under AtLeastOne")
		update(func(q *v1alpha1.DownstreamQuota) { q.Spec.BelowOne = v1alpha1.BelowOneAtLeastOne })
		settled(readyReason(v1alpha1.ReasonOvercommitted), v1alpha1.ReasonOvercommitted, 1)
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonOvercommitted)[0]).To(ContainSubstring("the pods together hold up to 7 in flight against a contract of 5"))

		By("ContractOversubscribed when a second quota hands out the same downstream; Overcommitted, still found, is not repeated")
		second := newQuota(ns, "ledger-copy", "books", 5)
		second.Spec.Downstream = q.Spec.Downstream
		Expect(k8s.Create(ctx, second)).To(Succeed())
		settled(readyReason(v1alpha1.ReasonContractOversubscribed), v1alpha1.ReasonContractOversubscribed, 1)
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonContractOversubscribed)[0]).To(ContainSubstring("= 8 permits against its concurrency of 5"))
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonOvercommitted)).To(HaveLen(1))
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonQuotaTooSmall)).To(HaveLen(2))
		Expect(warnings(ctx, Default, ns, "ledger", v1alpha1.ReasonWorkloadNotFound)).To(HaveLen(1))
		// The second quota warns about its own findings.
		Eventually(func(g Gomega) {
			g.Expect(warnings(ctx, g, ns, "ledger-copy", v1alpha1.ReasonContractOversubscribed)).To(HaveLen(1))
		}).Should(Succeed())
	})

	It("says Ready only once the plan is in its ConfigMap, for a user who waits for Ready and then reads it", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// One etcd orders the resourceVersions of every kind: the
		// ConfigMap's first version with the gate must come before the
		// quota's first Ready status.
		first := func(list client.ObjectList, name string, seen func(client.Object) bool) func() int64 {
			w, err := k8s.Watch(ctx, list, client.InNamespace(ns))
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(w.Stop)
			found := make(chan int64, 1)
			go func() {
				defer GinkgoRecover()
				for ev := range w.ResultChan() {
					if obj, ok := ev.Object.(client.Object); ok && obj.GetName() == name && seen(obj) {
						found <- resourceVersion(obj)
						return
					}
				}
			}()
			return func() int64 {
				var rv int64
				Eventually(found).Should(Receive(&rv))
				return rv
			}
		}
		readyAt := first(&v1alpha1.DownstreamQuotaList{}, "payments", func(o client.Object) bool {
			q := o.(*v1alpha1.DownstreamQuota)
			return meta.IsStatusConditionTrue(q.Status.Conditions, v1alpha1.ConditionReady) || q.Status.ConfigMap != nil
		})
		publishedAt := first(&corev1.ConfigMapList{}, "api-backpressure", func(o client.Object) bool {
			_, ok := o.(*corev1.ConfigMap).Data[plan.KeyFor("payments")]
			return ok
		})
		createReadyPods(ctx, ns, "api", 2)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		waitCached(ctx, ns, "api", 2, 2)
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 30))).To(Succeed())
		Expect(publishedAt()).To(BeNumerically("<", readyAt()))
	})
})

// planApplied returns q's PlanApplied condition, failing when there is
// none.
func planApplied(g Gomega, q *v1alpha1.DownstreamQuota) metav1.Condition {
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionPlanApplied)
	g.Expect(c).NotTo(BeNil(), "quota %s has no PlanApplied condition", q.Name)
	return *c
}

// warnings returns the notes of the Warning events of reason about quota,
// oldest first, once for each time it was recorded: an event repeated
// within a few minutes is stored once, with a series that counts it.
func warnings(ctx context.Context, g Gomega, ns, quota, reason string) []string {
	var out []string
	for _, e := range quotaEvents(ctx, g, ns, quota) {
		if e.Type != corev1.EventTypeWarning || e.Reason != reason {
			continue
		}
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		for range n {
			out = append(out, e.Note)
		}
	}
	return out
}
