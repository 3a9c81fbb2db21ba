// Package report turns what a storm scenario recorded into its report:
// the analysis of a run (RunData to VariantReport: phases, timeline,
// reloads, scale steps, rollout, the capacity the Ready pods held against
// the previous division, the retry amplification against the sizing
// model) and of callers sharing one contract (CallersData to
// CallersReport), the goals' record and the goals several scenarios share
// (Goals), the tables for a terminal and the README, the JSON report files
// and the plots drawn from them by hack/stormplot.
//
// A report's JSON form is a contract: hack/stormplot reads it, and the
// field tags do not change. What a scenario must show, its goals, is the
// scenario's (package storm); a report only records them.
package report
