//go:build unix

package cluster

// ObservePod hands the kubelet a Pod event, as its watch would.
func (w *Workload) ObservePod(obj any, deleted bool) { w.observePod(obj, deleted) }
