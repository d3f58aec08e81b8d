//go:build linux

package poller_test

import (
	"errors"
	"flag"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// The fd-reuse security test. Loopback TCP connections come and go on a
// few fixed fd numbers: connection A is deleted while its client's bytes
// (and sometimes its client's reset) are in flight, and B, a new
// connection, is forced onto A's fd number (dup3 over it) and registered,
// either at once after A's Delete returned (the registration may not
// have been released yet: its slot is not free) or after A's OnRelease
// (then B usually gets A's slot too, and only the generation tells them
// apart). Every connection's client sends bytes carrying its own tag. The
// test fails if B's handler ever sees an event of A's (handle check) or a
// byte that is not B's, if a handler runs after its OnRelease started or
// concurrently with itself, or if a release is missing or doubled.
//
// The fds are the user's (CloseFD false): the user-visible contract is
// that the number may be reused once Delete has returned (or, when Delete
// lost to a hang-up, once OnRelease ran). A handler already running for A
// when Delete returned may still be running, or start, and read from the
// number after the reuse; those reads are counted and reported, not
// failed: the poller promises only that OnEvent never runs once OnRelease
// has started.

var fdReuseCycles = flag.Int("fdreuse.cycles", 5000,
	"TestFDReuse: fd-number reuse cycles per topology")

func TestFDReuse(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.String(), func(t *testing.T) {
			opts := optsFor(topo, passBuck, 4)
			res := runFDReuse(t, opts, *fdReuseCycles, 4, false, 0)
			res.summary(t, "fd reuse "+topo.String())
			res.fail(t)
			if n := res.cycles.Load(); n != int64(*fdReuseCycles) {
				t.Errorf("%d reuse cycles done, want %d", n, *fdReuseCycles)
			}
			if res.sameSlot.Load() == 0 {
				t.Errorf("no cycle reused both the fd number and the slot: the test does not exercise generations")
			}
		})
	}
}

// fconn is one server-side connection.
type fconn struct {
	id       int64
	tag      byte
	fd       int // the server fd number (the lane's)
	cli      int // client end, owned by the lane
	h        atomic.Uint64
	inside   atomic.Int32
	poison   atomic.Bool
	replaced atomic.Bool // its fd number now belongs to a successor
	releases atomic.Int32
	released chan struct{}
}

type fdReuseResult struct {
	cycles, immediate, afterRelease, hungUp, sameSlot atomic.Int64
	events, bytes                                     atomic.Int64
	lateRuns, lateBytes                               atomic.Int64 // A's handler after the reuse
	crossEvents, crossBytes                           atomic.Int64 // B's handler: A's events and bytes (must stay 0)
	stale                                             uint64
	viol, errs                                        vlog
}

func (r *fdReuseResult) summary(t testing.TB, name string) {
	t.Helper()
	t.Logf("%s: %d cycles (%d reused the number right after Delete, %d after OnRelease, %d after a hang-up won), slot reused too %d times; %d events, %d bytes, %d stale events dropped; B's handlers saw %d events and %d bytes of A's; %d violations; A's handler, running when Delete returned, read %d bytes of B's from the reused number (and started after the reuse %d times)",
		name, r.cycles.Load(), r.immediate.Load(), r.afterRelease.Load(), r.hungUp.Load(), r.sameSlot.Load(),
		r.events.Load(), r.bytes.Load(), r.stale, r.crossEvents.Load(), r.crossBytes.Load(), r.viol.Count(), r.lateBytes.Load(), r.lateRuns.Load())
}

func (r *fdReuseResult) fail(t testing.TB) {
	t.Helper()
	if n := r.viol.Count(); n != 0 {
		t.Errorf("%d violations; the first:\n%s", n, r.viol.String())
	}
	if n := r.errs.Count(); n != 0 {
		t.Errorf("%d unexpected errors; the first:\n%s", n, r.errs.String())
	}
}

