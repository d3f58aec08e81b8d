//go:build linux

package bench

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

// BenchmarkReleaseLatency measures the time from Delete to the start of
// OnRelease, reported as p50-µs and p99-µs over the b.N deletes of the run.
// ns/op is the pace of the loop, not the latency.
//
//   - idle: two waiters blocked in epoll_wait with no timeout, and Delete
//     called from another goroutine (a timer, an admin command). Pass-the-
//     buck skips the offline waiters; the epoch reclaimer's goroutine sees
//     them offline.
//   - busy: events flow on 64 other eventfds and Delete is called from the
//     registration's own OnEvent on a waiter, as a server closes a
//     connection that reached EOF. The grace period ends at the waiters'
//     next quiescent points: about one batch.
//   - passbuck-classic: the original pass-the-buck (Bonzini, LKML 2012), in
//     which every waiter must wake up to pass the buck, with epoll_wait
//     timeouts of 1, 10 and 100 ms. The buck moves from waiter to waiter,
//     each at its own next wake-up, so an idle release takes about W/2
//     timeouts at the median and up to W (W waiters), not one timeout.
//
// Idle deletes under the default reclaimers run one at a time, each waiting
// for its release. The others are paced without waiting (busy: every
// 100 µs; classic: 1/100 of the timeout), so that a 100 ms timeout yields
// enough samples in seconds: their releases wait for the waiters' next
// quiescent points, not for each other, so overlapping them does not change
// their latency. Busy variants also report batch-µs, the mean time a
// waiter spent per epoll_wait batch meanwhile, the yardstick of "about one
// batch". Run it with a fixed count (-benchtime=2000x) to get the same
// number of samples everywhere.
func BenchmarkReleaseLatency(b *testing.B) {
	cases := []struct {
		name    string
		factory reclaim.Factory
		timeout time.Duration
		busy    bool
	}{
		{"idle/passbuck", passbuck.Factory(passbuck.Options{}), 0, false},
		{"idle/epoch", epoch.Factory(epoch.Options{}), 0, false},
		{"busy/passbuck", passbuck.Factory(passbuck.Options{}), 0, true},
		{"busy/epoch", epoch.Factory(epoch.Options{}), 0, true},
		{"idle/passbuck-classic/timeout=1ms", passbuck.Factory(passbuck.Options{Mode: passbuck.Classic}), time.Millisecond, false},
		{"idle/passbuck-classic/timeout=10ms", passbuck.Factory(passbuck.Options{Mode: passbuck.Classic}), 10 * time.Millisecond, false},
		{"idle/passbuck-classic/timeout=100ms", passbuck.Factory(passbuck.Options{Mode: passbuck.Classic}), 100 * time.Millisecond, false},
		{"busy/passbuck-classic/timeout=10ms", passbuck.Factory(passbuck.Options{Mode: passbuck.Classic}), 10 * time.Millisecond, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			releaseLatency(b, poller.Options{Waiters: 2, Reclaimer: c.factory, WaitTimeout: c.timeout}, c.busy)
		})
	}
}

func releaseLatency(b *testing.B, opts poller.Options, busy bool) {
	p, err := poller.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if busy {
		for _, fd := range busyEventfds(b, 64) {
			if _, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(e poller.Event) { handle(e.FD) }}); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond) // let the events flow
	}
	var (
		mu          sync.Mutex
		lat         = make([]time.Duration, 0, b.N)
		outstanding sync.WaitGroup
	)
	pace := opts.WaitTimeout / 100
	if busy && pace == 0 {
		pace = 100 * time.Microsecond
	}
	st0, t0 := p.Stats(), time.Now()
	b.ResetTimer()
	for range b.N {
		// A fresh eventfd, unreadable unless the busy case writes it to
		// make the registration delete itself.
		fd := eventfd(b, 0)
		var t0 time.Time // Delete's start; written before Delete, read after
		outstanding.Add(1)
		reg := poller.Registration{
			FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) {
				t0 = time.Now()
				if err := p.Delete(e.Handle); err != nil {
					b.Error(err)
				}
			},
			OnRelease: func(poller.Released) {
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				outstanding.Done()
			},
		}
		h, err := p.Add(reg)
		if err != nil {
			b.Fatal(err)
		}
		if busy {
			unix.Write(fd, one) // OnEvent deletes it on a waiter
		} else {
			t0 = time.Now()
			if err := p.Delete(h); err != nil {
				b.Fatal(err)
			}
		}
		if pace == 0 {
			outstanding.Wait()
		} else {
			time.Sleep(pace)
		}
	}
	outstanding.Wait()
	b.StopTimer()
	if busy {
		st1, el := p.Stats(), time.Since(t0)
		if n := st1.Wakeups - st0.Wakeups; n > 0 {
			b.ReportMetric(float64(el.Microseconds())*float64(len(st1.Waiters))/float64(n), "batch-µs")
		}
	}
	mu.Lock()
	reportPercentiles(b, lat)
	mu.Unlock()
}

// BenchmarkReleasePath measures the release path alone, Delete to the end
// of OnRelease, with -benchmem: allocs/op and B/op count only what Delete,
// the grace period and the release allocate (Add runs with the timer
// stopped). Registrations are added and deleted in batches of 256 on
// reused eventfds (CloseFD false), so steady state is reached: slots,
// reclaimer nodes and the fd map's entries are recycled.
func BenchmarkReleasePath(b *testing.B) {
	for _, c := range []struct {
		name    string
		factory reclaim.Factory
	}{
		{"passbuck", passbuck.Factory(passbuck.Options{})},
		{"epoch", epoch.Factory(epoch.Options{})},
	} {
		b.Run(c.name, func(b *testing.B) {
			const batch = 256
			p, err := poller.New(poller.Options{Waiters: 2, Reclaimer: c.factory})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			fds := make([]int, batch)
			for i := range fds {
				fds[i] = eventfd(b, 0)
				defer unix.Close(fds[i])
			}
			var released sync.WaitGroup
			onRelease := func(poller.Released) { released.Done() }
			onEvent := func(poller.Event) {}
			hs := make([]poller.Handle, batch)
			round := func(n int) {
				b.StopTimer()
				for i := range n {
					if hs[i], err = p.Add(poller.Registration{FD: fds[i], Events: poller.Readable, OnEvent: onEvent, OnRelease: onRelease}); err != nil {
						b.Fatal(err)
					}
				}
				released.Add(n)
				b.StartTimer()
				for i := range n {
					if err := p.Delete(hs[i]); err != nil {
						b.Fatal(err)
					}
				}
				released.Wait()
			}
			round(batch) // warm up: allocate slots, nodes and map entries
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				round(min(batch, b.N-done))
			}
		})
	}
}
