//go:build linux

package poller_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// sameBatchPair registers two fd numbers of one eventfd (a dup), so that a
// single write makes both ready at once and one epoll_wait most likely
// returns both. The handler of whichever runs first waits up to hold for
// the other to run: on a waiter that holds its whole batch the other
// cannot, if they came in one batch. It reports whether the second ran
// while the first was still waiting.
func sameBatchPair(t *testing.T, p *poller.Poller, hold time.Duration) (overlapped bool) {
	t.Helper()
	a := newEventfd(t)
	b, err := unix.Dup(a)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		first    = -1 // index of the registration that ran first
		secondCh = make(chan struct{})
		ran      [2]bool
		result   = make(chan bool, 1)
	)
	onEvent := func(i int) func(poller.Event) {
		return func(e poller.Event) {
			mu.Lock()
			if ran[i] {
				mu.Unlock()
				return // a re-armed level-triggered event: the trial is over
			}
			ran[i] = true
			if first < 0 {
				first = i
				mu.Unlock()
				select {
				case <-secondCh:
					result <- true
				case <-time.After(hold):
					result <- false
				}
				return
			}
			mu.Unlock()
			close(secondCh)
		}
	}
	var hs [2]poller.Handle
	for i, fd := range []int{a, b} {
		if hs[i], err = p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, OnEvent: onEvent(i)}); err != nil {
			t.Fatal(err)
		}
	}
	writeEventfd(t, a, 1)
	overlapped = wait(t, result, "the first handler to finish")
	for _, h := range hs {
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
	}
	return overlapped
}

// TestHandOff: two registrations ready in one batch, the first handler
// blocked until the second has run. With the hand-off, the rest of a
// blocked waiter's batch goes to the other waiter, so the second always
// runs while the first blocks. Without it (Overrun < 0, the control that
// shows the test can fail) the second waits behind the first whenever
// they came in one batch.
func TestHandOff(t *testing.T) {
	const trials = 40
	t.Run("on", func(t *testing.T) {
		p := newPoller(t, poller.Options{Waiters: 2, MaxWaiters: 2, Topology: poller.Shared, Overrun: time.Millisecond})
		for i := range trials {
			if !sameBatchPair(t, p, timeout) {
				t.Fatalf("trial %d: the second handler did not run while the first blocked", i)
			}
		}
		if st := p.Stats(); st.HandedOff == 0 {
			t.Errorf("no event was handed off in %d trials: the pairs never shared a batch, so this test proved nothing", trials)
		} else {
			t.Logf("%d events handed off in %d trials; waiters grown %d", st.HandedOff, trials, st.Grown)
		}
	})
	t.Run("off", func(t *testing.T) {
		p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.Shared, Overrun: -1})
		held := 0
		for range trials {
			if !sameBatchPair(t, p, 50*time.Millisecond) {
				held++
			}
		}
		if held == 0 {
			t.Errorf("without the hand-off the second handler never waited behind the first in %d trials: the test cannot tell", trials)
		}
		t.Logf("without the hand-off, the second handler waited behind the first in %d of %d trials", held, trials)
	})
}

// blockingHandlers registers n eventfds whose first OnEvent each records
// its waiter and blocks until release is closed, counting how many are
// inside at once.
type blockingHandlers struct {
	inside, peak atomic.Int32
	release      chan struct{}
	mu           sync.Mutex
	waiters      map[int]bool
	hs           []poller.Handle
}

func addBlocking(t *testing.T, p *poller.Poller, n int) *blockingHandlers {
	t.Helper()
	bh := &blockingHandlers{release: make(chan struct{}), waiters: map[int]bool{}}
	t.Cleanup(func() {
		select {
		case <-bh.release:
		default:
			close(bh.release)
		}
	})
	for range n {
		fd := newEventfd(t)
		var once sync.Once
		h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, OnEvent: func(e poller.Event) {
			readEventfd(e.FD)
			once.Do(func() {
				in := bh.inside.Add(1)
				for {
					pk := bh.peak.Load()
					if in <= pk || bh.peak.CompareAndSwap(pk, in) {
						break
					}
				}
				bh.mu.Lock()
				bh.waiters[e.Waiter] = true
				bh.mu.Unlock()
				select {
				case <-bh.release:
				case <-time.After(2 * timeout):
				}
				bh.inside.Add(-1)
			})
		}})
		if err != nil {
			t.Fatal(err)
		}
		bh.hs = append(bh.hs, h)
		writeEventfd(t, fd, 1)
	}
	return bh
}

