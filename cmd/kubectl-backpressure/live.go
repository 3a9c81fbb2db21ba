package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// quotaTypeNames are the spellings of the DownstreamQuota type that plan
// accepts before /NAME, as kubectl get does.
var quotaTypeNames = []string{"dq", "downstreamquota", "downstreamquotas", "downstreamquota.backpressure.dev", "downstreamquotas.backpressure.dev"}

// cluster reads what the live commands show: quotas, their contracts,
// workloads, HPAs and pods. Every read is one API call; nothing is cached
// or watched, so each run shows the cluster as it is.
type cluster struct {
	client client.Reader
	// namespace is the one of -n, or of the kubeconfig context.
	namespace string
	// listed holds, by namespace, what prefetch listed there; a namespace
	// not in it is read object by object.
	listed map[string]*namespaceObjects
	// contracts remembers the DownstreamContracts read, by name.
	contracts map[string]*v1alpha1.DownstreamContract
}

// namespaceObjects is what the pods of a namespace's quotas are found
// through: its Deployments and StatefulSets by name, and its pods.
type namespaceObjects struct {
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	pods         []corev1.Pod
}

// prefetch lists the Deployments, StatefulSets and pods of each namespace
// once, for a view of many quotas: three requests a namespace instead of
// two a quota, which at client-go's default 5 requests a second is what
// keeps `status -A` quick on a cluster with many quotas. A namespace whose
// lists fail (forbidden, say) is left to be read quota by quota, where the
// error is shown where it belongs.
func (c *cluster) prefetch(ctx context.Context, namespaces []string) {
	if c.listed == nil {
		c.listed = map[string]*namespaceObjects{}
	}
	for _, ns := range namespaces {
		if _, done := c.listed[ns]; done {
			continue
		}
		var deployments appsv1.DeploymentList
		var statefulSets appsv1.StatefulSetList
		var pods corev1.PodList
		if c.client.List(ctx, &deployments, client.InNamespace(ns)) != nil ||
			c.client.List(ctx, &statefulSets, client.InNamespace(ns)) != nil ||
			c.client.List(ctx, &pods, client.InNamespace(ns)) != nil {
			continue
		}
		objs := &namespaceObjects{
			deployments:  map[string]*appsv1.Deployment{},
			statefulSets: map[string]*appsv1.StatefulSet{},
			pods:         pods.Items,
		}
		for i := range deployments.Items {
			objs.deployments[deployments.Items[i].Name] = &deployments.Items[i]
		}
		for i := range statefulSets.Items {
			objs.statefulSets[statefulSets.Items[i].Name] = &statefulSets.Items[i]
		}
		c.listed[ns] = objs
	}
}

// newLiveScheme knows the kinds the live commands read.
func newLiveScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// staticMapper maps the few kinds the live commands read (and their
// lists) to their resources without asking the API server's discovery: one
// round trip fewer per run, and no discovery cache written under ~/.kube.
func staticMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	namespaced := []schema.GroupVersionKind{
		v1alpha1.GroupVersion.WithKind("DownstreamQuota"),
		appsv1.SchemeGroupVersion.WithKind("Deployment"),
		appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
		autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"),
		corev1.SchemeGroupVersion.WithKind("Pod"),
	}
	cluster := []schema.GroupVersionKind{
		v1alpha1.GroupVersion.WithKind("DownstreamContract"),
		corev1.SchemeGroupVersion.WithKind("Namespace"),
	}
	for scope, kinds := range map[meta.RESTScope][]schema.GroupVersionKind{meta.RESTScopeNamespace: namespaced, meta.RESTScopeRoot: cluster} {
		for _, gvk := range kinds {
			m.Add(gvk, scope)
			m.Add(gvk.GroupVersion().WithKind(gvk.Kind+"List"), scope)
		}
	}
	return m
}

// connect builds a client from the kubeconfig flags.
func connect(flags *genericclioptions.ConfigFlags) (*cluster, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	s, err := newLiveScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s, Mapper: staticMapper()})
	if err != nil {
		return nil, err
	}
	return &cluster{client: c, namespace: ns}, nil
}

