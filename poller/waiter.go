package poller

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// waiter is one waiter goroutine's state, padded against false sharing.
// Its counters are written only by that goroutine, once per epoll_wait.
type waiter struct {
	id       int
	name     string
	set      int // index of its epoll set and mailbox
	epfd     int // its epoll set's number, kept when renewSet replaces the set
	goid     atomic.Int64
	tid      atomic.Int64
	attached atomic.Int64 // registrations it owns (PerWaiter)
	events   atomic.Uint64
	calls    uint64 // OnEvent calls in the current batch; this goroutine only
	stale    atomic.Uint64
	wakeups  atomic.Uint64
	waitNs   atomic.Int64 // total time in epoll_wait
	procNs   atomic.Int64 // total time outside it
	// phase is +t while waiting since t, -t while processing since t (ns
	// since Poller.base), 0 once stopped: Stats adds the running phase.
	phase atomic.Int64
	// phaseMark is the claim cursor when the running processing phase
	// began (monitor.go).
	phaseMark atomic.Int64
	// setMu is held shared around every epoll_ctl on the waiter's own set
	// (PerWaiter), exclusively while the waiter renews the set.
	setMu sync.RWMutex
	renew atomic.Bool // the set holds an entry nothing can remove: renew it
	// running is set while the waiter's goroutine runs; an extra waiter
	// of a shared set comes and goes (monitor.go).
	running atomic.Bool
	// on is set, for other waiters to read, as the monitor sets each
	// start; blocked is the monitor's verdict at its last scan.
	on      atomic.Int32
	blocked atomic.Bool
	// parker is how it blocks (epoll_linux.go), watching its set as of
	// generation parkGen; its goroutine's alone while it runs.
	parker  *parker
	parkGen uint32
	b       batch
	// attach is how the monitor, having taken the waiter offline in the
	// reclaimer while it was detached, lets it come back (reattach).
	attach chan struct{}
	// seen and seenAt are the monitor's: the claim cursor as it last
	// found it, and since when (ns since Poller.base; 0 in epoll_wait).
	seen, seenAt int64
	// holdFrom is when the waiter began blocking in epoll_wait, holding
	// its P, while more waiters run than there are Ps (ns since
	// Poller.base; 0 once it parked): see holdWait.
	holdFrom int64
	_        [64]byte
}

// yieldEvery is how many consecutive busy batches a waiter runs between
// two yields.
const yieldEvery = 8

// run is one waiter's loop:
//
//	if its set holds an entry nothing can remove: renew the set
//	after a batch with events: yield (every yieldEvery batches), quiescent
//	    point, then epoll_wait
//	    without blocking, online (a busy waiter never blocks)
//	when that found nothing, or after an empty batch: offline (a quiescent
//	    point that lasts; it may run completed releases), epoll_wait (or,
//	    while more waiters run than there are Ps, hold the P in a bounded
//	    epoll_wait if fewer than GOMAXPROCS do and the poller has one set
//	    (holdWait), else park in the netpoller until the set has events,
//	    then epoll_wait without blocking), online
//	an extra waiter about to block that is no longer needed, or (Stealing)
//	    whose set has an earlier waiter free again: leave, end
//	for each event claimed from the batch (batch.go): wake-up -> skip;
//	    mailbox -> run fired timers; hand-off -> take handed-off events
//	    into the batch; else validate against the slot word, then dispatch
//	publish the batch's counters
//
// Yielding, polling before blocking, and parking matter to the Go
// scheduler. A waiter that never blocks keeps its P from every other
// goroutine until sysmon preempts it, so a busy waiter yields every few
// batches. A waiter blocked in epoll_wait keeps its P in the system call
// until sysmon takes it back, at once if sysmon is awake and up to 10 ms on
// an idle process, and resumes on another thread after a context switch or
// two; so a busy waiter never blocks, and while waiters outnumber the Ps,
// when a waiter's P is one another waiter or a handler's wake-up needs, an
// idle waiter parks in the netpoller, holding no P. Measured on a server pinned to one CPU
// that accepts, echoes and closes connections in a loop, this halves the
// context switches and cuts its CPU per connection by about a fifth; with
// two busy waiters on two CPUs, a release completes in under a batch
// instead of about fifteen. An idle waiter pays one extra epoll_wait
// before it sleeps.
func (p *Poller) run(w *waiter) {
	defer p.wg.Done()
	if p.opts.LockOSThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		w.tid.Store(int64(gettid()))
	}
	w.goid.Store(goid()) // once per waiter, for inCallback
	extra := w.id >= p.opts.Waiters
	timeoutMs := p.timeoutMs
	if extra {
		// An extra waiter joins before its first epoll_wait, and wakes up
		// now and then to see whether it is still needed.
		p.rec.Join(w.id)
		if ms := int(max(p.mon.retire/time.Millisecond, 1)); timeoutMs < 0 || timeoutMs > ms {
			timeoutMs = ms
		}
	}
	p.loop(w, extra, timeoutMs)
	p.nrunning.Add(-1)
	// Last, once nothing more is written to w: the monitor may reuse an
	// extra waiter's slot as soon as it is not running.
	w.phase.Store(0)
	w.running.Store(false)
}

