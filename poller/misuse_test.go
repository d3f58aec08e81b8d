//go:build linux

package poller_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// What a careless or hostile caller can do to the poller through its API:
// guess handles, hand it its own fds, close an fd behind its back, or hand
// it an fd it cannot watch. None of it may corrupt the poller.

// forgedBudget is how long each topology of TestForgedDeleteCannotStrandFD
// runs. Before Add published and registered under one lock, this exposed a
// stranded fd within a few hundred milliseconds.
const forgedBudget = time.Second

// TestForgedDeleteCannotStrandFD re-adds one fd over and over while another
// goroutine keeps deleting the handle Add is about to return (handles are
// predictable: the same slot, the next generation). Whoever wins, the
// registration must end cleanly: either the owner's Delete succeeds or the
// guesser's did and OnRelease runs exactly once; the fd leaves epoll, so it
// can be added again at once; no stale events keep a waiter spinning.
func TestForgedDeleteCannotStrandFD(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.String(), func(t *testing.T) {
			const waiters = 2
			p := newPoller(t, poller.Options{Waiters: waiters, Topology: topo})
			fd := newEventfd(t)
			defer unix.Close(fd) // before the fd-leak check at cleanup
			// Always readable and never read: a level-triggered entry left
			// behind in epoll would wake its waiter again and again.
			writeEventfd(t, fd, 1)

			var guess atomic.Uint64 // the handle Add is about to return
			var guessed atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if g := poller.Handle(guess.Load()); g != 0 && p.Delete(g) == nil {
						guessed.Add(1)
					}
				}
			}()
			defer func() { close(stop); wg.Wait() }()

			var iterations, mine int
			for deadline := time.Now().Add(forgedBudget); time.Now().Before(deadline); iterations++ {
				var releases atomic.Int32
				released := make(chan poller.Released, 1)
				h, err := p.Add(poller.Registration{
					FD: fd, Events: poller.Readable, OnEvent: nop,
					OnRelease: func(r poller.Released) {
						if releases.Add(1) == 1 {
							released <- r
						}
					},
				})
				if err != nil {
					t.Fatalf("iteration %d: re-adding fd %d after its release: %v (the previous registration is stranded in epoll)", iterations, fd, err)
				}
				switch err := p.Delete(h); {
				case err == nil:
					mine++
				case errors.Is(err, poller.ErrStale):
					// The guesser deleted it; it must still be released.
				default:
					t.Fatalf("iteration %d: Delete(%v) = %v", iterations, h, err)
				}
				if r := wait(t, released, "OnRelease"); r.Handle != h {
					t.Fatalf("iteration %d: released %v, want %v", iterations, r.Handle, h)
				}
				barrier(t, p)
				if n := releases.Load(); n != 1 {
					t.Fatalf("iteration %d: OnRelease of %v ran %d times, want exactly 1", iterations, h, n)
				}
				guess.Store(uint64(h.Gen()+1)<<32 | uint64(h.Slot()))
			}
			t.Logf("%d registrations: %d deleted by their owner, %d by the guesser", iterations, mine, guessed.Load())
			if int64(mine)+guessed.Load() != int64(iterations) {
				t.Errorf("%d owner deletes + %d guessed deletes, want %d in all", mine, guessed.Load(), iterations)
			}

			// Nothing is registered now: once the last batch is counted
			// (waiters publish their counters after each batch), no
			// event may arrive at all.
			time.Sleep(quiet)
			// Between Delete's claim of the slot and its EPOLL_CTL_DEL
			// a waiter may take the always-readable fd's event more than
			// once (it yields only every few busy batches): a few per
			// waiter per Delete, bounded; the check below is the one for
			// an fd left in epoll.
			st := p.Stats()
			if limit := uint64(4*iterations*waiters + 16); st.Stale > limit {
				t.Errorf("%d stale events in %d registrations, want at most %d (a few per waiter per Delete)", st.Stale, iterations, limit)
			}
			time.Sleep(2 * quiet)
			if later := p.Stats().Stale; later != st.Stale {
				t.Errorf("stale events go on with nothing registered: %d -> %d; an fd is stranded in epoll", st.Stale, later)
			}
		})
	}
}

