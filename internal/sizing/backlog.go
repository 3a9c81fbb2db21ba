package sizing

import "time"

// BacklogInput is producers feeding a pool of consumers.
type BacklogInput struct {
	// ArrivalPerSecond is the producers' rate P (greater than 0, at most
	// MaxRate).
	ArrivalPerSecond float64
	// Workers is the number of consumers (1..MaxCount).
	Workers int
	// Latency is the time one consumer takes per item, W (> 0).
	Latency time.Duration
	// Queue is the capacity of the queue between them (1..MaxCount); nil
	// when time to fill is not asked.
	Queue *int
	// Buffer is the length of a burst at rate P to absorb (> 0); nil when
	// not asked.
	Buffer *time.Duration
	// TargetPerSecond is a rate to size the consumers for (greater than 0,
	// at most MaxRate); nil when not asked.
	TargetPerSecond *float64
}

// BacklogResult is how a backlog grows: Q(t) = Q0 + (P − C)·t.
type BacklogResult struct {
	// ConsumerPerSecond is C = Workers / W.
	ConsumerPerSecond float64
	// GrowthPerSecond is P − C; negative when the consumers keep up and a
	// backlog drains at that rate. It is the one signed figure of the
	// package.
	GrowthPerSecond float64
	// TimeToFill is Queue / (P − C), from empty; nil when Queue was not
	// given or the backlog does not grow.
	TimeToFill *time.Duration
	// QueueForBuffer is ceil(max(0, P − C) · Buffer), the queue that absorbs
	// a burst of that length; nil when Buffer was not given.
	QueueForBuffer *int
	// WorkersForTarget is ceil(target · W), the consumers that sustain the
	// target rate; nil when no target was given.
	WorkersForTarget *int
}

// Backlog computes the growth of a queue between producers and consumers.
func Backlog(b BacklogInput) (BacklogResult, error) {
	if err := positiveRateIn("ArrivalPerSecond", b.ArrivalPerSecond); err != nil {
		return BacklogResult{}, err
	}
	if err := countIn("Workers", b.Workers, 1); err != nil {
		return BacklogResult{}, err
	}
	if b.Latency <= 0 {
		return BacklogResult{}, inputErr("Latency", "must be greater than 0, got %s", b.Latency)
	}
	if b.Queue != nil {
		if err := countIn("Queue", *b.Queue, 1); err != nil {
			return BacklogResult{}, err
		}
	}
	if b.Buffer != nil && *b.Buffer <= 0 {
		return BacklogResult{}, inputErr("Buffer", "must be greater than 0, got %s", *b.Buffer)
	}
	if b.TargetPerSecond != nil {
		if err := positiveRateIn("TargetPerSecond", *b.TargetPerSecond); err != nil {
			return BacklogResult{}, err
		}
	}

	res := BacklogResult{ConsumerPerSecond: perSecond(int64(b.Workers), b.Latency)}
	res.GrowthPerSecond = b.ArrivalPerSecond - res.ConsumerPerSecond
	growth := max(0, res.GrowthPerSecond)
	if b.Queue != nil && growth > 0 {
		fill := secondsToDuration(float64(*b.Queue) / growth)
		res.TimeToFill = &fill
	}
	if b.Buffer != nil {
		q := capCount(ceilRatio(growth, int64(*b.Buffer), nanosPerSecond, MaxCount))
		res.QueueForBuffer = &q
	}
	if b.TargetPerSecond != nil {
		w := capCount(ceilRatio(*b.TargetPerSecond, int64(b.Latency), nanosPerSecond, MaxCount))
		res.WorkersForTarget = &w
	}
	return res, nil
}
