package poller

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
)

// The slot state word, one atomic uint64 per slot. Every change to it is a
// method in this file; callers never touch the bits.
//
//	bits 63..32  generation; starts at 1, bumped when the slot is freed
//	bits 31..8   holds: Hold calls (and internal reads) not yet released
//	bit  6       disarmed: a level-triggered registration of a Stealing
//	             topology was made one-shot because another waiter ran it
//	             while the kernel reported it again; the runner re-arms it
//	bit  5       adding: Add has published the slot and is inside its
//	             EPOLL_CTL_ADD, holding ctlMu
//	bit  4       waitHolds: the grace period is over; the last hold (or
//	             the running bit) to go retires the release again
//	bit  3       pending: events arrived while a waiter ran OnEvent (Shared)
//	bit  2       running: a waiter is running OnEvent (Shared, Stealing);
//	             the release waits for it as for a hold
//	bits 1..0    lifecycle: free, active, released, freeing
//
// The lifecycle: Add makes a free slot active (registered in epoll and
// attached to its waiter). Delete, a hang-up, a panicking handler or Close
// makes it released: out of epoll, no more OnEvent, but its waiter and
// counters still readable. After the grace period and the last hold, the
// release makes it freeing (OnRelease runs, the owned fd is closed, the
// registration is detached from its waiter), then free with the next
// generation. "Registered" is the lifecycle; "attached" is a separate fact
// (slot.attached), dropped only after OnRelease.
//
// A waiter validates an event with ONE load of this word (validate):
// generation and lifecycle are read together, so the slot cannot be
// released and reused between two reads. Delete wins the registration with
// a CAS from active to released (claim); a stale handle fails it. The
// running bit orders the OnEvent calls of one registration on a shared set
// (each run's final CAS happens before the next run's first CAS), which the
// race detector can see and the kernel's EPOLLONESHOT ordering it cannot.
//
// The running bit is also a pin. It is taken only by the CAS that
// validates an event (enterRun: active, generation g), and the release
// treats it as a hold (toFreeing), so a handler's own registration can
// never be freed under it, whatever the reclaimer decides. That is what
// lets the monitor take a waiter stuck in one handler offline in the
// reclaimer (monitor.go): the running registration is the one reference it
// holds, and the pin keeps it.
const (
	lifeFree     uint64 = 0
	lifeActive   uint64 = 1
	lifeReleased uint64 = 2
	lifeFreeing  uint64 = 3
	lifeMask     uint64 = 3
	bitRunning   uint64 = 1 << 2
	bitPending   uint64 = 1 << 3
	bitWaitHolds uint64 = 1 << 4
	bitAdding    uint64 = 1 << 5
	bitDisarmed  uint64 = 1 << 6
	holdOne      uint64 = 1 << 8
	holdMask     uint64 = (1<<24 - 1) << 8
)

// state is a loaded slot word.
type state uint64

func stateOf(gen uint32, life uint64) state { return state(uint64(gen)<<32 | life) }

func (v state) gen() uint32         { return uint32(v >> 32) }
func (v state) life() uint64        { return uint64(v) & lifeMask }
func (v state) holds() uint64       { return (uint64(v) & holdMask) >> 8 }
func (v state) has(bit uint64) bool { return uint64(v)&bit != 0 }

// is reports whether v is generation gen in lifecycle life: the one way to
// say "active with generation g".
func (v state) is(gen uint32, life uint64) bool { return v.gen() == gen && v.life() == life }

func (v state) with(bit uint64) state    { return state(uint64(v) | bit) }
func (v state) without(bit uint64) state { return state(uint64(v) &^ bit) }
func (v state) to(life uint64) state     { return state(uint64(v)&^lifeMask | life) }

func inconsistent(op string, v state) {
	panic("poller: inconsistent slot state in " + op + ": " + v.String())
}

// String describes a word, for panics and debugging.
func (v state) String() string {
	names := [...]string{"free", "active", "released", "freeing"}
	s := names[v.life()] + " gen " + strconv.FormatUint(uint64(v.gen()), 10) + " holds " + strconv.FormatUint(v.holds(), 10)
	for _, b := range []struct {
		bit  uint64
		name string
	}{{bitRunning, "running"}, {bitPending, "pending"}, {bitWaitHolds, "waitHolds"}, {bitAdding, "adding"}, {bitDisarmed, "disarmed"}} {
		if v.has(b.bit) {
			s += " " + b.name
		}
	}
	return s
}

