package poller

import (
	"fmt"
	"sync/atomic"
)

// A hold is a count in the slot's state word: while it is not zero the
// release does not start (slot.toFreeing), so the fd stays open and the
// slot keeps its registration; the last hold to go after the grace period
// retires the release again (slot.unhold), never running it on its stack.

// Hold keeps h from being released while the caller uses its fd outside
// OnEvent: Delete still returns at once and events stop, but OnRelease (and
// closing an owned fd) waits until every hold is released. Call release
// exactly once; later calls do nothing. A Hold on a deleted or stale
// handle returns ErrStale. Barrier and Close do not wait for holds.
func (p *Poller) Hold(h Handle) (release func(), err error) {
	tok, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.ops.RUnlock(tok)
	s, err := p.acquire(h, false)
	if err != nil {
		return nil, err
	}
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			p.unhold(s)
		}
	}, nil
}

// acquire takes a hold on h's slot, which must be active, or also
// released when internal is set (reads of a registration's counters in its
// disconnect path).
func (p *Poller) acquire(h Handle, internal bool) (*slot, error) {
	s := p.lookup(h)
	if s == nil {
		return nil, ErrStale
	}
	switch s.acquire(h.Gen(), internal) {
	case holdStale:
		return nil, ErrStale
	case holdFull:
		return nil, fmt.Errorf("%w: too many holds on %v", ErrInvalid, h)
	}
	return s, nil
}

// unhold drops a hold, retiring the release again if it was the last one
// after the grace period.
func (p *Poller) unhold(s *slot) {
	if s.unhold() {
		p.retire(s)
	}
}

// CountBytes adds to h's byte counters (RegistrationStats.BytesIn and
// BytesOut), for handlers that want them in the statistics. It returns
// ErrStale, and counts nothing, once h is released.
func (p *Poller) CountBytes(h Handle, in, out int) error {
	if in < 0 || out < 0 {
		return fmt.Errorf("%w: negative byte count", ErrInvalid)
	}
	s, err := p.acquire(h, false)
	if err != nil {
		return err
	}
	s.bytesIn.Add(uint64(in))
	s.bytesOut.Add(uint64(out))
	p.unhold(s)
	return nil
}
