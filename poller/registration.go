package poller

import (
	"fmt"
	"strings"
)

// Events is a set of epoll event bits.
type Events uint32

// Event bits, with the values of their epoll counterparts.
const (
	Readable      Events = 0x1        // EPOLLIN
	Priority      Events = 0x2        // EPOLLPRI
	Writable      Events = 0x4        // EPOLLOUT
	Error         Events = 0x8        // EPOLLERR: always reported
	HangUp        Events = 0x10       // EPOLLHUP: always reported
	ReadHangUp    Events = 0x2000     // EPOLLRDHUP: the peer shut down writing
	EdgeTriggered Events = 0x80000000 // EPOLLET: report changes, not levels
)

// registrable are the bits a Registration may ask for.
const registrable = Readable | Priority | Writable | Error | HangUp | ReadHangUp | EdgeTriggered

// oneShot is EPOLLONESHOT, which the poller adds itself on a shared set.
const oneShot = 0x40000000

// exclusive is EPOLLEXCLUSIVE: an fd in several epoll sets wakes one of
// their waiters, not all (the hand-off eventfd of per-waiter sets).
const exclusive = 0x10000000

// timerDue is an internal event bit, unused by epoll, that asks the
// dispatching waiter to run a registration's fired timers.
const timerDue Events = 1 << 27