// TestGrowWaiters: 6 handlers that block at once on a shared set of 2
// waiters. The poller must start extra waiters until all 6 are inside, on
// 6 different waiters, and once the load is gone the extra waiters must
// retire, their statistics still readable. With every reclaimer: an extra
// waiter joins and leaves the reclaimer's participants while releases are
// pending (each trial deletes what it added).
func TestGrowWaiters(t *testing.T) {
	for _, rk := range reclaimers {
		t.Run(rk.String(), func(t *testing.T) {
			opts := optsFor(poller.Shared, rk, 2)
			opts.MaxWaiters, opts.Overrun = 8, 500*time.Microsecond
			p := newPoller(t, opts)
			for round := range 2 { // grow, shrink, and grow again
				bh := addBlocking(t, p, 6)
				eventually(t, "6 blocked handlers inside at once", func() bool { return bh.inside.Load() == 6 })
				bh.mu.Lock()
				distinct := len(bh.waiters)
				bh.mu.Unlock()
				if distinct != 6 {
					t.Errorf("round %d: 6 handlers blocked on %d waiters, want 6", round, distinct)
				}
				if n := p.Waiters(); n < 6 || n > 8 {
					t.Errorf("round %d: %d waiters running with 6 blocked, want 6..8", round, n)
				}
				close(bh.release)
				for _, h := range bh.hs {
					if err := p.Delete(h); err != nil {
						t.Fatal(err)
					}
				}
				barrier(t, p)
				eventually(t, "the extra waiters to retire", func() bool { return p.Waiters() == 2 })
			}
			st := p.Stats()
			if st.Grown < 8 {
				t.Errorf("Stats.Grown = %d after two rounds of 4 extra waiters, want at least 8", st.Grown)
			}
			for _, ws := range st.Waiters[2:] {
				if ws.Running {
					t.Errorf("%s still running after retiring", ws.Name)
				}
			}
			if len(st.Waiters) < 6 || st.Waiters[5].Events == 0 {
				t.Errorf("a retired waiter's statistics are gone: %+v", st.Waiters)
			}
		})
	}
}

// TestGrowBounded: MaxWaiters bounds the waiters however many handlers
// block; the rest of the events wait for a waiter to come back.
func TestGrowBounded(t *testing.T) {
	p := newPoller(t, poller.Options{Waiters: 1, MaxWaiters: 3, Topology: poller.Shared, Overrun: 200 * time.Microsecond})
	bh := addBlocking(t, p, 6)
	eventually(t, "3 blocked handlers inside at once", func() bool { return bh.inside.Load() == 3 })
	time.Sleep(20 * time.Millisecond) // room for a fourth, which must not come
	if pk := bh.peak.Load(); pk != 3 {
		t.Errorf("%d handlers blocked at once with MaxWaiters 3", pk)
	}
	if n := p.Waiters(); n != 3 {
		t.Errorf("%d waiters running, want MaxWaiters = 3", n)
	}
	close(bh.release)
	eventually(t, "the other 3 handlers to run", func() bool {
		bh.mu.Lock()
		defer bh.mu.Unlock()
		return bh.peak.Load() == 3 && bh.inside.Load() == 0 && len(bh.waiters) == 3
	})
}

// TestGrowOptions: the options that bound growth are validated in New.
func TestGrowOptions(t *testing.T) {
	for _, o := range []poller.Options{
		{Waiters: 4, MaxWaiters: 3, Topology: poller.Shared},
		{Waiters: 2, MaxWaiters: 4, Topology: poller.PerWaiter},
		{MaxWaiters: -1},
		{MaxWaiters: poller.MaxWaiters + 1, Topology: poller.Shared},
		{Overrun: 2 * poller.MaxWaitTimeout, Topology: poller.Shared},
	} {
		if p, err := poller.New(o); !errors.Is(err, poller.ErrInvalid) {
			if p != nil {
				p.Close()
			}
			t.Errorf("New(%+v): %v, want ErrInvalid", o, err)
		}
	}
	// Overrun < 0: no growth, whatever MaxWaiters says.
	p := newPoller(t, poller.Options{Waiters: 1, MaxWaiters: 4, Topology: poller.Shared, Overrun: -1})
	bh := addBlocking(t, p, 2)
	eventually(t, "a blocked handler", func() bool { return bh.inside.Load() == 1 })
	time.Sleep(20 * time.Millisecond)
	if n, pk := p.Waiters(), bh.peak.Load(); n != 1 || pk != 1 {
		t.Errorf("with Overrun < 0: %d waiters, %d handlers inside at once; want 1 and 1", n, pk)
	}
}
