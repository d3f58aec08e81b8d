//go:build linux

package poller_test

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// TestStealingStandIn: with Stealing, a waiter blocked in one handler gets
// a stand-in on its own epoll set, so another registration of that set is
// served while it blocks; once it is free again the stand-in ends. Without
// the monitor (Overrun < 0, the control) the other registration waits for
// the blocked handler.
func TestStealingStandIn(t *testing.T) {
	const block = 300 * time.Millisecond
	run := func(t *testing.T, overrun time.Duration) (waited time.Duration, st poller.Stats, p *poller.Poller) {
		p = newPoller(t, poller.Options{Waiters: 2, Topology: poller.Stealing, Overrun: overrun})
		_, unblock := blockWaiter(t, p, poller.Registration{Waiter: poller.OnWaiter(0)})
		time.AfterFunc(block, unblock)
		fd := newEventfd(t)
		served := make(chan time.Time, 1)
		if _, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, Waiter: poller.OnWaiter(0),
			OnEvent: func(e poller.Event) {
				if readEventfd(e.FD) != 0 {
					served <- time.Now()
				}
			}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		writeEventfd(t, fd, 1)
		waited = wait(t, served, "the other registration of the blocked waiter's set").Sub(start)
		return waited, p.Stats(), p
	}
	t.Run("on", func(t *testing.T) {
		// 200 µs: the stand-in, idle once the blocked waiter is free,
		// ends at its next wake-up, 4000 Overruns later at the latest.
		waited, st, p := run(t, 200*time.Microsecond)
		if waited >= block/2 {
			t.Errorf("served after %v, with a waiter blocked for %v on its set: no stand-in took it", waited, block)
		}
		if st.Grown == 0 {
			t.Errorf("Stats.Grown = 0: no stand-in started")
		}
		t.Logf("served after %v by a stand-in; %d waiters started", waited, st.Grown)
		eventually(t, "the stand-in to end once the blocked waiter is free", func() bool { return p.Waiters() == 2 })
	})
	t.Run("off", func(t *testing.T) {
		waited, _, _ := run(t, -1)
		if waited < block/2 {
			t.Errorf("served after %v without the monitor, with its waiter blocked for %v: the test cannot tell", waited, block)
		}
		t.Logf("without the monitor, served after %v", waited)
	})
}

// stealingLiveness runs registrations of a Stealing poller whose handlers
// sometimes block before they read, so that stand-ins and hand-offs put
// two waiters on one level-triggered registration and entries are
// disarmed, and reports what was written but never read after the writes
// stop, with the poller's counters. A disarmed entry that is never re-armed
// shows as lost writes.
func stealingLiveness(t *testing.T, d time.Duration) (lost uint64, st poller.Stats) {
	const n = 8
	p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.Stealing, Overrun: 50 * time.Microsecond, MaxWaiters: 8})
	var read [n]atomic.Uint64
	fds := make([]int, n)
	for i := range n {
		fds[i] = newEventfd(t)
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		var calls atomic.Int64
		if _, err := p.Add(poller.Registration{FD: fds[i], Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) {
				// Runs are serialised, so rng is this registration's alone.
				if calls.Add(1); rng.IntN(8) == 0 {
					time.Sleep(time.Millisecond) // blocked, its fd still readable
				}
				read[i].Add(readEventfd(e.FD))
			}}); err != nil {
			t.Fatal(err)
		}
	}
	var written uint64
	rng := rand.New(rand.NewPCG(7, 7))
	for end := time.Now().Add(d); time.Now().Before(end); {
		writeEventfd(t, fds[rng.IntN(n)], 1)
		written++
		time.Sleep(20 * time.Microsecond)
	}
	sum := func() (s uint64) {
		for i := range read {
			s += read[i].Load()
		}
		return s
	}
	for deadline := time.Now().Add(2 * time.Second); sum() < written && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return written - sum(), p.Stats()
}

// TestStealingLiveness: entries disarmed while two waiters met on one
// registration are always re-armed; every write is read. The mutation
// test (gracepoll_mutation) shows that a run that forgets the re-arm
// loses writes here.
func TestStealingLiveness(t *testing.T) {
	lost, st := stealingLiveness(t, 400*time.Millisecond)
	if lost != 0 {
		t.Errorf("%d writes never read: a registration's entry stayed disarmed", lost)
	}
	if st.Disarms == 0 {
		t.Errorf("no entry was disarmed (%d handed off, %d waiters started): the test proved nothing", st.HandedOff, st.Grown)
	}
	t.Logf("%d events, %d disarms, %d handed off, %d waiters started", st.Events, st.Disarms, st.HandedOff, st.Grown)
}
