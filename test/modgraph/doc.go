// Package modgraph checks the layering of the repository's modules and what
// each gives the modules that require it:
//
//   - the library (pkg/backpressure) and the plan document (api/plan) are
//     modules of their own; an application that requires only the library
//     gets in its module graph neither this repository's root module, nor
//     controller-runtime, nor anything the library's own graph lacks;
//   - no package of the library imports the operator's, no package of the
//     operator imports the library's, and the plan document imports
//     neither (the depguard rules of .golangci.yml say the same for direct
//     imports; these tests follow every import);
//   - modules only a benchmark or the demo needs (ants, gonum) are required
//     only by the nested modules hack/bench and hack/stormplot;
//   - every nested module replaces each module of the repository it
//     requires with the working tree.
package modgraph
