//go:build linux

package bench

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/gracepoll/gracepoll/poller"
)

// scaleSizes are the registration counts of BenchmarkScale. The largest
// needs 16,000 eventfds; the machine this was written for allows 20,000
// open files, and sizes that do not fit are skipped.
var scaleSizes = []int{100, 1000, 4000, 16000}

// BenchmarkScale measures the cost per event and the memory per
// registration from 100 to 16,000 registrations, every one of them busy
// (the handler reads and rewrites its eventfd), two waiters: the raw loop
// as the limit, and gracepoll on the shared, per-waiter and stealing
// topologies with the default reclaimer.
//
// B/reg is the Go heap the poller grew by while K registrations were added
// (after a GC on both sides), divided by K: slot table chunks, the fd map,
// the closures. It leaves out the poller's fixed cost and the kernel's own
// memory (struct epitem, the eventfd's file), which no variant avoids.
func BenchmarkScale(b *testing.B) {
	for _, k := range scaleSizes {
		name := fmt.Sprintf("K=%d", k)
		b.Run(name+"/raw", func(b *testing.B) {
			if !fdsFit(k) {
				b.Skipf("%d eventfds do not fit under RLIMIT_NOFILE %d with %d open", k, raiseNoFile(), openFDs())
			}
			rawLoop(b, 2, busyEventfds(b, k))
		})
		for _, topo := range []struct {
			name string
			topo poller.Topology
		}{{"shared-lt", poller.Shared}, {"per-waiter-lt", poller.PerWaiter}, {"stealing-lt", poller.Stealing}} {
			b.Run(name+"/"+topo.name, func(b *testing.B) {
				if !fdsFit(k) {
					b.Skipf("%d eventfds do not fit under RLIMIT_NOFILE %d with %d open", k, raiseNoFile(), openFDs())
				}
				scaleLoop(b, poller.Options{Waiters: 2, Topology: topo.topo}, busyEventfds(b, k))
			})
		}
	}
}

func scaleLoop(b *testing.B, opts poller.Options, fds []int) {
	p, err := poller.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	// One counter per waiter that may run: a shared set (Shared or
	// Stealing) may start extra waiters if all of its own stall.
	c := make(counters, p.MaxWaiters())
	// One handler for every registration, as a server would have: the
	// closure is not part of the per-registration cost.
	onEvent := func(e poller.Event) {
		handle(e.FD)
		c[e.Waiter].n.Add(1)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for _, fd := range fds {
		if _, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: onEvent}); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	perReg := (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(len(fds))
	measure(b, c)
	b.ReportMetric(perReg, "B/reg")
}
