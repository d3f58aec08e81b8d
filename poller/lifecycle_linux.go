//go:build linux

package poller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/reclaim"
)

// This file holds what a registration carries besides its fd: holds,
// timers, a context, counters, and the statistics and watchdog that read
// them.

// acquire takes a hold on h's slot if its generation matches and its
// lifecycle is active, or also released when internal is set. A hold keeps
// the release from moving the slot to freeing.
func (p *Poller) acquire(h Handle, internal bool) (*slot, error) {
	s := p.lookup(h)
	if s == nil {
		return nil, ErrStale
	}
	for {
		v := s.state.Load()
		st := v & stMask
		if genOf(v) != h.Gen() || !(st == stActive || internal && st == stReleased) {
			return nil, ErrStale
		}
		if v&holdMask == holdMask {
			return nil, fmt.Errorf("%w: too many holds on %v", ErrInvalid, h)
		}
		if s.state.CompareAndSwap(v, v+holdOne) {
			return s, nil
		}
	}
}

// unhold drops a hold. If it was the last one and the grace period is
// already over, the release is retired again: it never runs on this stack.
func (p *Poller) unhold(s *slot, h Handle) {
	for {
		v := s.state.Load()
		nv := v - holdOne
		last := holdsOf(nv) == 0 && v&bitWaitHolds != 0
		if last {
			nv &^= bitWaitHolds
		}
		if s.state.CompareAndSwap(v, nv) {
			if last {
				p.retire(s, h)
			}
			return
		}
	}
}

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
			p.unhold(s, h)
		}
	}, nil
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
	s := p.lookup(h)
	if s == nil {
		return nil, ErrStale
	}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if !isActive(s, h) {
		return nil, ErrStale
	}
	rt := &regTimer{f: f}
	s.timers = append(s.timers, rt)
	rt.t = time.AfterFunc(max(d, 0), func() { p.fire(s, h, rt) })
	return func() bool {
		s.ctlMu.Lock()
		defer s.ctlMu.Unlock()
		i := slices.Index(s.timers, rt)
		if i < 0 || rt.fired {
			return false
		}
		rt.t.Stop()
		s.timers = slices.Delete(s.timers, i, i+1)
		return true
	}, nil
}

func isActive(s *slot, h Handle) bool {
	v := s.state.Load()
	return genOf(v) == h.Gen() && v&stMask == stActive
}

// fire runs on the timer's goroutine: it marks the timer due and posts the
// registration to its epoll set's mailbox, so that a waiter, a reclaimer
// participant, runs it.
func (p *Poller) fire(s *slot, h Handle, rt *regTimer) {
	s.ctlMu.Lock()
	if !isActive(s, h) || !slices.Contains(s.timers, rt) {
		s.ctlMu.Unlock()
		return
	}
	rt.fired = true
	set := 0
	if s.waiter >= 0 {
		set = p.waiters[s.waiter].set
	}
	s.ctlMu.Unlock()
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
	var buf [8]byte
	mb.mu.Lock()
	unix.Read(mb.efd, buf[:])
	q := mb.q
	mb.q = nil
	mb.mu.Unlock()
	for _, m := range q {
		p.dispatch(w, m.s, m.h, timerDue)
	}
}

