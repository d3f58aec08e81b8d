//go:build linux

package poller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// FuzzPoller decodes a byte string into a sequence of operations on a real
// poller with real fds and checks each result against a model of which
// handles are live, deleted, held or released:
//
//	byte 0: configuration (bit 0 topology, bits 1-2 reclaimer, bits 3-4
//	        waiters - 1, bit 5 a 30 µs Overrun on a shared set, bit 6
//	        Stealing instead of bit 0's topology)
//	then:   an operation code (byte % opCount) and its argument bytes
//
// It checks Add, Modify, Delete, Hold, AfterFunc and Barrier results
// (ErrStale for anything not live, ErrInvalid for bad arguments, ErrClosed
// for everything after Close), that events and zero-delay timers reach
// only their own live registration, that after Barrier every registration
// deleted before it and not held has been released (and no live one has),
// that OnRelease runs exactly once, never while held, with the right
// reason, and that after Close every registration is released and the
// process has exactly the fds it had before. The seed corpus (f.Add and
// testdata/fuzz/FuzzPoller) runs as a normal test.

// Fuzz operations.
const (
	fzAddEventfd  = iota // flags: bit 0 CloseFD, bit 1 edge-triggered, bit 2 slow handler
	fzAddPipe            // flags as above
	fzWrite              // reg
	fzWriteWait          // reg: write, and wait for its OnEvent if live and interested
	fzModify             // reg, events choice
	fzDelete             // reg
	fzDeleteBogus        // choice: a handle never issued
	fzHold               // reg
	fzUnhold             // reg: release its oldest hold
	fzBarrier            //
	fzClose              //
	fzAfterFunc          // reg, mode: even runs at once (and is waited for), odd in an hour
	fzAddBad             // choice, reg: Add that must fail with ErrInvalid
	fzOpCount
)

func FuzzPoller(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0, fzAddEventfd, 1, fzWriteWait, 0, fzDelete, 0, fzBarrier, fzDelete, 0, fzClose, fzDelete, 0})
	f.Add([]byte{1, fzAddPipe, 2, fzAddEventfd, 0, fzWriteWait, 0, fzWriteWait, 1, fzModify, 0, 2, fzWrite, 0, fzDelete, 1, fzBarrier})
	f.Add([]byte{2, fzAddEventfd, 1, fzHold, 0, fzDelete, 0, fzBarrier, fzUnhold, 0, fzBarrier, fzHold, 0})
	f.Add([]byte{3, fzAddPipe, 1, fzAfterFunc, 0, 0, fzAfterFunc, 0, 1, fzDelete, 0, fzBarrier, fzAfterFunc, 0, 0})
	f.Add([]byte{5, fzAddEventfd, 0, fzAddPipe, 3, fzHold, 1, fzClose, fzAddEventfd, 0, fzBarrier, fzUnhold, 1})
	f.Add([]byte{8, fzDeleteBogus, 0, fzDeleteBogus, 1, fzAddEventfd, 1, fzDeleteBogus, 2, fzAddBad, 0, 0, fzAddBad, 1, 0, fzAddBad, 2, 0, fzAddBad, 3, 0, fzModify, 0, 4})
	f.Add([]byte{24, fzAddPipe, 0, fzAddPipe, 1, fzAddPipe, 2, fzAddPipe, 3, fzWriteWait, 0, fzWriteWait, 1, fzWriteWait, 2, fzWriteWait, 3, fzDelete, 2, fzAddEventfd, 1, fzWriteWait, 4, fzBarrier, fzAddEventfd, 3, fzWriteWait, 5})
	// A shared set with slow handlers: hand-offs and an extra waiter while
	// registrations are deleted, held and barriered.
	f.Add([]byte{32 | 8, fzAddEventfd, 4, fzAddEventfd, 5, fzAddPipe, 4, fzWrite, 0, fzWrite, 1, fzWrite, 2, fzDelete, 1, fzWriteWait, 0, fzHold, 2, fzDelete, 2, fzBarrier, fzWriteWait, 0, fzUnhold, 2, fzBarrier, fzClose})
	f.Add([]byte{32 | 4, fzAddEventfd, 6, fzAddEventfd, 4, fzAddEventfd, 4, fzWrite, 0, fzWrite, 1, fzWrite, 2, fzDelete, 0, fzDelete, 1, fzBarrier, fzWriteWait, 2, fzAfterFunc, 2, 0, fzBarrier})
	// The same on per-waiter sets with stealing (bit 6): stand-ins on a
	// blocked waiter's set, and entries disarmed where two waiters meet.
	f.Add([]byte{64 | 32 | 8, fzAddEventfd, 4, fzAddEventfd, 5, fzAddPipe, 4, fzWrite, 0, fzWrite, 1, fzWrite, 2, fzDelete, 1, fzWriteWait, 0, fzHold, 2, fzDelete, 2, fzBarrier, fzWriteWait, 0, fzUnhold, 2, fzBarrier, fzClose})
	f.Add([]byte{64 | 32 | 2, fzAddEventfd, 4, fzAddPipe, 4, fzAddEventfd, 6, fzWrite, 0, fzWrite, 1, fzModify, 0, 1, fzWrite, 2, fzDelete, 0, fzWriteWait, 1, fzAfterFunc, 2, 0, fzBarrier, fzDelete, 1})
	f.Fuzz(func(t *testing.T, data []byte) { fuzzPoller(t, data) })
}