// slot is one registration. The plain fields are written by Add before the
// state word becomes active and cleared by the release after the grace
// period; a waiter reads them only after validating the word.
type slot struct {
	word atomic.Uint64 // a state; change it only through the methods below
	// pend accumulates events under bitPending: the generation they are
	// for (high 32 bits) and the events (low 32). The generation makes
	// adding to it one checked step (addPending), so a waiter that has
	// only loaded the word never touches a later registration's events.
	pend   atomic.Uint64
	events atomic.Uint32 // interest set, as registered or modified

	// ctlMu serialises epoll_ctl on this slot's fd with the claim that
	// ends the registration (Add's EPOLL_CTL_ADD, Modify, re-arm, and the
	// claim plus EPOLL_CTL_DEL of Delete), so that none of them acts on
	// the fd after the registration moved on, and a Delete can never
	// slip between Add's publish and its EPOLL_CTL_ADD.
	ctlMu sync.Mutex

	index     uint32 // fixed when the slot's chunk is made
	fd        int
	waiter    int // owning waiter (PerWaiter), else -1
	closeFD   bool
	attached  bool   // counted in its waiter's Attached, until detached
	reason    Reason // written by whoever won the claim
	onEvent   func(Event)
	onRelease func(Released)
	addedAt   int64  // ns since Poller.base
	release   func() // this slot's release, made once: Retire allocates nothing

	// Written by the dispatching waiter (one at a time), read by Info and
	// the release: atomics, as Info may run on any goroutine.
	lastWaiter atomic.Int32 // last waiter to dispatch it, -1 if none
	nEvents    atomic.Uint64
	handlerNs  atomic.Int64
	bytesIn    atomic.Uint64
	bytesOut   atomic.Uint64

	deletedAt atomic.Int64 // ns since Poller.base, when it was released
	// pinned: its release found its handler still running and waits for
	// it, and Barrier with it (pinWaits); set and cleared by its release.
	pinned atomic.Bool

	// work holds the registration's timers and context, made on first
	// use and kept for the slot's later registrations: most never use
	// them, and a slot is smaller without.
	work atomic.Pointer[slotWork]
}

// init makes a new slot free, generation 1, before its chunk is published.
func (s *slot) init(index uint32) {
	s.index = index
	s.word.Store(uint64(stateOf(1, lifeFree)))
	s.waiter = -1
	s.lastWaiter.Store(-1)
}

// slotWork is a registration's timers and context, stopped and cancelled
// when it is released. Its mutex is not ctlMu, so a timer never waits
// behind an epoll_ctl system call.
type slotWork struct {
	mu     sync.Mutex
	timers []*regTimer
	ctx    context.Context
	cancel context.CancelFunc
}

// workState returns the slot's slotWork, making it on first use.
func (s *slot) workState() *slotWork {
	if w := s.work.Load(); w != nil {
		return w
	}
	s.work.CompareAndSwap(nil, new(slotWork))
	return s.work.Load()
}

func (s *slot) load() state { return state(s.word.Load()) }

func (s *slot) cas(old, new state) bool { return s.word.CompareAndSwap(uint64(old), uint64(new)) }

// publish makes the free slot of generation gen active, with the adding
// bit, for Add. The caller holds ctlMu.
func (s *slot) publish(gen uint32) {
	s.pend.Store(uint64(gen) << 32)
	if v := s.load(); v != stateOf(gen, lifeFree) || !s.cas(v, stateOf(gen, lifeActive).with(bitAdding)) {
		inconsistent("publish", v)
	}
}

// addPending adds e to generation gen's pending events, unless the slot
// has moved on to another generation. The load that validated the event
// is not enough: a waiter the monitor detached (monitor.go) may make it
// offline, and by the time it adds, the registration may have been
// released and the slot reused.
func (s *slot) addPending(gen uint32, e Events) bool {
	for {
		p := s.pend.Load()
		if uint32(p>>32) != gen {
			return false
		}
		if s.pend.CompareAndSwap(p, p|uint64(uint32(e))) {
			return true
		}
	}
}

