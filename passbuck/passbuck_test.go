package passbuck_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/reclaim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newR(t *testing.T, n int, mode passbuck.Mode) *passbuck.Reclaimer {
	t.Helper()
	r, err := passbuck.New(n, passbuck.Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestNewInvalid(t *testing.T) {
	for _, n := range []int{-1, 0, 1<<16 + 1} {
		if _, err := passbuck.New(n, passbuck.Options{}); !errors.Is(err, reclaim.ErrInvalid) {
			t.Errorf("New(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if _, err := passbuck.New(2, passbuck.Options{Mode: 7}); !errors.Is(err, reclaim.ErrInvalid) {
		t.Errorf("New(mode 7) = %v, want ErrInvalid", err)
	}
}

// The classic buck moves one participant per Quiesce, in index order, and
// the last participant runs the batch on its own stack.
func TestClassicSweep(t *testing.T) {
	const n = 3
	r := newR(t, n, passbuck.Classic)
	var ran atomic.Bool
	if err := r.Retire(func() { ran.Store(true) }); err != nil {
		t.Fatal(err)
	}
	// Out of order: 2 and 1 hold nothing yet, 0 hands it to 1.
	for _, p := range []int{2, 1, 0, 2} {
		r.Quiesce(p)
		if ran.Load() {
			t.Fatalf("released after Quiesce(%d) before a full sweep", p)
		}
	}
	r.Offline(1) // in classic mode Offline is a quiescent point, nothing more
	if ran.Load() {
		t.Fatal("released before participant 2 quiesced")
	}
	r.Quiesce(2)
	if !ran.Load() {
		t.Fatal("not released on the last participant's stack after a full sweep")
	}
	if s := r.Stats(); s.Retired != 1 || s.Released != 1 || s.Pending != 0 || s.GracePeriods != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

// In skip-offline mode the buck passes through offline participants: with
// 1..n-1 offline, participant 0's quiescent point completes the grace period.
func TestSkipOfflinePassesThrough(t *testing.T) {
	const n = 4
	r := newR(t, n, passbuck.SkipOffline)
	for p := 1; p < n; p++ {
		r.Offline(p)
	}
	var ran atomic.Bool
	if err := r.Retire(func() { ran.Store(true) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if ran.Load() {
		t.Fatal("released while participant 0 is online and has not quiesced")
	}
	r.Quiesce(0)
	if !ran.Load() {
		t.Fatal("Quiesce(0) with everyone else offline did not complete the grace period")
	}
	// Coming back online without quiescing holds a new release.
	r.Online(2)
	ran.Store(false)
	if err := r.Retire(func() { ran.Store(true) }); err != nil {
		t.Fatal(err)
	}
	r.Quiesce(0)
	time.Sleep(5 * time.Millisecond)
	if ran.Load() {
		t.Fatal("released past online participant 2")
	}
	r.Quiesce(2)
	if !ran.Load() {
		t.Fatal("Quiesce(2) did not carry the batch through offline 3")
	}
}

// With every participant offline Retire carries the batch to the end and
// the Reclaimer's goroutine runs it: never the caller.
func TestAllOfflineRunsOffStack(t *testing.T) {
	r := newR(t, 3, passbuck.SkipOffline)
	for p := range 3 {
		r.Offline(p)
	}
	gate := make(chan struct{})
	done := make(chan struct{})
	if err := r.Retire(func() {
		<-gate // deadlocks if run on Retire's stack
		close(done)
	}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("release did not run with every participant offline")
	}
}

// A panicking release propagates to the participant that ran it; the rest
// of its batch still runs and Barrier completes.
func TestPanicKeepsRest(t *testing.T) {
	r := newR(t, 1, passbuck.Classic)
	var after atomic.Int32
	r.Retire(func() { after.Add(1) })
	r.Retire(func() { panic("boom") })
	r.Retire(func() { after.Add(1) })
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		r.Quiesce(0)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if got := after.Load(); got != 2 {
		t.Fatalf("%d releases around the panic ran, want 2", got)
	}
	if s := r.Stats(); s.Released != 3 || s.Pending != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// Close races Retire calls that are carrying batches through offline
// participants: each accepted release runs exactly once.
func TestCloseWhileDriving(t *testing.T) {
	for range 20 {
		r, err := passbuck.New(2, passbuck.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r.Offline(0)
		r.Offline(1)
		var accepted, ran atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r.Retire(func() { ran.Add(1) }) == nil {
					accepted.Add(1)
				}
			}
		}()
		time.Sleep(time.Millisecond)
		r.Close()
		close(stop)
		<-done
		if a, b := accepted.Load(), ran.Load(); a != b {
			t.Fatalf("accepted %d releases, ran %d", a, b)
		}
	}
}

func TestBarrierCancelled(t *testing.T) {
	r := newR(t, 2, passbuck.SkipOffline)
	r.Retire(func() {}) // participants online and silent: blocked
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Barrier(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Barrier = %v, want context.Canceled", err)
	}
	if s := r.Stats(); s.Pending != 1 || s.OldestAge <= 0 {
		t.Fatalf("stats = %+v, want one pending with an age", s)
	}
	r.Close()
	if err := r.Barrier(context.Background()); !errors.Is(err, reclaim.ErrClosed) {
		t.Fatalf("Barrier after Close = %v", err)
	}
	if err := r.Retire(func() {}); !errors.Is(err, reclaim.ErrClosed) {
		t.Fatalf("Retire after Close = %v", err)
	}
}
