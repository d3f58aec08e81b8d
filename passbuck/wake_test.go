package passbuck

import (
	"context"
	"testing"
	"time"
)

// With participant 0 offline, Retire wakes the Reclaimer's goroutine once
// per batch: the first Retire into an empty list signals, the ones that
// join it do not.
func TestWakeOncePerBatch(t *testing.T) {
	r, err := New(2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Offline(0)
	r.Offline(1)
	started, gate := make(chan struct{}), make(chan struct{})
	if err := r.Retire(func() { close(started); <-gate }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started: // the goroutine is busy running it
	case <-time.After(5 * time.Second):
		t.Fatal("release did not run with every participant offline")
	}
	const n = 1000
	for range n {
		if err := r.Retire(func() {}); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// One wake-up for the first release, one for the batch of n (two if
	// the goroutine happened to see the first signal late).
	if w := r.bgWakeups.Load(); w > 3 {
		t.Errorf("the goroutine woke %d times for 2 batches (%d Retires)", w, n+1)
	}
	if s := r.Stats(); s.Released != n+1 {
		t.Errorf("Released = %d, want %d", s.Released, n+1)
	}
}