// String lists the bits, such as "Readable|Writable".
func (e Events) String() string {
	names := []struct {
		bit  Events
		name string
	}{
		{Readable, "Readable"}, {Priority, "Priority"}, {Writable, "Writable"},
		{Error, "Error"}, {HangUp, "HangUp"}, {ReadHangUp, "ReadHangUp"},
		{EdgeTriggered, "EdgeTriggered"},
	}
	var parts []string
	for _, n := range names {
		if e&n.bit != 0 {
			parts = append(parts, n.name)
			e &^= n.bit
		}
	}
	if e != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(e)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// A Handle identifies one registration: a slot index in the low 32 bits and
// the slot's generation in the high 32. Generations start at 1, so the zero
// Handle is never valid.
type Handle uint64

func makeHandle(slot, gen uint32) Handle { return Handle(uint64(gen)<<32 | uint64(slot)) }

// Slot returns the slot index.
func (h Handle) Slot() uint32 { return uint32(h) }

// Gen returns the generation.
func (h Handle) Gen() uint32 { return uint32(h >> 32) }

// String returns "slot/gen".
func (h Handle) String() string { return fmt.Sprintf("%d/%d", h.Slot(), h.Gen()) }

// eventOf returns the handle and bits an event carries: epoll_event.data
// holds a Handle, never a pointer, which the garbage collector could not
// see.
func eventOf(ev *epollEvent) (Handle, Events) {
	return Handle(uint64(uint32(ev.Pad))<<32 | uint64(uint32(ev.Fd))), Events(ev.Events)
}

// Registration describes an fd to watch.
type Registration struct {
	// FD is the file descriptor. It must be open, not registered with
	// this poller already, and not one of the poller's own.
	FD int
	// Events is the interest set. Level-triggered unless EdgeTriggered is
	// set; an edge-triggered handler must read until EAGAIN. Error and
	// HangUp are always reported.
	Events Events
	// OnEvent is called for each event, on a waiter goroutine, never
	// concurrently with itself for this registration. It may run before
	// Add returns. It must not block for long: its waiter dispatches
	// nothing else meanwhile. Required.
	OnEvent func(Event)
	// OnRelease, if set, is called once after the registration was deleted
	// (or hung up, or the poller closed) and every waiter has passed a
	// quiescent point: no OnEvent call for it is running or will run. It
	// runs in the reclaimer's batch, on a waiter or the reclaimer's
	// goroutine, with other registrations' releases after it: it must not
	// block, or they wait too.
	OnRelease func(Released)
	// CloseFD hands the fd to the poller, which closes it after OnRelease
	// returns. Until then the fd number cannot be registered again. If
	// Add fails, the fd stays the caller's, open.
	// Without CloseFD the fd stays the caller's, who must not close it
	// before OnRelease starts (see Delete).
	CloseFD bool
	// Waiter chooses the owning waiter (PerWaiter) or home waiter
	// (Stealing): the one with the fewest attached registrations (the zero
	// value), or OnWaiter(i), below Options.Waiters. It is ignored with
	// Shared.
	Waiter WaiterChoice
}

// WaiterChoice picks a registration's waiter; the zero value is
// LeastLoaded.
type WaiterChoice int

// LeastLoaded assigns a registration to the waiter with the fewest
// attached registrations, so that long-lived connections spread evenly.
const LeastLoaded WaiterChoice = 0

// OnWaiter names waiter i (0-based).
func OnWaiter(i int) WaiterChoice { return WaiterChoice(i + 1) }

// Event is one readiness report for a registration.
type Event struct {
	Handle Handle
	FD     int
	Events Events
	Waiter int // index of the waiter dispatching it, below Poller.MaxWaiters
}

// Released tells OnRelease which registration ended and why. The
// registration is still attached to its waiter while OnRelease runs, so
// Poller.WaiterStats(Waiter) still counts it: the disconnect path can read
// the waiter's statistics when it wants them, and pays nothing when not.
type Released struct {
	Handle Handle
	FD     int
	// Waiter is the waiter the registration belonged to (PerWaiter and
	// Stealing), or the last one that dispatched it (Shared); -1 if none
	// did.
	Waiter       int
	Reason       Reason            // why it was released
	Registration RegistrationStats // its own counters, final
}

// Reason says why a registration was released.
type Reason int

const (
	// Deleted: Delete was called.
	Deleted Reason = iota
	// HungUp: the fd reported HangUp or Error; its final event was
	// delivered first.
	HungUp
	// Panicked: its OnEvent panicked.
	Panicked
	// Closed: the poller closed while the registration was live.
	Closed
)

// String returns the reason in lower case.
func (r Reason) String() string {
	switch r {
	case Deleted:
		return "deleted"
	case HungUp:
		return "hung-up"
	case Panicked:
		return "panicked"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// epollBits returns the epoll interest set for ev: level-triggered
// registrations on a shared set are one-shot, re-armed after each dispatch,
// so that only one waiter at a time is handed the fd.
func (p *Poller) epollBits(ev Events) uint32 {
	bits := uint32(ev)
	if p.opts.Topology == Shared && ev&EdgeTriggered == 0 {
		bits |= oneShot
	}
	return bits
}

// lockSet returns the epoll set holding s, for an epoll_ctl on it. In the
// PerWaiter topology it holds the owning waiter's setMu shared until
// unlockSet, so that the waiter cannot renew its set (renewSet) while the
// call is in progress and its entry would be lost; the shared set is never
// renewed and takes no lock.
func (p *Poller) lockSet(s *slot) int {
	if s.waiter < 0 {
		return p.epfds[0]
	}
	w := &p.waiters[s.waiter]
	w.setMu.RLock()
	return w.epfd
}

// unlockSet ends lockSet.
func (p *Poller) unlockSet(s *slot) {
	if s.waiter >= 0 {
		p.waiters[s.waiter].setMu.RUnlock()
	}
}

// lookup returns h's slot, or nil if h was never issued.
func (p *Poller) lookup(h Handle) *slot {
	if h.Gen() == 0 {
		return nil
	}
	return p.tab.get(h.Slot())
}

// Add registers reg and returns its handle. If it fails, the poller keeps
// nothing of reg: with CloseFD the fd is still the caller's, open.
func (p *Poller) Add(reg Registration) (Handle, error) {
	switch {
	case reg.FD < 0:
		return 0, fmt.Errorf("%w: negative fd %d", ErrInvalid, reg.FD)
	case reg.OnEvent == nil:
		return 0, fmt.Errorf("%w: nil OnEvent for fd %d", ErrInvalid, reg.FD)
	case reg.Events&^registrable != 0:
		return 0, fmt.Errorf("%w: unsupported event bits %v", ErrInvalid, reg.Events&^registrable)
	case reg.Waiter < 0 || int(reg.Waiter) > p.homes():
		return 0, fmt.Errorf("%w: Registration.Waiter names waiter %d of %d", ErrInvalid, int(reg.Waiter)-1, p.homes())
	}
	tok, err := p.enter()
	if err != nil {
		return 0, err
	}
	defer p.ops.RUnlock(tok)
	// Inside the fence: the poller's fds stay open, so the numbers are its.
	if what, ok := p.own.Load(reg.FD); ok {
		return 0, fmt.Errorf("%w: fd %d is this poller's own %s: registering it would let a handler close or drain it under the poller", ErrInvalid, reg.FD, what)
	}
	if _, loaded := p.fds.LoadOrStore(reg.FD, 0); loaded {
		return 0, fmt.Errorf("%w: fd %d is already registered (or owned until its release)", ErrInvalid, reg.FD)
	}
	idx, ok := p.tab.alloc()
	if !ok {
		p.fds.Delete(reg.FD)
		return 0, fmt.Errorf("%w: slot table full (%d registrations)", ErrInvalid, maxChunks*chunkSize)
	}
	s := p.tab.get(idx)
	if s.release == nil {
		s.release = func() { p.release(s) }
	}
	gen := s.load().gen()
	h := makeHandle(idx, gen)
	s.fd, s.closeFD, s.onEvent, s.onRelease = reg.FD, reg.CloseFD, reg.OnEvent, reg.OnRelease
	s.addedAt = p.now()
	s.waiter = -1
	if p.opts.Topology != Shared {
		s.waiter = int(reg.Waiter) - 1
		if reg.Waiter == LeastLoaded {
			s.waiter = p.leastLoaded()
		}
		s.attached = true
		p.waiters[s.waiter].attached.Add(1)
	}
	s.events.Store(uint32(reg.Events))
	p.fds.Store(reg.FD, h)
	// Publish and EPOLL_CTL_ADD under ctlMu: a Delete of this handle,
	// guessed or taken from an event that beat Add's return, claims the
	// registration only after the kernel has it, so its EPOLL_CTL_DEL
	// cannot strand the fd in epoll.
	s.ctlMu.Lock()
	s.publish(gen)
	err = epollAdd(p.lockSet(s), reg.FD, p.epollBits(reg.Events), h)
	p.unlockSet(s)
	if err != nil {
		s.unpublish(gen)
		if s.attached {
			p.waiters[s.waiter].attached.Add(-1)
		}
		s.clear()
		s.ctlMu.Unlock()
		p.tab.recycle(idx)
		p.fds.Delete(reg.FD)
		return 0, err
	}
	s.added()
	s.ctlMu.Unlock()
	p.added.Inc()
	return h, nil
}

// clear resets a slot for its next registration. Only its owner touches
// it: Add before publishing, or the release after the grace period.
func (s *slot) clear() {
	s.fd, s.closeFD, s.onEvent, s.onRelease = -1, false, nil, nil
	s.waiter, s.reason, s.attached, s.addedAt = -1, Deleted, false, 0
	s.pend.Store(0)
	s.lastWaiter.Store(-1)
	s.nEvents.Store(0)
	s.handlerNs.Store(0)
	s.bytesIn.Store(0)
	s.bytesOut.Store(0)
	s.deletedAt.Store(0)
}

// homes returns how many waiters a registration may belong to: the
// Waiters of per-waiter sets (PerWaiter, Stealing), every waiter that may
// run on a shared set (where Registration.Waiter is ignored).
func (p *Poller) homes() int {
	if p.opts.Topology == Shared {
		return len(p.waiters)
	}
	return p.opts.Waiters
}

// leastLoaded returns the waiter with the fewest registrations.
func (p *Poller) leastLoaded() int {
	best, least := 0, p.waiters[0].attached.Load()
	for i := 1; i < p.opts.Waiters; i++ {
		if n := p.waiters[i].attached.Load(); n < least {
			best, least = i, n
		}
	}
	return best
}

// Modify replaces the interest set of h.
func (p *Poller) Modify(h Handle, events Events) error {
	if events&^registrable != 0 {
		return fmt.Errorf("%w: unsupported event bits %v", ErrInvalid, events&^registrable)
	}
	tok, err := p.enter()
	if err != nil {
		return err
	}
	defer p.ops.RUnlock(tok)
	s := p.lookup(h)
	if s == nil {
		return ErrStale
	}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if !s.active(h.Gen()) {
		return ErrStale
	}
	s.events.Store(uint32(events))
	bits := p.epollBits(events)
	if s.disarmed(h.Gen()) {
		bits |= oneShot // another waiter runs it, and re-arms it after
	}
	err = epollMod(p.lockSet(s), s.fd, bits, h)
	p.unlockSet(s)
	if err != nil {
		return fmt.Errorf("poller: modify fd %d: %w", s.fd, err)
	}
	return nil
}
