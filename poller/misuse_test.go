//go:build linux

package poller_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
			st := p.Stats()
			if limit := uint64(iterations*waiters + 16); st.Stale > limit {
				t.Errorf("%d stale events in %d registrations, want at most %d (one per waiter per Delete)", st.Stale, iterations, limit)
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
// epoll set, the wake-up eventfd and each timer mailbox's eventfd. Add must
// refuse each with ErrInvalid saying why, leave it open (CloseFD or not),
// and the poller must go on working on every waiter.
func TestAddRefusesOwnFDs(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.String(), func(t *testing.T) {
			const waiters = 3
			p, epolls, eventfds := ownFDs(t, poller.Options{Waiters: waiters, Topology: topo})
			sets := 1
			if topo == poller.PerWaiter {
				sets = waiters
			}
			if len(epolls) != sets || len(eventfds) != 1+sets {
				t.Fatalf("New opened %d epoll fds and %d eventfds, want %d and %d (wake-up plus a mailbox per set)", len(epolls), len(eventfds), sets, 1+sets)
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
				if topo == poller.PerWaiter {
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
