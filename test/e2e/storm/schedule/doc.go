// Package schedule is the timeline a storm scenario runs on: how long the
// load runs and at what rate, the downstream's latency steps, the replica
// counts a scenario asks the HPA for, and the phases the report
// summarises. Times are offsets from the moment the load starts.
package schedule
