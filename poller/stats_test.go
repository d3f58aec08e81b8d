//go:build linux

package poller_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// TestStats runs a known sequence and checks the counters.
func TestStats(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		opts.OnPanic = func(poller.Handle, any, []byte) {}
		p := newPoller(t, opts)
		ignore := cmpopts.IgnoreFields(poller.Stats{}, "Reclaim", "Wakeups", "Waiters", "ReleaseLatency", "OldestPending", "Window")
		expect := func(what string, want poller.Stats) {
			t.Helper()
			if n := len(p.Stats().Waiters); n != opts.Waiters {
				t.Fatalf("%s: %d waiters in Stats, want %d", what, n, opts.Waiters)
			}
			// Waiters publish their counters after each batch, so the
			// last event may show a moment after its handler ran.
			var got poller.Stats
			for deadline := time.Now().Add(timeout); ; time.Sleep(time.Millisecond) {
				got = p.Stats()
				if cmp.Equal(want, got, ignore) || time.Now().After(deadline) {
					break
				}
			}
			if diff := cmp.Diff(want, got, ignore); diff != "" {
				t.Fatalf("%s: Stats mismatch (-want +got):\n%s", what, diff)
			}
		}
		expect("new poller", poller.Stats{})

		handled := make(chan struct{}, 16)
		fds := make([]int, 4)
		hs := make([]poller.Handle, 4)
		for i := range fds {
			fds[i] = newEventfd(t)
			var err error
			hs[i], err = p.Add(poller.Registration{
				FD: fds[i], Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) {
					readEventfd(e.FD)
					handled <- struct{}{}
					if i == 3 {
						panic("counted")
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// A failed Add counts nothing.
		if _, err := p.Add(poller.Registration{FD: fds[0], OnEvent: nop}); err == nil {
			t.Fatal("Add of a registered fd succeeded")
		}
		expect("after 4 Adds", poller.Stats{Added: 4, Live: 4})

		for _, i := range []int{0, 1, 0} {
			writeEventfd(t, fds[i], 1)
			wait(t, handled, "event")
		}
		expect("after 3 events", poller.Stats{Added: 4, Live: 4, Events: 3})

		if err := p.Delete(hs[1]); err != nil {
			t.Fatal(err)
		}
		barrier(t, p)
		expect("after a Delete", poller.Stats{Added: 4, Live: 3, Deleted: 1, Releases: 1, Events: 3})

		writeEventfd(t, fds[3], 1) // its handler panics: the registration is deleted
		wait(t, handled, "panicking event")
		eventually(t, "panic deletes the registration", func() bool { return p.Stats().Deleted == 2 })
		barrier(t, p)
		expect("after a panic", poller.Stats{Added: 4, Live: 2, Deleted: 2, Releases: 2, Events: 4, Panics: 1})

		// Hang-up: a pipe whose write end closes.
		rd, wr := newPipe(t)
		if _, err := p.Add(poller.Registration{FD: rd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(poller.Event) { handled <- struct{}{} }}); err != nil {
			t.Fatal(err)
		}
		unix.Close(wr)
		wait(t, handled, "hang-up event")
		eventually(t, "hang-up deletes the registration", func() bool { return p.Stats().Deleted == 3 })
		barrier(t, p)
		expect("after a hang-up", poller.Stats{Added: 5, Live: 2, Deleted: 3, Releases: 3, Events: 5, Panics: 1})

		if err := closeWithin(t, p); err != nil {
			t.Fatal(err)
		}
		expect("after Close", poller.Stats{Added: 5, Live: 0, Deleted: 5, Releases: 5, Events: 5, Panics: 1})
		st := p.Stats()
		if st.Reclaim.Pending != 0 || st.Reclaim.Released != st.Reclaim.Retired {
			t.Errorf("reclaimer after Close: %+v, want nothing pending", st.Reclaim)
		}
	})
}

// TestHandle checks the Handle helpers and that the zero Handle is never
// issued or accepted.
func TestHandle(t *testing.T) {
	for _, c := range []struct{ slot, gen uint32 }{
		{0, 1}, {1, 1}, {7, 42}, {math.MaxUint32, 1}, {0, math.MaxUint32}, {math.MaxUint32, math.MaxUint32}, {0, 0},
	} {
		h := poller.Handle(uint64(c.gen)<<32 | uint64(c.slot))
		if h.Slot() != c.slot || h.Gen() != c.gen {
			t.Errorf("Handle(%#x): Slot %d Gen %d, want %d %d", uint64(h), h.Slot(), h.Gen(), c.slot, c.gen)
		}
		if got, want := h.String(), fmt.Sprintf("%d/%d", c.slot, c.gen); got != want {
			t.Errorf("Handle(%#x).String() = %q, want %q", uint64(h), got, want)
		}
	}
	var zero poller.Handle
	if zero.Slot() != 0 || zero.Gen() != 0 || zero.String() != "0/0" {
		t.Errorf("zero Handle: %d %d %q", zero.Slot(), zero.Gen(), zero.String())
	}

	p := newPoller(t, poller.Options{Waiters: 1})
	if err := p.Delete(zero); err == nil {
		t.Error("Delete(0) succeeded")
	}
	// Issued handles never have generation 0, also once slots recycle.
	seen := map[poller.Handle]bool{}
	for range 50 {
		fd := newEventfd(t)
		h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, OnEvent: nop})
		if err != nil {
			t.Fatal(err)
		}
		if h == 0 || h.Gen() == 0 {
			t.Fatalf("issued handle %v", h)
		}
		if seen[h] {
			t.Fatalf("handle %v issued twice", h)
		}
		seen[h] = true
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		barrier(t, p)
	}
}

