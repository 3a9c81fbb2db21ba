// Package observe is what the storm learns while a scenario runs, from
// the outside as a user would: the plans the operator publishes in a
// ConfigMap, the quota's rollout and division in its status, the pods'
// acknowledgements in their annotations (watches of the API server), the
// plans each pod's gate puts in force (its "Applied plan" log lines), the
// permits its gate exports in backpressure_gate_permits (a scrape), and a
// DownstreamContract's split over its callers.
package observe
