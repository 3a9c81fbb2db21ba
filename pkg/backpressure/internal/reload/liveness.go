package reload

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// Liveness is implemented by a Source that knows when it last held what its
// origin holds, as *ConfigMapSource does: a Runtime lets a gate that does
// not acknowledge lapse to a share of 0 once its source has not confirmed
// it for nearly the operator's unacknowledged delay. *DirSource does not:
// the kubelet gives a mounted volume no signal of being current.
type Liveness interface {
	// Confirmed returns whether the source is live now (it follows its
	// origin), and otherwise the last moment it was known to hold what its
	// origin held; the zero time when it never was.
	Confirmed() (live bool, at time.Time)
}

// rewatchGap is how soon after the previous watch ended a new one may
// start without reading the ConfigMap first: the informer renews a watch
// that timed out at once, while one that comes back after a failure may
// replay changes the gates must not run without.
const rewatchGap = time.Second

// liveness tracks a ConfigMapSource's confirmations: a successful read
// loaded (a list or get) confirms, an open watch started on a loaded read
// confirms for as long as it stays open, and a failure ends it.
type liveness struct {
	now func() time.Time
	wg  sync.WaitGroup // the watches' forwarders

	mu    sync.Mutex
	open  int       // watches open
	fresh bool      // a read was loaded since the last failure
	at    time.Time // the last moment known confirmed
}

func newLiveness() *liveness { return &liveness{now: time.Now} }

// Confirmed implements Liveness.
func (l *liveness) Confirmed() (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open > 0 && l.fresh, l.at
}

// confirmed records a read just loaded.
func (l *liveness) confirmed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at, l.fresh = l.now(), true
}

// failed records a list, get or watch that failed: the source holds what it
// held when it was last live.
func (l *liveness) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked()
	l.fresh = false
}

// endLocked stamps the end of a live period.
func (l *liveness) endLocked() {
	if l.open > 0 && l.fresh {
		l.at = l.now()
	}
}

// needsRead reports whether a watch about to start must be preceded by a
// read: after a failure, or a pause longer than rewatchGap.
func (l *liveness) needsRead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.fresh || (l.open == 0 && l.now().Sub(l.at) > rewatchGap)
}

// follow returns w, counted as open until its result channel closes; an
// error event ends the confirmation at once.
func (l *liveness) follow(w watch.Interface) watch.Interface {
	l.mu.Lock()
	l.open++
	l.mu.Unlock()
	lw := &liveWatch{inner: w, out: make(chan watch.Event), done: make(chan struct{})}
	l.wg.Go(func() { lw.run(l) })
	return lw
}

// liveWatch forwards a watch's events and tells its liveness when it ends.
type liveWatch struct {
	inner watch.Interface
	out   chan watch.Event
	done  chan struct{}
	once  sync.Once
}

// Stop stops the watch and its forwarding.
func (w *liveWatch) Stop() {
	w.once.Do(func() { close(w.done) })
	w.inner.Stop()
}

// ResultChan returns the forwarded events.
func (w *liveWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *liveWatch) run(l *liveness) {
	defer close(w.out)
	defer func() {
		l.mu.Lock()
		l.endLocked()
		l.open--
		l.mu.Unlock()
	}()
	for ev := range w.inner.ResultChan() {
		if ev.Type == watch.Error {
			// An expired resource version or a server error: the
			// reflector lists again, which confirms again.
			l.failed()
		}
		select {
		case w.out <- ev:
		case <-w.done:
			return
		}
	}
}