// TestStrings checks the String methods of the enumerations.
func TestStrings(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{poller.Shared.String(), "shared"},
		{poller.PerWaiter.String(), "per-waiter"},
		{poller.Topology(9).String(), "Topology(9)"},
		{poller.Deleted.String(), "deleted"},
		{poller.HungUp.String(), "hung-up"},
		{poller.Panicked.String(), "panicked"},
		{poller.Closed.String(), "closed"},
		{poller.Reason(9).String(), "Reason(9)"},
		{poller.Events(0).String(), "0"},
		{(poller.Readable | poller.Writable).String(), "Readable|Writable"},
		{(poller.Readable | poller.HangUp | poller.EdgeTriggered | 0x40).String(), "Readable|HangUp|EdgeTriggered|0x40"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// The event bits have their epoll values.
	for _, c := range []struct {
		bit  poller.Events
		want uint32
	}{
		{poller.Readable, unix.EPOLLIN}, {poller.Priority, unix.EPOLLPRI}, {poller.Writable, unix.EPOLLOUT},
		{poller.Error, unix.EPOLLERR}, {poller.HangUp, unix.EPOLLHUP}, {poller.ReadHangUp, unix.EPOLLRDHUP},
		{poller.EdgeTriggered, unix.EPOLLET},
	} {
		if uint32(c.bit) != c.want {
			t.Errorf("%v = %#x, want %#x", c.bit, uint32(c.bit), c.want)
		}
	}
}

// TestWaiters checks Waiters: the number of waiter goroutines, GOMAXPROCS
// by default, the same count Stats lists.
func TestWaiters(t *testing.T) {
	for _, c := range []struct {
		opts poller.Options
		want int
	}{
		{poller.Options{}, runtime.GOMAXPROCS(0)},
		{poller.Options{Topology: poller.Shared}, runtime.GOMAXPROCS(0)},
		{poller.Options{Waiters: 3}, 3},
		{poller.Options{Waiters: 1, Topology: poller.Shared}, 1},
	} {
		p := newPoller(t, c.opts)
		if n := p.Waiters(); n != c.want {
			t.Errorf("Waiters() with Options.Waiters %d, %v = %d, want %d", c.opts.Waiters, c.opts.Topology, n, c.want)
		}
		if n := len(p.Stats().Waiters); n != p.Waiters() {
			t.Errorf("Stats lists %d waiters, Waiters() says %d", n, p.Waiters())
		}
	}
}
