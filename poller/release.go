package poller

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// A registration's end, from Delete to the recycled slot, in the order it
// happens:
//
//	Delete / hangUp / panic / shutdown
//	  end:      claim (active -> released), stop timers and context,
//	            EPOLL_CTL_DEL, all under ctlMu
//	  retire:   the slot's release function goes to the reclaimer
//	... grace period: every waiter passes a quiescent point ...
//	  release:  released -> freeing (or wait for the last hold),
//	            OnRelease, close an owned fd, detach from the waiter,
//	            freeing -> free with the next generation, recycle

// Delete ends registration h. It returns at once: the fd leaves epoll
// before Delete returns, OnRelease runs later on another goroutine, or on a
// waiter, after every waiter has passed a quiescent point. It may be called
// from any goroutine, OnEvent included. A second Delete, or a Delete of a
// stale handle, returns ErrStale.
//
// An OnEvent call dispatched before Delete may still be running, or even
// start, after Delete returns; every such call is over once OnRelease
// starts. So close or reuse an fd you own (CloseFD false) only in or after
// OnRelease, or hand it to the poller with CloseFD: otherwise that late
// handler may read from whatever the kernel gives the number to next.
//
// If the caller closed the fd already, the lifecycle still completes. But
// if another descriptor still shares the fd's open file (a dup, a child
// forked without close-on-exec, a copy sent over a Unix socket), the kernel
// keeps the epoll entry, and nothing can remove it by number. The poller
// detects this at Delete (EPOLL_CTL_DEL fails with EBADF or ENOENT and the
// entry is still listed), counts it in Stats.ClosedEarly and logs it once.
// In the PerWaiter topology the owning waiter is woken and replaces its
// epoll set with a fresh one holding its other registrations, which drops
// the entry; on a shared set the entry is one-shot and reports at most
// once (edge-triggered, once per new readiness of the other descriptor).
// The poller does not prevent the case by registering a duplicate of every
// fd it does not own: that would cost a descriptor per registration, to
// protect a rule the caller can keep.
func (p *Poller) Delete(h Handle) error {
	tok, err := p.enter()
	if err != nil {
		return err
	}
	defer p.ops.RUnlock(tok)
	s := p.lookup(h)
	if s == nil || !p.end(s, h.Gen(), Deleted) {
		return ErrStale
	}
	p.retire(s)
	return nil
}

// end claims generation gen of s for the reason why and takes it out of
// epoll; only one caller wins. Callers other than shutdown then retire it.
func (p *Poller) end(s *slot, gen uint32, why Reason) bool {
	s.ctlMu.Lock()
	// Only a holder of ctlMu claims, so a registration seen active here
	// stays so, with its waiter, until the claim below.
	if !s.active(gen) {
		s.ctlMu.Unlock()
		return false
	}
	// The claim and EPOLL_CTL_DEL are one step for renewSet, which holds
	// the set exclusively: it sees the registration active and copies its
	// entry, or sees it released with its EPOLL_CTL_DEL done and the
	// outcome below counted.
	epfd := p.lockSet(s)
	if !s.claim(gen) {
		p.unlockSet(s)
		s.ctlMu.Unlock()
		return false
	}
	s.reason = why
	s.deletedAt.Store(p.now())
	h := makeHandle(s.index, gen)
	// Look for a surviving entry in the set the EPOLL_CTL_DEL failed on,
	// before its waiter can renew it.
	early := epollDel(epfd, s.fd) && entryAlive(epfd, s.fd, h)
	if early && s.waiter >= 0 {
		p.waiters[s.waiter].renew.Store(true)
	}
	p.unlockSet(s)
	p.stopWork(s)
	s.ctlMu.Unlock()
	p.deleted.Inc()
	if early {
		p.closedEarlyFound(s.fd, h)
		if s.waiter >= 0 {
			// Renew now, not when the entry next reports: a live
			// registration's entry may also be one to drop.
			p.mail[p.waiters[s.waiter].set].wake()
		}
	}
	if !s.closeFD {
		p.forgetFD(s.fd, h)
	}
	return true
}

// closedEarlyFound reports an fd the caller closed before Delete whose
// epoll entry survived it (see Delete), found at Delete or by renewSet.
func (p *Poller) closedEarlyFound(fd int, h Handle) {
	p.closedEarly.Inc()
	if p.earlyWarned.CompareAndSwap(false, true) {
		p.opts.Logger.Warn("poller: fd closed before Delete while another descriptor shares its file; "+
			"its epoll entry survives the close and reports stale events, until the poller renews the waiter's epoll set (per-waiter) "+
			"or that descriptor closes (shared). "+
			"Close an fd only in or after OnRelease, or register it with CloseFD (counted in Stats.ClosedEarly; reported once)",
			"fd", fd, "handle", h.String())
	}
}

func (p *Poller) forgetFD(fd int, h Handle) {
	p.fds.Compute(fd, func(old Handle, loaded bool) (Handle, bool) {
		return old, !loaded || old == h
	})
}

