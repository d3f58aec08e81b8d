//go:build linux

package poller_test

import (
	"context"
	"errors"
	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/reclaim"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// badEnv is what the bad-input cases act on.
type badEnv struct {
	p, closed  *poller.Poller
	live       poller.Handle // a live registration
	liveFD     int
	deleted    poller.Handle // deleted and released
	notOpen    int           // an fd number that is not open
	regular    int           // a regular file
	userClosed poller.Handle // live, but the user closed its fd
}

func nop(poller.Event) {}

// TestBadInput checks every documented error: the sentinel (errors.Is),
// the errno where a system call caused it, and that the poller still works
// afterwards.
func TestBadInput(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		p := newPoller(t, opts)
		var env badEnv
		env.p = p
		var err error
		// Opened first: fd numbers closed below must stay free.
		env.closed, err = poller.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := closeWithin(t, env.closed); err != nil {
			t.Fatal(err)
		}
		env.regular, err = unix.Open(filepath.Join(t.TempDir(), "regular"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(env.regular)

		liveGot := make(chan uint64, 4)
		env.liveFD = newEventfd(t)
		env.live, err = p.Add(poller.Registration{FD: env.liveFD, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) { liveGot <- readEventfd(e.FD) }})
		if err != nil {
			t.Fatal(err)
		}

		dfd := newEventfd(t)
		if env.deleted, err = p.Add(poller.Registration{FD: dfd, Events: poller.Readable, CloseFD: true, OnEvent: nop}); err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(env.deleted); err != nil {
			t.Fatal(err)
		}
		barrier(t, p)

		// Two numbers closed last, and not reused: the cases open no fds.
		// One was never registered; the other stays registered, its fd
		// closed by the user.
		env.notOpen = newEventfd(t)
		ufd := newEventfd(t)
		if env.userClosed, err = p.Add(poller.Registration{FD: ufd, Events: poller.Readable, OnEvent: nop}); err != nil {
			t.Fatal(err)
		}
		unix.Close(env.notOpen)
		unix.Close(ufd)

		forged := func(h poller.Handle, dgen int) poller.Handle {
			return poller.Handle(uint64(uint32(int(h.Gen())+dgen))<<32 | uint64(h.Slot()))
		}
		reg := func(fd int) poller.Registration {
			return poller.Registration{FD: fd, Events: poller.Readable, OnEvent: nop}
		}
		cases := []struct {
			name  string
			call  func(e *badEnv) error
			want  error
			errno error
		}{
			{"Add/negative fd", func(e *badEnv) error { _, err := e.p.Add(reg(-1)); return err }, poller.ErrInvalid, nil},
			{"Add/fd not open", func(e *badEnv) error { _, err := e.p.Add(reg(e.notOpen)); return err }, poller.ErrInvalid, unix.EBADF},
			{"Add/fd already registered", func(e *badEnv) error { _, err := e.p.Add(reg(e.liveFD)); return err }, poller.ErrInvalid, nil},
			{"Add/regular file", func(e *badEnv) error { _, err := e.p.Add(reg(e.regular)); return err }, poller.ErrInvalid, unix.EPERM},
			{"Add/nil OnEvent", func(e *badEnv) error {
				_, err := e.p.Add(poller.Registration{FD: e.regular, Events: poller.Readable})
				return err
			}, poller.ErrInvalid, nil},
			{"Add/unknown event bits", func(e *badEnv) error {
				r := reg(e.regular)
				r.Events |= 0x40 // EPOLLRDNORM: not in the API
				_, err := e.p.Add(r)
				return err
			}, poller.ErrInvalid, nil},
			{"Add/EPOLLONESHOT", func(e *badEnv) error {
				r := reg(e.regular)
				r.Events |= 1 << 30 // the poller's own business
				_, err := e.p.Add(r)
				return err
			}, poller.ErrInvalid, nil},
			{"Add/after Close", func(e *badEnv) error { _, err := e.closed.Add(reg(e.regular)); return err }, poller.ErrClosed, nil},

			{"Delete/zero handle", func(e *badEnv) error { return e.p.Delete(0) }, poller.ErrStale, nil},
			{"Delete/forged next generation", func(e *badEnv) error { return e.p.Delete(forged(e.live, 1)) }, poller.ErrStale, nil},
			{"Delete/forged earlier generation", func(e *badEnv) error { return e.p.Delete(forged(e.deleted, -1)) }, poller.ErrStale, nil},
			{"Delete/never issued slot", func(e *badEnv) error { return e.p.Delete(poller.Handle(1<<32 | 1<<20)) }, poller.ErrStale, nil},
			{"Delete/huge slot", func(e *badEnv) error { return e.p.Delete(poller.Handle(1<<32 | 0xfffffffe)) }, poller.ErrStale, nil},
			{"Delete/generation zero", func(e *badEnv) error { return e.p.Delete(poller.Handle(e.live.Slot())) }, poller.ErrStale, nil},
			{"Delete/wake handle", func(e *badEnv) error { return e.p.Delete(poller.Handle(0xffffffff)) }, poller.ErrStale, nil},
			{"Delete/deleted", func(e *badEnv) error { return e.p.Delete(e.deleted) }, poller.ErrStale, nil},
			{"Delete/after Close", func(e *badEnv) error { return e.closed.Delete(e.live) }, poller.ErrClosed, nil},

			{"Modify/zero handle", func(e *badEnv) error { return e.p.Modify(0, poller.Readable) }, poller.ErrStale, nil},
			{"Modify/forged generation", func(e *badEnv) error { return e.p.Modify(forged(e.live, 1), poller.Readable) }, poller.ErrStale, nil},
			{"Modify/deleted", func(e *badEnv) error { return e.p.Modify(e.deleted, poller.Readable) }, poller.ErrStale, nil},
			{"Modify/unknown bits", func(e *badEnv) error { return e.p.Modify(e.live, poller.Readable|0x100) }, poller.ErrInvalid, nil},
			{"Modify/after Close", func(e *badEnv) error { return e.closed.Modify(e.live, poller.Readable) }, poller.ErrClosed, nil},
			// Not a sentinel: the system call's errno, wrapped.
			{"Modify/user closed the fd", func(e *badEnv) error { return e.p.Modify(e.userClosed, poller.Readable) }, nil, unix.EBADF},

			{"Barrier/after Close", func(e *badEnv) error { return e.closed.Barrier(context.Background()) }, poller.ErrClosed, nil},
		}
		for _, c := range cases {
			err := c.call(&env)
			if err == nil {
				t.Errorf("%s: nil error", c.name)
				continue
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, err, c.want)
			}
			if c.errno != nil && !errors.Is(err, c.errno) {
				t.Errorf("%s: %v, want it to wrap %v", c.name, err, c.errno)
			}
			for _, other := range []error{poller.ErrInvalid, poller.ErrStale, poller.ErrClosed, poller.ErrInCallback, poller.ErrUnsupported} {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("%s: %v also matches %v", c.name, err, other)
				}
			}
		}
		if err := closeWithin(t, env.closed); err != nil {
			t.Errorf("Close twice: %v", err)
		}

		// The poller still works: the live registration, the one whose fd
		// the user closed, and a fresh round trip.
		writeEventfd(t, env.liveFD, 5)
		if v := wait(t, liveGot, "event on the live registration"); v != 5 {
			t.Errorf("live registration read %d, want 5", v)
		}
		if err := p.Delete(env.userClosed); err != nil {
			t.Errorf("Delete of the registration whose fd the user closed: %v", err)
		}
		roundTrip(t, p)
		if st := p.Stats(); st.Live != 1 {
			t.Errorf("after the bad calls: %d live registrations, want 1 (failed Adds must not count)", st.Live)
		}
	})
}

