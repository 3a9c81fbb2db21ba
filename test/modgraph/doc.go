// Package modgraph checks the layering of the repository's modules and what
// each gives the modules that require it:
//
//   - the library (pkg/backpressure), the plan document (api/plan) and the
//     permit server's protocol (api/reserve) are modules of their own; an
//     application that requires only the library gets in its module graph
//     neither this repository's root module, nor controller-runtime, nor
//     anything the library's own graph lacks;
//   - no package of the library imports the operator's, no package of the
//     operator imports the library's, and the plan document and the permit
//     server's protocol import neither (the depguard rules of .golangci.yml
//     say the same for direct imports; these tests follow every import);
//   - modules only a benchmark, the demo or the protobuf compiler needs
//     (ants, gonum, protocompile) are required only by the nested modules
//     hack/bench, hack/stormplot and hack/tools/protoc;
//   - every nested module replaces each module of the repository it
//     requires with the working tree.
package modgraph
