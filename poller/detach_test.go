//go:build linux

package poller_test

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// releaseBound is how long after its Delete a registration must be
// released while another waiter is blocked in a handler, on a shared set.
// A release takes microseconds; the margin is for -race on a loaded CI
// machine.
const releaseBound = 100 * time.Millisecond

// TestReleaseWhileHandlerBlocked blocks one handler and, meanwhile, opens
// 1,000 loopback TCP connections, one after another and 50 at a time, each
// registered with CloseFD, answered from its OnEvent and deleted once the
// client has its answer. On a shared set (Shared, Stealing) every one of
// them is released, OnRelease run and descriptor closed, within
// releaseBound of its Delete, and the process's descriptors are back to
// what they were while the handler is still blocked: the monitor detached
// the stuck waiter. On per-waiter sets nothing can take a registration's
// events from its waiter, and no waiter is detached: every release waits
// for the blocked handler, and completes within releaseBound of its
// return. That is the bound this topology keeps, and why servers whose
// handlers may block use a shared set.
func TestReleaseWhileHandlerBlocked(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.String(), func(t *testing.T) {
			opts := poller.Options{Topology: topo, Waiters: 2}
			p := newPoller(t, opts)
			ln := newListener()
			t.Cleanup(func() { unix.Close(ln) })
			baseline := countSockets(t)
			// On per-waiter sets (and Stealing's home sets) the handler
			// blocks waiter 0 and the connections live on waiter 1, which
			// is the only way per-waiter sets can serve them meanwhile.
			_, unblock := blockWaiter(t, p, poller.Registration{Waiter: poller.OnWaiter(0)})

			var (
				mu       sync.Mutex
				deleted  = map[poller.Handle]time.Time{}
				lateness []time.Duration
				released atomic.Int64
			)
			const conns, together = 1000, 50
			for start := 0; start < conns; start += together {
				var wg sync.WaitGroup
				for range together {
					srv, cl, err := tcpPair(ln)
					if err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						defer unix.Close(cl)
						if err := unix.SetNonblock(cl, false); err != nil {
							t.Error(err)
							return
						}
						if err := serveOne(p, srv, poller.OnWaiter(1), &mu, deleted, &lateness, &released); err != nil {
							t.Error(err)
							return
						}
						if _, err := unix.Write(cl, []byte("ping")); err != nil {
							t.Error(err)
							return
						}
						var b [4]byte
						if n, err := unix.Read(cl, b[:]); err != nil || string(b[:n]) != "pong" {
							t.Errorf("client read %q, %v; want pong", b[:n], err)
						}
					})
				}
				wg.Wait()
				if t.Failed() {
					return
				}
			}
			// The last Deletes have just returned: give their releases the
			// bound, then look.
			time.Sleep(releaseBound)
			if topo == poller.PerWaiter {
				if n := released.Load(); n != 0 {
					t.Errorf("per-waiter: %d of %d released while a handler blocks; want none (no waiter is detached)", n, conns)
				}
				t0 := time.Now()
				unblock()
				eventually(t, "every release after the handler returned", func() bool { return released.Load() == conns })
				if d := time.Since(t0); d > releaseBound {
					t.Errorf("per-waiter: the releases completed %v after the blocked handler returned, want within %v", d, releaseBound)
				}
				return
			}
			mu.Lock()
			n := len(lateness)
			slices.Sort(lateness)
			mu.Unlock()
			if n != conns {
				t.Fatalf("%d of %d connections released within %v of their Delete while a handler blocks", n, conns, releaseBound)
			}
			t.Logf("%d releases while a handler blocks: p50 %v, p99 %v, max %v after Delete; %d waiters detached",
				n, lateness[n/2], lateness[n*99/100], lateness[n-1], p.Stats().Detaches)
			if worst := lateness[n-1]; worst > releaseBound {
				t.Errorf("slowest release %v after its Delete, want within %v", worst, releaseBound)
			}
			// Every connection's descriptor is closed. (The poller's own
			// descriptors may have grown: extra waiters, each with its
			// parker's epoll fd, run until a second after the last stuck
			// one.)
			if got := countSockets(t); got != baseline {
				t.Errorf("%d sockets open while the handler is still blocked, want %d as before the connections", got, baseline)
			}
			if p.Stats().Detaches == 0 {
				t.Error("Stats.Detaches is 0: the blocked waiter was never detached")
			}
		})
	}
}

// serveOne registers server socket fd, owned by the poller: its OnEvent
// answers "pong" to what it reads and deletes the registration; its
// OnRelease records how long after the Delete it ran.
func serveOne(p *poller.Poller, fd int, home poller.WaiterChoice, mu *sync.Mutex, deleted map[poller.Handle]time.Time, lateness *[]time.Duration, released *atomic.Int64) error {
	_, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable, CloseFD: true, Waiter: home,
		OnEvent: func(e poller.Event) {
			var b [16]byte
			if n, err := unix.Read(e.FD, b[:]); err != nil || n == 0 {
				return
			}
			mu.Lock()
			deleted[e.Handle] = time.Now()
			mu.Unlock()
			unix.Write(e.FD, []byte("pong"))
			p.Delete(e.Handle)
		},
		OnRelease: func(r poller.Released) {
			now := time.Now()
			mu.Lock()
			if at, ok := deleted[r.Handle]; ok {
				*lateness = append(*lateness, now.Sub(at))
			}
			mu.Unlock()
			released.Add(1)
		},
	})
	if err != nil {
		unix.Close(fd)
	}
	return err
}

// countSockets counts the process's open sockets.
func countSockets(t testing.TB) int {
	n := 0
	for _, target := range fdTable(t) {
		if strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
