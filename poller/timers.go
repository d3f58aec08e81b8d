package poller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Timers and contexts tie work to a registration's life. A timer fires on
// its own goroutine, which only posts the registration to its epoll set's
// mailbox (an eventfd in the set); a waiter takes the mailbox and runs the
// timer through the same serialisation as events. At the end of the
// registration (Poller.end) its timers stop and its context is cancelled,
// so an outstanding operation, however far out, never holds the release up.

// mailbox carries fired timers to the waiters of one epoll set.
type mailbox struct {
	mu  sync.Mutex
	efd int // -1 once closed
	q   []posted
}

type posted struct {
	s *slot
	h Handle
}

// close closes the eventfd under the mutex: a timer firing now must not
// write to a closed fd number, which the kernel may have reused.
func (mb *mailbox) close() {
	mb.mu.Lock()
	if mb.efd >= 0 {
		closeFD(mb.efd)
		mb.efd = -1
	}
	mb.mu.Unlock()
}

// wake makes a waiter of the mailbox's set return from epoll_wait, with
// nothing posted.
func (mb *mailbox) wake() {
	mb.mu.Lock()
	if mb.efd >= 0 {
		signal(mb.efd)
	}
	mb.mu.Unlock()
}

// regTimer is one AfterFunc timer. fired is guarded by slotWork.mu.
type regTimer struct {
	t     *time.Timer
	f     func()
	fired bool
}

// AfterFunc runs f once, after d, on a waiter, never concurrently with the
// registration's OnEvent (so f may use the registration's state as OnEvent
// does). The registration's timers stop when it is released: a timer
// pending then, however far out, never runs and does not delay the
// release. stop cancels the timer and reports whether it did so before f
// was due. AfterFunc on a deleted or stale handle returns ErrStale.
func (p *Poller) AfterFunc(h Handle, d time.Duration, f func()) (stop func() bool, err error) {
	if f == nil {
		return nil, fmt.Errorf("%w: nil timer function", ErrInvalid)
	}
	tok, err := p.enter()
	if err != nil {
		return nil, err
	}
	defer p.ops.RUnlock(tok)
	s, w, err := p.lockWork(h)
	if err != nil {
		return nil, err
	}
	defer w.mu.Unlock()
	rt := &regTimer{f: f}
	w.timers = append(w.timers, rt)
	rt.t = time.AfterFunc(max(d, 0), func() { p.fire(s, h, rt) })
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		i := slices.Index(w.timers, rt)
		if i < 0 || rt.fired {
			return false
		}
		rt.t.Stop()
		w.timers = slices.Delete(w.timers, i, i+1)
		return true
	}, nil
}

// lockWork returns h's slot and its slotWork with the mutex held, if h is
// active (after an Add still in its EPOLL_CTL_ADD has finished).
func (p *Poller) lockWork(h Handle) (*slot, *slotWork, error) {
	s := p.lookup(h)
	if s == nil {
		return nil, nil, ErrStale
	}
	s.settle()
	w := s.workState()
	w.mu.Lock()
	if !s.active(h.Gen()) {
		w.mu.Unlock()
		return nil, nil, ErrStale
	}
	return s, w, nil
}

// fire runs on the timer's goroutine: it marks the timer due and posts the
// registration to its epoll set's mailbox, so that a waiter, a reclaimer
// participant, runs it.
func (p *Poller) fire(s *slot, h Handle, rt *regTimer) {
	w := s.work.Load() // made by the AfterFunc that made rt
	w.mu.Lock()
	if !s.active(h.Gen()) || !slices.Contains(w.timers, rt) {
		w.mu.Unlock()
		return
	}
	rt.fired = true
	set := 0
	if s.waiter >= 0 {
		set = p.waiters[s.waiter].set
	}
	w.mu.Unlock()
	mb := &p.mail[set]
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if mb.efd < 0 {
		return // closed: the registration was released by Close
	}
	wasEmpty := len(mb.q) == 0
	mb.q = append(mb.q, posted{s, h})
	if wasEmpty {
		signal(mb.efd)
	}
}

// deliverTimers takes waiter w's mailbox and dispatches each posted
// registration with timerDue, through the same serialisation as events.
func (p *Poller) deliverTimers(w *waiter) {
	mb := &p.mail[w.set]
	mb.mu.Lock()
	drain(mb.efd)
	q := mb.q
	mb.q = nil
	mb.mu.Unlock()
	for _, m := range q {
		p.dispatch(w, m.s, m.h, timerDue)
	}
}

// runTimers runs h's fired timers, on a waiter that holds its dispatch.
func (p *Poller) runTimers(s *slot, h Handle) {
	w := s.work.Load()
	if w == nil {
		return
	}
	w.mu.Lock()
	var due []*regTimer
	if s.active(h.Gen()) {
		keep := w.timers[:0]
		for _, rt := range w.timers {
			if rt.fired {
				due = append(due, rt)
			} else {
				keep = append(keep, rt)
			}
		}
		clear(w.timers[len(keep):])
		w.timers = keep
	}
	w.mu.Unlock()
	for _, rt := range due {
		p.callTimer(h, rt.f)
	}
}

func (p *Poller) callTimer(h Handle, f func()) {
	defer func() {
		if v := recover(); v != nil {
			p.reportPanic(h, v)
		}
	}()
	f()
}

// stopWork stops an ended registration's timers and cancels its context,
// so that work tied to it ends promptly instead of holding the release up
// (a cancelling destroy, as the OpenFabrics IBAL connection manager learnt
// to do when retried sends held its destroy up for minutes).
func (p *Poller) stopWork(s *slot) {
	w := s.work.Load()
	if w == nil {
		return // never had timers or a context
	}
	w.mu.Lock()
	for _, rt := range w.timers {
		rt.t.Stop()
	}
	clear(w.timers)
	w.timers = w.timers[:0]
	cancel := w.cancel
	w.ctx, w.cancel = nil, nil
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Context returns a context that is cancelled when h is released (Delete,
// hang-up, panic or Close), for work tied to the registration. It returns
// ErrStale for a deleted or stale handle.
func (p *Poller) Context(h Handle) (context.Context, error) {
	_, w, err := p.lockWork(h)
	if err != nil {
		return nil, err
	}
	defer w.mu.Unlock()
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(p.ctx)
	}
	return w.ctx, nil
}
