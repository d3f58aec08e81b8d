//go:build linux

package poller_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// serialState is one registration's handler state in TestSerialisation.
// runs and total are plain fields: two unordered OnEvent runs would be a
// data race the race detector reports.
type serialState struct {
	inside  atomic.Int32
	overlap atomic.Int32
	calls   atomic.Int64
	seen    atomic.Uint64 // mirror of total, for the test goroutine

	runs  int
	total uint64

	final chan [2]uint64 // runs and total, read in OnRelease
}

func (s *serialState) onEvent(read func() uint64) func(poller.Event) {
	return func(poller.Event) {
		if s.inside.Add(1) != 1 {
			s.overlap.Add(1)
		}
		s.runs++
		n := read()
		s.total += n
		s.seen.Add(n)
		s.calls.Add(1)
		s.inside.Add(-1)
	}
}

func (s *serialState) onRelease(poller.Released) {
	// OnRelease happens after every OnEvent: plain reads are ordered.
	s.final <- [2]uint64{uint64(s.runs), s.total}
}

// TestSerialisation keeps two registrations busy from 4 writer goroutines
// each, with 4 waiters, and checks that OnEvent never runs concurrently with
// itself and that its runs are ordered (plain fields, checked by -race).
func TestSerialisation(t *testing.T) {
	forEachConfigN(t, 4, func(t *testing.T, opts poller.Options) {
		for _, trig := range triggers {
			t.Run(trig.name, func(t *testing.T) { testSerialisation(t, opts, trig.bits) })
		}
	})
}

func testSerialisation(t *testing.T, opts poller.Options, trig poller.Events) {
	const (
		writers   = 4
		perWriter = 400
		chunk     = 32
	)
	checkFDLeak(t)
	p, err := poller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p != nil {
			closeWithin(t, p)
		}
	}()
	et := trig&poller.EdgeTriggered != 0

	efd := newEventfd(t)
	ev := &serialState{final: make(chan [2]uint64, 1)}
	readEv := func() uint64 { return readEventfd(efd) }
	if _, err := p.Add(poller.Registration{FD: efd, Events: poller.Readable | trig, CloseFD: true,
		OnEvent: ev.onEvent(readEv), OnRelease: ev.onRelease}); err != nil {
		t.Fatal(err)
	}

	sa, sb := newSocketpair(t)
	defer unix.Close(sb)
	so := &serialState{final: make(chan [2]uint64, 1)}
	readSo := func() uint64 {
		if et {
			b, _ := readAll(sa)
			return uint64(len(b))
		}
		var buf [256]byte // small: level-triggered runs come back for more
		n, _ := unix.Read(sa, buf[:])
		return uint64(max(n, 0))
	}
	hs, err := p.Add(poller.Registration{FD: sa, Events: poller.Readable | trig, CloseFD: true,
		OnEvent: so.onEvent(readSo), OnRelease: so.onRelease})
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			var one [8]byte
			putU64(one[:], 1)
			for range perWriter {
				if _, err := unix.Write(efd, one[:]); err != nil {
					t.Errorf("write eventfd: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			buf := make([]byte, chunk)
			deadline := time.Now().Add(timeout)
			for i := 0; i < perWriter; {
				n, err := unix.Write(sb, buf)
				if err == unix.EAGAIN {
					if time.Now().After(deadline) {
						t.Errorf("socket writer: buffer full for %v, the handler does not drain it", timeout)
						return
					}
					time.Sleep(50 * time.Microsecond)
					continue
				}
				if err != nil || n != chunk {
					t.Errorf("write socket: %d, %v", n, err)
					return
				}
				i++
			}
		})
	}
	wg.Wait()
	const wantEv, wantSo = writers * perWriter, writers * perWriter * chunk
	eventually(t, "every write read", func() bool {
		return ev.seen.Load() == wantEv && so.seen.Load() == wantSo
	})
	if err := p.Delete(hs); err != nil {
		t.Fatal(err)
	}
	soFinal := wait(t, so.final, "socket OnRelease")
	// The eventfd registration is live at Close, which releases it.
	if err := closeWithin(t, p); err != nil {
		t.Fatal(err)
	}
	evFinal := wait(t, ev.final, "eventfd OnRelease")
	st := p.Stats()
	p = nil

	for _, c := range []struct {
		name  string
		s     *serialState
		final [2]uint64
		want  uint64
	}{{"eventfd", ev, evFinal, wantEv}, {"socketpair", so, soFinal, wantSo}} {
		if n := c.s.overlap.Load(); n != 0 {
			t.Errorf("%s: OnEvent ran concurrently with itself %d times", c.name, n)
		}
		if c.final[1] != c.want {
			t.Errorf("%s: handler read %d in total, want %d", c.name, c.final[1], c.want)
		}
		if calls := uint64(c.s.calls.Load()); c.final[0] != calls {
			t.Errorf("%s: plain run counter %d, atomic %d: runs were lost or unordered", c.name, c.final[0], calls)
		}
		t.Logf("%s: %d OnEvent runs", c.name, c.final[0])
	}
	if calls := uint64(ev.calls.Load() + so.calls.Load()); st.Events != calls {
		t.Errorf("Stats.Events = %d, but OnEvent ran %d times", st.Events, calls)
	}
}