// freg is the model of one registration.
type freg struct {
	h       poller.Handle
	hv      atomic.Uint64 // h, for the callbacks: no event precedes its store
	rd, wr  int           // wr: pipe write end, or -1
	closeFD bool
	slow    bool          // OnEvent sleeps past a short Overrun
	events  poller.Events // interest set, as the model knows it
	live    bool          // added and not deleted
	deleted bool          // Delete returned nil

	holds   []func() // outstanding holds, oldest first
	nHolds  atomic.Int32
	seen    atomic.Int64 // OnEvent calls
	timers  atomic.Int64 // timer calls
	inside  atomic.Int32
	poison  atomic.Bool
	rels    atomic.Int32
	reason  atomic.Int32 // release reason + 1
	closeFn func()       // closes the test's fds once released
}

type fuzzer struct {
	t      *testing.T
	p      *poller.Poller
	regs   []*freg
	closed bool
	bad    vlog
}

func fuzzPoller(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	cfg := data[0]
	data = data[1:]
	topo := topologies[cfg&1]
	if cfg&(1<<6) != 0 {
		topo = poller.Stealing
	}
	opts := optsFor(topo, reclaimers[int(cfg>>1&3)%len(reclaimers)], 1+int(cfg>>3&3))
	if cfg&(1<<5) != 0 && opts.Topology != poller.PerWaiter {
		// Slow handlers (flag bit 2) overrun this at once: their batches
		// are handed off and waiters grow while the model is checked.
		opts.Overrun, opts.MaxWaiters = 30*time.Microsecond, opts.Waiters+3
	}
	fz := &fuzzer{t: t}
	opts.OnPanic = func(h poller.Handle, v any, stack []byte) {
		fz.bad.Add("panic in a callback of %v: %v\n%s", h, v, firstLines(stack, 6))
	}
	checkFDLeak(t) // after Close and the cleanup below, the fds are back
	p, err := poller.New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	fz.p = p
	defer fz.finish()
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for ops := 0; len(data) > 0 && ops < 128 && !t.Failed(); ops++ {
		fz.step(next(), next)
	}
}

// pick returns the registration an argument byte names, or nil.
func (fz *fuzzer) pick(b byte) *freg {
	if len(fz.regs) == 0 {
		return nil
	}
	return fz.regs[int(b)%len(fz.regs)]
}

// want checks err against the model's expectation: nil when ok, else
// ErrClosed after Close, else ErrStale.
func (fz *fuzzer) want(op string, err error, ok bool) {
	fz.t.Helper()
	var want error
	switch {
	case fz.closed:
		want = poller.ErrClosed
	case !ok:
		want = poller.ErrStale
	}
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		fz.t.Fatalf("%s = %v, want %v", op, err, want)
	}
}

