// Package modgraph checks what an application that requires this module
// gets in its module graph: every requirement of the root go.mod, and the
// packages of pkg/backpressure. Modules only a benchmark or the demo needs (ants,
// gonum) belong in the nested modules hack/bench and hack/stormplot, not
// here.
package modgraph
