package reclaimtest

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// Benchmark measures Reclaimers made by newR with sub-benchmarks that any
// implementation can run, so that implementations can be compared:
//
//   - QuiesceIdle: Quiesce with nothing pending, the cost every waiter pays
//     per epoll_wait. It must not allocate; the benchmark fails if it does.
//   - Retire: Retire from one goroutine, while participants let grace
//     periods through (offline, or quiescing in a loop for a NeedsQuiesce
//     reclaimer), so that the cost of draining is included.
//   - RetireOnly: Retire alone, participants online and silent; the
//     backlog is let through with the timer stopped.
//   - RetireParallel: Retire from 2×GOMAXPROCS goroutines, draining.
//   - GracePeriodOffline: latency from Retire to the release running, with
//     every participant offline (an idle server); also reported as the
//     median, "p50-µs". Skipped for a NeedsQuiesce reclaimer.
//   - GracePeriodQuiescing: the same latency with two participant
//     goroutines online, passing quiescent points in a loop (busy waiters).
//
// Every sub-benchmark closes its Reclaimer and stops its goroutines.
func Benchmark(b *testing.B, newR reclaim.Factory, opts ...Option) {
	c := newConfig(opts)
	b.Run("QuiesceIdle", func(b *testing.B) {
		r := benchStart(b, newR, 2)
		r.Offline(1)
		if a := testing.AllocsPerRun(1000, func() { r.Quiesce(0) }); a > 0 {
			b.Errorf("Quiesce with nothing pending allocates %v times per call, want 0", a)
		}
		b.ReportAllocs()
		for b.Loop() {
			r.Quiesce(0)
		}
	})
	b.Run("Retire", func(b *testing.B) {
		r := benchStart(b, newR, 2)
		benchDrain(b, c, r)
		var n atomic.Uint64
		release := func() { n.Add(1) }
		b.ReportAllocs()
		for b.Loop() {
			if err := r.Retire(release); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RetireOnly", func(b *testing.B) {
		// Retire's own cost: participants stay online, so nothing drains
		// while the timer runs; every 1<<16 calls the timer stops and the
		// participants let the backlog through.
		r := benchStart(b, newR, 2)
		var n atomic.Uint64
		release := func() { n.Add(1) }
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := r.Retire(release); err != nil {
				b.Fatal(err)
			}
			if i&(1<<16-1) == 1<<16-1 {
				b.StopTimer()
				benchFlush(b, r)
				b.StartTimer()
			}
		}
		b.StopTimer()
		benchFlush(b, r)
	})
	b.Run("RetireParallel", func(b *testing.B) {
		r := benchStart(b, newR, 2)
		benchDrain(b, c, r)
		var n atomic.Uint64
		release := func() { n.Add(1) }
		b.ReportAllocs()
		b.SetParallelism(2)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := r.Retire(release); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("GracePeriodOffline", func(b *testing.B) {
		if c.needsQuiesce {
			b.Skip("not applicable: the reclaimer NeedsQuiesce")
		}
		r := benchStart(b, newR, 2)
		r.Offline(0)
		r.Offline(1)
		benchLatency(b, r)
	})
	b.Run("GracePeriodQuiescing", func(b *testing.B) {
		r := benchStart(b, newR, 2)
		quit := make(chan struct{})
		var wg sync.WaitGroup
		for p := range 2 {
			wg.Go(func() {
				for {
					select {
					case <-quit:
						return
					default:
					}
					r.Quiesce(p)
					runtime.Gosched()
				}
			})
		}
		b.Cleanup(func() {
			close(quit)
			wg.Wait()
		})
		benchLatency(b, r)
	})
}

// benchStart makes a Reclaimer with n participants, all online, and closes
// it when the benchmark ends.
func benchStart(b *testing.B, newR reclaim.Factory, n int) reclaim.Reclaimer {
	b.Helper()
	r, err := start(newR, n)
	if err != nil {
		b.Fatal(err)
	}
	// Cleanups run last-in first-out: participant goroutines started later
	// stop before Close.
	b.Cleanup(func() {
		if err := shut(r); err != nil {
			b.Error(err)
		}
	})
	return r
}

// benchDrain lets grace periods through until the benchmark ends: every
// participant offline, or for a NeedsQuiesce reclaimer a goroutine that
// quiesces all of them in a loop.
func benchDrain(b *testing.B, c config, r reclaim.Reclaimer) {
	ps := all(r.Participants())
	if !c.needsQuiesce {
		for _, p := range ps {
			r.Offline(p)
		}
		return
	}
	stop := loop(func() {
		for _, p := range ps {
			r.Quiesce(p)
		}
		runtime.Gosched()
	})
	b.Cleanup(func() {
		if err := stop(); err != nil {
			b.Error(err)
		}
	})
}

// benchLatency measures Retire-to-release latency, one release at a time.
func benchLatency(b *testing.B, r reclaim.Reclaimer) {
	done := make(chan struct{}, 1)
	release := func() { done <- struct{}{} }
	timeout := time.NewTimer(time.Hour)
	defer timeout.Stop()
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if err := r.Retire(release); err != nil {
			b.Fatal(err)
		}
		timeout.Reset(eventually)
		select {
		case <-done:
		case <-timeout.C:
			b.Fatalf("release did not run within %v", eventually)
		}
		lat = append(lat, time.Since(t0))
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Microsecond), "p50-µs")
	}
}

// benchFlush lets every pending release through: each participant passes a
// quiescent point in index order (one sweep carries a classic buck to the
// end), then Barrier waits, then the participants come back online.
func benchFlush(b *testing.B, r reclaim.Reclaimer) {
	n := r.Participants()
	for p := range n {
		r.Offline(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Barrier(ctx); err != nil {
		b.Fatalf("backlog did not drain: %v", err)
	}
	for p := range n {
		r.Online(p)
	}
}
