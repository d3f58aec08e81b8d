//go:build linux

package poller_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// TestModify changes a registration's interest set, from outside and from
// inside its OnEvent.
func TestModify(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, trig := range triggers {
			t.Run(trig.name, func(t *testing.T) {
				p := newPoller(t, opts)
				a, b := newSocketpair(t)
				defer unix.Close(b)
				var writable, readable atomic.Int32
				modErr := make(chan error, 1)
				var once sync.Once
				h, err := p.Add(poller.Registration{
					FD: a, Events: poller.Readable | trig.bits, CloseFD: true,
					OnEvent: func(e poller.Event) {
						if e.Events&poller.Readable != 0 {
							readAll(e.FD)
							readable.Add(1)
						}
						if e.Events&poller.Writable != 0 {
							writable.Add(1)
							// Level-triggered, it would fire for ever.
							once.Do(func() { modErr <- p.Modify(e.Handle, poller.Readable|trig.bits) })
						}
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(quiet)
				if n := writable.Load() + readable.Load(); n != 0 {
					t.Fatalf("%d events on an idle socket registered for Readable", n)
				}
				// The socket is writable at once.
				if err := p.Modify(h, poller.Readable|poller.Writable|trig.bits); err != nil {
					t.Fatalf("Modify: %v", err)
				}
				if err := wait(t, modErr, "Writable event after Modify"); err != nil {
					t.Errorf("Modify from OnEvent: %v", err)
				}
				time.Sleep(quiet)
				w1 := writable.Load()
				time.Sleep(quiet)
				if w2 := writable.Load(); w2 != w1 {
					t.Errorf("%d more Writable events after Modify removed Writable", w2-w1)
				}
				if _, err := unix.Write(b, []byte("x")); err != nil {
					t.Fatal(err)
				}
				eventually(t, "Readable event after Modify", func() bool { return readable.Load() > 0 })
			})
		}
	})
}

// TestHangUpRacesDelete hangs up the peer while another goroutine deletes
// the registration: exactly one of them wins, and the registration is
// released once, after its last OnEvent.
func TestHangUpRacesDelete(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		var deletedWins, hangUpWins int
		for range 40 {
			rd, peer := newSocketpair(t)
			var g guard
			var finals atomic.Int32
			rel := make(chan poller.Released, 2)
			h, err := p.Add(poller.Registration{
				FD: rd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) {
					g.enter()
					defer g.leave()
					readAll(e.FD)
					if e.Events&poller.HangUp != 0 {
						finals.Add(1)
					}
				},
				OnRelease: func(r poller.Released) {
					g.release()
					rel <- r
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			start := make(chan struct{})
			delErr := make(chan error, 1)
			go func() {
				<-start
				delErr <- p.Delete(h)
			}()
			close(start)
			unix.Close(peer)
			err = wait(t, delErr, "Delete")
			r := wait(t, rel, "OnRelease")
			barrier(t, p)
			g.check(t, "registration")
			switch {
			case err == nil && r.Reason == poller.Deleted:
				deletedWins++
				if n := finals.Load(); n != 0 {
					t.Errorf("Delete won but %d final events were delivered", n)
				}
			case errors.Is(err, poller.ErrStale) && r.Reason == poller.HungUp:
				hangUpWins++
				if n := finals.Load(); n != 1 {
					t.Errorf("hang-up won with %d final events, want 1", n)
				}
			default:
				t.Errorf("Delete = %v and release reason %v: want nil/deleted or ErrStale/hung-up", err, r.Reason)
			}
		}
		t.Logf("Delete won %d times, hang-up %d times", deletedWins, hangUpWins)
	})
}

// TestCloseRacesOperations closes the poller while other goroutines add
// and delete registrations: every Add either fails with ErrClosed or its
// registration is released exactly once (by Delete or by Close), and every
// owned fd is closed (the fd leak check).
func TestCloseRacesOperations(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		checkFDLeak(t)
		p, err := poller.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu       sync.Mutex
			added    = map[poller.Handle]bool{}
			released = map[poller.Handle][]poller.Reason{}
			failures violations
			wg       sync.WaitGroup
			adds     atomic.Int32
		)
		onRelease := func(r poller.Released) {
			mu.Lock()
			released[r.Handle] = append(released[r.Handle], r.Reason)
			mu.Unlock()
		}
		for range 3 {
			wg.Go(func() {
				for {
					fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
					if err != nil {
						failures.add("eventfd: %v", err)
						return
					}
					h, err := p.Add(poller.Registration{
						FD: fd, Events: poller.Readable, CloseFD: true,
						OnEvent:   func(e poller.Event) { readEventfd(e.FD) },
						OnRelease: onRelease,
					})
					if err != nil {
						unix.Close(fd) // not handed over
						if !errors.Is(err, poller.ErrClosed) {
							failures.add("Add: %v", err)
						}
						return
					}
					mu.Lock()
					added[h] = true
					mu.Unlock()
					adds.Add(1)
					var one [8]byte
					putU64(one[:], 1)
					unix.Write(fd, one[:])
					if adds.Load()%2 == 0 {
						// Keep every other registration live for Close.
						continue
					}
					if err := p.Delete(h); err != nil && !errors.Is(err, poller.ErrClosed) {
						failures.add("Delete: %v", err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					err = p.Barrier(ctx)
					cancel()
					if err != nil && !errors.Is(err, poller.ErrClosed) {
						failures.add("Barrier: %v", err)
					}
				}
			})
		}
		eventually(t, "some registrations", func() bool { return adds.Load() >= 30 })
		if err := closeWithin(t, p); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		wait(t, done, "adders to stop")
		if n := failures.n.Load(); n != 0 {
			t.Fatalf("%d failures; first: %s", n, failures.first)
		}
		mu.Lock()
		defer mu.Unlock()
		var closedReason int
		for h := range added {
			rs := released[h]
			if len(rs) != 1 {
				t.Errorf("registration %v released %d times (%v), want once", h, len(rs), rs)
				continue
			}
			if rs[0] == poller.Closed {
				closedReason++
			}
		}
		for h := range released {
			if !added[h] {
				t.Errorf("release of %v, which no Add returned", h)
			}
		}
		t.Logf("%d registrations, %d released by Close", len(added), closedReason)
		st := p.Stats()
		if st.Added != uint64(len(added)) || st.Releases != st.Added || st.Live != 0 || st.ReleasedNotFree != 0 {
			t.Errorf("after Close: %+v, want Added %d and every one released", st, len(added))
		}
	})
}

// TestBarrierDuringClose blocks a Barrier behind a waiter stuck in
// OnEvent, then closes the poller: the Barrier returns (nil, since Close
// runs every pending release, or ErrClosed) and does not hang.
func TestBarrierDuringClose(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		checkFDLeak(t)
		p, err := poller.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		_, unblock := blockWaiter(t, p, poller.Registration{})
		fd := newEventfd(t)
		var released atomic.Bool
		h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: nop, OnRelease: func(poller.Released) { released.Store(true) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		barrierErr := make(chan error, 1)
		go func() { barrierErr <- p.Barrier(context.Background()) }()
		time.Sleep(time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- p.Close() }()
		time.Sleep(time.Millisecond)
		unblock()
		if err := wait(t, closed, "Close"); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, barrierErr, "Barrier during Close"); err != nil && !errors.Is(err, poller.ErrClosed) {
			t.Errorf("Barrier during Close = %v, want nil or ErrClosed", err)
		}
		if !released.Load() {
			t.Error("pending release did not run by the time Close returned")
		}
	})
}
