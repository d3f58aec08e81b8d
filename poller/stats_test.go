//go:build linux

package poller_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
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
		// Detaches depends on the machine's load: a waiter descheduled
		// for Overrun inside a handler looks blocked, and is detached.
		ignore := cmpopts.IgnoreFields(poller.Stats{}, "Reclaim", "Wakeups", "Waiters", "ReleaseLatency", "OldestPending", "Window", "Detaches")
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

// TestStatsReadableInDisconnectPath checks that a registration's disconnect
// path can still read what it belonged to: in the final hang-up event and in
// OnRelease the registration's waiter, that waiter's statistics (the
// registration still counted in its Attached) and the registration's own
// counters are readable; Info works until the release begins. Being out of
// epoll (released) and detached from the waiter (removed) are separate
// steps, the second after OnRelease.
func TestStatsReadableInDisconnectPath(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		a, b := newSocketpair(t)
		defer unix.Close(b)
		type seen struct {
			info poller.Info
			ws   poller.WaiterStats
			err  error
			ev   poller.Event
		}
		type released struct {
			poller.Released
			ws poller.WaiterStats
		}
		final := make(chan seen, 1)
		rel := make(chan released, 1)
		var h poller.Handle
		var err error
		h, err = p.Add(poller.Registration{
			FD: a, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) {
				buf := make([]byte, 64)
				n, _ := unix.Read(e.FD, buf)
				if n > 0 {
					p.CountBytes(e.Handle, n, 0)
				}
				if e.Events&(poller.HangUp|poller.Error) != 0 {
					in, err := p.Info(e.Handle)
					ws, _ := p.WaiterStats(in.Waiter)
					final <- seen{in, ws, err, e}
				}
			},
			OnRelease: func(r poller.Released) {
				ws, _ := p.WaiterStats(r.Waiter)
				rel <- released{r, ws}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		in, err := p.Info(h)
		if err != nil || !in.Registered || in.FD != a {
			t.Fatalf("Info of a live registration = %+v, %v", in, err)
		}
		unix.Write(b, []byte("hello"))
		eventually(t, "bytes counted", func() bool {
			in, err := p.Info(h)
			return err == nil && in.Registration.BytesIn == 5
		})
		unix.Close(b) // the peer hangs up: a's final event
		f := wait(t, final, "final hang-up event")
		if f.err != nil {
			t.Fatalf("Info in the final event: %v", f.err)
		}
		if f.info.Registered {
			t.Error("Info in the final event: still registered; it must leave epoll before its final event")
		}
		// The waiter it belongs to is the one running its final event,
		// except under Stealing, where that may be a stand-in for its
		// home, which the registration still names.
		want := f.ev.Waiter
		if opts.Topology == poller.Stealing {
			if want = f.info.Waiter; want < 0 || want >= opts.Waiters {
				t.Errorf("stealing: Info in the final event names waiter %d, want a home waiter 0..%d", want, opts.Waiters-1)
			}
		}
		if f.info.Waiter != want || f.ws.Index != want || f.ws.Name == "" {
			t.Errorf("Info in the final event names waiter %d (stats of %d %q), want %d (event on waiter %d)",
				f.info.Waiter, f.ws.Index, f.ws.Name, want, f.ev.Waiter)
		}
		if f.info.Registration.BytesIn != 5 || f.info.Registration.Events < 2 {
			t.Errorf("Info in the final event: counters %+v, want 5 bytes in and at least 2 events", f.info.Registration)
		}
		if opts.Topology == poller.PerWaiter && (!f.info.Attached || f.ws.Attached < 1) {
			t.Errorf("per-waiter: in the final event the registration is detached already: %+v", f.info)
		}
		r := wait(t, rel, "release")
		if r.Reason != poller.HungUp || r.Waiter != want || r.ws.Index != r.Waiter {
			t.Errorf("released %+v, want HungUp on waiter %d with its stats", basicRelease(r.Released), want)
		}
		if r.Registration.BytesIn != 5 || r.Registration.Events != f.info.Registration.Events {
			t.Errorf("released counters %+v, want 5 bytes and %d events, the final one included", r.Registration, f.info.Registration.Events)
		}
		if opts.Topology == poller.PerWaiter && r.ws.Attached < 1 {
			t.Errorf("per-waiter: OnRelease sees waiter %d with %d attached; the registration must stay attached until OnRelease returns", r.Waiter, r.ws.Attached)
		}
		barrier(t, p)
		if _, err := p.Info(h); !errors.Is(err, poller.ErrStale) {
			t.Errorf("Info after the release = %v, want ErrStale", err)
		}
		if opts.Topology == poller.PerWaiter {
			if ws, _ := p.WaiterStats(r.Waiter); ws.Attached != 0 {
				t.Errorf("after the release waiter %d has %d attached, want 0 (detached)", r.Waiter, ws.Attached)
			}
		}
	})
}

