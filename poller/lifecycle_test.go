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

// guard records, for one registration, every violation of "no OnEvent once
// OnRelease has started" and "OnRelease exactly once". OnEvent announces
// itself in inside before it looks at released; OnRelease stores released
// before it looks at inside: with sequentially consistent atomics, an
// OnEvent that overlaps or follows OnRelease is seen by one side or the
// other.
type guard struct {
	inside   atomic.Int32
	released atomic.Bool
	releases atomic.Int32
	events   atomic.Int64
	bad      atomic.Int32 // OnEvent after or during OnRelease
}

func (g *guard) enter() {
	g.inside.Add(1)
	if g.released.Load() {
		g.bad.Add(1)
	}
}

func (g *guard) leave() {
	g.events.Add(1)
	g.inside.Add(-1)
}

func (g *guard) release() {
	g.releases.Add(1)
	g.released.Store(true)
	if g.inside.Load() != 0 {
		g.bad.Add(1)
	}
}

func (g *guard) check(t testing.TB, name string) {
	t.Helper()
	if n := g.bad.Load(); n != 0 {
		t.Errorf("%s: %d OnEvent calls ran during or after OnRelease", name, n)
	}
	if n := g.releases.Load(); n != 1 {
		t.Errorf("%s: OnRelease ran %d times, want 1", name, n)
	}
}

// startWriter keeps an eventfd readable until stop is called.
func startWriter(t testing.TB, fd int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var one [8]byte
		putU64(one[:], 1)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := unix.Write(fd, one[:]); err != nil && err != unix.EAGAIN {
				t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(10 * time.Microsecond)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop) // before the fd is closed, if the test fails early
	return stop
}

// TestDeleteLifecycle checks Delete: OnRelease exactly once, after Delete
// returned and never on its stack, and no OnEvent once OnRelease started.
func TestDeleteLifecycle(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		t.Run("NotOnDeleteStack", func(t *testing.T) { testNotOnDeleteStack(t, opts) })
		for _, trig := range triggers {
			t.Run("NoEventAfterRelease/"+trig.name, func(t *testing.T) { testNoEventAfterRelease(t, opts, trig.bits) })
			t.Run("DeleteSelfInOnEvent/"+trig.name, func(t *testing.T) { testDeleteSelf(t, opts, trig.bits) })
			t.Run("DeleteOtherInOnEvent/"+trig.name, func(t *testing.T) { testDeleteOther(t, opts, trig.bits) })
		}
		t.Run("DoubleDelete", func(t *testing.T) { testDoubleDelete(t, opts) })
	})
}