// added clears the adding bit once EPOLL_CTL_ADD succeeded. Waiters may
// have set the dispatch bits, or claimed the registration, meanwhile.
func (s *slot) added() {
	for {
		v := s.load()
		if !v.has(bitAdding) {
			inconsistent("added", v)
		}
		if s.cas(v, v.without(bitAdding)) {
			return
		}
	}
}

// unpublish frees the slot again, same generation, after EPOLL_CTL_ADD
// failed: the kernel never saw the handle, so no event or claim can have
// touched the word. The caller holds ctlMu.
func (s *slot) unpublish(gen uint32) {
	v := s.load()
	if v != stateOf(gen, lifeActive).with(bitAdding) || !s.cas(v, stateOf(gen, lifeFree)) {
		inconsistent("unpublish", v)
	}
}

// settle waits for an Add in progress on this slot, so that a hold or timer
// taken from an event that arrived before Add returned sees its outcome.
func (s *slot) settle() {
	if s.load().has(bitAdding) {
		s.ctlMu.Lock()
		//lint:ignore SA2001 the empty critical section waits for Add
		s.ctlMu.Unlock()
	}
}

// validate is the one validating load after a waiter comes online: it
// reports whether the slot still holds generation gen, active. An event
// that arrives while Add is in its EPOLL_CTL_ADD is valid: the adding bit
// is not part of the test.
func (s *slot) validate(gen uint32) (state, bool) {
	v := s.load()
	return testHookValidate(s, gen, v, v.is(gen, lifeActive))
}

// active reports whether the slot holds generation gen, active: one load.
func (s *slot) active(gen uint32) bool { return s.load().is(gen, lifeActive) }

// claim moves generation gen from active to released, keeping the
// dispatch bits; only one caller can win it. The caller holds ctlMu, so
// the adding bit is never set here.
func (s *slot) claim(gen uint32) bool {
	for {
		v := s.load()
		if !v.is(gen, lifeActive) {
			return false
		}
		if v.has(bitAdding) {
			inconsistent("claim", v)
		}
		if s.cas(v, v.to(lifeReleased)) {
			return true
		}
	}
}

// Outcomes of enterRun.
const (
	runStale  = iota // the event is stale
	runQueued        // another waiter runs OnEvent; it takes the events
	runDisarm        // as runQueued, and the caller must disarm the entry
	runOwned         // the caller runs OnEvent
)

// enterRun validates an event on a shared set and takes the running bit,
// or, if another waiter holds it, leaves the events to that waiter. With
// disarm (a level-triggered entry on a set of its own, which reports the
// fd on every epoll_wait until the handler reads), the first waiter to
// queue events sets the disarmed bit too and is told to disarm the entry.
func (s *slot) enterRun(gen uint32, e Events, disarm bool) int {
	for {
		v, ok := s.validate(gen)
		if !ok {
			return runStale
		}
		if v.has(bitRunning) {
			if !s.addPending(gen, e) {
				return runStale
			}
			if disarm && !v.has(bitDisarmed) {
				if s.cas(v, v.with(bitPending|bitDisarmed)) {
					return runDisarm
				}
				continue
			}
			if s.cas(v, v.with(bitPending)) {
				return runQueued
			}
			continue
		}
		if s.cas(v, v.with(bitRunning)) {
			return runOwned
		}
	}
}

// finishRun clears the running bit, or, if events arrived meanwhile and the
// registration is still active, takes them for another run. The running
// bit pins the slot, so it is not freed while the bit is set. Once the
// running bit is clear, rearm reports a disarmed entry: the caller re-arms
// it (clearDisarmed), as the waiter that disarmed it relied on; and unpin
// says what ending the run means to a release that waits for it
// (Poller.unpinned).
func (s *slot) finishRun() (e Events, again, rearm bool, unpin int) {
	for {
		v := s.load()
		if !v.has(bitRunning) {
			inconsistent("finishRun", v)
		}
		if v.has(bitPending) && v.life() == lifeActive {
			if s.cas(v, v.without(bitPending)) {
				return Events(uint32(s.pend.Swap(uint64(v.gen()) << 32))), true, false, unpinNone
			}
			continue
		}
		nv, unpin := v.unpinned(bitRunning | bitPending)
		if s.cas(v, nv) {
			return 0, false, v.has(bitDisarmed), unpin
		}
	}
}

// What dropping a pin (the running bit, or a hold) means to a release
// that found the slot pinned after its grace period (waitHolds).
const (
	unpinNone   = iota // nothing: no release waits, or other pins remain
	unpinRetire        // the last pin: retire the release again
	unpinHolds         // the running bit went, holds remain: the release waits for them alone
)