// runFDReuse runs cycles reuse cycles spread over lanes fd numbers. With
// stopEarly (mutation tests) it ends at the first violation, and with a
// budget after that time.
func runFDReuse(t *testing.T, opts poller.Options, cycles, lanes int, stopEarly bool, budget time.Duration) *fdReuseResult {
	t.Helper()
	res := &fdReuseResult{}
	checkFDLeak(t)
	l := newListener()
	if l < 0 {
		t.Fatal("cannot listen on loopback TCP")
	}
	defer unix.Close(l)
	opts.OnPanic = func(h poller.Handle, v any, stack []byte) {
		res.viol.Add("panic in a callback of %v: %v\n%s", h, v, firstLines(stack, 6))
	}
	p, err := poller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var (
		lmu    sync.Mutex
		nextID atomic.Int64
		left   atomic.Int64
		wg     sync.WaitGroup
		connMu sync.Mutex
		conns  []*fconn
	)
	left.Store(int64(cycles))
	var deadline time.Time
	if budget > 0 {
		deadline = time.Now().Add(budget)
	}
	dial := func() (acc, cli int, err error) {
		lmu.Lock()
		defer lmu.Unlock()
		return tcpPair(l)
	}
	seed := uint64(time.Now().UnixNano())
	for lane := range lanes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(lane)))
			var cur *fconn
			num := -1
			var seq byte
			// next connects a client and registers its server end on the
			// lane's fd number: the first one's own, then A's.
			next := func() bool {
				acc, cli, err := dial()
				if err != nil {
					res.errs.Add("connect: %v", err)
					return false
				}
				seq = seq%255 + 1 // consecutive connections differ
				b := &fconn{id: nextID.Add(1), tag: seq, cli: cli, released: make(chan struct{})}
				var prev poller.Handle
				if cur == nil {
					num = acc
				} else {
					prev = poller.Handle(cur.h.Load())
					if !reuse(p, cur, acc, num, rng, res) {
						unix.Close(acc)
						unix.Close(cli)
						return false
					}
					res.cycles.Add(1)
				}
				b.fd = num
				cur = nil
				h, err := p.Add(poller.Registration{
					FD: num, Events: poller.Readable | poller.ReadHangUp,
					OnEvent:   fdReuseOnEvent(b, res),
					OnRelease: fdReuseOnRelease(b, res),
				})
				if err != nil {
					res.errs.Add("Add of connection %d on fd %d: %v", b.id, num, err)
					closeRST(num)
					closeRST(cli)
					return false
				}
				// Only now may B's client write: no event precedes the
				// handle.
				b.h.Store(uint64(h))
				connMu.Lock()
				conns = append(conns, b)
				connMu.Unlock()
				if prev != 0 && prev.Slot() == h.Slot() {
					res.sameSlot.Add(1)
				}
				send(b, 1+rng.IntN(64))
				cur = b
				return true
			}
			if !next() {
				return
			}
			for left.Add(-1) >= 0 {
				if stopEarly && res.viol.Count() > 0 || budget > 0 && time.Now().After(deadline) || !next() {
					break
				}
			}
			if cur != nil {
				if err := p.Delete(poller.Handle(cur.h.Load())); err != nil && !errors.Is(err, poller.ErrStale) {
					res.errs.Add("final Delete: %v", err)
				}
				waitRelease(cur, res)
				closeRST(num)
				if cur.cli >= 0 {
					closeRST(cur.cli)
				}
			}
		})
	}
	wg.Wait()
	if err := closeWithin(t, p); err != nil {
		t.Error(err)
	}
	res.stale = p.Stats().Stale
	for _, c := range conns {
		if n := c.releases.Load(); n != 1 {
			res.viol.Add("connection %d: OnRelease ran %d times, want once", c.id, n)
		}
	}
	return res
}

// send writes n bytes of c's tag from its client.
func send(c *fconn, n int) {
	var buf [64]byte
	for i := range buf[:n] {
		buf[i] = c.tag
	}
	unix.Write(c.cli, buf[:n]) // EAGAIN or a reset: the handler checks what arrives
}

