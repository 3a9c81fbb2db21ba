// Package traffic is the storm's traffic: the open-loop load that users
// send to a workload's Ready pods (Load, through Endpoints, which play a
// Service and its load balancer), and the third-party downstream those pods
// call, which enforces its global contract by answering 429 to any call
// beyond its in-flight limit (Downstream).
//
// It knows nothing of Kubernetes: the storm's kubelet adds a pod's address
// to Endpoints once the pod is Ready and removes it when the pod starts
// terminating.
package traffic