// unpinned returns v without the given bits and says what that means to a
// waiting release; for the last pin, waitHolds is cleared too.
func (v state) unpinned(bits uint64) (state, int) {
	nv := v.without(bits)
	switch {
	case !v.has(bitWaitHolds) || nv.has(bitRunning):
		return nv, unpinNone
	case nv.holds() == 0:
		return nv.without(bitWaitHolds), unpinRetire
	case v.has(bitRunning):
		return nv, unpinHolds
	}
	return nv, unpinNone
}

// disarmed reports whether generation gen is active with its entry
// disarmed. The caller holds ctlMu, under which alone the bit is cleared.
func (s *slot) disarmed(gen uint32) bool {
	v := s.load()
	return v.is(gen, lifeActive) && v.has(bitDisarmed)
}

// clearDisarmed clears the disarmed bit of active generation gen and
// reports whether the entry needs re-arming: the registration is active.
// The caller holds ctlMu, so that a disarm cannot come between the two.
func (s *slot) clearDisarmed(gen uint32) bool {
	for {
		v := s.load()
		if !v.is(gen, lifeActive) {
			return false
		}
		if !v.has(bitDisarmed) || s.cas(v, v.without(bitDisarmed)) {
			return true
		}
	}
}

// stopRunning clears the running and pending bits after a final event,
// and says what that means to a waiting release, as finishRun.
func (s *slot) stopRunning() (unpin int) {
	for {
		v := s.load()
		nv, unpin := v.unpinned(bitRunning | bitPending)
		if s.cas(v, nv) {
			return unpin
		}
	}
}

// Outcomes of acquire.
const (
	holdTaken = iota
	holdStale
	holdFull
)

// acquire takes a hold on generation gen if it is active, or also released
// when internal is set. A hold keeps the release from moving the slot to
// freeing.
func (s *slot) acquire(gen uint32, internal bool) int {
	for {
		v := s.load()
		if v.has(bitAdding) {
			s.settle()
			continue
		}
		if v.gen() != gen || !(v.life() == lifeActive || internal && v.life() == lifeReleased) {
			return holdStale
		}
		if v.holds() == holdMask>>8 {
			return holdFull
		}
		if s.cas(v, state(uint64(v)+holdOne)) {
			return holdTaken
		}
	}
}

// unhold drops a hold. It reports whether it was the last pin (hold or
// running bit) after the grace period ended: the caller must then retire
// the release again.
func (s *slot) unhold() (retire bool) {
	for {
		v := s.load()
		if v.holds() == 0 {
			inconsistent("unhold", v)
		}
		nv, unpin := state(uint64(v) - holdOne).unpinned(0)
		if s.cas(v, nv) {
			return unpin == unpinRetire
		}
	}
}

// toFreeing starts the release after the grace period: released becomes
// freeing and the handle is returned, unless pins remain (holds, or the
// running bit of a handler still running); then the slot waits for its
// last pin (waitHolds), ok is false, and running reports whether the
// running bit was among them.
func (s *slot) toFreeing() (h Handle, ok, running bool) {
	for {
		v := s.load()
		if v.life() != lifeReleased || v.has(bitWaitHolds) {
			inconsistent("toFreeing", v)
		}
		running = testHookPinned(v.has(bitRunning))
		if v.holds() > 0 || running {
			if s.cas(v, v.with(bitWaitHolds)) {
				return 0, false, running
			}
			continue
		}
		if s.cas(v, v.to(lifeFreeing)) {
			return s.handle(v.gen()), true, false
		}
	}
}

// free ends the release: freeing becomes free with the next generation. It
// reports false when the generation would wrap; the slot is then retired
// for good and stays freeing, which no handle validates against.
func (s *slot) free(gen uint32) bool {
	v := s.load()
	if !v.is(gen, lifeFreeing) || v.holds() != 0 {
		inconsistent("free", v)
	}
	next := gen + 1
	if next == 0 {
		return false
	}
	if !s.cas(v, stateOf(next, lifeFree)) {
		inconsistent("free", s.load())
	}
	return true
}

// handle returns the slot's handle for generation gen.
func (s *slot) handle(gen uint32) Handle { return makeHandle(s.index, gen) }
