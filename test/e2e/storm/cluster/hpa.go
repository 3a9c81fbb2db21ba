package cluster

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DictateHPA turns hpa into the HPA of a scenario with scale steps of its
// own (the laggard, the two callers): it scales its Deployment on the
// Deployment's ReplicasMetric with a target average value of 1, so that the
// real HPA controller decides exactly the count the scenario set (see
// Workload.Scale), at its next sync: no tolerance, no stabilization, and
// policies that allow any step at once.
func DictateHPA(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	one := resource.MustParse("1")
	zero := resource.MustParse("0")
	noWindow := int32(0)
	maxPolicy := autoscalingv2.MaxChangePolicySelect
	rules := func() *autoscalingv2.HPAScalingRules {
		return &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: &noWindow,
			SelectPolicy:               &maxPolicy,
			Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 100, PeriodSeconds: 1}},
			Tolerance:                  &zero,
		}
	}
	minReplicas := int32(1)
	hpa.Spec.MinReplicas = &minReplicas
	hpa.Spec.MaxReplicas = 20
	hpa.Spec.Metrics = []autoscalingv2.MetricSpec{{
		Type: autoscalingv2.ObjectMetricSourceType,
		Object: &autoscalingv2.ObjectMetricSource{
			DescribedObject: autoscalingv2.CrossVersionObjectReference{
				APIVersion: hpa.Spec.ScaleTargetRef.APIVersion,
				Kind:       hpa.Spec.ScaleTargetRef.Kind,
				Name:       hpa.Spec.ScaleTargetRef.Name,
			},
			Metric: autoscalingv2.MetricIdentifier{Name: ReplicasMetric},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &one},
		},
	}}
	hpa.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: rules(), ScaleDown: rules()}
}