// crossReg is one registration in TestNoCrossDelivery.
type crossReg struct {
	fd, wr   int
	h        atomic.Uint64
	released atomic.Bool
	inside   atomic.Int32
}

type violations struct {
	n     atomic.Int32
	once  sync.Once
	first string
}

func (v *violations) add(format string, a ...any) {
	v.n.Add(1)
	v.once.Do(func() { v.first = fmt.Sprintf(format, a...) })
}

// TestNoCrossDelivery deletes registrations with events in flight, closes
// their fds and registers new fds that reuse the numbers (and, once
// released, the slots), thousands of times; every event must reach the
// registration it was reported for.
func TestNoCrossDelivery(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		for _, kind := range fdKinds[:2] { // eventfd, pipe
			for _, trig := range triggers {
				t.Run(kind.name+"/"+trig.name, func(t *testing.T) {
					testNoCrossDelivery(t, opts, kind, trig.bits)
				})
			}
		}
	})
}

func testNoCrossDelivery(t *testing.T, opts poller.Options, kind fdKind, trig poller.Events) {
	const (
		ring   = 3
		cycles = 500
	)
	p := newPoller(t, opts)
	var (
		bad                  violations
		releases             atomic.Int32
		created              int
		fdReuse, slotReuse   int
		sameSlotAndFD        int
		isEventfd            = kind.name == "eventfd"
		one                  [8]byte
		wantReleaseOfHandles sync.Map
	)
	putU64(one[:], 1)
	poke := func(r *crossReg) {
		if _, err := unix.Write(r.wr, one[:]); err != nil {
			t.Errorf("write fd %d: %v", r.wr, err)
		}
	}
	add := func() *crossReg {
		r := &crossReg{}
		r.fd, r.wr = kind.make(t)
		h, err := p.Add(poller.Registration{
			FD: r.fd, Events: poller.Readable | trig,
			OnEvent: func(e poller.Event) {
				r.inside.Add(1)
				defer r.inside.Add(-1)
				if r.released.Load() {
					bad.add("event %+v after OnRelease", e)
				}
				if mine := poller.Handle(r.h.Load()); e.Handle != mine || e.FD != r.fd {
					bad.add("event %+v delivered to registration %v fd %d", e, mine, r.fd)
				}
				if isEventfd {
					readEventfd(e.FD)
				} else {
					readAll(e.FD)
				}
			},
			OnRelease: func(rel poller.Released) {
				r.released.Store(true)
				if r.inside.Load() != 0 {
					bad.add("OnRelease of %v while its OnEvent runs", rel.Handle)
				}
				if mine := poller.Handle(r.h.Load()); rel.Handle != mine || rel.FD != r.fd {
					bad.add("release %+v for registration %v fd %d", rel, mine, r.fd)
				}
				if _, ok := wantReleaseOfHandles.LoadAndDelete(rel.Handle); !ok {
					bad.add("unexpected or second release of %v", rel.Handle)
				}
				releases.Add(1)
			},
		})
		if err != nil {
			t.Fatalf("Add fd %d: %v", r.fd, err)
		}
		wantReleaseOfHandles.Store(h, true)
		r.h.Store(uint64(h))
		created++
		poke(r) // only now: no event can precede the handle's store
		return r
	}
	regs := make([]*crossReg, ring)
	for i := range regs {
		regs[i] = add()
	}
	for c := range cycles {
		i := c % ring
		old := regs[i]
		poke(old) // an event in flight for the registration being deleted
		if err := p.Delete(poller.Handle(old.h.Load())); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if c%10 == 0 {
			// Let the release recycle the slot: the new registration
			// gets the same slot (the free list is LIFO) and the same
			// fd number, and only the generation tells them apart.
			barrier(t, p)
		}
		unix.Close(old.fd)
		if !isEventfd {
			unix.Close(old.wr)
		}
		regs[i] = add()
		if regs[i].fd == old.fd {
			fdReuse++
		}
		nh, oh := poller.Handle(regs[i].h.Load()), poller.Handle(old.h.Load())
		if nh.Gen() > 1 {
			slotReuse++
		}
		if nh.Slot() == oh.Slot() && regs[i].fd == old.fd {
			sameSlotAndFD++
		}
		if bad.n.Load() != 0 {
			break
		}
	}
	for _, r := range regs {
		if err := p.Delete(poller.Handle(r.h.Load())); err != nil {
			t.Errorf("final Delete: %v", err)
		}
	}
	barrier(t, p)
	for _, r := range regs {
		unix.Close(r.fd)
		if !isEventfd {
			unix.Close(r.wr)
		}
	}
	if n := bad.n.Load(); n != 0 {
		t.Fatalf("%d violations; first: %s", n, bad.first)
	}
	if n := int(releases.Load()); n != created {
		t.Errorf("%d releases for %d registrations", n, created)
	}
	t.Logf("%d registrations; fd number reused %d times, recycled slot %d times, both slot and fd number of the registration just deleted %d times",
		created, fdReuse, slotReuse, sameSlotAndFD)
	if fdReuse < cycles/2 || sameSlotAndFD < cycles/20 {
		t.Errorf("fd number reused in %d of %d cycles, slot and fd number in %d: the test does not exercise reuse", fdReuse, cycles, sameSlotAndFD)
	}
}

