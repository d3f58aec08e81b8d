//go:build linux

package poller_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// fdKind makes an fd to register (rd) and the fd a test writes to (wr). For
// an eventfd they are the same fd.
type fdKind struct {
	name string
	make func(t testing.TB) (rd, wr int)
}

var fdKinds = []fdKind{
	{"eventfd", func(t testing.TB) (int, int) { fd := newEventfd(t); return fd, fd }},
	{"pipe", func(t testing.TB) (int, int) { return newPipe(t) }},
	{"socketpair", func(t testing.TB) (int, int) { return newSocketpair(t) }},
	{"tcp", func(t testing.TB) (int, int) { return newTCPPair(t) }},
}

// TestFDAccounting checks the fd leak helper itself and what the poller
// opens and closes: New opens a wake-up eventfd, an epoll fd and a mailbox
// eventfd per set, an epoll fd per waiter for its parker, and a hand-off
// eventfd on a shared set; Close
// closes those and every CloseFD fd, and leaves the others open.
func TestFDAccounting(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		checkFDLeak(t)
		before := countFDs(t)
		p, err := poller.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		sets, handoff := 1, 1
		switch opts.Topology {
		case poller.PerWaiter:
			sets, handoff = opts.Waiters, 0
		case poller.Stealing:
			sets = opts.Waiters
		}
		// A shared set's monitor has a hand-off eventfd and an alarm timerfd.
		if got, want := countFDs(t), before+1+2*sets+opts.Waiters+2*handoff; got != want {
			t.Errorf("after New: %d fds open, want %d (a wake eventfd, %d epoll fds and timer mailbox eventfds, %d parkers, %d hand-off eventfd and alarm timerfd)", got, want, sets, opts.Waiters, handoff)
		}
		var owned, mine []int
		for i := range 4 {
			fd := newEventfd(t)
			reg := poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(poller.Event) {}}
			if i%2 == 0 {
				reg.CloseFD = true
				owned = append(owned, fd)
			} else {
				mine = append(mine, fd)
			}
			if _, err := p.Add(reg); err != nil {
				t.Fatal(err)
			}
		}
		if err := closeWithin(t, p); err != nil {
			t.Fatal(err)
		}
		if got, want := countFDs(t), before+len(mine); got != want {
			t.Errorf("after Close: %d fds open, want %d (only the %d fds the poller does not own)", got, want, len(mine))
		}
		for _, fd := range owned {
			if err := isOpen(fd); err != unix.EBADF {
				t.Errorf("owned fd %d after Close: fcntl = %v, want EBADF", fd, err)
			}
		}
		for _, fd := range mine {
			if err := isOpen(fd); err != nil {
				t.Errorf("non-owned fd %d closed by Close: %v", fd, err)
			}
			unix.Close(fd)
		}
	})
}

// TestDelivery registers each kind of fd, level- and edge-triggered, and
// checks that the handler reads exactly what was written, on the right
// handle, fd and waiter.
func TestDelivery(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, kind := range fdKinds {
			for _, trig := range triggers {
				t.Run(kind.name+"/"+trig.name, func(t *testing.T) {
					testDelivery(t, opts, kind, trig.bits)
				})
			}
		}
	})
}