func (fz *fuzzer) step(op byte, next func() byte) {
	t := fz.t
	t.Helper()
	switch op % fzOpCount {
	case fzAddEventfd, fzAddPipe:
		if len(fz.regs) >= 32 {
			return
		}
		flags := next()
		r := &freg{wr: -1, closeFD: flags&1 != 0, events: poller.Readable, slow: flags&4 != 0}
		if flags&2 != 0 {
			r.events |= poller.EdgeTriggered
		}
		if op%fzOpCount == fzAddEventfd {
			r.rd = newEventfd(t)
		} else {
			r.rd, r.wr = newPipe(t)
		}
		h, err := fz.p.Add(poller.Registration{
			FD: r.rd, Events: r.events, CloseFD: r.closeFD,
			OnEvent:   fz.onEvent(r),
			OnRelease: fz.onRelease(r),
		})
		if fz.closed {
			if !errors.Is(err, poller.ErrClosed) {
				t.Fatalf("Add after Close = %v, want ErrClosed", err)
			}
			unix.Close(r.rd)
			if r.wr >= 0 {
				unix.Close(r.wr)
			}
			return
		}
		if err != nil {
			t.Fatalf("Add fd %d: %v", r.rd, err)
		}
		r.h, r.live = h, true
		r.hv.Store(uint64(h))
		r.closeFn = func() {
			if !r.closeFD {
				unix.Close(r.rd)
			}
			if r.wr >= 0 {
				unix.Close(r.wr)
			}
		}
		fz.regs = append(fz.regs, r)

	case fzWrite, fzWriteWait:
		r := fz.pick(next())
		if r == nil || !r.live { // only a live registration's fd is surely open
			return
		}
		before := r.seen.Load()
		fz.poke(r)
		if op%fzOpCount == fzWriteWait && !fz.closed && r.events&poller.Readable != 0 {
			fz.eventually("OnEvent after a write", func() bool { return r.seen.Load() > before })
		}

	case fzModify:
		r := fz.pick(next())
		c := next()
		if r == nil {
			return
		}
		ev := []poller.Events{poller.Readable, poller.Readable | poller.EdgeTriggered, 0, poller.Readable | poller.ReadHangUp, 1 << 20}[int(c)%5]
		err := fz.p.Modify(r.h, ev)
		if ev == 1<<20 {
			if !errors.Is(err, poller.ErrInvalid) && !(fz.closed && errors.Is(err, poller.ErrClosed)) {
				t.Fatalf("Modify with unknown bits = %v, want ErrInvalid", err)
			}
			return
		}
		fz.want("Modify", err, r.live)
		if err == nil {
			r.events = ev
		}

	case fzDelete:
		r := fz.pick(next())
		if r == nil {
			return
		}
		err := fz.p.Delete(r.h)
		fz.want("Delete", err, r.live)
		if err == nil {
			r.live, r.deleted = false, true
		}

	case fzDeleteBogus:
		var h poller.Handle
		switch c := next(); c % 4 {
		case 0: // the zero Handle
		case 1:
			h = poller.Handle(uint64(c)) // generation 0: never issued
		case 2:
			h = poller.Handle(1<<32 | 1<<31) // a slot never allocated
		case 3:
			if r := fz.pick(c); r != nil { // a generation not reached
				h = poller.Handle(uint64(r.h.Gen()+1000)<<32 | uint64(r.h.Slot()))
			}
		}
		fz.want("Delete of a handle never issued", fz.p.Delete(h), false)

	case fzHold:
		r := fz.pick(next())
		if r == nil {
			return
		}
		release, err := fz.p.Hold(r.h)
		fz.want("Hold", err, r.live)
		if err == nil {
			r.nHolds.Add(1)
			r.holds = append(r.holds, release)
		}

	case fzUnhold:
		r := fz.pick(next())
		if r == nil || len(r.holds) == 0 {
			return
		}
		release := r.holds[0]
		r.holds = r.holds[1:]
		r.nHolds.Add(-1)
		release()

	case fzBarrier:
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := fz.p.Barrier(ctx)
		cancel()
		fz.want("Barrier", err, true)
		if err != nil {
			return
		}
		for i, r := range fz.regs {
			n := r.rels.Load()
			switch {
			case r.live && n != 0:
				t.Fatalf("registration %d (%v), live, released %d times", i, r.h, n)
			case r.deleted && len(r.holds) == 0 && n != 1:
				t.Fatalf("registration %d (%v), deleted and not held, released %d times after Barrier, want once", i, r.h, n)
			case r.deleted && len(r.holds) > 0 && n != 0:
				t.Fatalf("registration %d (%v), deleted and held, released %d times, want none until the hold goes", i, r.h, n)
			}
		}

	case fzClose:
		if err := closeWithin(t, fz.p); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if fz.closed {
			return // idempotent; a hold dropped since releases asynchronously
		}
		fz.closed = true
		fz.checkClosed()
		for _, r := range fz.regs {
			r.live = false // released by Close: an owned fd is closed
		}

	case fzAfterFunc:
		r := fz.pick(next())
		mode := next()
		if r == nil {
			return
		}
		d := time.Duration(0)
		if mode&1 != 0 {
			d = time.Hour // never runs; must not delay the release
		}
		before := r.timers.Load()
		_, err := fz.p.AfterFunc(r.h, d, func() { fz.onTimer(r) })
		fz.want("AfterFunc", err, r.live)
		if err == nil && d == 0 {
			fz.eventually("zero-delay timer", func() bool { return r.timers.Load() > before })
		}

	case fzAddBad:
		c := next()
		r := fz.pick(next())
		reg := poller.Registration{FD: -1, Events: poller.Readable, OnEvent: func(poller.Event) {}}
		what := "a negative fd"
		switch c % 4 {
		case 1:
			if r == nil || !r.live {
				return
			}
			reg.FD, what = r.rd, "an fd registered already"
		case 2:
			reg.FD, reg.OnEvent, what = 0, nil, "a nil OnEvent"
		case 3:
			reg.FD, reg.Events, what = 0, 1<<20, "unknown event bits"
		}
		_, err := fz.p.Add(reg)
		if !errors.Is(err, poller.ErrInvalid) && !(fz.closed && errors.Is(err, poller.ErrClosed)) {
			t.Fatalf("Add of %s = %v, want ErrInvalid", what, err)
		}
	}
}