// loop is run's loop, until Close or, for an extra waiter, retirement.
func (p *Poller) loop(w *waiter, extra bool, timeoutMs int) {
	// Time is read twice per blocking epoll_wait, never per event (unless
	// TimeHandlers): waiting is the blocking call, processing the rest.
	last := p.now()
	w.phase.Store(-last)
	busy, yield := false, 0
	for {
		if extra && p.surplus(w) {
			p.rec.Leave(w.id) // holds nothing: its batch is over
			return
		}
		if w.renew.Load() {
			p.renewSet(w)
		}
		evs := w.b.evs[:p.opts.MaxEvents]
		n, err := 0, error(nil)
		if busy {
			// Yield every few batches: goroutines made runnable
			// meanwhile (timers, the runtime's own netpoller, the
			// reclaimer's goroutine, the application's) run within a
			// few batches, not when sysmon preempts a waiter that never
			// blocks, 10 ms later. Not every batch: with a batch or two
			// of events per request, a yield per batch costs a
			// scheduler round trip per request.
			if yield++; yield%yieldEvery == 0 {
				runtime.Gosched()
			}
			// A quiescent point: this waiter holds no event of the
			// previous batch. It stays online, as it does not block.
			p.rec.Quiesce(w.id)
			n, err = epollWait(w.epfd, evs, 0)
		}
		if n == 0 && err == nil {
			if extra && p.idleExtra(w) {
				p.rec.Leave(w.id) // holds nothing: its batch is over
				return
			}
			// Offline is this waiter's quiescent point while it blocks.
			// It may run releases that completed here.
			p.rec.Offline(w.id)
			// Each phase is stored before the total it ends is added to,
			// so that Stats, which adds the running phase to the totals,
			// may count a moment too little but never twice: a base taken
			// by ResetStats is then never above a later reading.
			t := p.now()
			w.phase.Store(t)
			w.procNs.Add(t - last)
			held := false
			if p.nrunning.Load() <= p.procs {
				w.parker.disarm() // a nested entry costs every event
				n, err = epollWait(w.epfd, evs, timeoutMs)
				held, w.holdFrom = true, 0
			} else if len(p.epfds) == 1 {
				n, err, held = p.holdWait(w, evs, t, timeoutMs)
			}
			if !held {
				w.holdFrom = 0
				if w.parkGen != p.setGen[w.set].Load() {
					err = p.park(w) // the set was renewed: watch the new one
				}
				if err == nil {
					n, err = w.parker.wait(evs, timeoutMs)
				}
			}
			testHookWoken()
			last = p.now()
			// The claim cursor as processing begins, stored before the
			// phase that dates it: while the cursor is one past it, the
			// monitor knows the event was claimed at -phase.
			w.phaseMark.Store(w.b.next.Load())
			w.phase.Store(-last)
			w.waitNs.Add(last - t)
			if p.mon != nil {
				p.mon.kick()
			}
			p.rec.Online(w.id)
		}
		busy = n > 0
		if p.closing.Load() {
			p.rec.Offline(w.id)
			return
		}
		if err != nil {
			// Only a bug can make epoll_wait fail; report it rather than
			// spin.
			p.reportPanic(0, fmt.Errorf("poller: epoll_wait: %w", err))
			p.rec.Offline(w.id)
			return
		}
		p.runBatch(w, n)
	}
}

// runBatch validates and dispatches the n events epoll_wait returned, and
// the events handed off to this waiter meanwhile, then publishes the
// batch's counters.
func (p *Poller) runBatch(w *waiter, n int) {
	w.b.start(n)
	var stale uint64
	for {
		ev := w.b.claim()
		if ev == nil {
			if !w.b.detached() {
				break
			}
			// The monitor took this waiter offline while a handler
			// blocked: come back online before touching another event.
			p.reattach(w)
			continue
		}
		h, e := eventOf(ev)
		switch h {
		case wakeHandle:
			continue
		case mailHandle:
			p.deliverTimers(w)
			continue
		case handoffHandle:
			p.hq.take(&w.b)
			continue
		}
		if s := p.lookup(h); s == nil || !p.dispatch(w, s, h, e) {
			stale++
		}
	}
	w.b.finish()
	if w.blocked.Load() {
		// The monitor, which found this waiter blocked, may have parked
		// since: it watches the waiter again from now on.
		p.mon.kick()
	}
	w.wakeups.Add(1)
	// Count OnEvent calls, not validated events: on a shared set an
	// event merged into a running handler's next run, or a final event
	// that lost to a Delete, calls nothing.
	if w.calls != 0 {
		w.events.Add(w.calls)
		w.calls = 0
	}
	if stale != 0 {
		w.stale.Add(stale)
	}
}

