//go:build linux

package bench

import (
	"context"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// BenchmarkChurn measures Add+Delete cycles per second while events flow:
// two waiters dispatch 64 busy eventfds (the handler reads and rewrites the
// fd) and the benchmark goroutine creates an eventfd, adds it with
// CloseFD, and deletes it, as a server does with short-lived connections.
// It reports cycles/s, the events/s that kept flowing meanwhile, and
// peak-released-not-free: the largest Stats.ReleasedNotFree seen, sampled
// every 32 cycles, which is how far reclamation fell behind the deletes.
// It runs each reclaimer on each topology: the shared set, per-waiter sets
// and stealing.
func BenchmarkChurn(b *testing.B) {
	for _, topo := range []struct {
		name string
		topo poller.Topology
	}{{"shared", poller.Shared}, {"per-waiter", poller.PerWaiter}, {"stealing", poller.Stealing}} {
		for _, r := range reclaimers {
			b.Run(topo.name+"/"+r.name, func(b *testing.B) {
				churn(b, poller.Options{Waiters: 2, Topology: topo.topo, Reclaimer: r.factory, WaitTimeout: r.timeout})
			})
		}
	}
}

func churn(b *testing.B, opts poller.Options) {
	p, err := poller.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	// One counter per waiter that may run: a shared set (Shared or
	// Stealing) may start extra waiters if all of its own stall.
	c := make(counters, p.MaxWaiters())
	for _, fd := range busyEventfds(b, 64) {
		_, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(e poller.Event) {
			handle(e.FD)
			c[e.Waiter].n.Add(1)
		}})
		if err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond) // let the events flow
	nop := func(poller.Event) {}
	var peak int64
	b.ResetTimer()
	start, events0 := time.Now(), c.total()
	for i := range b.N {
		h, err := p.Add(poller.Registration{FD: eventfd(b, 0), Events: poller.Readable, CloseFD: true, OnEvent: nop})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Delete(h); err != nil {
			b.Fatal(err)
		}
		if i%32 == 0 {
			peak = max(peak, p.Stats().ReleasedNotFree)
		}
	}
	el := time.Since(start)
	events := c.total() - events0
	b.StopTimer()
	peak = max(peak, p.Stats().ReleasedNotFree)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Barrier(ctx); err != nil {
		b.Fatalf("releases did not complete: %v", err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "cycles/s")
	b.ReportMetric(float64(events)/el.Seconds(), "events/s")
	b.ReportMetric(float64(peak), "peak-released-not-free")
}