// ownFDs returns the fds New opened: epoll sets and eventfds.
func ownFDs(t *testing.T, opts poller.Options) (p *poller.Poller, epolls, eventfds []int) {
	t.Helper()
	// Let the runtime's own poller open its fds first, so that what New
	// opens is the only difference.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	before := fdTable(t)
	p = newPoller(t, opts)
	for fd, target := range fdTable(t) {
		if before[fd] == target {
			continue
		}
		switch target {
		case "anon_inode:[eventpoll]":
			epolls = append(epolls, fd)
		case "anon_inode:[eventfd]":
			eventfds = append(eventfds, fd)
		}
	}
	return p, epolls, eventfds
}

// TestAddRefusesOwnFDs hands Add each fd the poller opened: every waiter's
// epoll set, the wake-up eventfd, each timer mailbox's eventfd and the
// hand-off eventfd. Add must
// refuse each with ErrInvalid saying why, leave it open (CloseFD or not),
// and the poller must go on working on every waiter.
func TestAddRefusesOwnFDs(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.String(), func(t *testing.T) {
			const waiters = 3
			// A long Overrun: the round trips below ask for delivery on
			// each waiter, and under a loaded machine's scheduling delays
			// Stealing would rightly hand a late waiter's set to a stand-in
			// (CI saw "event on waiter 3, want waiter 1").
			p, epolls, eventfds := ownFDs(t, poller.Options{Waiters: waiters, Topology: topo, Overrun: time.Second})
			sets, handoff := 1, 1
			switch topo {
			case poller.PerWaiter:
				sets, handoff = waiters, 0
			case poller.Stealing:
				sets = waiters
			}
			if len(epolls) != sets+waiters || len(eventfds) != 1+sets+handoff {
				t.Fatalf("New opened %d epoll fds and %d eventfds, want %d (the sets, and a parker per waiter) and %d (wake-up, a mailbox per set, and the shared set's hand-off)", len(epolls), len(eventfds), sets+waiters, 1+sets+handoff)
			}
			for _, fd := range append(epolls, eventfds...) {
				for _, closeFD := range []bool{true, false} {
					_, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: closeFD, OnEvent: nop})
					if err == nil {
						t.Fatalf("Add(fd %d, the poller's own, CloseFD %v) succeeded", fd, closeFD)
					}
					if !errors.Is(err, poller.ErrInvalid) || !strings.Contains(err.Error(), "own") {
						t.Errorf("Add(fd %d, the poller's own, CloseFD %v) = %v, want ErrInvalid saying it is the poller's own", fd, closeFD, err)
					}
				}
			}
			barrier(t, p)
			for _, fd := range append(epolls, eventfds...) {
				if err := isOpen(fd); err != nil {
					t.Errorf("the poller's own fd %d after a refused Add: %v, want open", fd, err)
				}
			}
			for i := range waiters {
				if topo != poller.Shared {
					roundTripOn(t, p, i) // each waiter's own epoll set still works
				} else {
					roundTrip(t, p) // the one shared set still works
				}
			}
			if st := p.Stats(); st.Panics != 0 || st.Added != uint64(waiters) {
				t.Errorf("after the refused Adds: Added %d Panics %d, want %d and 0", st.Added, st.Panics, waiters)
			}
		})
	}
}

// recordHandler is a slog.Handler that keeps the records it is given.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *recordHandler) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