// servedHint explains a NotFound on a list of a project kind: the API
// server does not serve it, so the CRDs are not installed. (A NotFound on
// a get is the object's.)
func servedHint(err error, kind string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the cluster does not serve %s of %s: are backpressure-operator's CRDs installed? (%w)", kind, v1alpha1.GroupVersion, err)
	}
	return err
}

// quota reads one DownstreamQuota.
func (c *cluster) quota(ctx context.Context, namespace, name string) (*v1alpha1.DownstreamQuota, error) {
	q := &v1alpha1.DownstreamQuota{}
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, q); err != nil {
		return nil, err
	}
	return q, nil
}

// quotas lists the DownstreamQuotas of namespace ("" for every namespace)
// by namespace and name.
func (c *cluster) quotas(ctx context.Context, namespace string) ([]v1alpha1.DownstreamQuota, error) {
	var list v1alpha1.DownstreamQuotaList
	if err := c.client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, servedHint(err, "DownstreamQuotas")
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.DownstreamQuota) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return list.Items, nil
}

// hpaOf returns the HPA that scales q's workload: spec.hpaName, or else the
// HPA whose scaleTargetRef names the workload and, as the operator picks
// when two fight over one workload, wants the most replicas. It returns
// nil and no error when there is none.
func (c *cluster) hpaOf(ctx context.Context, q *v1alpha1.DownstreamQuota) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	if name := q.Spec.HPAName; name != "" {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: q.Namespace, Name: name}, hpa); err != nil {
			return nil, fmt.Errorf("spec.hpaName: %w", err)
		}
		return hpa, nil
	}
	var list autoscalingv2.HorizontalPodAutoscalerList
	if err := c.client.List(ctx, &list, client.InNamespace(q.Namespace)); err != nil {
		return nil, err
	}
	target := quota.WorkloadKey(q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name)
	var found []autoscalingv2.HorizontalPodAutoscaler
	for _, hpa := range list.Items {
		if key, ok := quota.HPATarget(&hpa); ok && key == target {
			found = append(found, hpa)
		}
	}
	if len(found) == 0 {
		return nil, nil
	}
	best := slices.MinFunc(found, func(a, b autoscalingv2.HorizontalPodAutoscaler) int {
		return cmp.Or(cmp.Compare(b.Status.DesiredReplicas, a.Status.DesiredReplicas), cmp.Compare(a.Name, b.Name))
	})
	return &best, nil
}

// errWorkloadNotFound is returned by podsOf when the workload does not
// exist.
var errWorkloadNotFound = errors.New("workload not found")

// errBrokerNotFound is returned by brokerPodsOf when the permit server's
// Deployment does not exist.
var errBrokerNotFound = errors.New("broker not found")

// podsOf lists the pods of q's workload, through its selector, by name.
func (c *cluster) podsOf(ctx context.Context, q *v1alpha1.DownstreamQuota) ([]corev1.Pod, error) {
	ref := q.Spec.WorkloadRef
	selector, err := c.workloadSelector(ctx, q)
	if err != nil {
		return nil, err
	}
	return c.podsSelected(ctx, q.Namespace, selector, ref.Kind+"/"+ref.Name)
}

// brokerPodsOf returns the pods of the Deployment that runs q's permit
// server (spec.reserve.brokerRef), sorted by name; errBrokerNotFound when
// the Deployment does not exist.
func (c *cluster) brokerPodsOf(ctx context.Context, q *v1alpha1.DownstreamQuota) ([]corev1.Pod, error) {
	name := q.Spec.Reserve.BrokerRef.Name
	var d *appsv1.Deployment
	if objs := c.listed[q.Namespace]; objs != nil {
		d = objs.deployments[name]
	} else {
		d = &appsv1.Deployment{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: q.Namespace, Name: name}, d); apierrors.IsNotFound(err) {
			d = nil
		} else if err != nil {
			return nil, err
		}
	}
	if d == nil {
		return nil, errBrokerNotFound
	}
	return c.podsSelected(ctx, q.Namespace, d.Spec.Selector, "Deployment/"+name)
}

