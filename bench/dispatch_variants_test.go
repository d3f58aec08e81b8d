//go:build linux

package bench

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

// naiveReg is the registration of the fix a user would write first: the
// idea of the kernel's EPOLL_CTL_DISABLE self-test. A handler locks the
// registration, checks its dead flag, handles the event and unlocks; a
// delete locks it, sets dead, does EPOLL_CTL_DEL and unlocks. A handler
// that raced with the delete finds dead and does nothing.
//
// It is still unsafe: the registration cannot be freed, nor its fd closed,
// while a stale event may reach it (the fd-indexed table hands the next
// registration of a reused fd number to that event), and two waiters woken
// for one level-triggered fd queue on the mutex. It is here for contrast.
type naiveReg struct {
	mu   sync.Mutex
	dead bool
	fd   int
}

// naiveDelete is the naive fix's delete.
func naiveDelete(epfd int, r *naiveReg) {
	r.mu.Lock()
	r.dead = true
	unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, r.fd, nil)
	r.mu.Unlock()
}

// naiveLoop runs the naive fix on the raw loop's epoll set: level-
// triggered, fd in epoll data, a table indexed by fd.
func naiveLoop(b *testing.B, waiters int, fds []int) {
	maxFD := 0
	for _, fd := range fds {
		maxFD = max(maxFD, fd)
	}
	table := make([]*naiveReg, maxFD+1)
	for _, fd := range fds {
		table[fd] = &naiveReg{fd: fd}
	}
	epfd := fdLoop(b, waiters, fds, func(fd int) bool {
		r := table[fd]
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.dead {
			return false
		}
		handle(fd)
		return true
	})
	defer unix.Close(epfd)
	for _, fd := range fds {
		naiveDelete(epfd, table[fd])
	}
}

// reclaimers are the three reclaimers, with the epoll_wait timeout the
// classic one needs. Busy waiters rarely block, so the timeout barely
// matters to dispatch.
var reclaimers = []struct {
	name    string
	factory reclaim.Factory
	timeout time.Duration
}{
	{"passbuck", passbuck.Factory(passbuck.Options{}), 0},
	{"passbuck-classic", passbuck.Factory(passbuck.Options{Mode: passbuck.Classic}), 10 * time.Millisecond},
	{"epoch", epoch.Factory(epoch.Options{}), 0},
}

// BenchmarkDispatchVariants measures events/s through W waiters over K
// busy eventfds, the handler reading and rewriting the fd, for each
// variant in one run: the unsafe raw loop (the limit; dispatch_test.go),
// the naive mutex fix, and gracepoll with each reclaimer on three
// level-triggered topologies: the shared set (one-shot re-arm per event),
// per-waiter sets (the default: no re-arm, a registration only ever on its
// own waiter) and stealing (per-waiter sets whose registrations any waiter
// may run, serialised by the running bit: no re-arm per event), plus the
// shared edge-triggered mode (a pending bit, no re-arm) with the default
// reclaimer. bench/run.sh divides each variant's ns/event by the raw
// loop's of the same W and K; the raw loop runs again here so that the
// ratio compares neighbours in time on a noisy machine.
func BenchmarkDispatchVariants(b *testing.B) {
	for _, w := range []int{1, 2, 4} {
		for _, k := range []int{64, 4096} {
			name := fmt.Sprintf("W=%d/K=%d", w, k)
			b.Run(name+"/raw", func(b *testing.B) { rawLoop(b, w, busyEventfds(b, k)) })
			b.Run(name+"/naive-mutex", func(b *testing.B) { naiveLoop(b, w, busyEventfds(b, k)) })
			for _, topo := range []struct {
				name string
				topo poller.Topology
			}{{"shared-lt", poller.Shared}, {"per-waiter-lt", poller.PerWaiter}, {"stealing-lt", poller.Stealing}} {
				for _, r := range reclaimers {
					b.Run(name+"/"+topo.name+"/"+r.name, func(b *testing.B) {
						opts := poller.Options{Waiters: w, Topology: topo.topo, Reclaimer: r.factory, WaitTimeout: r.timeout}
						gracepollLoop(b, opts, false, busyEventfds(b, k))
					})
				}
			}
			// Edge-triggered on the shared set: serialised by the pending
			// bit instead of a re-arm syscall.
			b.Run(name+"/shared-et/passbuck", func(b *testing.B) {
				gracepollLoop(b, poller.Options{Waiters: w, Topology: poller.Shared}, true, busyEventfds(b, k))
			})
		}
	}
}
