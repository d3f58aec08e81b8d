//go:build linux

package poller_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// TestLoad registers 16,000 eventfds (the machine allows 20,000 open
// files) and runs steady traffic and churn on them: no operation may fail,
// the released-but-not-free backlog must stay bounded, and Close under full
// load must join every waiter and run every release (the requirement is
// within 1 s; the test allows 5 s on a shared machine and logs the time).
// Then every registration must have been released exactly once, and every
// fd closed.

const (
	loadRegs = 16000
	// loadBacklog bounds Stats().ReleasedNotFree under churn. At about
	// 10,000 replacements/s and a release latency of a few hundred
	// microseconds (a few milliseconds under -race) the backlog stays
	// near 50; the bound is thirty times that, and a reclaimer that
	// stalled would pass it within the run.
	loadBacklog = loadRegs / 10
	loadRun     = 1500 * time.Millisecond
	loadCloseOK = 5 * time.Second
)

func TestLoad(t *testing.T) {
	raiseNoFile(t, loadRegs+1500)
	for _, c := range []struct {
		topo poller.Topology
		rk   reclaimerKind
	}{{poller.Shared, passBuck}, {poller.PerWaiter, epochQSBR}} {
		t.Run(c.topo.String()+"/"+c.rk.String(), func(t *testing.T) {
			testLoad(t, optsFor(c.topo, c.rk, 2))
		})
	}
}

// raiseNoFile raises the soft RLIMIT_NOFILE to at least need (up to the
// hard limit) for the test, or skips it.
func raiseNoFile(t *testing.T, need uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Skipf("RLIMIT_NOFILE hard limit %d, need %d", lim.Max, need)
	}
	old := lim
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot raise RLIMIT_NOFILE to %d: %v", lim.Max, err)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
}

// lrec is one registration of the load test.
type lrec struct {
	fd       int
	h        atomic.Uint64
	mu       sync.Mutex // writers hold it; OnRelease sets released under it
	released bool
	rels     atomic.Int32
}

