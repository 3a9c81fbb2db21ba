package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestEvaluate(t *testing.T) {
	var got evaluateJSON
	// 10 workers / 150ms = 66.67/s; 20 queued wait 300ms; 450ms > 300ms;
	// largest queue floor((300ms − 150ms) × 10 / 150ms) = 10.
	runJSON(t, &got, "evaluate", "--workers", "10", "--queue", "20", "--latency", "150ms", "--deadline", "300ms")
	want := evaluateJSON{Throughput: 10 / 0.15, MaxQueueWaitSeconds: 0.3, TotalSeconds: 0.45, LargestQueueThatFits: 10}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("evaluate -o json mismatch (-want +got):\n%s", diff)
	}

	stdout, _, _ := runCLI(t, "evaluate", "--workers", "10", "--queue", "20", "--latency", "50ms", "--deadline", "300ms")
	for _, want := range []string{
		"throughput               200/s  workers / latency = 10 / 50ms",
		"max queue wait           100ms  queue / throughput = 20 / 200/s",
		"fits deadline            yes    total ≤ deadline: 150ms ≤ 300ms",
		"largest queue that fits  50     floor((deadline − latency) × workers / latency) = floor((300ms − 50ms) × 10 / 50ms)",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("evaluate table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestRetry(t *testing.T) {
	var got retryJSON
	runJSON(t, &got, "retry", "--capacity", "100", "--arrival", "150", "--retries", "1")
	// p0 = 1 − 100/150 = 1/3, A = 4/3, 200/s; then p = 1/2, A = 3/2, 225/s.
	if diff := cmp.Diff(roundJSON{Rejection: 1.0 / 3, Amplification: 4.0 / 3, AttemptRate: 200}, got.SingleRound, approx); diff != "" {
		t.Errorf("singleRound (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(roundJSON{Rejection: 0.5, Amplification: 1.5, AttemptRate: 225}, got.Rounds[1], approx); diff != "" {
		t.Errorf("rounds[1] (-want +got):\n%s", diff)
	}
	if got.FixedPoint != got.Rounds[len(got.Rounds)-1] || !got.Converged || !got.DivergentWithoutLimit {
		t.Errorf("fixedPoint %+v, converged %v, divergent %v", got.FixedPoint, got.Converged, got.DivergentWithoutLimit)
	}

	stdout, _, _ := runCLI(t, "retry", "--capacity", "100", "--arrival", "80", "--retries", "3")
	for _, want := range []string{
		"1      0.0%       1.0000         80/s      p = max(0, 1 − 100 / 80), A = (1 − p^4) / (1 − p), attempts = 80 × A",
		"Without a retry limit this still settles: arrival 80/s is within capacity 100/s.",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("retry table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBacklog(t *testing.T) {
	var got backlogJSON
	runJSON(t, &got, "backlog", "--arrival", "1900", "--workers", "50", "--latency", "220ms", "--queue", "1000", "--buffer", "2s", "--target-rate", "500")
	consumer := 50 / 0.22
	fill := 1000 / (1900 - consumer)
	buffer := 3346 // ceil(1672.73 × 2)
	want := backlogJSON{GrowthPerSecond: 1900 - consumer, ConsumerRate: consumer, SecondsToFill: &fill, QueueForBuffer: &buffer, WorkersForTarget: 110}
	// Seconds come from a time.Duration, whole nanoseconds.
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-8, 0)); diff != "" {
		t.Errorf("backlog -o json mismatch (-want +got):\n%s", diff)
	}

	// Without --queue and --buffer they are null; the target defaults to
	// the arrival rate: ceil(100 × 0.22) = 22.
	stdout, _, _ := runCLI(t, "backlog", "--arrival", "100", "--workers", "50", "--latency", "220ms", "-o", "json")
	for _, want := range []string{`"secondsToFill": null`, `"queueForBuffer": null`, `"workersForTarget": 22`} {
		if !containsSpaced(stdout, want) {
			t.Errorf("backlog JSON lacks %s:\n%s", want, stdout)
		}
	}
	stdout, _, _ = runCLI(t, "backlog", "--arrival", "100", "--workers", "50", "--latency", "220ms", "--queue", "10")
	for _, want := range []string{
		"growth            -127.27/s (drains)",
		"time to fill      never",
		"workers for 100/s  22",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("backlog table lacks %q:\n%s", want, stdout)
		}
	}
}
