package sizing

import "time"

// Pool is an existing worker pool: workers behind a bounded queue.
type Pool struct {
	// Workers is the number of workers (1..MaxCount).
	Workers int
	// Queue is the queue capacity (0..MaxCount).
	Queue int
	// Latency is the time one task takes, W (> 0).
	Latency time.Duration
	// Deadline is the time a task may take, queue wait included (> 0).
	Deadline time.Duration
}

// PoolResult is what a pool delivers at a latency, against a deadline.
type PoolResult struct {
	// ThroughputPerSecond is Workers / W.
	ThroughputPerSecond float64
	// MaxQueueWait is Queue / throughput = Queue·W / Workers, rounded up to
	// a nanosecond: the wait of a task that finds the queue full.
	MaxQueueWait time.Duration
	// Total is MaxQueueWait + W, the longest a task takes.
	Total time.Duration
	// FitsDeadline says whether Total ≤ Deadline.
	FitsDeadline bool
	// LargestQueueThatFits is floor((D − W)·Workers / W), the largest queue
	// whose worst wait still fits the deadline; 0 when even an empty queue
	// does not fit (W > D).
	LargestQueueThatFits int
}

// Evaluate checks an existing pool against a latency and a deadline: a pool
// that was fine at 50 ms can break its deadline at 150 ms.
func Evaluate(p Pool) (PoolResult, error) {
	if err := countIn("Workers", p.Workers, 1); err != nil {
		return PoolResult{}, err
	}
	if err := countIn("Queue", p.Queue, 0); err != nil {
		return PoolResult{}, err
	}
	if p.Latency <= 0 {
		return PoolResult{}, inputErr("Latency", "must be greater than 0, got %s", p.Latency)
	}
	if p.Deadline <= 0 {
		return PoolResult{}, inputErr("Deadline", "must be greater than 0, got %s", p.Deadline)
	}
	workers, w := int64(p.Workers), p.Latency
	res := PoolResult{
		ThroughputPerSecond: perSecond(workers, w),
		// Rounded up, so that a queue reported to fit never misses the
		// deadline by a fraction of a nanosecond.
		MaxQueueWait: time.Duration(mulDivCeil(int64(p.Queue), int64(w), workers)),
	}
	res.Total = addDurations(res.MaxQueueWait, w)
	res.FitsDeadline = res.Total <= p.Deadline
	if room := p.Deadline - w; room > 0 {
		res.LargestQueueThatFits = capCount(mulDivFloor(int64(room), workers, int64(w)))
	}
	return res, nil
}
