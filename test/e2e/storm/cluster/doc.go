// Package cluster is the Kubernetes the storm runs in: a real
// kube-apiserver (with the aggregation layer) and etcd, a real
// kube-controller-manager running the HPA, Deployment, ReplicaSet,
// StatefulSet, garbage-collector and EndpointSlice controllers, and the
// parts of a cluster that have no process here, played by the harness:
//
//   - the custom metrics API the HPA controller reads
//     (custom.metrics.k8s.io/v1beta2 through an APIService, with the
//     certificates of the aggregation layer: MetricsAPI, AggregationPKI),
//     each pod's demand computed from its gate's metrics, and the replica
//     count a scenario with scale steps of its own asks for (DictateHPA);
//   - the scheduler, the kubelet and the Service of one workload
//     (Workload): a bound Pod's container is an OS process (Process), Ready
//     once it logs "Serving"; a deleted Pod's process gets SIGTERM and, once
//     it has exited, the Pod is deleted with grace period 0; a
//     StatefulSet's Pod created again under its name is a new Pod with a
//     new process;
//   - the operator's manager as a process (StartManager), replicas of it
//     and a supervisor that starts one again when it exits, as a
//     Deployment's would be.
//
// A Cluster also restarts kube-apiserver with its certificates and port
// (RestartAPIServer). Nothing here knows the storm's scenarios or its
// traffic: what a pod runs is the caller's PodRunner, and where a Ready
// pod's address goes its Endpoints.
package cluster