// TestClosedEarlyWithDuplicate closes a registered fd the poller does not
// own before Delete, while a duplicate of it is still open: the kernel keeps
// the epoll entry (it belongs to the open file, not the number), and
// EPOLL_CTL_DEL can no longer name it. Delete must still succeed and
// OnRelease run once; the poller counts each case in Stats.ClosedEarly and
// logs a warning saying what to do, once per poller. An fd closed early
// with no duplicate is harmless (its entry went away with the file) and is
// not counted.
func TestClosedEarlyWithDuplicate(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		var logs recordHandler
		opts.Logger = slog.New(&logs)
		p := newPoller(t, opts)
		closeEarly := func(withDup bool) {
			t.Helper()
			fd := newEventfd(t)
			writeEventfd(t, fd, 1) // readable, never read: level-triggered events keep coming
			dup := -1
			if withDup {
				var err error
				if dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
					t.Fatal(err)
				}
				defer unix.Close(dup)
			}
			var releases atomic.Int32
			released := make(chan poller.Released, 1)
			h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: nop,
				OnRelease: func(r poller.Released) {
					if releases.Add(1) == 1 {
						released <- r
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(fd) // against the rules: before OnRelease
			if err := p.Delete(h); err != nil {
				t.Fatalf("Delete after the fd was closed (duplicate open: %v) = %v, want nil", withDup, err)
			}
			if r := wait(t, released, "OnRelease of an fd closed early"); r.Handle != h || r.Reason != poller.Deleted {
				t.Errorf("released %+v, want %v deleted", basicRelease(r), h)
			}
			barrier(t, p)
			if n := releases.Load(); n != 1 {
				t.Errorf("OnRelease ran %d times, want 1", n)
			}
		}
		warnings := func() (n int, msg string) {
			for _, r := range logs.records() {
				n++
				if r.Level != slog.LevelWarn {
					t.Errorf("log record at level %v: %q, want only warnings", r.Level, r.Message)
				}
				msg = r.Message
			}
			return n, msg
		}

		closeEarly(true)
		if n := p.Stats().ClosedEarly; n != 1 {
			t.Errorf("Stats.ClosedEarly = %d after an fd closed early with a duplicate open, want 1", n)
		}
		n, msg := warnings()
		if n != 1 || !strings.Contains(msg, "Delete") || !strings.Contains(msg, "OnRelease") {
			t.Errorf("%d log records (last %q), want one warning saying the fd was closed before Delete and to close only in or after OnRelease", n, msg)
		}

		closeEarly(true)
		if n := p.Stats().ClosedEarly; n != 2 {
			t.Errorf("Stats.ClosedEarly = %d after a second such fd, want 2", n)
		}
		if n, _ := warnings(); n != 1 {
			t.Errorf("%d log records after a second such fd, want still 1 (reported once)", n)
		}

		closeEarly(false)
		if n := p.Stats().ClosedEarly; n != 2 {
			t.Errorf("Stats.ClosedEarly = %d after an fd closed early with no duplicate, want still 2 (its epoll entry went with the file)", n)
		}
		if n, _ := warnings(); n != 1 {
			t.Errorf("%d log records after an fd closed early with no duplicate, want still 1", n)
		}
		// With every duplicate closed, the entries are gone: once the
		// last batch is counted, no more stale events.
		time.Sleep(quiet)
		st := p.Stats().Stale
		time.Sleep(2 * quiet)
		if later := p.Stats().Stale; later != st {
			t.Errorf("stale events go on after every duplicate closed: %d -> %d", st, later)
		}
		roundTrip(t, p)
	})
}

