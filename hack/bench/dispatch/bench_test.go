package dispatch_test

import (
	"context"
	"sync"
	"testing"

	"github.com/panjf2000/ants/v2"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
)

const (
	benchWorkers = 4
	// benchBatch tasks are submitted before waiting for them all; it is the
	// queue capacity of the dispatcher and the channel pool, so neither ever
	// refuses a task (ants, which has no queue, blocks the submitter instead).
	benchBatch = 256
)

// runSubmit submits b.N trivial tasks in batches of benchBatch, waiting for
// each batch to finish, and reports the cost per task.
func runSubmit(b *testing.B, submit func(task func())) {
	var wg sync.WaitGroup
	task := func() { wg.Done() }
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		wg.Add(1)
		submit(task)
		if i++; i%benchBatch == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
}

// BenchmarkSubmit compares the dispatcher with ants and a plain channel pool
// at the same worker count on a trivial task.
func BenchmarkSubmit(b *testing.B) {
	b.Run("dispatcher", func(b *testing.B) {
		d, err := dispatch.New("bench", dispatch.Limits{Workers: benchWorkers, QueueCapacity: benchBatch})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = d.Shutdown(context.Background()) }()
		ctx := context.Background()
		var wg sync.WaitGroup
		task := func(context.Context) { wg.Done() }
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			wg.Add(1)
			if err := d.Submit(ctx, task); err != nil {
				b.Fatal(err)
			}
			if i++; i%benchBatch == 0 {
				wg.Wait()
			}
		}
		wg.Wait()
	})
	b.Run("ants", func(b *testing.B) {
		p, err := ants.NewPool(benchWorkers)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Release()
		runSubmit(b, func(task func()) {
			if err := p.Submit(task); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("chanpool", func(b *testing.B) {
		tasks := make(chan func(), benchBatch)
		var workers sync.WaitGroup
		for range benchWorkers {
			workers.Go(func() {
				for task := range tasks {
					task()
				}
			})
		}
		defer func() { close(tasks); workers.Wait() }()
		runSubmit(b, func(task func()) { tasks <- task })
	})
}
