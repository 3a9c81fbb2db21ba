package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime"
)

// planSource returns where the plans come from (delayed by --apply-delay),
// and the acknowledgement options when --acknowledge is on.
func planSource(c config) (runtime.Source, *runtime.AckOptions, error) {
	src, ack, err := c.Open("backpressure-example-gateway")
	if err != nil {
		return runtime.Source{}, nil, err
	}
	return delayed(src, c.applyDelay), ack, nil
}

// delayed wraps src so that every update it delivers after the first is put
// in force delay late: a fault-injection hook (--apply-delay) that makes
// this pod a laggard, so that tests can watch the operator wait for its
// acknowledgement before handing its capacity to others. The plans New
// reads at start are applied at once. Updates keep their order; the source
// goes on reading while they wait, and the Runtime acknowledges a revision
// only once it enforces it, so the acknowledgement is late too.
func delayed(src runtime.Source, delay time.Duration) runtime.Source {
	if delay <= 0 {
		return src
	}
	// A Source is opaque to applications; this module's programs may wrap
	// one through package reload.
	return reload.WrapSource(src, func(open reload.Opener) reload.Opener {
		return func(ctx context.Context, opts reload.Options) (reload.Source, error) {
			d := &delayedSource{delay: delay, apply: opts.Subscriber, queue: make(chan timedUpdate, 1024), stopped: make(chan struct{})}
			opts.Subscriber = d.enqueue
			inner, err := open(ctx, opts)
			if err != nil {
				return nil, err
			}
			d.Source = inner
			return d, nil
		}
	})
}

// delayedSource is the source delayed opens.
type delayedSource struct {
	reload.Source
	delay time.Duration
	apply reload.Subscriber
	queue chan timedUpdate
	// stopped is closed when Start stops applying, so that a source still
	// delivering then cannot block on a full queue.
	stopped chan struct{}
	started atomic.Bool
}

type timedUpdate struct {
	u  reload.Update
	at time.Time // when to apply u
}

// enqueue is the inner source's subscriber. It blocks only when a thousand
// updates are already waiting, which slows the source rather than dropping
// a plan, and never once Start has stopped applying.
func (d *delayedSource) enqueue(u reload.Update) {
	select {
	case d.queue <- timedUpdate{u: u, at: time.Now().Add(d.delay)}:
	case <-d.stopped:
	}
}

// Start runs the inner source and applies what it delivers, each update
// delay after it arrived, until ctx ends; updates still waiting then are
// dropped, as the process is stopping.
func (d *delayedSource) Start(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return d.Source.Start(ctx) // the inner source's error for a second Start
	}
	go func() {
		defer close(d.stopped)
		for {
			select {
			case <-ctx.Done():
				return
			case tu := <-d.queue:
				t := time.NewTimer(time.Until(tu.at))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				d.apply(tu.u)
			}
		}
	}()
	err := d.Source.Start(ctx)
	<-d.stopped
	return err
}

// Release passes the release on to the inner source when it can release.
func (d *delayedSource) Release(ctx context.Context, gates []string) error {
	if r, ok := d.Source.(reload.Releaser); ok {
		return r.Release(ctx, gates)
	}
	return nil
}
