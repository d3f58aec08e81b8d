//go:build linux

package poller_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// BenchmarkBatchHold measures how long an event waits behind a handler
// that blocks in the same batch: two fd numbers of one eventfd (a dup), so
// that one write makes both ready and one epoll_wait most likely returns
// both; whichever handler runs first sleeps D, and the other's start is
// timed from the first's. On a waiter that held its whole batch the second
// would wait D; with the hand-off it waits until the monitor finds the
// waiter blocked, Options.Overrun (250 µs) and the monitor's reaction.
// The poller has the default waiters (GOMAXPROCS: run with -cpu 1,2) and
// MaxWaiters, and is reused across trials, as a server's is.
//
// It reports hold-p50-µs, hold-p99-µs and hold-max-µs over every trial,
// and same-batch, the trials whose two events came out of one epoll_wait
// (the second was handed off, or ran on the first's waiter), with
// same-batch-hold-p99-µs over those alone: a waiter standing in on the
// set, as Stealing keeps one for a while, often takes the second event in
// a batch of its own, and such a trial counts near 0 in the first
// figures. The measurement ignores b.N: run it with -benchtime=1x;
// -test.count gives rounds.
func BenchmarkBatchHold(b *testing.B) {
	const trials = 250
	// The Go runtime opens its netpoller's fds on first use, which the
	// poller's parkers and alarm are: before the fd check's first count.
	if warm, err := poller.New(poller.Options{Topology: poller.Shared}); err == nil {
		warm.Close()
	}
	for _, topo := range []poller.Topology{poller.Shared, poller.Stealing} {
		for _, d := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
			b.Run(fmt.Sprintf("%v/D=%v", topo, d), func(b *testing.B) {
				p := newPoller(b, poller.Options{Topology: topo})
				var holds, same []time.Duration
				for range trials {
					hold, sameBatch := batchHold(b, p, d)
					holds = append(holds, hold)
					if sameBatch {
						same = append(same, hold)
					}
				}
				q := func(ds []time.Duration, f float64) float64 {
					if len(ds) == 0 {
						return 0
					}
					slices.Sort(ds)
					return float64(ds[min(int(f*float64(len(ds))), len(ds)-1)].Nanoseconds()) / 1e3
				}
				b.ReportMetric(q(holds, 0.5), "hold-p50-µs")
				b.ReportMetric(q(holds, 0.99), "hold-p99-µs")
				b.ReportMetric(q(holds, 1), "hold-max-µs")
				b.ReportMetric(float64(len(same)), "same-batch")
				b.ReportMetric(q(same, 0.99), "same-batch-hold-p99-µs")
			})
		}
	}
}

// batchHold runs one trial of BenchmarkBatchHold: it returns how long
// after the first handler started, sleeping d, the second started, and
// whether the two came in one batch.
func batchHold(b *testing.B, p *poller.Poller, d time.Duration) (hold time.Duration, sameBatch bool) {
	b.Helper()
	a := newEventfd(b)
	dup, err := unix.Dup(a)
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu      sync.Mutex
		starts  []time.Time
		waiters []int
		done    = make(chan time.Duration, 1)
	)
	onEvent := func(e poller.Event) {
		now := time.Now()
		mu.Lock()
		starts = append(starts, now)
		waiters = append(waiters, e.Waiter)
		n := len(starts)
		mu.Unlock()
		switch n {
		case 1:
			// Not reading the counter: an edge-triggered report the
			// other waiter has not collected yet would be dropped as
			// no longer ready.
			time.Sleep(d)
		case 2:
			done <- now.Sub(starts[0])
		}
	}
	var hs [2]poller.Handle
	for i, fd := range []int{a, dup} {
		if hs[i], err = p.Add(poller.Registration{FD: fd, Events: poller.Readable | poller.EdgeTriggered, CloseFD: true, OnEvent: onEvent}); err != nil {
			b.Fatal(err)
		}
	}
	h0 := p.Stats().HandedOff
	writeEventfd(b, a, 1)
	select {
	case hold = <-done:
	case <-time.After(timeout):
		b.Fatalf("the second handler did not run within %v; %d started\n%v", timeout, len(starts), p.Stats())
	}
	for _, h := range hs {
		if err := p.Delete(h); err != nil {
			b.Fatal(err)
		}
	}
	mu.Lock()
	sameBatch = p.Stats().HandedOff > h0 || waiters[0] == waiters[1]
	mu.Unlock()
	// The sleeper ends before the next trial, so that each starts with
	// its waiters free.
	time.Sleep(d)
	return hold, sameBatch
}
