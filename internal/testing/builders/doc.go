// Package builders builds the Kubernetes objects of the operator's tests,
// in the style of kueue's test wrappers (pkg/util/testing/wrappers.go):
// MakeX returns a wrapper of a valid object with sensible defaults, every
// method sets what its name says and returns the wrapper, and Obj returns
// the object. The unit, fake-client and envtest tests of the operator's
// packages, and the performance suite, build their quotas, contracts,
// workloads, pods and HPAs with it instead of literals of their own.
//
//	q := builders.MakeQuota("shop", "logistics-api").Workload("Deployment", "search-gateway").Concurrency(50).Obj()
//
// Plan documents have their builder in the plan's own module
// (api/plan/plantest), where the library's tests can use it too.
package builders