func (fz *fuzzer) poke(r *freg) {
	var b [8]byte
	putU64(b[:], 1)
	fd := r.rd
	if r.wr >= 0 {
		fd = r.wr
	}
	if _, err := unix.Write(fd, b[:]); err != nil && err != unix.EAGAIN {
		fz.t.Fatalf("write: %v", err)
	}
}

func (fz *fuzzer) eventually(what string, cond func() bool) {
	fz.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			fz.t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// checkClosed checks the model after Close: every registration released
// once, with the right reason, except those still held, which are
// released when their last hold goes.
func (fz *fuzzer) checkClosed() {
	t := fz.t
	t.Helper()
	for i, r := range fz.regs {
		n := r.rels.Load()
		if len(r.holds) > 0 {
			if n != 0 {
				t.Fatalf("registration %d (%v), held, released %d times at Close, want none until the hold goes", i, r.h, n)
			}
			continue
		}
		if n != 1 {
			t.Fatalf("registration %d (%v): released %d times by Close, want once", i, r.h, n)
		}
		want := poller.Closed
		if r.deleted {
			want = poller.Deleted
		}
		if got := poller.Reason(r.reason.Load() - 1); got != want {
			t.Fatalf("registration %d (%v): released as %v, want %v", i, r.h, got, want)
		}
	}
}

// finish closes the poller, drops every hold, waits for the releases,
// closes the test's fds and reports what the callbacks saw.
func (fz *fuzzer) finish() {
	t := fz.t
	if !fz.closed {
		if err := closeWithin(t, fz.p); err != nil {
			t.Errorf("Close: %v", err)
		}
		fz.closed = true
		if !t.Failed() {
			fz.checkClosed()
		}
	}
	for _, r := range fz.regs {
		for _, release := range r.holds {
			r.nHolds.Add(-1)
			release()
		}
		r.holds = nil
	}
	deadline := time.Now().Add(timeout)
	for _, r := range fz.regs {
		for r.rels.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if n := r.rels.Load(); n != 1 {
			t.Errorf("registration %v: released %d times in all, want once", r.h, n)
			continue
		}
		r.closeFn()
	}
	if n := fz.bad.Count(); n != 0 {
		t.Errorf("%d violations in callbacks; the first:\n%s", n, fz.bad.String())
	}
}

func (fz *fuzzer) onEvent(r *freg) func(poller.Event) {
	return func(e poller.Event) {
		if n := r.inside.Add(1); n != 1 {
			fz.bad.Add("%v: OnEvent while another callback of it runs", r.hv.Load())
		}
		defer r.inside.Add(-1)
		if r.poison.Load() {
			fz.bad.Add("%v: OnEvent after OnRelease started", r.hv.Load())
		}
		if h := poller.Handle(r.hv.Load()); e.Handle != h || e.FD != r.rd {
			fz.bad.Add("event for %v fd %d delivered to %v fd %d", e.Handle, e.FD, h, r.rd)
			return
		}
		if r.slow {
			time.Sleep(200 * time.Microsecond)
		}
		if r.wr >= 0 {
			readAll(e.FD)
		} else {
			readEventfd(e.FD)
		}
		r.seen.Add(1)
	}
}

func (fz *fuzzer) onTimer(r *freg) {
	if n := r.inside.Add(1); n != 1 {
		fz.bad.Add("%v: timer while another callback of it runs", r.hv.Load())
	}
	defer r.inside.Add(-1)
	if r.poison.Load() {
		fz.bad.Add("%v: timer after OnRelease started", r.hv.Load())
	}
	r.timers.Add(1)
}

func (fz *fuzzer) onRelease(r *freg) func(poller.Released) {
	return func(rel poller.Released) {
		if n := r.rels.Add(1); n != 1 {
			fz.bad.Add("%v: OnRelease ran %d times", r.hv.Load(), n)
		}
		r.poison.Store(true)
		if r.inside.Load() != 0 {
			fz.bad.Add("%v: OnRelease while a callback of it runs", r.hv.Load())
		}
		if n := r.nHolds.Load(); n != 0 {
			fz.bad.Add("%v: OnRelease with %d holds outstanding", r.hv.Load(), n)
		}
		if h := poller.Handle(r.hv.Load()); rel.Handle != h || rel.FD != r.rd {
			fz.bad.Add("release of %v fd %d delivered to %v fd %d", rel.Handle, rel.FD, h, r.rd)
		}
		r.reason.Store(int32(rel.Reason) + 1)
	}
}