// reuse deletes a with events in flight and forces acc onto a's fd number
// num. It reports false if the lane must stop.
func reuse(p *poller.Poller, a *fconn, acc, num int, rng *rand.Rand, res *fdReuseResult) bool {
	send(a, 1+rng.IntN(64))
	hangUp := rng.IntN(8) == 0
	if hangUp {
		closeRST(a.cli) // an error and hang-up event in flight
		a.cli = -1
	}
	// Sweep the window between the kernel's copy-out and the Delete.
	switch rng.IntN(4) {
	case 0:
	case 1:
		runtime.Gosched()
	case 2:
		for range rng.IntN(2000) {
			_ = rng.Uint32() // spin a few microseconds
		}
	case 3:
		time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
	}
	err := p.Delete(poller.Handle(a.h.Load()))
	switch {
	case err == nil && rng.IntN(2) == 0:
		res.immediate.Add(1)
	case err == nil:
		res.afterRelease.Add(1)
		if !waitRelease(a, res) {
			return false
		}
	case errors.Is(err, poller.ErrStale): // a hang-up won: its release
		res.hungUp.Add(1) // forgets the number only then
		if !waitRelease(a, res) {
			return false
		}
	default:
		res.errs.Add("Delete of connection %d: %v", a.id, err)
		return false
	}
	if a.cli >= 0 {
		send(a, 1+rng.IntN(64)) // A's traffic after its Delete
	}
	// Reset rather than linger in TIME_WAIT: 100,000 cycles would run out
	// of ports.
	unix.SetsockoptLinger(num, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	a.replaced.Store(true)
	if err := unix.Dup3(acc, num, unix.O_CLOEXEC); err != nil {
		res.errs.Add("dup3: %v", err)
		return false
	}
	unix.Close(acc)
	if a.cli >= 0 {
		closeRST(a.cli)
		a.cli = -1
	}
	return true
}

func waitRelease(c *fconn, res *fdReuseResult) bool {
	select {
	case <-c.released:
		return true
	case <-time.After(timeout):
		res.viol.Add("connection %d: no OnRelease within %v of its Delete", c.id, timeout)
		return false
	}
}

func fdReuseOnEvent(c *fconn, res *fdReuseResult) func(poller.Event) {
	return func(e poller.Event) {
		res.events.Add(1)
		if n := c.inside.Add(1); n != 1 {
			res.viol.Add("connection %d: OnEvent while %d other runs of it", c.id, n-1)
		}
		defer c.inside.Add(-1)
		if c.poison.Load() {
			res.viol.Add("connection %d: OnEvent after its OnRelease started", c.id)
		}
		if h := poller.Handle(c.h.Load()); e.Handle != h || e.FD != c.fd {
			res.crossEvents.Add(1)
			res.viol.Add("event %v for handle %v fd %d reached the handler of connection %d (handle %v fd %d)", e.Events, e.Handle, e.FD, c.id, h, c.fd)
			return
		}
		late := c.replaced.Load()
		if late {
			res.lateRuns.Add(1)
		}
		jitter()
		var buf [512]byte
		for {
			n, err := unix.Read(e.FD, buf[:])
			if n <= 0 {
				if err == unix.EINTR {
					continue
				}
				break
			}
			res.bytes.Add(int64(n))
			var foreign int
			for _, b := range buf[:n] {
				if b != c.tag {
					foreign++
				}
			}
			switch {
			case foreign == 0:
			case late || c.replaced.Load():
				res.lateBytes.Add(int64(foreign))
			default:
				res.crossBytes.Add(int64(foreign))
				res.viol.Add("%d bytes of another connection reached the handler of connection %d (tag %d), read from fd %d", foreign, c.id, c.tag, e.FD)
			}
		}
	}
}

func fdReuseOnRelease(c *fconn, res *fdReuseResult) func(poller.Released) {
	return func(r poller.Released) {
		if n := c.releases.Add(1); n != 1 {
			res.viol.Add("connection %d: OnRelease ran %d times", c.id, n)
			return
		}
		c.poison.Store(true)
		if n := c.inside.Load(); n != 0 {
			res.viol.Add("connection %d: OnRelease while its OnEvent runs", c.id)
		}
		if h := poller.Handle(c.h.Load()); r.Handle != h {
			res.viol.Add("release of %v reached connection %d (handle %v)", r.Handle, c.id, h)
		}
		close(c.released)
	}
}