func testLoad(t *testing.T, opts poller.Options) {
	var (
		bad      vlog
		events   atomic.Int64
		writes   atomic.Int64
		churned  atomic.Int64
		added    atomic.Int64
		closedAt atomic.Bool // Close returned: no callback may run
		recMu    sync.Mutex
		recs     []*lrec
	)
	opts.OnPanic = func(h poller.Handle, v any, _ []byte) { bad.Add("panic in a callback of %v: %v", h, v) }
	checkFDLeak(t)
	base := countFDs(t)
	p, err := poller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	add := func() *lrec {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			bad.Add("eventfd with %d registrations: %v", added.Load(), err)
			return nil
		}
		r := &lrec{fd: fd}
		h, err := p.Add(poller.Registration{
			FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) {
				if closedAt.Load() {
					bad.Add("OnEvent after Close returned")
				}
				if e.Handle != poller.Handle(r.h.Load()) {
					bad.Add("event for %v delivered to %v", e.Handle, poller.Handle(r.h.Load()))
				}
				readEventfd(e.FD)
				events.Add(1)
			},
			OnRelease: func(poller.Released) {
				if closedAt.Load() {
					bad.Add("OnRelease after Close returned")
				}
				if r.rels.Add(1) != 1 {
					bad.Add("OnRelease twice")
				}
				r.mu.Lock()
				r.released = true // the poller closes fd next
				r.mu.Unlock()
			},
		})
		if err != nil {
			unix.Close(fd)
			if !errors.Is(err, poller.ErrClosed) {
				bad.Add("Add with %d registrations: %v", added.Load(), err)
			}
			return nil
		}
		r.h.Store(uint64(h))
		added.Add(1)
		recMu.Lock()
		recs = append(recs, r)
		recMu.Unlock()
		return r
	}

	start := time.Now()
	lanes := make([]atomic.Pointer[lrec], loadRegs)
	for i := range lanes {
		r := add()
		if r == nil {
			closeWithin(t, p)
			t.Fatalf("setup: %s", bad.String())
		}
		lanes[i].Store(r)
	}
	setup := time.Since(start)
	if got := countFDs(t); got < base+loadRegs {
		t.Fatalf("%d fds open, want at least %d", got, base+loadRegs)
	}

	stop, stopChurn := make(chan struct{}), make(chan struct{})
	var wg, churnWG sync.WaitGroup
	// Traffic: writers poke random registrations.
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var one [8]byte
			putU64(one[:], 1)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				r := lanes[rng.IntN(loadRegs)].Load()
				r.mu.Lock()
				if !r.released {
					if _, err := unix.Write(r.fd, one[:]); err != nil {
						bad.Add("write: %v", err)
					}
					writes.Add(1)
				}
				r.mu.Unlock()
				if n%32 == 0 { // steady, not saturating: about 30,000 writes/s
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	// Churn: replace random registrations, steadily.
	churnWG.Go(func() {
		rng := rand.New(rand.NewPCG(7, 1))
		for n := 0; ; n++ {
			select {
			case <-stopChurn:
				return
			default:
			}
			i := rng.IntN(loadRegs)
			old := lanes[i].Load()
			err := p.Delete(poller.Handle(old.h.Load()))
			if errors.Is(err, poller.ErrClosed) {
				return
			}
			if err != nil {
				bad.Add("Delete: %v", err)
				return
			}
			r := add()
			if r == nil {
				return
			}
			lanes[i].Store(r)
			churned.Add(1)
			if n%16 == 0 { // about 10,000 replacements/s
				time.Sleep(time.Millisecond)
			}
		}
	})
	// Sample the backlog.
	var maxBacklog, samples int64
	end := time.Now().Add(loadRun)
	for time.Now().Before(end) {
		time.Sleep(5 * time.Millisecond)
		st := p.Stats()
		samples++
		maxBacklog = max(maxBacklog, st.ReleasedNotFree)
	}

	// The churn stops; with the traffic going on, the backlog drains.
	close(stopChurn)
	churnWG.Wait()
	drainStart := time.Now()
	eventually(t, "the released-but-not-free backlog to drain", func() bool { return p.Stats().ReleasedNotFree == 0 })
	drained := time.Since(drainStart)

	// Close under full load: every registration live, the writers on.
	before := p.Stats()
	closeStart := time.Now()
	if err := closeWithin(t, p); err != nil {
		t.Error(err)
	}
	closeTook := time.Since(closeStart)
	closedAt.Store(true)
	releasedAtClose := int64(0)
	recMu.Lock()
	for _, r := range recs {
		if r.rels.Load() == 1 {
			releasedAtClose++
		}
	}
	total := int64(len(recs))
	recMu.Unlock()
	close(stop)
	wg.Wait()
	time.Sleep(quiet) // a callback after Close would show now

	st := p.Stats()
	t.Logf("%s: %d registrations set up in %v; %v of traffic and churn: %d writes, %d events, %d replaced; released-but-not-free backlog max %d over %d samples (bound %d), drained in %v after the churn stopped, release latency p50 %v p99 %v max %v; Close under load (%d live, %d events so far) took %v and released %d of %d",
		t.Name(), loadRegs, setup.Round(time.Millisecond), loadRun, writes.Load(), events.Load(), churned.Load(),
		maxBacklog, samples, loadBacklog, drained.Round(time.Microsecond), before.ReleaseLatency.P50, before.ReleaseLatency.P99, before.ReleaseLatency.Max, before.Live, before.Events, closeTook.Round(time.Microsecond), releasedAtClose, total)
	if n := bad.Count(); n != 0 {
		t.Errorf("%d failures; the first:\n%s", n, bad.String())
	}
	if maxBacklog >= loadBacklog {
		t.Errorf("released-but-not-free backlog reached %d, bound %d", maxBacklog, loadBacklog)
	}
	if closeTook > loadCloseOK {
		t.Errorf("Close under load took %v (requirement 1 s, allowed %v here)", closeTook, loadCloseOK)
	} else if closeTook > time.Second {
		t.Logf("NOTE: Close under load took %v, above the 1 s requirement", closeTook)
	}
	if before.Live != loadRegs {
		t.Errorf("Stats.Live = %d at Close, want %d", before.Live, loadRegs)
	}
	if releasedAtClose != total {
		t.Errorf("Close returned with %d of %d registrations released", releasedAtClose, total)
	}
	if st.Added != uint64(total) || st.Releases != st.Added || st.Live != 0 || st.ReleasedNotFree != 0 {
		t.Errorf("after Close: Added %d Releases %d Live %d ReleasedNotFree %d, want %d added and all released",
			st.Added, st.Releases, st.Live, st.ReleasedNotFree, total)
	}
	if events.Load() == 0 || churned.Load() == 0 {
		t.Errorf("%d events and %d replacements: the load did not run", events.Load(), churned.Load())
	}
}
