// Package apitest is the root of the library's tests that need a real API
// server (kube-apiserver and etcd, built by hack/setup-envtest.sh): reload
// holds those of the plan sources, backpressure those of the Runtime's
// acknowledgement and bootstrap. Each starts one control plane for its
// tests and gives every test a namespace of its own.
package apitest