// TestPostReleaseOperationsCountNothing checks that operations on a
// registration between its release and its slot being freed fail with
// ErrStale and change no counter, neither its own nor its waiter's: a late
// send on a released connection must not skew the statistics.
func TestPostReleaseOperationsCountNothing(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		hold := make(chan struct{})
		relStarted := make(chan struct{})
		h, err := p.Add(poller.Registration{
			FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop,
			OnRelease: func(poller.Released) { close(relStarted); <-hold },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CountBytes(h, 10, 20); err != nil {
			t.Fatal(err)
		}
		// A hold keeps the registration in Released (not Free) while we try.
		release, err := p.Hold(h)
		if err != nil {
			t.Fatal(err)
		}
		before := p.Stats()
		beforeInfo, _ := p.Info(h)
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		in, err := p.Info(h)
		if err != nil || in.Registered {
			t.Fatalf("Info between Released and Free = %+v, %v; want readable, not registered", in, err)
		}
		for name, op := range map[string]func() error{
			"CountBytes": func() error { return p.CountBytes(h, 1000, 1000) },
			"Modify":     func() error { return p.Modify(h, poller.Writable) },
			"AfterFunc":  func() error { _, err := p.AfterFunc(h, time.Millisecond, func() { t.Error("timer ran") }); return err },
			"Hold":       func() error { _, err := p.Hold(h); return err },
			"Context":    func() error { _, err := p.Context(h); return err },
			"Delete":     func() error { return p.Delete(h) },
		} {
			if err := op(); !errors.Is(err, poller.ErrStale) {
				t.Errorf("%s after Delete = %v, want ErrStale", name, err)
			}
		}
		after, _ := p.Info(h)
		if after.Registration.BytesIn != 10 || after.Registration.BytesOut != 20 || after.Registration.Events != beforeInfo.Registration.Events {
			t.Errorf("counters after refused operations: %+v, want unchanged %+v", after.Registration, beforeInfo.Registration)
		}
		st := p.Stats()
		for i := range st.Waiters {
			if st.Waiters[i].Attached != before.Waiters[i].Attached {
				t.Errorf("waiter %d attached %d -> %d after refused operations", i, before.Waiters[i].Attached, st.Waiters[i].Attached)
			}
		}
		if st.Added != before.Added || st.Deleted != before.Deleted+1 {
			t.Errorf("Added %d -> %d, Deleted %d -> %d; want only the one Delete counted", before.Added, st.Added, before.Deleted, st.Deleted)
		}
		release()
		wait(t, relStarted, "OnRelease after the hold")
		close(hold)
		barrier(t, p)
	})
}

// TestStatsConsistentUnderLoad checks that Stats snapshots stay consistent under concurrent dispatch and resets.
func TestStatsConsistentUnderLoad(t *testing.T) {
	forEachConfigN(t, 2, func(t *testing.T, opts poller.Options) {
		opts.TimeHandlers = true
		p := newPoller(t, opts)
		var fds []int
		var hs []poller.Handle
		for range 8 {
			fd := newEventfd(t)
			h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) { readEventfd(e.FD); time.Sleep(time.Microsecond) }})
			if err != nil {
				t.Fatal(err)
			}
			fds, hs = append(fds, fd), append(hs, h)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// Stopped before the poller closes, also when a check below fails.
		t.Cleanup(func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				writeEventfd(t, fds[i%len(fds)], 1)
			}
		}()
		eventually(t, "events flowing", func() bool { return p.Stats().Events > 100 })
		var last uint64
		for i := range 200 {
			time.Sleep(50 * time.Microsecond)
			if i%50 == 0 {
				p.ResetStats()
			}
			st := p.Stats()
			var sum uint64
			for _, w := range st.Waiters {
				sum += w.Events
				if w.Utilisation < -1 || w.Utilisation > 1 || w.Waiting < 0 || w.Processing < 0 {
					t.Fatalf("waiter stats out of range: %+v", w)
				}
				if w.Utilisation >= 0 && w.Window <= 0 {
					t.Fatalf("utilisation %v with window %v", w.Utilisation, w.Window)
				}
			}
			if sum != st.Events || st.Events < last {
				t.Fatalf("Events %d (previous %d), waiters sum to %d", st.Events, last, sum)
			}
			last = st.Events
			if i == 100 && !strings.Contains(st.String(), "waiter-1") {
				t.Errorf("Stats.String() lacks the waiter rows:\n%s", st)
			}
		}
		close(stop)
		wg.Wait()
		in, err := p.Info(hs[0])
		if err != nil || in.Registration.Events == 0 || in.Registration.HandlerTime <= 0 {
			t.Errorf("Info with TimeHandlers: %+v, %v; want events and handler time", in.Registration, err)
		}
		t.Logf("\n%s", p.Stats())
	})
}
