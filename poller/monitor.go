package poller

import (
	"cmp"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"time"
)

// The monitor keeps a slow handler from holding up other registrations on a
// shared set. Every waiter takes up to MaxEvents events per epoll_wait, and
// with EPOLLONESHOT nobody else is given them: while one handler blocks
// (a sleep, a lock, a blocking system call), the rest of its waiter's batch
// would wait for it. And a fixed pool of waiters all blocked at once leaves
// every ready event waiting, where a goroutine-per-connection server would
// still answer (the floating connections of ZygOS, SOSP 2017).
//
// So the monitor, a goroutine that runs while a waiter is processing,
// looks every Overrun/2 at each waiter's claim cursor, and at the moment a
// verdict can fall. A cursor that has not moved for Overrun, on a waiter
// that is not in epoll_wait, is a waiter blocked in one handler (or timer,
// or release):
//
//   - the events of its batch it has not reached go to the hand-off queue,
//     and the queue's eventfd wakes a free waiter, which takes them into
//     its own batch and validates each like a fresh event (batch.go);
//   - the blocked waiter is detached: taken offline in the reclaimer on its
//     behalf (offlineFor), so that releases of other registrations do not
//     wait for its handler, while the running bit pins its own;
//   - if every waiter of an epoll set is blocked and events wait (the
//     queue, or the set itself: an epoll fd polls readable while its ready
//     list is not empty), and fewer goroutines wait for a P than waiters
//     look blocked (waiters that do not move because the CPU is saturated
//     are not blocked), it starts another waiter on that set, up to
//     MaxWaiters. The new waiter joins the reclaimer before its first
//     epoll_wait; an extra waiter that finds nothing to do once no waiter
//     has been blocked for 4000 Overruns (a second by default) leaves the
//     reclaimer and ends. Its statistics stay readable.
//   - with Stealing, whose sets hold plain level-triggered entries, two
//     free waiters on one set would both be handed each ready fd (and meet
//     on it, dispatchShared), so an extra waiter also ends, between two
//     batches, as soon as a waiter started before it on its set is free:
//     the one it stood in for is back.
//
// Per event the waiters pay one atomic add (the claim); per batch, one load
// of blocked; per blocking epoll_wait, one load of parked and one store of
// the cursor. The monitor costs nothing while every waiter waits in
// epoll_wait or has been found blocked, with a free waiter on its set: it
// parks until a waiter comes back with work or a blocked one moves.
//
// Its timer is a Go timer, which on an idle runtime fires only when the
// runtime's netpoller wakes, after whole milliseconds: the alarm, a
// timerfd in that netpoller, wakes it on time (see alarm).
type monitor struct {
	tick    time.Duration
	overrun int64 // ns
	retire  time.Duration
	parked  atomic.Bool // parked, or idling on a tick without the alarm
	// due is when the monitor scans next, while a waiter may be blocking
	// without a verdict yet (ns since Poller.base; 0 otherwise): a waiter
	// that holds its P in epoll_wait (holdWait) returns by then, for the
	// monitor's timer to fire.
	due atomic.Int64
	// alarm wakes the runtime's netpoller when the timer is due: on an
	// idle runtime a timer due in less than a millisecond fires after one.
	alarm *alarm
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	// needAt is the last time every waiter was blocked (ns since
	// Poller.base); extra waiters retire a second after it.
	needAt atomic.Int64
	// runnable reads the runtime's count of goroutines waiting for a P.
	runnable [1]metrics.Sample
	// running and blocked count each set's waiters during a scan, and
	// since is when the last of a set's blocked waiters was first seen
	// stuck; want lists the sets that need a waiter.
	running, blocked []int
	since            []int64
	want             []int
}

// retireOverruns is how long, in Overruns, after the last moment every
// waiter was blocked an extra waiter with nothing to do retires: a second
// at the default Overrun.
const retireOverruns = 4000

// monitorIdleTicks is how many ticks with every waiter in epoll_wait the
// monitor waits before it parks.
const monitorIdleTicks = 8

func newMonitor(overrun time.Duration, sets int) *monitor {
	m := &monitor{
		tick:    max(overrun/2, 10*time.Microsecond),
		overrun: int64(overrun),
		retire:  retireOverruns * overrun,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		running: make([]int, sets),
		blocked: make([]int, sets),
		since:   make([]int64, sets),
		want:    make([]int, 0, sets),
	}
	m.runnable[0].Name = "/sched/goroutines/runnable:goroutines"
	return m
}