// dispatch validates and runs one event (or fired timers) for h's slot, by
// the topology's serialisation. It reports false for a stale event.
func (p *Poller) dispatch(w *waiter, s *slot, h Handle, e Events) bool {
	if p.opts.Topology == PerWaiter {
		return p.dispatchOwned(w, s, h, e)
	}
	return p.dispatchShared(w, s, h, e)
}

// dispatchOwned runs an event on the registration's own waiter (PerWaiter):
// only this waiter dispatches it, so its runs are serialised for free.
func (p *Poller) dispatchOwned(w *waiter, s *slot, h Handle, e Events) bool {
	if _, ok := s.validate(h.Gen()); !ok {
		return false
	}
	if e&(HangUp|Error) != 0 {
		p.hangUp(w, s, h, e)
		return true
	}
	if p.callEvent(w, s, h, e) {
		p.endFromWaiter(s, h, Panicked)
	}
	return true
}

// dispatchShared serialises the registration's OnEvent across waiters with
// the running and pending bits of its state word.
//
// On a shared set a level-triggered entry is one-shot, re-armed after each
// run. With Stealing it is a plain level-triggered entry, which costs
// nothing per event, but reports the fd on every epoll_wait of its set
// until the handler reads: when that reaches a second waiter of the set (a
// waiter standing in for a blocked one) or a handed-off event races a
// fresh one, the waiter that finds it running disarms the entry (one-shot,
// ctlMu held) and the runner re-arms it. Both epoll_ctl calls happen only
// when two waiters meet on one registration.
func (p *Poller) dispatchShared(w *waiter, s *slot, h Handle, e Events) bool {
	lt := Events(s.events.Load())&EdgeTriggered == 0
	switch s.enterRun(h.Gen(), e, lt && p.opts.Topology == Stealing) {
	case runStale:
		return false
	case runQueued:
		return true
	case runDisarm:
		p.disarm(s, h)
		return true
	}
	rearm := lt && p.opts.Topology == Shared
	for {
		if e&(HangUp|Error) != 0 {
			p.hangUp(w, s, h, e)
			p.unpinned(s, h, s.stopRunning())
			return true
		}
		if p.callEvent(w, s, h, e) {
			p.endFromWaiter(s, h, Panicked)
		}
		var again, disarmed bool
		var unpin int
		if e, again, disarmed, unpin = s.finishRun(); !again {
			p.unpinned(s, h, unpin)
			rearm = rearm || testHookRearm(disarmed)
			break
		}
	}
	// Past finishRun the slot is no longer pinned: rearm touches it only
	// under ctlMu, if it is still this generation, active.
	if rearm {
		p.rearm(s, h)
	}
	return true
}

// unpinned finishes what a run's end means to a release that found the
// registration running (finishRun): the registration was released while
// its handler went on with the waiter detached (monitor.go), and the
// release waited for the running bit. It goes round again once nothing
// pins the slot; if holds remain, Barrier stops waiting for it.
func (p *Poller) unpinned(s *slot, h Handle, unpin int) {
	switch unpin {
	case unpinRetire:
		p.retire(s)
	case unpinHolds:
		p.pins.done(s, h.Gen())
	}
}

// rearm re-enables a one-shot or disarmed registration after its dispatch,
// if it is still active: one load of the word, under ctlMu, which Delete's
// claim and disarm also hold.
func (p *Poller) rearm(s *slot, h Handle) {
	s.ctlMu.Lock()
	if s.clearDisarmed(h.Gen()) {
		// ENOENT or EBADF: the user closed the fd; Delete still works.
		epollMod(p.lockSet(s), s.fd, p.epollBits(Events(s.events.Load())), h)
		p.unlockSet(s)
	}
	s.ctlMu.Unlock()
}

// disarm makes a Stealing registration's level-triggered entry one-shot
// while another waiter runs it, unless that waiter has re-armed it since
// (the disarmed bit is clear): the entry reports at most once more, and the
// running waiter re-arms it when its run ends.
func (p *Poller) disarm(s *slot, h Handle) {
	s.ctlMu.Lock()
	if s.disarmed(h.Gen()) {
		epollMod(p.lockSet(s), s.fd, p.epollBits(Events(s.events.Load()))|oneShot, h)
		p.unlockSet(s)
		p.disarms.Add(1)
	}
	s.ctlMu.Unlock()
}

