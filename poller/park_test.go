//go:build linux

package poller_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// TestManyParkedWaiters: more waiters parked on one shared set than the
// kernel lets nest it (each parker is an epoll set holding the shared set,
// and is itself in the Go runtime's netpoller: Linux refuses an
// EPOLL_CTL_ADD past 100 such paths of that depth, fs/eventpoll.c's
// reverse_path_check). The waiters the kernel refuses wait in epoll_wait
// instead: none dies, and events keep coming.
func TestManyParkedWaiters(t *testing.T) {
	opts := optsFor(poller.Shared, epochQSBR, 300)
	var panics atomic.Int32
	opts.OnPanic = func(h poller.Handle, v any, stack []byte) {
		if panics.Add(1) == 1 {
			t.Errorf("reported: %v", v)
		}
	}
	p := newPoller(t, opts)
	fd := newEventfd(t)
	got := make(chan struct{}, 1)
	if _, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, OnEvent: func(e poller.Event) {
		readEventfd(e.FD)
		select {
		case got <- struct{}{}:
		default:
		}
	}}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		writeEventfd(t, fd, 1)
		select {
		case <-got:
		case <-time.After(timeout):
			t.Fatalf("event %d not delivered", i)
		}
		time.Sleep(time.Millisecond) // the waiters park between events
	}
	if n := p.Waiters(); n != 300 {
		t.Errorf("%d waiters running, want 300", n)
	}
	if n := panics.Load(); n > 0 {
		t.Errorf("%d waiters reported an error", n)
	}
}