// kick wakes a parked or idling monitor. A waiter calls it on coming back
// from a blocking epoll_wait: one load when the monitor is watching.
func (m *monitor) kick() {
	if m.parked.Load() && m.parked.CompareAndSwap(true, false) {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// monitor is the monitor's goroutine, until Close.
func (p *Poller) monitor() {
	m := p.mon
	defer close(m.done)
	t := time.NewTimer(m.tick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-t.C:
		case <-m.wake: // a waiter came back with work while the monitor idled
		case <-m.stop:
			return
		}
		m.parked.Store(false)
		watching, next := p.scan()
		if watching {
			idle = 0
		} else if idle++; idle >= monitorIdleTicks {
			m.due.Store(0)
			// Stored before the waiters' phases are read again, the mirror
			// image of a waiter storing its phase before loading parked:
			// one of the two sees the other, so a waiter coming back with
			// work either finds the monitor parked and wakes it, or is seen
			// here.
			m.parked.Store(true)
			if !p.anyProcessing() {
				select {
				case <-m.wake:
				case <-m.stop:
					return
				}
			}
			m.parked.Store(false)
			idle = 0
			next = 0
		}
		d := m.tick
		if next != 0 {
			d = min(d, time.Duration(next-p.now()))
		}
		t.Reset(d)
		if watching {
			m.due.Store(p.now() + int64(d))
			m.alarm.set(d)
		} else {
			// Only a verdict, or the sighting of a waiter that may be
			// blocking, needs the alarm: a timerfd_settime per idle tick
			// cost more than it saved (each expiry on an idle P is one
			// more wake-up of the runtime). An idle tick may come late,
			// so a waiter coming back with work wakes the monitor now,
			// as it does a parked one.
			m.due.Store(0)
			m.parked.Store(true)
		}
	}
}

// anyProcessing reports whether a running waiter is out of epoll_wait and
// not found blocked: one found blocked wakes the monitor when it moves
// again (runBatch).
func (p *Poller) anyProcessing() bool {
	for i := range int(p.highWater.Load()) {
		if w := &p.waiters[i]; w.running.Load() && w.phase.Load() < 0 && !w.blocked.Load() {
			return true
		}
	}
	return false
}

// scan looks at every waiter once, hands off the batches of blocked ones,
// and starts a waiter on each set whose waiters are all blocked while
// events wait. It reports whether it is watching a waiter (one processing
// and not found blocked, or every waiter of a set blocked) and, if one may
// be found blocked before the next tick, when (ns since Poller.base).
//
// A waiter's cursor that has not moved for Overrun, on a waiter that is
// not in epoll_wait, is a waiter blocked in one handler. Since when it has
// not moved is, for the first event claimed after a blocking epoll_wait,
// the time that wait returned (phaseMark and phase, read around the
// cursor so that the three belong to one phase); for any other event the
// scan that first saw the cursor there, up to a tick after the claim.
func (p *Poller) scan() (watching bool, next int64) {
	m := p.mon
	now := p.now()
	clear(m.running)
	clear(m.blocked)
	clear(m.since)
	blocked := 0
	for i := range int(p.highWater.Load()) {
		w := &p.waiters[i]
		if !w.running.Load() {
			continue
		}
		m.running[w.set]++
		ph := w.phase.Load()
		pm := w.phaseMark.Load()
		mark := w.b.next.Load()
		waiting := ph >= 0
		if waiting {
			w.seenAt = 0 // in epoll_wait: holds nothing back
			if w.blocked.Load() {
				w.blocked.Store(false)
			}
			continue
		}
		if mark != w.seen || w.seenAt == 0 {
			w.seen, w.seenAt = mark, now
			if mark == pm+1 && w.phase.Load() == ph {
				w.seenAt = -ph // claimed as its wait returned
			}
		}
		stuck := now-w.seenAt >= m.overrun
		if w.blocked.Load() != stuck {
			w.blocked.Store(stuck)
		}
		if !stuck {
			watching = true
			if at := w.seenAt + m.overrun; next == 0 || at < next {
				next = at
			}
			continue
		}
		m.blocked[w.set]++
		m.since[w.set] = max(m.since[w.set], w.seenAt)
		blocked++
		if k, ok := w.b.detach(&p.hq); ok {
			p.handedOff.Add(uint64(k))
			p.detaches.Add(1)
			// The cursor moved; the handler has not.
			w.seen = w.b.next.Load()
			p.wg.Add(1) // Close stops the monitor before it waits
			go p.offlineFor(w)
		}
	}
	if blocked == 0 {
		return watching, next
	}
	m.want = m.want[:0]
	for set, n := range m.running {
		if n > 0 && m.blocked[set] == n {
			watching = true // events may come to a set nobody serves
			if p.workWaiting(set) {
				m.want = append(m.want, set)
			}
		}
	}
	if len(m.want) == 0 {
		return watching, next
	}
	// Of the waiters that look blocked, as many as goroutines wait for a
	// P may merely be starved of CPU; the others are blocked for sure, so
	// that many sets get a waiter, those stuck longest first. A starved
	// waiter runs again within a few of the others' batches, so a set
	// stuck for starvedOverruns gets one too.
	n := blocked - m.starved()
	slices.SortFunc(m.want, func(a, b int) int { return cmp.Compare(m.since[a], m.since[b]) })
	for i, set := range m.want {
		if i < n || now-m.since[set] >= starvedOverruns*m.overrun {
			m.needAt.Store(now)
			p.grow(set)
		}
	}
	return watching, next
}

// offlineFor takes detached waiter w offline in the reclaimer on its
// behalf, then lets it come back online (reattach). It runs on a goroutine
// of its own because Offline may run releases, and their OnRelease calls
// must delay neither the monitor nor, unless it returns meanwhile, w.
//
// This is what keeps a handler that blocks from holding back the release
// of every other registration: a waiter that never returns from one
// handler never reaches a quiescent point, and pass-the-buck (like any
// quiescent-state reclaimer) would wait for it forever. Detached, it holds
// one reference the grace period would protect, the registration it is
// running, and that one is pinned by its running bit (slot.toFreeing);
// the rest of its batch went to other waiters as raw events, and whatever
// it claims after reattach it validates then, as after epoll_wait.
func (p *Poller) offlineFor(w *waiter) {
	defer p.wg.Done()
	p.rec.Offline(w.id)
	w.attach <- struct{}{}
}

// reattach brings detached waiter w back online once its handler has
// returned, after the monitor's Offline on its behalf has: the two never
// make reclaimer calls for w at once.
func (p *Poller) reattach(w *waiter) {
	<-w.attach
	p.rec.Online(w.id)
	w.b.reattach()
}

// starvedOverruns is how long, in Overruns, every waiter of a set may look
// blocked before it gets another waiter even though as many goroutines
// wait for a P: a waiter merely starved of CPU is not stuck that long.
const starvedOverruns = 4

// starved returns how many goroutines wait for a P. A waiter that has not
// moved may be blocked (asleep, in a system call, waiting for a lock) or
// merely runnable, starved of CPU; more waiters help only the first kind,
// and if as many goroutines wait to run as waiters look blocked, they may
// all be the second.
func (m *monitor) starved() int {
	metrics.Read(m.runnable[:])
	if v := m.runnable[0].Value; v.Kind() == metrics.KindUint64 {
		return int(v.Uint64())
	}
	return 0
}

// workWaiting reports whether events wait for a waiter of a set: handed
// off, or ready in the set.
func (p *Poller) workWaiting(set int) bool {
	return p.hq.n.Load() > 0 || readable(p.epfds[set])
}

// grow starts an extra waiter on a set, if MaxWaiters allows. Only the
// monitor calls it, and Close stops the monitor before it joins the
// waiters.
func (p *Poller) grow(set int) {
	for i := p.opts.Waiters; i < len(p.waiters); i++ {
		w := &p.waiters[i]
		if w.running.Load() {
			continue
		}
		// Not running, so no other goroutine reads them: the go statement
		// below publishes them to the waiter.
		w.set, w.epfd = set, p.epfds[set]
		if p.park(w) != nil {
			return // out of fds: no waiter now, perhaps at the next scan
		}
		w.on.Store(int32(set))
		w.blocked.Store(false)
		p.nrunning.Add(1)
		w.running.Store(true)
		if int32(i) >= p.highWater.Load() {
			p.highWater.Store(int32(i) + 1)
		}
		p.grown.Add(1)
		p.wg.Add(1)
		go p.run(w)
		return
	}
}

// idleExtra reports whether extra waiter w, about to block with nothing to
// do, should end: no waiter has been blocked for a while.
func (p *Poller) idleExtra(w *waiter) bool {
	return w.id >= p.opts.Waiters && p.now()-p.mon.needAt.Load() > int64(p.mon.retire)
}

// surplus reports whether extra waiter w of a Stealing topology should end
// before its next epoll_wait: a waiter started before it on its set is
// running and free (waiting, or processing without being blocked).
func (p *Poller) surplus(w *waiter) bool {
	if p.opts.Topology != Stealing {
		return false
	}
	for i := range w.id {
		if o := &p.waiters[i]; o.on.Load() == int32(w.set) && o.running.Load() && !o.blocked.Load() {
			return true
		}
	}
	return false
}