// retire hands an ended slot to the reclaimer.
func (p *Poller) retire(s *slot) {
	if err := p.rec.Retire(s.release); err != nil {
		// Only after the reclaimer closed, when the waiters are gone:
		// no grace period is needed.
		go p.release(s)
	}
}

// release finishes a registration after its grace period: unless holds
// remain (then the last one retires it again), it moves the slot to
// freeing, runs OnRelease, closes an owned fd, detaches the registration
// from its waiter, then bumps the generation and recycles the slot. It
// takes no lock but the fd map's and the table's, and allocates nothing.
func (p *Poller) release(s *slot) {
	v := s.load()
	if v.has(bitRunning) {
		// A detached waiter's handler still runs this registration. Known
		// to Barrier before toFreeing publishes waitHolds: the release
		// that follows the handler may run at once.
		p.pins.add(s, v.gen())
	}
	h, ok, running := s.toFreeing()
	if !ok {
		if !running {
			// Holds alone, which Barrier does not wait for.
			p.pins.done(s, v.gen())
		}
		return
	}
	p.latency.add(time.Duration(p.now() - s.deletedAt.Load()))
	if s.onRelease != nil {
		p.releasing.Add(1)
		runOnRelease(p, s.onRelease, Released{
			Handle:       h,
			FD:           s.fd,
			Waiter:       s.waiterOf(),
			Reason:       s.reason,
			Registration: p.regStats(s),
		})
		p.releasing.Add(-1)
	}
	if s.closeFD {
		// Forget the number before closing it: once closed, the kernel
		// may hand it to the next accept or open at once, and an Add of
		// that new fd must not find the old registration's claim.
		p.forgetFD(s.fd, h)
		closeFD(s.fd)
	}
	if s.attached {
		p.waiters[s.waiter].attached.Add(-1)
	}
	p.pins.done(s, h.Gen())
	s.clear()
	if s.free(h.Gen()) {
		p.tab.recycle(h.Slot())
	}
	p.releases.Inc()
}

// runOnRelease calls f, recovering a panic. inCallback finds its frame on
// the stack: that is how Close and Barrier know they run inside OnRelease,
// at no cost to the release.
//
//go:noinline
func runOnRelease(p *Poller, f func(Released), r Released) {
	defer func() {
		if v := recover(); v != nil {
			p.reportPanic(r.Handle, v)
		}
	}()
	f(r)
}

// Barrier returns when every release of a registration deleted before the
// call has completed (OnRelease returned, owned fd closed), or when ctx
// ends. Called from OnEvent or OnRelease it returns ErrInCallback instead of
// waiting for itself.
func (p *Poller) Barrier(ctx context.Context) error {
	if p.closing.Load() {
		return ErrClosed
	}
	if p.inCallback() {
		return ErrInCallback
	}
	err := p.rec.Barrier(ctx)
	if errors.Is(err, reclaim.ErrClosed) {
		return ErrClosed
	}
	if err != nil {
		return err
	}
	// Every release retired before the call has run once; those that
	// found their handler still running have been counted by now, and go
	// round again when it returns.
	return p.pins.wait(ctx)
}

// pinWaits tracks the releases that found their registration's handler
// still running, on a waiter the monitor detached, and wait for it: the
// reclaimer counts such a release done when it steps aside, so Barrier
// waits for them here. Only a handler blocked past Overrun while its own
// registration is deleted gets here; every other release costs one load.
type pinWaits struct {
	mu      sync.Mutex
	seq     uint64             // counts add calls
	waiting map[*slot]pinEntry // the waiting releases
	changed chan struct{}      // closed, and replaced, when one stops waiting
}

// pinEntry is one waiting release: its generation, and its add's seq.
type pinEntry struct {
	gen uint32
	seq uint64
}

// add records that generation gen of s waits for its running bit, unless
// it already does. Only s's release calls it.
func (t *pinWaits) add(s *slot, gen uint32) {
	if s.pinned.Load() {
		return
	}
	t.mu.Lock()
	if t.waiting == nil {
		t.waiting = make(map[*slot]pinEntry)
	}
	t.seq++
	t.waiting[s] = pinEntry{gen, t.seq}
	s.pinned.Store(true)
	t.mu.Unlock()
}

// done records that generation gen of s no longer waits for a handler: its
// release completed, or waits for holds alone. The generation keeps a late
// call from ending a later registration's wait.
func (t *pinWaits) done(s *slot, gen uint32) {
	if !s.pinned.Load() {
		return
	}
	t.mu.Lock()
	if e, ok := t.waiting[s]; ok && e.gen == gen {
		delete(t.waiting, s)
		s.pinned.Store(false)
		if t.changed != nil {
			close(t.changed)
			t.changed = nil
		}
	}
	t.mu.Unlock()
}

// wait returns when every release added before the call is done, or ctx's
// error.
func (t *pinWaits) wait(ctx context.Context) error {
	t.mu.Lock()
	target := t.seq
	for {
		waiting := false
		for _, e := range t.waiting {
			waiting = waiting || e.seq <= target
		}
		if !waiting {
			t.mu.Unlock()
			return nil
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.mu.Lock()
	}
}