// podsSelected returns the pods of namespace that selector (of the
// workload what) matches, sorted by name.
func (c *cluster) podsSelected(ctx context.Context, namespace string, selector *metav1.LabelSelector, what string) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("%s: spec.selector: %w", what, err)
	}
	if sel.Empty() {
		// The API server rejects an empty selector on apps/v1; an empty
		// one here would list every pod of the namespace.
		sel = labels.Nothing()
	}
	var pods []corev1.Pod
	if objs := c.listed[namespace]; objs != nil {
		for _, p := range objs.pods {
			if sel.Matches(labels.Set(p.Labels)) {
				pods = append(pods, p)
			}
		}
	} else {
		var list corev1.PodList
		if err := c.client.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, err
		}
		pods = list.Items
	}
	sortPods(pods)
	return pods, nil
}

// sortPods puts pods in the natural order of their names (naturalCompare).
func sortPods(pods []corev1.Pod) {
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return naturalCompare(a.Name, b.Name) })
}

// workloadSelector returns the pod selector of q's workload, from what
// prefetch listed or from the API server.
func (c *cluster) workloadSelector(ctx context.Context, q *v1alpha1.DownstreamQuota) (*metav1.LabelSelector, error) {
	ref := q.Spec.WorkloadRef
	key := client.ObjectKey{Namespace: q.Namespace, Name: ref.Name}
	objs := c.listed[q.Namespace]
	switch ref.Kind {
	case "Deployment":
		if objs != nil {
			if d, ok := objs.deployments[ref.Name]; ok {
				return d.Spec.Selector, nil
			}
			return nil, errWorkloadNotFound
		}
		var d appsv1.Deployment
		if err := c.client.Get(ctx, key, &d); err != nil {
			return nil, workloadErr(err)
		}
		return d.Spec.Selector, nil
	case "StatefulSet":
		if objs != nil {
			if s, ok := objs.statefulSets[ref.Name]; ok {
				return s.Spec.Selector, nil
			}
			return nil, errWorkloadNotFound
		}
		var s appsv1.StatefulSet
		if err := c.client.Get(ctx, key, &s); err != nil {
			return nil, workloadErr(err)
		}
		return s.Spec.Selector, nil
	default:
		return nil, fmt.Errorf("spec.workloadRef.kind: must be Deployment or StatefulSet, got %q", ref.Kind)
	}
}

func workloadErr(err error) error {
	if apierrors.IsNotFound(err) {
		return errWorkloadNotFound
	}
	return err
}

// contract reads the DownstreamContract a quota shares, once per name: the
// callers of one contract show it as it was read for the first.
func (c *cluster) contract(ctx context.Context, name string) (*v1alpha1.DownstreamContract, error) {
	if dc, ok := c.contracts[name]; ok {
		return dc, nil
	}
	dc := &v1alpha1.DownstreamContract{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: name}, dc); err != nil {
		return nil, err
	}
	if c.contracts == nil {
		c.contracts = map[string]*v1alpha1.DownstreamContract{}
	}
	c.contracts[name] = dc
	return dc, nil
}

// quotaName parses a plan argument, dq/NAME (or another spelling of the
// type), and returns NAME.
func quotaName(arg string) (string, error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || name == "" || strings.Contains(name, "/") || !slices.Contains(quotaTypeNames, strings.ToLower(kind)) {
		return "", fmt.Errorf("argument %q: must be dq/NAME, a DownstreamQuota of the namespace (-n)", arg)
	}
	return name, nil
}

// newConfigFlags returns the standard kubeconfig flags (--kubeconfig,
// --context, -n, --as, ...) of kubectl, added to cmd.
func newConfigFlags(cmd *cobra.Command) *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(true)
	f.AddFlags(cmd.Flags())
	return f
}
