// Package detach gives a call that must outlive its caller a context of its
// own: the middleware of packages httpmw and grpcmw hold a call's permit
// until the downstream answers, not until the caller leaves, because the
// downstream keeps working on, and counting, a call whose client has left.
package detach

import (
	"context"
	"time"
)

// DefaultLinger bounds the wait of an abandoned call when no linger is
// given.
const DefaultLinger = 10 * time.Second

// Context returns a context that carries ctx's values but not its end: it
// is cancelled linger() after ctx ends (linger is asked then; nil or a
// result <= 0 means DefaultLinger), or when cancel is called, which must be
// called once the work done under it is over.
func Context(ctx context.Context, linger func() time.Duration) (context.Context, context.CancelFunc) {
	detached, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		d := DefaultLinger
		if linger != nil {
			if l := linger(); l > 0 {
				d = l
			}
		}
		timer := time.AfterFunc(d, cancel)
		context.AfterFunc(detached, func() { timer.Stop() })
	})
	return detached, func() {
		// A long-lived ctx would otherwise keep the callback.
		stop()
		cancel()
	}
}