// TestOwnedFDNumberReuse has several goroutines register fresh fds with
// CloseFD and delete them, as an accept loop would: the poller closes the
// old fds on its own goroutines and the kernel hands their numbers to the
// next fds at once. Add of a fresh fd must never fail.
func TestOwnedFDNumberReuse(t *testing.T) {
	forEachConfig(t, func(t *testing.T, opts poller.Options) {
		const (
			goroutines = 3
			cycles     = 300
		)
		p := newPoller(t, opts)
		var releases atomic.Int64
		var failures violations
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range cycles {
					fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
					if err != nil {
						failures.add("eventfd: %v", err)
						return
					}
					h, err := p.Add(poller.Registration{
						FD: fd, Events: poller.Readable, CloseFD: true,
						OnEvent:   func(e poller.Event) { readEventfd(e.FD) },
						OnRelease: func(poller.Released) { releases.Add(1) },
					})
					if err != nil {
						failures.add("Add of fresh fd %d: %v", fd, err)
						unix.Close(fd)
						continue
					}
					var one [8]byte
					putU64(one[:], 1)
					unix.Write(fd, one[:])
					if err := p.Delete(h); err != nil {
						failures.add("Delete: %v", err)
					}
				}
			})
		}
		wg.Wait()
		barrier(t, p)
		if n := failures.n.Load(); n != 0 {
			t.Fatalf("%d failures; first: %s", n, failures.first)
		}
		if n := releases.Load(); n != goroutines*cycles {
			t.Errorf("%d releases, want %d", n, goroutines*cycles)
		}
	})
}
