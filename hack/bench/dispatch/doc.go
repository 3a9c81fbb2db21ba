// Package dispatch holds the benchmarks that compare the library's
// dispatcher (pkg/backpressure/dispatch) with worker pools from other modules,
// which the library's own module must not require.
package dispatch