// TestClosedEarlyDuplicateDoesNotSpin closes a registered socket the poller
// does not own before Delete, with a duplicate still open and the socket
// readable. The epoll entry outlives EPOLL_CTL_DEL, which can no longer
// name it; level-triggered, it would report the duplicate's readiness to
// its waiter on every epoll_wait for as long as the duplicate lives (about
// 100,000 wake-ups in the window below, one core burnt). After OnRelease
// the waiters must be idle again, the other registration of that waiter
// must go on exchanging data, no epoll fd may be left behind, and the case
// is still counted in Stats.ClosedEarly.
func TestClosedEarlyDuplicateDoesNotSpin(t *testing.T) {
	const window = 100 * time.Millisecond
	forEachConfigN(t, 2, func(t *testing.T, opts poller.Options) {
		var logs recordHandler
		opts.Logger = slog.New(&logs)
		p := newPoller(t, opts)
		epolls := epollFDs(t)

		// An echo registration on the same waiter as the culprit.
		echo, echoPeer := newSocketpair(t)
		defer unix.Close(echoPeer)
		if _, err := p.Add(poller.Registration{FD: echo, Events: poller.Readable, CloseFD: true, Waiter: poller.OnWaiter(0),
			OnEvent: func(e poller.Event) {
				data, _ := readAll(e.FD)
				unix.Write(e.FD, data)
			}}); err != nil {
			unix.Close(echo)
			t.Fatal(err)
		}
		echoRoundTrip(t, echoPeer, "before")

		h := closeEarlyAndDelete(t, p)

		before := p.Stats().Wakeups
		time.Sleep(window)
		woken := p.Stats().Wakeups - before
		limit := uint64(100)
		if opts.WaitTimeout > 0 {
			// Each waiter wakes once per timeout anyway.
			limit += uint64(2 * window / opts.WaitTimeout)
		}
		t.Logf("%d wake-ups in %v after the release", woken, window)
		if woken >= limit {
			t.Errorf("%d wake-ups in %v after the release of an fd closed early, want < %d: its epoll entry still reports the duplicate's readiness", woken, window, limit)
		}
		if n := p.Stats().ClosedEarly; n != 1 {
			t.Errorf("Stats.ClosedEarly = %d, want 1", n)
		}
		if opts.Topology == poller.PerWaiter {
			if fd, ok := entryOf(t, h); ok {
				t.Errorf("epoll fd %d still lists the entry of %v after its release", fd, h)
			}
		}
		echoRoundTrip(t, echoPeer, "after")
		// An extra waiter started meanwhile keeps its parker, one epoll fd,
		// until Close.
		if now, grown := epollFDs(t), int(p.Stats().Grown); now < epolls || now > epolls+grown {
			t.Errorf("%d epoll fds open, want %d as before (and at most one more for each of %d extra waiters started)", now, epolls, grown)
		}
		if n := len(logs.records()); n != 1 {
			t.Errorf("%d log records, want the one warning about the fd closed early", n)
		}
	})
}

// TestRenewedSetSkipsReusedNumber closes a live registration's socket, with
// a duplicate open, and puts another socket under its number, then makes
// its waiter renew its epoll set (another fd closed early). The renewal
// must not re-add the number, which now names a socket nobody registered:
// that socket's data must never reach the old registration's OnEvent. The
// old entry goes with the old set, and the registration closed early is
// counted once.
func TestRenewedSetSkipsReusedNumber(t *testing.T) {
	var logs recordHandler
	p := newPoller(t, poller.Options{Waiters: 1, Topology: poller.PerWaiter, Logger: slog.New(&logs)})
	fd, peer := newSocketpair(t)
	defer unix.Close(peer)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	var calls atomic.Int64
	released := make(chan poller.Released, 1)
	h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, OnEvent: func(poller.Event) { calls.Add(1) },
		OnRelease: func(r poller.Released) { released <- r }})
	if err != nil {
		t.Fatal(err)
	}
	// Another socket under the registered number, as the next accept would
	// get it.
	other, otherPeer := newSocketpair(t)
	defer unix.Close(otherPeer)
	if err := unix.Dup3(other, fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(other)
	defer unix.Close(fd)

	closeEarlyAndDelete(t, p)
	// The release may complete before the renewal, which then follows at
	// the waiter's next turn of its loop.
	eventually(t, "Stats.ClosedEarly = 2: the deleted fd, and the live one whose number names another file", func() bool {
		return p.Stats().ClosedEarly == 2
	})
	before := calls.Load()
	if _, err := unix.Write(otherPeer, []byte("not yours")); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(peer, []byte("stale")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quiet)
	if n := calls.Load() - before; n != 0 {
		t.Errorf("OnEvent ran %d times after the renewal, for a socket that took the number of its closed fd, or for the closed fd's duplicate", n)
	}
	if _, ok := entryOf(t, h); ok {
		t.Errorf("an epoll set still lists %v after the renewal", h)
	}
	if err := p.Delete(h); err != nil {
		t.Fatalf("Delete of the registration dropped by the renewal: %v", err)
	}
	wait(t, released, "OnRelease")
	if n := p.Stats().ClosedEarly; n != 2 {
		t.Errorf("Stats.ClosedEarly = %d after its Delete, want still 2 (counted once)", n)
	}
	roundTripOn(t, p, 0)
}

