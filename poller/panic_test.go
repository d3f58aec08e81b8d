//go:build linux

package poller_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

type panicReport struct {
	h     poller.Handle
	value any
	stack int
}

type panicLog struct {
	mu  sync.Mutex
	got []panicReport
}

func (l *panicLog) onPanic(h poller.Handle, v any, stack []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, panicReport{h, v, len(stack)})
}

func (l *panicLog) reports() []panicReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]panicReport(nil), l.got...)
}

// TestPanics checks that a panicking callback is recovered and reported,
// that a registration whose OnEvent panicked is released with Reason
// Panicked, and that the poller goes on.
func TestPanics(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, trig := range triggers {
			t.Run("OnEvent/"+trig.name, func(t *testing.T) { testOnEventPanic(t, opts, trig.bits) })
		}
		t.Run("OnRelease", func(t *testing.T) { testOnReleasePanic(t, opts) })
		t.Run("NilOnPanic", func(t *testing.T) {
			// The panics are logged with slog; nothing crashes.
			p := newPoller(t, opts)
			fd := newEventfd(t)
			rel := make(chan poller.Released, 1)
			_, err := p.Add(poller.Registration{
				FD: fd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(poller.Event) { panic("logged, not reported") },
				OnRelease: func(r poller.Released) {
					rel <- r
					panic("logged too")
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			writeEventfd(t, fd, 1)
			if r := wait(t, rel, "release after panic"); r.Reason != poller.Panicked {
				t.Errorf("released with reason %v, want panicked", r.Reason)
			}
			barrier(t, p)
			if n := p.Stats().Panics; n != 2 {
				t.Errorf("Stats.Panics = %d, want 2", n)
			}
			roundTrip(t, p)
		})
	})
}

func testOnEventPanic(t *testing.T, opts poller.Options, trig poller.Events) {
	var log panicLog
	opts.OnPanic = log.onPanic
	p := newPoller(t, opts)

	// A healthy registration, busy before and after the panic.
	okFD := newEventfd(t)
	okGot := make(chan uint64, 16)
	if _, err := p.Add(poller.Registration{
		FD: okFD, Events: poller.Readable | trig, CloseFD: true,
		OnEvent: func(e poller.Event) { okGot <- readEventfd(e.FD) },
	}); err != nil {
		t.Fatal(err)
	}

	fd := newEventfd(t)
	var g guard
	rel := make(chan poller.Released, 1)
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable | trig, CloseFD: true,
		OnEvent: func(e poller.Event) {
			g.enter()
			defer g.leave()
			// Level-triggered and unread: it would fire again if the
			// registration were not released.
			panic("boom")
		},
		OnRelease: func(r poller.Released) {
			g.release()
			rel <- r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	writeEventfd(t, fd, 1)
	r := wait(t, rel, "release after an OnEvent panic")
	barrier(t, p)
	g.check(t, "panicking registration")
	if n := g.events.Load(); n != 1 {
		t.Errorf("panicking OnEvent ran %d times, want 1", n)
	}
	wantWaiter := r.Waiter
	if n := releaseWaiters(p, opts); r.Waiter < 0 || r.Waiter >= n {
		t.Errorf("released on waiter %d, want 0..%d", r.Waiter, n-1)
	}
	if want := (poller.Released{Handle: h, FD: fd, Waiter: wantWaiter, Reason: poller.Panicked}); basicRelease(r) != want {
		t.Errorf("released %+v, want %+v", r, want)
	}
	reps := log.reports()
	if len(reps) != 1 || reps[0].h != h || reps[0].value != "boom" || reps[0].stack == 0 {
		t.Errorf("OnPanic reports %+v, want one for %v with value \"boom\" and a stack", reps, h)
	}
	if err := isOpen(fd); err != unix.EBADF {
		t.Errorf("owned fd after the panicked registration's release: fcntl = %v, want EBADF", err)
	}

	// The other registration and the poller go on.
	for i := uint64(1); i <= 3; i++ {
		writeEventfd(t, okFD, i)
		if v := wait(t, okGot, "event on the healthy registration"); v != i {
			t.Errorf("healthy registration read %d, want %d", v, i)
		}
	}
	roundTrip(t, p)
	if st := p.Stats(); st.Panics != 1 {
		t.Errorf("Stats.Panics = %d, want 1", st.Panics)
	}
}

func testOnReleasePanic(t *testing.T, opts poller.Options) {
	var log panicLog
	opts.OnPanic = log.onPanic
	p := newPoller(t, opts)
	fd := newEventfd(t)
	var releases atomic.Int32
	h, err := p.Add(poller.Registration{
		FD: fd, Events: poller.Readable, CloseFD: true,
		OnEvent: func(poller.Event) {},
		OnRelease: func(poller.Released) {
			releases.Add(1)
			panic(42)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(h); err != nil {
		t.Fatal(err)
	}
	barrier(t, p)
	if n := releases.Load(); n != 1 {
		t.Errorf("OnRelease ran %d times, want 1", n)
	}
	reps := log.reports()
	if len(reps) != 1 || reps[0].h != h || reps[0].value != 42 || reps[0].stack == 0 {
		t.Errorf("OnPanic reports %+v, want one for %v with value 42 and a stack", reps, h)
	}
	if err := isOpen(fd); err != unix.EBADF {
		t.Errorf("owned fd after a panicking OnRelease: fcntl = %v, want EBADF", err)
	}
	st := p.Stats()
	if st.Releases != 1 || st.ReleasedNotFree != 0 {
		t.Errorf("after a panicking OnRelease: Releases %d ReleasedNotFree %d, want 1 and 0", st.Releases, st.ReleasedNotFree)
	}
	// The slot was recycled: the free list is LIFO, so the next Add gets
	// it back with the next generation.
	fd2 := newEventfd(t)
	h2, err := p.Add(poller.Registration{FD: fd2, Events: poller.Readable, CloseFD: true, OnEvent: func(poller.Event) {}})
	if err != nil {
		t.Fatal(err)
	}
	if h2.Slot() != h.Slot() || h2.Gen() != h.Gen()+1 {
		t.Errorf("next handle %v after releasing %v: want the same slot, next generation", h2, h)
	}
	roundTrip(t, p)
}