func testNotOnDeleteStack(t *testing.T, opts poller.Options) {
	p := newPoller(t, opts)
	for range 20 {
		fd := newEventfd(t)
		returned := make(chan struct{})
		var (
			calls    atomic.Int32
			timedOut atomic.Bool
			relGoid  atomic.Int64
		)
		relDone := make(chan struct{})
		h, err := p.Add(poller.Registration{
			FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) { readEventfd(e.FD) },
			OnRelease: func(poller.Released) {
				calls.Add(1)
				relGoid.Store(curGoid())
				// On Delete's stack this would wait for itself: it
				// times out instead, and the test fails.
				select {
				case <-returned:
				case <-time.After(timeout):
					timedOut.Store(true)
				}
				close(relDone)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		writeEventfd(t, fd, 1)
		me := curGoid()
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		close(returned)
		wait(t, relDone, "OnRelease")
		if timedOut.Load() {
			t.Fatal("OnRelease ran before Delete returned (on Delete's stack)")
		}
		if g := relGoid.Load(); g == me {
			t.Fatalf("OnRelease ran on the deleting goroutine %d", g)
		}
		barrier(t, p)
		if n := calls.Load(); n != 1 {
			t.Fatalf("OnRelease ran %d times, want 1", n)
		}
	}
}

func testNoEventAfterRelease(t *testing.T, opts poller.Options, trig poller.Events) {
	p := newPoller(t, opts)
	for iter := range 25 {
		fd := newEventfd(t)
		var g guard
		relDone := make(chan struct{})
		h, err := p.Add(poller.Registration{
			FD: fd, Events: poller.Readable | trig, // the test closes fd
			OnEvent: func(e poller.Event) {
				g.enter()
				readEventfd(e.FD)
				g.leave()
			},
			OnRelease: func(poller.Released) {
				g.release()
				close(relDone)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		stop := startWriter(t, fd)
		eventually(t, "first events", func() bool { return g.events.Load() >= 3 })
		delErr := make(chan error, 1)
		go func() { delErr <- p.Delete(h) }()
		if err := wait(t, delErr, "Delete"); err != nil {
			t.Fatalf("iteration %d: Delete: %v", iter, err)
		}
		wait(t, relDone, "OnRelease")
		n := g.events.Load()
		time.Sleep(time.Millisecond) // the writer goes on: no event may follow
		stop()
		barrier(t, p)
		g.check(t, "registration")
		if m := g.events.Load(); m != n {
			t.Fatalf("iteration %d: %d OnEvent calls after OnRelease returned", iter, m-n)
		}
		unix.Close(fd)
		if t.Failed() {
			return
		}
	}
}

func testDeleteSelf(t *testing.T, opts poller.Options, trig poller.Events) {
	p := newPoller(t, opts)
	fd := newEventfd(t)
	defer unix.Close(fd)
	var g guard
	var nilErrs, otherErrs atomic.Int32
	relDone := make(chan poller.Released, 1)
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable | trig,
		OnEvent: func(e poller.Event) {
			g.enter()
			defer g.leave()
			// Leave the eventfd readable: level-triggered, it would
			// fire again if the registration were still armed.
			if err := p.Delete(e.Handle); err == nil {
				nilErrs.Add(1)
			} else {
				otherErrs.Add(1)
			}
		},
		OnRelease: func(r poller.Released) {
			g.release()
			relDone <- r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := startWriter(t, fd)
	r := wait(t, relDone, "OnRelease")
	time.Sleep(quiet)
	stop()
	barrier(t, p)
	g.check(t, "self-deleting registration")
	if r.Handle != h || r.Reason != poller.Deleted {
		t.Errorf("released %+v, want handle %v reason deleted", r, h)
	}
	if n, m := nilErrs.Load(), otherErrs.Load(); n != 1 || m != 0 {
		t.Errorf("Delete from OnEvent: %d nil, %d errors; want exactly one call, returning nil", n, m)
	}
	if n := g.events.Load(); n != 1 {
		t.Errorf("%d OnEvent calls, want 1: none after the registration deleted itself", n)
	}
	if err := p.Delete(h); !errors.Is(err, poller.ErrStale) {
		t.Errorf("Delete after self-delete = %v, want ErrStale", err)
	}
}

func testDeleteOther(t *testing.T, opts poller.Options, trig poller.Events) {
	p := newPoller(t, opts)
	fdA, fdB := newEventfd(t), newEventfd(t)
	defer unix.Close(fdA)
	defer unix.Close(fdB)
	var gB guard
	var hB atomic.Uint64
	var nilErrs, staleErrs, otherErrs atomic.Int32
	relB := make(chan poller.Released, 1)
	relA := make(chan struct{})
	hA, err := p.Add(poller.Registration{
		FD: fdA, Events: poller.Readable | trig,
		OnEvent: func(e poller.Event) {
			readEventfd(e.FD)
			h := poller.Handle(hB.Load())
			if h == 0 {
				return
			}
			switch err := p.Delete(h); {
			case err == nil:
				nilErrs.Add(1)
			case errors.Is(err, poller.ErrStale):
				staleErrs.Add(1)
			default:
				otherErrs.Add(1)
			}
		},
		OnRelease: func(poller.Released) { close(relA) },
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.Add(poller.Registration{
		FD: fdB, Events: poller.Readable | trig,
		OnEvent: func(e poller.Event) {
			gB.enter()
			readEventfd(e.FD)
			gB.leave()
		},
		OnRelease: func(r poller.Released) {
			gB.release()
			relB <- r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stopB := startWriter(t, fdB)
	eventually(t, "events on B", func() bool { return gB.events.Load() >= 3 })
	hB.Store(uint64(h))
	stopA := startWriter(t, fdA)
	r := wait(t, relB, "B's OnRelease")
	time.Sleep(quiet)
	stopA()
	stopB()
	if err := p.Delete(hA); err != nil {
		t.Errorf("Delete A: %v", err)
	}
	wait(t, relA, "A's OnRelease")
	barrier(t, p)
	gB.check(t, "B")
	if r.Handle != h || r.Reason != poller.Deleted {
		t.Errorf("B released %+v, want handle %v reason deleted", r, h)
	}
	if n, m := nilErrs.Load(), otherErrs.Load(); n != 1 || m != 0 {
		t.Errorf("Delete(B) from A's OnEvent: %d nil, %d unexpected errors (and %d ErrStale); want exactly one nil", n, m, staleErrs.Load())
	}
}

func testDoubleDelete(t *testing.T, opts poller.Options) {
	p := newPoller(t, opts)
	fd := newEventfd(t)
	var releases atomic.Int32
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable, CloseFD: true,
		OnEvent:   func(poller.Event) {},
		OnRelease: func(poller.Released) { releases.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(h); err != nil {
		t.Fatalf("first Delete: %v", err)
	}
	if err := p.Delete(h); !errors.Is(err, poller.ErrStale) {
		t.Errorf("second Delete = %v, want ErrStale", err)
	}
	if err := p.Modify(h, poller.Readable|poller.Writable); !errors.Is(err, poller.ErrStale) {
		t.Errorf("Modify after Delete = %v, want ErrStale", err)
	}
	barrier(t, p)
	// Also once the slot has been recycled.
	if err := p.Delete(h); !errors.Is(err, poller.ErrStale) {
		t.Errorf("Delete after release = %v, want ErrStale", err)
	}
	if err := p.Modify(h, poller.Readable); !errors.Is(err, poller.ErrStale) {
		t.Errorf("Modify after release = %v, want ErrStale", err)
	}
	if n := releases.Load(); n != 1 {
		t.Errorf("OnRelease ran %d times, want 1", n)
	}
}

// TestCloseFD checks an fd the poller owns: open while OnRelease runs, its
// number not registrable until the release has closed it, closed after
// Barrier, and its number registrable again once reused.
func TestCloseFD(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		fd := newEventfd(t)
		started := make(chan error, 1)
		proceed := make(chan struct{})
		h, err := p.Add(poller.Registration{
			FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) { readEventfd(e.FD) },
			OnRelease: func(r poller.Released) {
				started <- isOpen(r.FD)
				select {
				case <-proceed:
				case <-time.After(timeout):
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		writeEventfd(t, fd, 1)
		if err := p.Delete(h); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, started, "OnRelease"); err != nil {
			t.Errorf("owned fd inside OnRelease: fcntl = %v, want open", err)
		}
		if err := isOpen(fd); err != nil {
			t.Errorf("owned fd while OnRelease runs: fcntl = %v, want open", err)
		}
		if _, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(poller.Event) {}}); !errors.Is(err, poller.ErrInvalid) {
			t.Errorf("Add of an owned fd number before its release = %v, want ErrInvalid", err)
		}
		close(proceed)
		barrier(t, p)
		if err := isOpen(fd); err != unix.EBADF {
			t.Fatalf("owned fd after Barrier: fcntl = %v, want EBADF", err)
		}
		// A new fd with the same number can be registered.
		if nfd := newEventfd(t); nfd != fd {
			if err := unix.Dup3(nfd, fd, unix.O_CLOEXEC); err != nil {
				t.Fatalf("dup3: %v", err)
			}
			unix.Close(nfd)
		}
		got := make(chan uint64, 1)
		h2, err := p.Add(poller.Registration{
			FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) { got <- readEventfd(e.FD) },
		})
		if err != nil {
			t.Fatalf("Add of a new fd with the released number: %v", err)
		}
		if h2 == h {
			t.Errorf("new registration reuses the handle %v", h)
		}
		writeEventfd(t, fd, 3)
		if v := wait(t, got, "event on the new fd"); v != 3 {
			t.Errorf("read %d, want 3", v)
		}
		// The new registration is live at Close, which closes its fd.
	})
}

// TestUserClosedFD checks that a registration whose fd the user closed
// (CloseFD false) still deletes cleanly: epoll_ctl's EBADF or ENOENT does
// not stop the lifecycle.
func TestUserClosedFD(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, reuse := range []bool{false, true} {
			name := "closed"
			if reuse {
				name = "closed-and-number-reused"
			}
			t.Run(name, func(t *testing.T) {
				p := newPoller(t, opts)
				fd := newEventfd(t)
				got := make(chan struct{}, 8)
				rel := make(chan poller.Released, 1)
				h, err := p.Add(poller.Registration{
					FD: fd, Events: poller.Readable,
					OnEvent: func(e poller.Event) {
						readEventfd(e.FD)
						got <- struct{}{}
					},
					OnRelease: func(r poller.Released) { rel <- r },
				})
				if err != nil {
					t.Fatal(err)
				}
				writeEventfd(t, fd, 1)
				wait(t, got, "event")
				unix.Close(fd)
				var other int = -1
				if reuse {
					other = newEventfd(t) // most likely the same number
					defer unix.Close(other)
				}
				if err := p.Delete(h); err != nil {
					t.Fatalf("Delete of a registration whose fd the user closed: %v", err)
				}
				if r := wait(t, rel, "OnRelease"); r.Handle != h || r.Reason != poller.Deleted {
					t.Errorf("released %+v, want handle %v reason deleted", r, h)
				}
				barrier(t, p)
				if reuse {
					if err := isOpen(other); err != nil {
						t.Errorf("unrelated fd %d closed: %v", other, err)
					}
					// The number is free for registration again.
					if _, err := p.Add(poller.Registration{FD: other, Events: poller.Readable, OnEvent: func(poller.Event) {}}); err != nil {
						t.Errorf("Add of fd %d after the old registration was deleted: %v", other, err)
					}
				}
				roundTrip(t, p)
			})
		}
	})
}

// hangUpKind makes a registered fd (rd) and a peer end, and hangs up the
// peer.
type hangUpKind struct {
	name   string
	make   func(t testing.TB) (rd, peer int)
	hangUp func(t testing.TB, rd, peer int)
}

var hangUpKinds = []hangUpKind{
	{"pipe", func(t testing.TB) (int, int) { return newPipe(t) },
		func(t testing.TB, _, w int) { unix.Close(w) }},
	{"socketpair", func(t testing.TB) (int, int) { return newSocketpair(t) },
		func(t testing.TB, _, peer int) { unix.Close(peer) }},
	{"tcp-rst", func(t testing.TB) (int, int) { return newTCPPair(t) },
		func(t testing.TB, _, peer int) {
			// Linger 0: close sends a reset, which reports HangUp|Error.
			if err := unix.SetsockoptLinger(peer, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
				t.Errorf("SO_LINGER: %v", err)
			}
			unix.Close(peer)
		}},
	{"tcp-fin-both-ways", func(t testing.TB) (int, int) { return newTCPPair(t) },
		func(t testing.TB, rd, peer int) {
			// Both directions shut down: HangUp.
			if err := unix.Shutdown(rd, unix.SHUT_WR); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			unix.Close(peer)
		}},
}

// TestHangUp checks the hang-up path: the final event (HangUp or Error) is
// delivered exactly once, last, to a registration already out of epoll
// (Delete returns ErrStale from inside it), then OnRelease runs with Reason
// HungUp, with no Delete call.
func TestHangUp(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, kind := range hangUpKinds {
			for _, trig := range triggers {
				t.Run(kind.name+"/"+trig.name, func(t *testing.T) {
					testHangUp(t, opts, kind, trig.bits)
				})
			}
		}
	})
}

func testHangUp(t *testing.T, opts poller.Options, kind hangUpKind, trig poller.Events) {
	p := newPoller(t, opts)
	rd, peer := kind.make(t)
	var (
		g          guard
		finals     atomic.Int32
		afterFinal atomic.Int32
		deleteErr  = make(chan error, 4)
		openErr    = make(chan error, 4)
		mu         sync.Mutex
		data       []byte
	)
	rel := make(chan poller.Released, 2)
	h, err := p.Add(poller.Registration{
		FD: rd, Events: poller.Readable | trig, CloseFD: true,
		OnEvent: func(e poller.Event) {
			g.enter()
			defer g.leave()
			if finals.Load() != 0 {
				afterFinal.Add(1)
			}
			b, _ := readAll(e.FD)
			mu.Lock()
			data = append(data, b...)
			mu.Unlock()
			if e.Events&(poller.HangUp|poller.Error) != 0 {
				finals.Add(1)
				select {
				case openErr <- isOpen(e.FD):
				default:
				}
				select {
				case deleteErr <- p.Delete(e.Handle):
				default:
				}
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
	if kind.name != "tcp-rst" { // a reset discards unread data
		if _, err := unix.Write(peer, []byte("last words")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "data before the hang-up", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return string(data) == "last words"
		})
	}
	kind.hangUp(t, rd, peer)
	r := wait(t, rel, "OnRelease after hang-up")
	time.Sleep(quiet)
	barrier(t, p)
	g.check(t, "hung-up registration")
	if n := finals.Load(); n != 1 {
		t.Errorf("%d final events (HangUp or Error), want exactly 1", n)
	}
	if n := afterFinal.Load(); n != 0 {
		t.Errorf("%d OnEvent calls after the final event", n)
	}
	if err := <-openErr; err != nil {
		t.Errorf("fd during the final event: fcntl = %v, want open", err)
	}
	if err := <-deleteErr; !errors.Is(err, poller.ErrStale) {
		t.Errorf("Delete inside the final event = %v, want ErrStale (already removed)", err)
	}
	wantWaiter := r.Waiter // the owner, or the one that delivered the final event
	if n := releaseWaiters(p, opts); r.Waiter < 0 || r.Waiter >= n {
		t.Errorf("released on waiter %d, want 0..%d", r.Waiter, n-1)
	}
	if want := (poller.Released{Handle: h, FD: rd, Waiter: wantWaiter, Reason: poller.HungUp}); basicRelease(r) != want {
		t.Errorf("released %+v, want %+v", r, want)
	}
	if err := p.Delete(h); !errors.Is(err, poller.ErrStale) {
		t.Errorf("Delete after hang-up release = %v, want ErrStale", err)
	}
	if err := isOpen(rd); err != unix.EBADF {
		t.Errorf("owned fd after hang-up release: fcntl = %v, want EBADF", err)
	}
}

// TestReadHangUpIsNotFinal checks that ReadHangUp alone (the peer shut
// down writing) is an ordinary event: the registration stays live.
func TestReadHangUpIsNotFinal(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		rd, peer := newTCPPair(t)
		defer unix.Close(peer)
		deleteErr := make(chan error, 1)
		var once sync.Once
		rel := make(chan poller.Released, 1)
		_, err := p.Add(poller.Registration{
			FD: rd, Events: poller.Readable | poller.ReadHangUp, CloseFD: true,
			OnEvent: func(e poller.Event) {
				readAll(e.FD)
				if e.Events&poller.ReadHangUp != 0 {
					once.Do(func() { deleteErr <- p.Delete(e.Handle) })
				}
			},
			OnRelease: func(r poller.Released) { rel <- r },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Shutdown(peer, unix.SHUT_WR); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, deleteErr, "ReadHangUp event"); err != nil {
			t.Errorf("Delete on ReadHangUp = %v, want nil (the registration was still live)", err)
		}
		if r := wait(t, rel, "OnRelease"); r.Reason != poller.Deleted {
			t.Errorf("released with reason %v, want deleted", r.Reason)
		}
	})
}

// TestHangUpOutOfEpollFirst checks the order of the hang-up path from the
// outside: when the final event is delivered the fd has already left epoll
// and the poller, so the final OnEvent can register the same fd again (an
// fd still in the set would fail with EEXIST).
func TestHangUpOutOfEpollFirst(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		rd, wr := newPipe(t)
		defer unix.Close(rd) // not owned by the poller
		readdErr := make(chan error, 1)
		rel := make(chan poller.Released, 2)
		_, err := p.Add(poller.Registration{
			FD: rd, Events: poller.Readable,
			OnEvent: func(e poller.Event) {
				if e.Events&poller.HangUp == 0 {
					return
				}
				_, err := p.Add(poller.Registration{FD: e.FD, Events: poller.Readable, OnEvent: nop,
					OnRelease: func(r poller.Released) { rel <- r }})
				readdErr <- err
			},
			OnRelease: func(r poller.Released) { rel <- r },
		})
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(wr)
		if err := wait(t, readdErr, "final event"); err != nil {
			t.Errorf("Add of the hung-up fd from its final OnEvent = %v, want nil", err)
		}
		for range 2 { // the first registration, then the second, hung up too
			if r := wait(t, rel, "release"); r.Reason != poller.HungUp {
				t.Errorf("released %+v, want reason hung-up", r)
			}
		}
		barrier(t, p)
	})
}

// TestFinalEventReadsDataBeforeHangUp writes "bye" into a pipe and closes
// its write end before the read end is registered: the one event that
// arrives is the final one (HangUp), and its handler can still read the
// data that arrived before the hang-up, since the fd stays open until after
// OnRelease.
func TestFinalEventReadsDataBeforeHangUp(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, trig := range triggers {
			t.Run(trig.name, func(t *testing.T) {
				p := newPoller(t, opts)
				r, w := newPipe(t)
				if _, err := unix.Write(w, []byte("bye")); err != nil {
					t.Fatal(err)
				}
				unix.Close(w)
				type final struct {
					events poller.Events
					data   string
					eof    bool
				}
				got := make(chan final, 4)
				rel := make(chan poller.Released, 1)
				h, err := p.Add(poller.Registration{
					FD: r, Events: poller.Readable | trig.bits, CloseFD: true,
					OnEvent: func(e poller.Event) {
						data, eof := readAll(e.FD)
						got <- final{e.Events, string(data), eof}
					},
					OnRelease: func(r poller.Released) { rel <- r },
				})
				if err != nil {
					t.Fatal(err)
				}
				f := wait(t, got, "final event")
				if f.events&poller.HangUp == 0 || f.data != "bye" || !f.eof {
					t.Errorf("final event %v read %q (EOF %v), want HangUp reading \"bye\" then EOF", f.events, f.data, f.eof)
				}
				if r := wait(t, rel, "release after the final event"); r.Handle != h || r.Reason != poller.HungUp {
					t.Errorf("released %+v, want %v hung up", basicRelease(r), h)
				}
				barrier(t, p)
				if n := len(got); n != 0 {
					t.Errorf("%d events after the final one", n)
				}
			})
		}
	})
}