// closeEarlyAndDelete registers a readable socket on waiter 0, closes it
// while a duplicate stays open, deletes it and waits for its release: its
// epoll entry outlives the Delete, which makes a PerWaiter waiter renew
// its set. It returns the registration's handle.
func closeEarlyAndDelete(t *testing.T, p *poller.Poller) poller.Handle {
	t.Helper()
	fd, peer := newSocketpair(t)
	defer unix.Close(peer)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	released := make(chan poller.Released, 1)
	h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, Waiter: poller.OnWaiter(0), OnEvent: nop,
		OnRelease: func(r poller.Released) { released <- r }})
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if _, err := unix.Write(peer, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(h); err != nil {
		t.Fatalf("Delete after the fd was closed: %v", err)
	}
	wait(t, released, "OnRelease of an fd closed early")
	return h
}

// TestRenewWhileChurning renews one waiter's epoll set over and over while
// another goroutine adds, modifies and deletes registrations on that waiter:
// every registration must get the events it is owed, in whichever set it
// lands, and be released once; every fd closed early is counted once; and
// afterwards the waiter is idle.
func TestRenewWhileChurning(t *testing.T) {
	const renewals = 300
	var logs recordHandler
	p := newPoller(t, poller.Options{Waiters: 2, Topology: poller.PerWaiter, Logger: slog.New(&logs)})
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := churnOnce(p); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	for range renewals {
		closeEarlyAndDelete(t, p)
	}
	close(stop)
	n := <-churned
	t.Logf("%d registrations churned during %d renewals", n, renewals)
	if st := p.Stats(); st.ClosedEarly != renewals {
		t.Errorf("Stats.ClosedEarly = %d, want %d", st.ClosedEarly, renewals)
	}
	if n < renewals/10 { // each churn is six round trips through the waiter
		t.Errorf("only %d registrations churned during %d renewals", n, renewals)
	}
	before := p.Stats().Wakeups
	time.Sleep(quiet)
	if woken := p.Stats().Wakeups - before; woken > 10 {
		t.Errorf("%d wake-ups in %v with nothing registered", woken, quiet)
	}
	roundTripOn(t, p, 0)
	roundTripOn(t, p, 1)
}

// churnOnce adds an eventfd to waiter 0, waits for its event, modifies it
// and waits for the modified event, then deletes it and waits for its
// release.
func churnOnce(p *poller.Poller) error {
	fd, err := unix.Eventfd(1, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	got := make(chan poller.Events, 64)
	released := make(chan struct{})
	h, err := p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, Waiter: poller.OnWaiter(0),
		OnEvent: func(e poller.Event) {
			readEventfd(e.FD)
			select {
			case got <- e.Events:
			default:
			}
		},
		OnRelease: func(poller.Released) { close(released) }})
	if errors.Is(err, poller.ErrInvalid) {
		// The number is still registered to an fd closed early, which
		// its Delete is about to forget.
		unix.Close(fd)
		return nil
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("Add: %w", err)
	}
	await := func(want poller.Events, what string) error {
		for deadline := time.After(timeout); ; {
			select {
			case e := <-got:
				if e&want != 0 {
					return nil
				}
			case <-deadline:
				return fmt.Errorf("%s of churned registration %v: not within %v", what, h, timeout)
			}
		}
	}
	if err := await(poller.Readable, "Readable"); err != nil {
		return err
	}
	// An eventfd is always writable.
	if err := p.Modify(h, poller.Writable); err != nil {
		return fmt.Errorf("Modify: %w", err)
	}
	if err := await(poller.Writable, "Writable after Modify"); err != nil {
		return err
	}
	if err := p.Delete(h); err != nil {
		return fmt.Errorf("Delete: %w", err)
	}
	select {
	case <-released:
	case <-time.After(timeout):
		return fmt.Errorf("release of churned registration %v: not within %v", h, timeout)
	}
	return nil
}

// echoRoundTrip writes a message to peer, whose other end echoes what it
// reads, and checks that it comes back whole.
func echoRoundTrip(t *testing.T, peer int, when string) {
	t.Helper()
	msg := bytes.Repeat([]byte(when+" "), 1024)
	if n, err := unix.Write(peer, msg); n != len(msg) {
		t.Fatalf("%s: write %d of %d bytes: %v", when, n, len(msg), err)
	}
	var got []byte
	eventually(t, when+": echo", func() bool {
		data, _ := readAll(peer)
		got = append(got, data...)
		return len(got) >= len(msg)
	})
	if !bytes.Equal(got, msg) {
		t.Errorf("%s: echoed %d bytes that differ from the %d written", when, len(got), len(msg))
	}
}