// runTimers runs h's fired timers, on a waiter that holds its dispatch.
func (p *Poller) runTimers(s *slot, h Handle) {
	s.ctlMu.Lock()
	var due []*regTimer
	if isActive(s, h) {
		keep := s.timers[:0]
		for _, rt := range s.timers {
			if rt.fired {
				due = append(due, rt)
			} else {
				keep = append(keep, rt)
			}
		}
		clear(s.timers[len(keep):])
		s.timers = keep
	}
	s.ctlMu.Unlock()
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

// stopWork stops a released registration's timers and cancels its
// context, so that work tied to it ends promptly (IBAL CEP's lesson: an
// outstanding operation must not hold destroy up).
func (p *Poller) stopWork(s *slot) {
	s.ctlMu.Lock()
	for _, rt := range s.timers {
		rt.t.Stop()
	}
	clear(s.timers)
	s.timers = s.timers[:0]
	cancel := s.cancel
	s.ctx, s.cancel = nil, nil
	s.ctlMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Context returns a context that is cancelled when h is released (Delete,
// hang-up, panic or Close), for work tied to the registration. It returns
// ErrStale for a deleted or stale handle.
func (p *Poller) Context(h Handle) (context.Context, error) {
	s := p.lookup(h)
	if s == nil {
		return nil, ErrStale
	}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if !isActive(s, h) {
		return nil, ErrStale
	}
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(p.ctx)
	}
	return s.ctx, nil
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
	p.unhold(s, h)
	return nil
}

// Info describes h while it is live or released and not yet freed (its
// final hang-up event included). It returns ErrStale once the release has
// begun, or for a handle never issued.
func (p *Poller) Info(h Handle) (Info, error) {
	s, err := p.acquire(h, true)
	if err != nil {
		return Info{}, err
	}
	defer p.unhold(s, h)
	in := Info{
		Handle:     h,
		FD:         s.fd,
		Registered: s.state.Load()&stMask == stActive,
		Attached:   s.attached,
	}
	in.Waiter, in.Registration = p.regStats(s)
	if in.Waiter >= 0 {
		in.WaiterStats = p.waiterStats(in.Waiter)
	}
	return in, nil
}

// WaiterStats returns waiter i's statistics, or ErrInvalid for an index
// out of range.
func (p *Poller) WaiterStats(i int) (WaiterStats, error) {
	if i < 0 || i >= len(p.waiters) {
		return WaiterStats{}, fmt.Errorf("%w: waiter %d of %d", ErrInvalid, i, len(p.waiters))
	}
	return p.waiterStats(i), nil
}

// times returns waiter w's waiting and processing totals, the running
// phase included.
func (p *Poller) times(w *waiter, now int64) (wait, proc int64) {
	ph := w.phase.Load()
	wait, proc = w.waitNs.Load(), w.procNs.Load()
	switch {
	case ph > 0:
		wait += max(now-ph, 0)
	case ph < 0:
		proc += max(now+ph, 0)
	}
	return wait, proc
}

func (p *Poller) waiterStats(i int) WaiterStats {
	rs := p.rec.Stats()
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	return p.waiterStatsLocked(i, p.now(), rs.Participants)
}

func (p *Poller) waiterStatsLocked(i int, now int64, parts []reclaim.ParticipantStats) WaiterStats {
	w := &p.waiters[i]
	wait, proc := p.times(w, now)
	ws := WaiterStats{
		Index:       i,
		Name:        w.name,
		TID:         int(w.tid.Load()),
		Attached:    w.attached.Load(),
		Events:      w.events.Load(),
		Wakeups:     w.wakeups.Load(),
		Stale:       w.stale.Load(),
		Waiting:     time.Duration(wait),
		Processing:  time.Duration(proc),
		Utilisation: -1,
		Window:      time.Duration(now - p.windowStart),
	}
	dw, dp := wait-p.baseWait[i], proc-p.baseProc[i]
	if dw+dp > 0 {
		ws.Utilisation = float64(dp) / float64(dw+dp)
	}
	if i < len(parts) {
		ws.Holding, ws.GracePeriods = parts[i].Holding, parts[i].Passed
	}
	return ws
}

// Stats returns a snapshot of the poller's statistics. Collecting costs
// the waiters nothing: each waiter's counters are written by it alone, once
// per epoll_wait, and read here.
func (p *Poller) Stats() Stats {
	rs := p.rec.Stats()
	st := Stats{
		Added:          uint64(p.added.Value()),
		Deleted:        uint64(p.deleted.Value()),
		Releases:       uint64(p.releases.Value()),
		Panics:         uint64(p.panics.Value()),
		Reclaim:        rs,
		ReleaseLatency: p.latency.summary(),
		OldestPending:  p.oldestPending(),
	}
	p.statsMu.Lock()
	now := p.now()
	st.Window = time.Duration(now - p.windowStart)
	st.Waiters = make([]WaiterStats, len(p.waiters))
	for i := range p.waiters {
		ws := p.waiterStatsLocked(i, now, rs.Participants)
		st.Waiters[i] = ws
		st.Events += ws.Events
		st.Stale += ws.Stale
		st.Wakeups += ws.Wakeups
	}
	p.statsMu.Unlock()
	st.Live = int64(st.Added) - int64(st.Deleted)
	st.ReleasedNotFree = int64(st.Deleted) - int64(st.Releases)
	return st
}

// ResetStats starts a new window for utilisation and release latency.
// Counters are totals and are not reset.
func (p *Poller) ResetStats() {
	p.statsMu.Lock()
	now := p.now()
	p.windowStart = now
	for i := range p.waiters {
		p.baseWait[i], p.baseProc[i] = p.times(&p.waiters[i], now)
	}
	p.statsMu.Unlock()
	p.latency.reset()
}

// oldestPending scans the slots for the oldest released-but-not-free one.
func (p *Poller) oldestPending() time.Duration {
	now := p.now()
	var oldest int64
	for i := range p.tab.used() {
		s := p.tab.get(i)
		if st := s.state.Load() & stMask; st == stReleased || st == stFreeing {
			if at := s.deletedAt.Load(); at > 0 {
				oldest = max(oldest, now-at)
			}
		}
	}
	return time.Duration(oldest)
}

// watch is the release watchdog: it reports, once each, releases pending
// longer than Options.ReleaseWatchdog and what holds them. It only reads.
func (p *Poller) watch() {
	defer close(p.wdDone)
	limit := int64(p.opts.ReleaseWatchdog)
	tick := time.NewTicker(max(p.opts.ReleaseWatchdog/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-p.watchdog:
			return
		case <-tick.C:
		}
		now := p.now()
		for i := range p.tab.used() {
			s := p.tab.get(i)
			v := s.state.Load()
			st := v & stMask
			if st != stReleased && st != stFreeing {
				continue
			}
			at := s.deletedAt.Load()
			if at == 0 || now-at < limit || !s.warned.CompareAndSwap(false, true) {
				continue
			}
			p.report(makeHandle(i, genOf(v)), v, time.Duration(now-at))
		}
	}
}

// report logs one stuck release with what holds it.
func (p *Poller) report(h Handle, v uint64, age time.Duration) {
	args := []any{"handle", h.String(), "age", age.Round(time.Millisecond)}
	switch {
	case v&stMask == stFreeing:
		args = append(args, "held_by", "OnRelease still running")
	case holdsOf(v) > 0:
		args = append(args, "held_by", "holds", "holds", holdsOf(v))
	default:
		var waiters []int
		for i, ps := range p.rec.Stats().Participants {
			if ps.Holding > 0 {
				waiters = append(waiters, i)
			}
		}
		args = append(args, "held_by", "grace period", "waiters", waiters)
	}
	p.logger.Warn("poller: release pending too long; still waiting, never releasing early", args...)
}
