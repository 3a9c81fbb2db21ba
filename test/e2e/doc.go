// Package e2e holds the end-to-end suite of the project: the 429 storm of
// the README's story, reproduced without the operator and prevented with
// it, a pod that applies every plan late, two workloads sharing one
// contract, and the faults (faults_test.go: the leader killed, the API
// server restarted, finished pods, a StatefulSet caller), against a real API server, the manager as a process and one
// examples/gateway process per pod (see package storm for the harness).
//
// The suite is behind the e2e build tag, so that `go test ./...` does not
// run it; run it with `make e2e` or
//
//	KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go test -tags e2e -timeout 20m ./test/e2e/
//
// $STORM_TIME_SCALE (for example 0.5) shortens the schedule for a quicker,
// less faithful run.
package e2e
