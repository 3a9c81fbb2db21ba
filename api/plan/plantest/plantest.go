// Package plantest builds plan documents for tests, and writes them where a
// plan source reads them, as net/http/httptest serves HTTP for tests: the
// tests of the library, of its sidecar proxy, of the example gateway and of
// the operator's own programs build their documents with it instead of a
// struct literal of their own.
//
// It lives in the plan's module, the leaf that the library's module and
// the operator's both require, so that the library's tests can use it
// without their module requiring the operator's, and it imports nothing
// but the plan and the standard library.
//
// A DocumentWrapper is built in the style of kueue's test wrappers:
//
//	d := plantest.MakeDocument("logistics-api").Permits(4).Queue(8, time.Second).Obj()
//
// MakeDocument returns a valid document, every method changes what its name
// says, and Obj returns the document, valid and with its hash.
package plantest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// DocumentWrapper wraps a plan document while a test builds it. The zero
// value is not useful: start from MakeDocument.
type DocumentWrapper struct {
	doc plan.Document
	// revision says whether Revision set the revision; Obj derives it from
	// the content otherwise.
	revision bool
}

// MakeDocument returns a valid document for gate, as the operator would
// publish it: the current version, generation 1, epoch "e1", one permit
// and one worker for every pod, no rate limit, no waiting room, waits and
// an acquire timeout of 50 ms, no latency check, a deadline of 10 s and a
// retry budget of 10 per second.
func MakeDocument(gate string) *DocumentWrapper {
	return &DocumentWrapper{doc: plan.Document{
		Version: plan.CurrentVersion, Gate: gate, Downstream: gate + ".example.com", Generation: 1,
		Epoch: "e1", Permits: 1, Workers: 1,
		MaxQueueWaitSeconds: 0.05, AcquireTimeoutSeconds: 0.05, DeadlineSeconds: 10, RetryBudgetPerSecond: 10,
	}}
}

// Downstream sets the informational name of the downstream.
func (w *DocumentWrapper) Downstream(name string) *DocumentWrapper {
	w.doc.Downstream = name
	return w
}

// Epoch sets the division's epoch.
func (w *DocumentWrapper) Epoch(epoch string) *DocumentWrapper {
	w.doc.Epoch = epoch
	return w
}

// Revision sets the revision. Without it Obj derives one from the content,
// so that documents that differ are distinct revisions, as the operator
// publishes them, and the same document built twice is the same revision.
func (w *DocumentWrapper) Revision(r int64) *DocumentWrapper {
	w.doc.Revision, w.revision = r, true
	return w
}

// Permits sets the base share's permits, and its workers to as many. A
// share of no permits makes no calls: its retry budget is set to zero too,
// as plan.Validate wants.
func (w *DocumentWrapper) Permits(n int) *DocumentWrapper {
	w.doc.Permits, w.doc.Workers = n, n
	if n == 0 {
		w.doc.RetryBudgetPerSecond = 0
	}
	return w
}

// Workers sets the base share's dispatcher workers.
func (w *DocumentWrapper) Workers(n int) *DocumentWrapper {
	w.doc.Workers = n
	return w
}

// Rate sets the base share's admission rate and its burst; zero for both
// means no rate limit.
func (w *DocumentWrapper) Rate(perSecond float64, burst int) *DocumentWrapper {
	w.doc.RatePerSecond, w.doc.Burst = perSecond, burst
	return w
}

// Queue sets the base share's waiting room and the longest wait in it.
func (w *DocumentWrapper) Queue(capacity int, maxWait time.Duration) *DocumentWrapper {
	w.doc.QueueCapacity, w.doc.MaxQueueWaitSeconds = capacity, maxWait.Seconds()
	return w
}

// AcquireTimeout sets the longest a caller waits for a permit.
func (w *DocumentWrapper) AcquireTimeout(d time.Duration) *DocumentWrapper {
	w.doc.AcquireTimeoutSeconds = d.Seconds()
	return w
}

// Latency sets the downstream's typical latency; zero turns the check of a
// call's deadline against it off.
func (w *DocumentWrapper) Latency(d time.Duration) *DocumentWrapper {
	w.doc.LatencySeconds = d.Seconds()
	return w
}

// Deadline sets the per-hop deadline the plan was sized for.
func (w *DocumentWrapper) Deadline(d time.Duration) *DocumentWrapper {
	w.doc.DeadlineSeconds = d.Seconds()
	return w
}

// RetryBudget sets the base share of the retry budget.
func (w *DocumentWrapper) RetryBudget(perSecond float64) *DocumentWrapper {
	w.doc.RetryBudgetPerSecond = perSecond
	return w
}

// Pod gives the pod name a share of its own.
func (w *DocumentWrapper) Pod(name string, s plan.PodShare) *DocumentWrapper {
	pods := make(map[string]plan.PodShare, len(w.doc.Pods)+1)
	for n, p := range w.doc.Pods {
		pods[n] = p
	}
	pods[name] = s
	w.doc.Pods = pods
	return w
}

// Obj returns the document with its revision (see Revision) and its hash.
// It panics when the document is not valid: a test that wants an invalid
// one changes the document Obj returns.
func (w *DocumentWrapper) Obj() plan.Document {
	d := w.doc
	if !w.revision {
		d.Revision = 1
		sum, err := hex.DecodeString(plan.Hash(d)[:8])
		if err != nil {
			panic(err)
		}
		// 1 to 2^31: an int64 that reads well in an acknowledgement.
		d.Revision = 1 + int64(binary.BigEndian.Uint32(sum)>>1)
	}
	d.Hash = plan.Hash(d)
	if err := plan.Validate(d); err != nil {
		panic(fmt.Sprintf("plantest: the document built is not valid: %v", err))
	}
	return d
}

// Write writes d into dir as a careful writer does, as <gate>.json: a
// temporary file renamed into place, so that a source never reads half a
// document. It fails the test on error.
func Write(t testing.TB, dir string, d plan.Document) {
	t.Helper()
	WriteFile(t, dir, plan.KeyFor(d.Gate), Marshal(t, d))
}

// WriteFile writes data into dir/name through a temporary file renamed into
// place. It fails the test on error.
func WriteFile(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// Marshal returns d's encoding, failing the test on error.
func Marshal(t testing.TB, d plan.Document) []byte {
	t.Helper()
	b, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