// hangUp delivers a registration's final event: it leaves epoll first, the
// event is delivered once, then the registration is released as if deleted.
// The fd stays open until after OnRelease, so the handler can still read
// what arrived before the hang-up.
func (p *Poller) hangUp(w *waiter, s *slot, h Handle, e Events) {
	if !p.end(s, h.Gen(), HungUp) {
		return // deleted meanwhile: no more events
	}
	p.callEvent(w, s, h, e)
	p.retire(s)
}

// endFromWaiter ends a registration from inside a waiter, which needs no
// ops fence: Close joins the waiters before closing epoll sets.
func (p *Poller) endFromWaiter(s *slot, h Handle, why Reason) {
	if p.end(s, h.Gen(), why) {
		p.retire(s)
	}
}

// callEvent runs OnEvent (after any fired timers) and reports whether it
// panicked.
func (p *Poller) callEvent(w *waiter, s *slot, h Handle, e Events) (panicked bool) {
	if e&timerDue != 0 {
		p.runTimers(s, h)
		if e &^= timerDue; e == 0 {
			return false
		}
	}
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			p.reportPanic(h, v)
		}
	}()
	w.calls++
	s.nEvents.Add(1)
	if s.waiter < 0 && s.lastWaiter.Load() != int32(w.id) {
		s.lastWaiter.Store(int32(w.id))
	}
	if p.opts.TimeHandlers {
		t := p.now()
		defer func() { s.handlerNs.Add(p.now() - t) }()
	}
	s.onEvent(Event{Handle: h, FD: s.fd, Events: e, Waiter: w.id})
	return false
}

// holdBudget bounds how long in all a waiter blocks in epoll_wait holding
// its P, events or not, between two parks, while more waiters run than
// there are Ps: see holdWait.
const holdBudget = int64(10 * time.Millisecond)

// holdIdle is how long a waiter blocks in epoll_wait holding its P, while
// more waiters run than there are Ps, before it parks in the netpoller.
const holdIdle = time.Millisecond

// holdWait is how a waiter blocks while more waiters run than there are
// Ps, on a poller with one epoll set. Parking in the netpoller (parker)
// frees the waiter's P for a blocked handler's wake-up, but costs: each
// time every goroutine is parked the P goes idle, and the runtime's
// sysmon, which sleeps while every P is idle, is woken by the next system
// call and then polls every 20 µs for a while. With 2 % of requests
// blocking 5 ms at 10,000 requests/s that doubled the server's CPU per
// request. So as many waiters as there are Ps block in epoll_wait, holding
// their P, as the waiters within GOMAXPROCS always do, and the rest park;
// the events come to the holders first, and to the parked ones once no
// holder is left. To give back what holding the P takes:
//
//   - a holder yields before it blocks, so that goroutines made runnable
//     meanwhile (a handler whose sleep ended, one back from a system
//     call) run first: on a loaded server they wait for the next event;
//   - it blocks at most holdIdle, and at most until the monitor's next
//     scan when a waiter may be blocking without a verdict yet (its
//     timer could not fire while the P is held), then parks if nothing
//     came: an idle server gives its P back within holdIdle;
//   - after holdBudget of holding in all it parks once, so that the Go
//     netpoller (goroutines waiting on network I/O, such as a handler's
//     database connection) is polled even if events never stop.
//
// It reports held false if the caller should park instead.
func (p *Poller) holdWait(w *waiter, evs []epollEvent, now int64, timeoutMs int) (n int, err error, held bool) {
	if w.holdFrom == 0 {
		w.holdFrom = now
	} else if now-w.holdFrom >= holdBudget {
		return 0, nil, false
	}
	if p.holders.Add(1) > p.procs {
		p.holders.Add(-1)
		return 0, nil, false
	}
	w.parker.disarm() // a nested entry costs every event
	runtime.Gosched()
	wait, scan := int64(holdIdle), false
	if p.mon != nil {
		if due := p.mon.due.Load(); due != 0 {
			if d := due - p.now(); d < wait {
				wait, scan = max(d, 0), true
			}
		}
	}
	if timeoutMs >= 0 && int64(timeoutMs)*int64(time.Millisecond) <= wait {
		n, err = epollWait(w.epfd, evs, timeoutMs)
		p.holders.Add(-1)
		return n, err, true
	}
	n, err = epollWaitNs(w.epfd, evs, wait)
	p.holders.Add(-1)
	return n, err, n > 0 || err != nil || scan
}