// TestBadOptions checks that New rejects invalid Options with ErrInvalid
// and leaks nothing.
func TestBadOptions(t *testing.T) {
	checkFDLeak(t)
	cases := []struct {
		name string
		opts poller.Options
	}{
		{"negative Waiters", poller.Options{Waiters: -1}},
		{"Waiters > MaxWaiters", poller.Options{Waiters: poller.MaxWaiters + 1}},
		{"negative WaitTimeout", poller.Options{WaitTimeout: -time.Millisecond}},
		{"WaitTimeout > MaxWaitTimeout", poller.Options{WaitTimeout: poller.MaxWaitTimeout + time.Second}},
		{"negative MaxEvents", poller.Options{MaxEvents: -1}},
		{"MaxEvents > MaxMaxEvents", poller.Options{MaxEvents: poller.MaxMaxEvents + 1}},
		{"unknown Topology", poller.Options{Topology: poller.Stealing + 1}},
		{"negative Topology", poller.Options{Topology: -1}},
		{"failing Reclaimer", poller.Options{Reclaimer: func(int) (reclaim.Reclaimer, error) { return nil, errors.New("no") }}},
		{"nil Reclaimer made", poller.Options{Reclaimer: func(int) (reclaim.Reclaimer, error) { return nil, nil }}},
		{"Reclaimer with too few participants", poller.Options{Waiters: 2, Reclaimer: func(int) (reclaim.Reclaimer, error) { return passbuck.New(1, passbuck.Options{}) }}},
		{"classic without timeout", poller.Options{Reclaimer: passBuckClassic.factory()}},
		{"classic without timeout, per-waiter", poller.Options{Reclaimer: passBuckClassic.factory(), Topology: poller.PerWaiter, Waiters: 2}},
	}
	for _, c := range cases {
		p, err := poller.New(c.opts)
		if !errors.Is(err, poller.ErrInvalid) || p != nil {
			t.Errorf("New(%s) = %v, %v; want nil, ErrInvalid", c.name, p, err)
			if p != nil {
				p.Close()
			}
		}
	}
	// The limits themselves are accepted.
	for _, o := range []poller.Options{
		{Waiters: 1, MaxEvents: 1},
		{Waiters: 2, MaxEvents: poller.MaxMaxEvents, WaitTimeout: poller.MaxWaitTimeout},
		{Waiters: 2, Reclaimer: passBuckClassic.factory(), WaitTimeout: time.Nanosecond, Topology: poller.PerWaiter},
		{Waiters: 2, LockOSThread: true},
	} {
		p, err := poller.New(o)
		if err != nil {
			t.Errorf("New(%+v): %v", o, err)
			continue
		}
		roundTrip(t, p)
		if st := p.Stats(); len(st.Waiters) != o.Waiters {
			t.Errorf("len(Stats.Waiters) = %d, want %d", len(st.Waiters), o.Waiters)
		}
		closeAndCheck(t, p)
	}
}
