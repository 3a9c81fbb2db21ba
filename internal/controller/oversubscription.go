package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// claimant is a quota or contract that hands out permits of a downstream.
type claimant struct {
	name        string
	concurrency int32
	usable      int64
}

// oversubscription checks the quotas and contracts that name downstream
// without sharing one contract: when the permits they hand out add up to
// more than the smallest concurrency any of them states for it, it returns
// a ContractOversubscribed diagnostic with the arithmetic. self is the
// quota being reconciled, if any: it counts, about to publish, while
// another quota that has published nothing (its workload missing, its spec
// invalid) hands out nothing and does not.
func oversubscription(ctx context.Context, c client.Reader, downstream string, self client.ObjectKey) (*v1alpha1.Diagnostic, error) {
	var quotas v1alpha1.DownstreamQuotaList
	if err := c.List(ctx, &quotas, client.MatchingFields{indexer.QuotaDownstreamKey: downstream}); err != nil {
		return nil, fmt.Errorf("controller: list quotas of downstream %s: %w", downstream, err)
	}
	var contracts v1alpha1.DownstreamContractList
	if err := c.List(ctx, &contracts); err != nil {
		return nil, fmt.Errorf("controller: list contracts: %w", err)
	}
	var all []claimant
	for i := range quotas.Items {
		o := &quotas.Items[i]
		if o.Spec.Contract == nil || !o.DeletionTimestamp.IsZero() {
			continue // a shared quota counts through its contract
		}
		if o.Status.ConfigMap == nil && client.ObjectKeyFromObject(o) != self {
			continue
		}
		spec := quota.Default(o.Spec)
		all = append(all, claimant{
			name:        "DownstreamQuota " + o.Namespace + "/" + o.Name,
			concurrency: spec.Contract.Concurrency,
			usable:      int64(quota.ClusterConcurrency(*spec.Contract)) * int64(spec.SafetyPercent) / 100,
		})
	}
	for i := range contracts.Items {
		dc := &contracts.Items[i]
		if dc.Spec.Downstream != downstream {
			continue
		}
		all = append(all, claimant{
			name:        "DownstreamContract " + dc.Name,
			concurrency: dc.Spec.Contract.Concurrency,
			usable:      quota.ContractUsable(dc.Spec),
		})
	}
	if len(all) < 2 {
		return nil, nil
	}
	slices.SortFunc(all, func(a, b claimant) int { return strings.Compare(a.name, b.name) })
	var (
		sum   int64
		terms []string
		least = all[0].concurrency
	)
	for _, cl := range all {
		sum += cl.usable
		least = min(least, cl.concurrency)
		terms = append(terms, fmt.Sprintf("%s %d", cl.name, cl.usable))
	}
	if sum <= int64(least) {
		return nil, nil
	}
	return &v1alpha1.Diagnostic{
		Reason: v1alpha1.ReasonContractOversubscribed,
		Message: fmt.Sprintf("%d quotas and contracts name downstream %s without sharing one contract and hand out %s = %d permits against its concurrency of %d; share one DownstreamContract through spec.contractRef, or lower their parts",
			len(all), downstream, strings.Join(terms, " + "), sum, least),
	}, nil
}
