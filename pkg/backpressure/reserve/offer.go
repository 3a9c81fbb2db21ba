package reserve

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Offer offers the idle permits of this pod's gate named gateName, lent by
// o, to the permit server, which lends them to other pods' borrowers when
// the gate's reserve is lent out (the Offer stream of api/reserve). It
// runs until ctx is done and then returns ctx.Err(); it returns at once
// with another error only when gateName or o is missing.
//
// The stream tells the server o.Spare() when it opens, in every answer,
// and whenever it changed (read every Options.SpareInterval). When the
// stream breaks, or the server refuses it (a server that does not know
// the gate, or an older one without offers), Offer opens it again after
// Options.Backoff, quietly: offering is an addition to the pod's own share,
// and the pod's calls do not depend on it.
//
// A permit o lent for an ask is held until the server releases it, or
// until the ask's ttl has passed since the ask arrived, whichever comes
// first, and never released earlier: not when the stream breaks, nor when
// ctx is done and Offer returns, since the borrower may use it until its
// ttl. A shrink or drain of the gate therefore waits for such a permit at
// most the ttl, as it waits for the pod's own calls.
func (c *Client) Offer(ctx context.Context, gateName string, o gate.Offerer) error {
	if gateName == "" {
		return errors.New("reserve: offer: gate name is required")
	}
	if o == nil {
		return errors.New("reserve: offer: Offerer is required")
	}
	for {
		_ = c.offerOnce(ctx, gateName, o)
		t := time.NewTimer(c.opts.Backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// offerOnce offers o's permits over one stream until it breaks or ctx is
// done.
func (c *Client) offerOnce(ctx context.Context, gateName string, o gate.Offerer) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Offer(sctx)
	if err != nil {
		return err
	}
	s := &offerStream{o: o, stream: stream, held: map[uint64]*heldPermit{}}
	if err := s.send(&reservev1.OfferMessage{Gate: gateName, Pod: c.opts.Pod}); err != nil {
		return err
	}
	// One goroutine reads the stream and answers asks; this one sends
	// the spare's changes. A stream takes one sender at a time: both send
	// through s.send.
	read := make(chan error, 1)
	go func() { read <- s.read() }()
	tick := time.NewTicker(c.opts.SpareInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-read:
			return err
		case <-tick.C:
			if err := s.sendSpareIfChanged(); err != nil {
				cancel() // ends the read
				return errors.Join(err, <-read)
			}
		}
	}
}

// offerStream is one Offer stream and the permits lent on its asks.
type offerStream struct {
	o      gate.Offerer
	stream reservev1.Reserve_OfferClient

	sendMu sync.Mutex
	// sent is the spare the last message sent told; guarded by sendMu.
	sent int32

	mu sync.Mutex
	// held are the permits lent on this stream's asks and not yet
	// released, by ask id: ids name asks within one stream only, so a
	// permit held past its stream is ended by its timer alone. Guarded by
	// mu.
	held map[uint64]*heldPermit
}

// heldPermit is one permit lent for one ask. Whoever takes it out of
// offerStream.held, the server's release or the ttl's timer, releases it:
// exactly once, whichever comes first, even when both come at once.
type heldPermit struct {
	release func()
	// timer releases the permit when the ask's ttl has passed; set
	// before the permit is in offerStream.held, and never changed.
	timer *time.Timer
}

// send sends m with the spare as of now.
func (s *offerStream) send(m *reservev1.OfferMessage) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	m.Spare = spare(s.o)
	if err := s.stream.Send(m); err != nil {
		return err
	}
	s.sent = m.Spare
	return nil
}

// sendSpareIfChanged tells the server the spare when it changed since the
// last message sent.
func (s *offerStream) sendSpareIfChanged() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	m := &reservev1.OfferMessage{Spare: spare(s.o)}
	if m.Spare == s.sent {
		return nil
	}
	if err := s.stream.Send(m); err != nil {
		return err
	}
	s.sent = m.Spare
	return nil
}

// spare is o's spare permits, as the protocol's int32.
func spare(o gate.Offerer) int32 {
	return int32(min(max(o.Spare(), 0), math.MaxInt32))
}

// read handles the server's asks and releases until the stream breaks.
func (s *offerStream) read() error {
	for {
		m, err := s.stream.Recv()
		if err != nil {
			return err
		}
		// The ttl runs from the ask's arrival: the borrower is done
		// before ttl has passed since it sent its borrow, which was
		// before the server asked.
		arrived := time.Now()
		if id := m.GetRelease(); id != 0 {
			s.release(id)
		}
		if id := m.GetAsk(); id != 0 {
			granted := s.lend(id, m.GetTtl().AsDuration(), arrived)
			if err := s.send(&reservev1.OfferMessage{Ask: id, Granted: granted}); err != nil {
				return err
			}
		}
	}
}

// lend lends one of o's permits for the ask id whose lease lasts ttl from
// arrived, and reports whether it did.
func (s *offerStream) lend(id uint64, ttl time.Duration, arrived time.Time) bool {
	s.mu.Lock()
	_, dup := s.held[id]
	s.mu.Unlock()
	if dup || ttl <= 0 {
		// An id already lent for names one permit, released once; a
		// lease without a ttl could never be given back.
		return false
	}
	release, ok := s.o.Lend(ttl)
	if !ok {
		return false
	}
	left := ttl - time.Since(arrived)
	if left <= 0 {
		// Lend took the whole ttl: the borrower is done already.
		release()
		return false
	}
	h := &heldPermit{release: release}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The timer's function takes mu, so it finds h in held, and h.timer
	// set, even when it fires at once.
	h.timer = time.AfterFunc(left, func() { s.expire(id, h) })
	s.held[id] = h
	return true
}

// release ends the permit lent for the ask id now, if it is still held.
func (s *offerStream) release(id uint64) {
	s.mu.Lock()
	h := s.held[id]
	delete(s.held, id)
	s.mu.Unlock()
	if h != nil {
		h.timer.Stop()
		h.release()
	}
}

// expire ends the permit lent for the ask id when its ttl has passed.
func (s *offerStream) expire(id uint64, h *heldPermit) {
	s.mu.Lock()
	mine := s.held[id] == h
	if mine {
		delete(s.held, id)
	}
	s.mu.Unlock()
	if mine {
		h.release()
	}
}

// OfferFunc returns a function of the shape of backpressure.Options.Offer:
// for each gate it runs Offer in a goroutine of its own until the stop it
// returns is called or ctx is done. stop waits for that Offer to return,
// which it does at once; the permits lent already are held until their
// releases (see Offer).
func (c *Client) OfferFunc(ctx context.Context) func(gateName string, o gate.Offerer) (stop func()) {
	return func(gateName string, o gate.Offerer) func() {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.Offer(ctx, gateName, o)
		}()
		return func() {
			cancel()
			<-done
		}
	}
}