// epollFDs counts the process's open epoll fds.
func epollFDs(t *testing.T) int {
	t.Helper()
	n := 0
	for _, target := range fdTable(t) {
		if target == "anon_inode:[eventpoll]" {
			n++
		}
	}
	return n
}

// entryOf returns an open epoll fd whose /proc/self/fdinfo lists an entry
// carrying handle h.
func entryOf(t *testing.T, h poller.Handle) (int, bool) {
	t.Helper()
	want := "data: " + strconv.FormatUint(uint64(h), 16) + " "
	for fd, target := range fdTable(t) {
		if target != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(info)) {
			if strings.Contains(strings.Join(strings.Fields(line), " ")+" ", want) {
				return fd, true
			}
		}
	}
	return 0, false
}

// TestFailedAddLeavesFDOpen makes Add with CloseFD fail, in its argument
// checks and in EPOLL_CTL_ADD: the fd stays the caller's, open with its
// descriptor flags untouched, no OnRelease runs, nothing is counted, and
// the slot and the fd number are free for the next Add.
func TestFailedAddLeavesFDOpen(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.String(), func(t *testing.T) {
			p := newPoller(t, poller.Options{Waiters: 2, Topology: topo})
			regular, err := unix.Open(filepath.Join(t.TempDir(), "regular"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(regular)
			efd := newEventfd(t)
			for _, c := range []struct {
				name   string
				fd     int
				events poller.Events
				errno  error
			}{
				{"regular file", regular, poller.Readable, unix.EPERM},
				{"unknown event bit", efd, poller.Readable | 1<<20, nil},
				{"EPOLLONESHOT asked for", efd, poller.Readable | 1<<30, nil},
			} {
				_, err := p.Add(poller.Registration{FD: c.fd, Events: c.events, CloseFD: true, OnEvent: nop,
					OnRelease: func(poller.Released) { t.Errorf("%s: OnRelease of a failed Add", c.name) }})
				if !errors.Is(err, poller.ErrInvalid) || (c.errno != nil && !errors.Is(err, c.errno)) {
					t.Errorf("%s: Add = %v, want ErrInvalid (errno %v)", c.name, err, c.errno)
				}
				flags, err := unix.FcntlInt(uintptr(c.fd), unix.F_GETFD, 0)
				if err != nil {
					t.Fatalf("%s: fd %d after the failed Add with CloseFD: %v, want open (still the caller's)", c.name, c.fd, err)
				}
				if flags&unix.FD_CLOEXEC == 0 {
					t.Errorf("%s: fd %d lost FD_CLOEXEC in the failed Add", c.name, c.fd)
				}
			}
			barrier(t, p)
			if st := p.Stats(); st.Added != 0 || st.Deleted != 0 || st.Releases != 0 {
				t.Errorf("after failed Adds: Added %d Deleted %d Releases %d, want 0", st.Added, st.Deleted, st.Releases)
			}
			// A fresh poller hands out slot 0 first: the failed EPOLL_CTL_ADD
			// must have given it back, generation unchanged.
			got := make(chan uint64, 1)
			h, err := p.Add(poller.Registration{FD: efd, Events: poller.Readable, CloseFD: true,
				OnEvent: func(e poller.Event) { got <- readEventfd(e.FD) }})
			if err != nil {
				t.Fatalf("Add of the fd a failed Add refused: %v", err)
			}
			if h.Slot() != 0 || h.Gen() != 1 {
				t.Errorf("first successful Add got handle %v, want 0/1: the failed Add kept its slot", h)
			}
			writeEventfd(t, efd, 3)
			if v := wait(t, got, "event"); v != 3 {
				t.Errorf("read %d, want 3", v)
			}
			if err := p.Delete(h); err != nil {
				t.Fatal(err)
			}
			barrier(t, p)
			if err := isOpen(efd); err != unix.EBADF {
				t.Errorf("owned fd after its release: %v, want EBADF", err)
			}
		})
	}
}