func testDelivery(t *testing.T, opts poller.Options, kind fdKind, trig poller.Events) {
	p := newPoller(t, opts)
	rd, wr := kind.make(t)
	isEventfd := rd == wr
	if !isEventfd {
		defer unix.Close(wr)
	}
	var (
		mu     sync.Mutex
		got    []byte
		sum    uint64
		events []poller.Event
	)
	released := make(chan poller.Released, 2)
	var relWaiter poller.WaiterStats // the waiter's statistics, read in OnRelease
	h, err := p.Add(poller.Registration{
		FD: rd, Events: poller.Readable | trig, CloseFD: true,
		OnEvent: func(e poller.Event) {
			var data []byte
			var v uint64
			switch {
			case isEventfd:
				v = readEventfd(e.FD)
			case trig&poller.EdgeTriggered != 0:
				data, _ = readAll(e.FD) // edge-triggered: until EAGAIN
			default:
				var buf [4096]byte
				if n, _ := unix.Read(e.FD, buf[:]); n > 0 {
					data = buf[:n]
				}
			}
			mu.Lock()
			got = append(got, data...)
			sum += v
			events = append(events, e)
			mu.Unlock()
		},
		OnRelease: func(r poller.Released) {
			relWaiter, _ = p.WaiterStats(r.Waiter)
			released <- r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if h == 0 || h.Gen() == 0 {
		t.Fatalf("Add returned handle %v: zero generation", h)
	}

	var want []byte
	var wantSum uint64
	for i := 1; i <= 5; i++ {
		if isEventfd {
			writeEventfd(t, wr, uint64(i))
			wantSum += uint64(i)
		} else {
			msg := fmt.Appendf(nil, "message %d from %s;", i, kind.name)
			if _, err := unix.Write(wr, msg); err != nil {
				t.Fatalf("write: %v", err)
			}
			want = append(want, msg...)
		}
		eventually(t, fmt.Sprintf("delivery of write %d", i), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return bytes.Equal(got, want) && sum == wantSum
		})
	}

	if err := p.Delete(h); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	r := wait(t, released, "OnRelease")
	barrier(t, p)

	mu.Lock()
	defer mu.Unlock()
	if !bytes.Equal(got, want) || sum != wantSum {
		t.Errorf("read %q (eventfd sum %d), want %q (sum %d)", got, sum, want, wantSum)
	}
	wantWaiter := -1
	for i, e := range events {
		if e.Handle != h || e.FD != rd || e.Events&poller.Readable == 0 || e.Events&(poller.HangUp|poller.Error) != 0 {
			t.Errorf("event %d = %+v (%v), want handle %v fd %d Readable", i, e, e.Events, h, rd)
		}
		// On a shared set (Shared, Stealing) a waiter started while the
		// others overran may dispatch it: any waiter below MaxWaiters.
		if e.Waiter < 0 || e.Waiter >= p.MaxWaiters() {
			t.Errorf("event %d on waiter %d, want 0..%d", i, e.Waiter, p.MaxWaiters()-1)
		}
		if opts.Topology == poller.PerWaiter {
			if i == 0 {
				wantWaiter = e.Waiter
			} else if e.Waiter != wantWaiter {
				t.Errorf("per-waiter: event %d on waiter %d, earlier ones on %d", i, e.Waiter, wantWaiter)
			}
		}
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	switch opts.Topology {
	case poller.Shared:
		wantWaiter = events[len(events)-1].Waiter // the last to dispatch it
	case poller.Stealing:
		// Its home, where events run unless a waiter was blocked.
		if wantWaiter = r.Waiter; r.Waiter < 0 || r.Waiter >= opts.Waiters {
			t.Errorf("stealing: released from waiter %d, want a home waiter 0..%d", r.Waiter, opts.Waiters-1)
		}
	}
	if r.Registration.Events != uint64(len(events)) || relWaiter.Index != wantWaiter || relWaiter.Events == 0 {
		t.Errorf("released with %+v and waiter %+v, want %d events and waiter %d's stats", r.Registration, relWaiter, len(events), wantWaiter)
	}
	if want := (poller.Released{Handle: h, FD: rd, Waiter: wantWaiter, Reason: poller.Deleted}); basicRelease(r) != want {
		t.Errorf("released %+v, want %+v", r, want)
	}
	if err := isOpen(rd); err != unix.EBADF {
		t.Errorf("owned fd %d after Delete+Barrier: fcntl = %v, want EBADF", rd, err)
	}
	select {
	case r2 := <-released:
		t.Errorf("second OnRelease: %+v", r2)
	default:
	}
}

// TestPerWaiterBalance checks that PerWaiter assigns each registration to
// the waiter with the fewest, counting releases.
func TestPerWaiterBalance(t *testing.T) {
	for _, rk := range reclaimers {
		t.Run(rk.String(), func(t *testing.T) {
			const waiters = 3
			p := newPoller(t, optsFor(poller.PerWaiter, rk, waiters))
			owner := func() (poller.Handle, int) {
				t.Helper()
				fd := newEventfd(t)
				got := make(chan int, 1)
				h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true,
					OnEvent: func(e poller.Event) {
						readEventfd(e.FD)
						select {
						case got <- e.Waiter:
						default:
						}
					}})
				if err != nil {
					t.Fatal(err)
				}
				writeEventfd(t, fd, 1)
				return h, wait(t, got, "event")
			}
			byWaiter := map[int][]poller.Handle{}
			for range 2 * waiters {
				h, w := owner()
				byWaiter[w] = append(byWaiter[w], h)
			}
			for w := range waiters {
				if n := len(byWaiter[w]); n != 2 {
					t.Fatalf("waiter %d owns %d of %d registrations, want 2 each: %v", w, n, 2*waiters, byWaiter)
				}
			}
			// Release waiter 1's: the next two registrations go there.
			for _, h := range byWaiter[1] {
				if err := p.Delete(h); err != nil {
					t.Fatal(err)
				}
			}
			barrier(t, p)
			for range 2 {
				if _, w := owner(); w != 1 {
					t.Errorf("new registration on waiter %d, want 1 (the least loaded after its releases)", w)
				}
			}
		})
	}
}

// TestWaiterChoice checks that PerWaiter assigns to the least-loaded waiter unless the caller names one.
func TestWaiterChoice(t *testing.T) {
	p := newPoller(t, poller.Options{Waiters: 3, Topology: poller.PerWaiter})
	var hs []poller.Handle
	add := func(c poller.WaiterChoice) (poller.Handle, error) {
		h, err := p.Add(poller.Registration{FD: newEventfd(t), Events: poller.Readable, CloseFD: true, OnEvent: nop, Waiter: c})
		if err == nil {
			hs = append(hs, h)
		}
		return h, err
	}
	for range 4 {
		if _, err := add(poller.OnWaiter(2)); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if _, err := add(poller.LeastLoaded); err != nil {
			t.Fatal(err)
		}
	}
	want := []int64{2, 2, 4}
	for i, n := range want {
		if ws, _ := p.WaiterStats(i); ws.Attached != n {
			t.Errorf("waiter %d has %d attached, want %d", i, ws.Attached, n)
		}
	}
	for _, c := range []poller.WaiterChoice{poller.OnWaiter(3), poller.OnWaiter(-2), -1} {
		fd := newEventfd(t)
		if _, err := p.Add(poller.Registration{FD: fd, OnEvent: nop, Waiter: c}); !errors.Is(err, poller.ErrInvalid) {
			t.Errorf("Add on waiter choice %d = %v, want ErrInvalid", c, err)
		}
		unix.Close(fd)
	}
	if _, err := p.WaiterStats(3); !errors.Is(err, poller.ErrInvalid) {
		t.Errorf("WaiterStats(3) of 3 waiters = %v, want ErrInvalid", err)
	}
}
