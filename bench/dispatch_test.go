//go:build linux

package bench

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// counter is one waiter's event count on its own cache lines.
type counter struct {
	n atomic.Uint64
	_ [120]byte
}

type counters []counter

func (c counters) total() uint64 {
	var t uint64
	for i := range c {
		t += c[i].n.Load()
	}
	return t
}

// busyEventfds makes k non-blocking eventfds, each readable.
func busyEventfds(b *testing.B, k int) []int {
	b.Helper()
	fds := make([]int, k)
	for i := range fds {
		fd, err := unix.Eventfd(1, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			b.Fatal(err)
		}
		fds[i] = fd
	}
	b.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return fds
}

var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// handle is the handler every variant runs: read the eventfd (which resets
// it) and write it again, so the fd stays busy.
func handle(fd int) {
	var buf [8]byte
	if n, _ := unix.Read(fd, buf[:]); n == 8 {
		unix.Write(fd, one)
	}
}

// waitFor blocks until the counters reach n, polling: the measured loop
// must not be slowed by the benchmark's own signalling.
func waitFor(c counters, n uint64) {
	for c.total() < n {
		time.Sleep(50 * time.Microsecond)
	}
}

// measure times the counters from now until they have grown by b.N and
// reports the rate. It counts from a snapshot taken as the clock starts, so
// events that flowed while the fds were being added are not divided by a
// window that does not include them.
func measure(b *testing.B, c counters) {
	b.ResetTimer()
	start, base := time.Now(), c.total()
	waitFor(c, base+uint64(b.N))
	b.StopTimer()
	report(b, start, c.total()-base)
}

func report(b *testing.B, start time.Time, events uint64) {
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(events)/el.Seconds(), "events/s")
}

// rawLoop is the unsafe limit: one level-triggered epoll set, W goroutines,
// the fd itself in epoll data, no validation, no reclamation, no
// serialisation (two waiters may read one fd at once).
func rawLoop(b *testing.B, waiters int, fds []int) {
	epfd := fdLoop(b, waiters, fds, func(fd int) bool { handle(fd); return true })
	unix.Close(epfd)
}

// fdLoop runs W goroutines on one level-triggered epoll set holding fds,
// with each fd itself in epoll data, calling dispatch for every event (it
// reports whether it handled the event) until b.N events are handled. It
// returns the epoll fd, still open, for the caller's teardown. The indirect
// call per event costs the raw loop a few nanoseconds of the ~2 µs an
// event takes here.
func fdLoop(b *testing.B, waiters int, fds []int, dispatch func(fd int) bool) int {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	stop, _ := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	defer unix.Close(stop)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(stop)}
	unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, stop, &ev)
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(epfd)
			b.Fatal(err)
		}
	}
	c := make(counters, waiters)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now() // the waiters start now: every event is in the window
	for w := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := make([]unix.EpollEvent, 128)
			for {
				n, err := unix.EpollWait(epfd, evs, -1)
				if err != nil && err != unix.EINTR {
					return
				}
				var k uint64
				for i := range evs[:n] {
					fd := int(evs[i].Fd)
					if fd == stop {
						return
					}
					if dispatch(fd) {
						k++
					}
				}
				c[w].n.Add(k)
			}
		}()
	}
	waitFor(c, uint64(b.N))
	b.StopTimer()
	report(b, start, c.total())
	unix.Write(stop, one)
	wg.Wait()
	return epfd
}

// gracepollLoop runs the same handler on a poller.
func gracepollLoop(b *testing.B, opts poller.Options, et bool, fds []int) {
	p, err := poller.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	// One counter per waiter that may run: a shared set may start extra
	// waiters if all of them stall (it should not here).
	c := make(counters, poller.MaxWaiters)
	events := poller.Readable
	if et {
		events |= poller.EdgeTriggered
	}
	for _, fd := range fds {
		_, err := p.Add(poller.Registration{FD: fd, Events: events, OnEvent: func(e poller.Event) {
			if et {
				// Edge-triggered: drain, then make a new edge.
				var buf [8]byte
				for {
					if n, _ := unix.Read(e.FD, buf[:]); n != 8 {
						break
					}
				}
				unix.Write(e.FD, one)
			} else {
				handle(e.FD)
			}
			c[e.Waiter].n.Add(1)
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	measure(b, c)
	p.Close()
}

// BenchmarkDispatch measures events/s through W waiters over K busy
// eventfds: the raw loop (the limit), then gracepoll in its dispatch modes.
// Compare ns/event within one run: shared-lt pays an EPOLLONESHOT re-arm
// per event, shared-et an atomic pending bit, per-waiter neither, and
// stealing-lt (per-waiter sets whose registrations any waiter may run) no
// re-arm but the running bit's atomics.
func BenchmarkDispatch(b *testing.B) {
	for _, w := range []int{1, 2, 4} {
		for _, k := range []int{64, 4096} {
			name := fmt.Sprintf("W=%d/K=%d", w, k)
			b.Run(name+"/raw", func(b *testing.B) { rawLoop(b, w, busyEventfds(b, k)) })
			for _, v := range []struct {
				name string
				topo poller.Topology
				et   bool
			}{
				{"shared-lt", poller.Shared, false},
				{"shared-et", poller.Shared, true},
				{"per-waiter-lt", poller.PerWaiter, false},
				{"stealing-lt", poller.Stealing, false},
			} {
				b.Run(name+"/"+v.name, func(b *testing.B) {
					gracepollLoop(b, poller.Options{Waiters: w, Topology: v.topo}, v.et, busyEventfds(b, k))
				})
			}
		}
	}
	runtime.GC()
}
