//go:build linux

package poller_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// The torture test (rcutorture for epoll) drives a real poller on real fds
// with everything a server does at once: Add, Modify and Delete from
// outside and from inside OnEvent (a registration deleting itself and
// another), peers hanging up, holds, timers, Barrier, Close under load,
// random delays in handlers, and stutter (bursts, then everything idle).
// Every registration carries a record: a poison flag set by OnRelease, a
// pipe count of Barriers completed since its Delete, and the identity of
// its fd (device and inode, and for eventfds, which share one inode, the
// open file itself via kcmp). It fails on
//
//   - OnEvent or a timer after OnRelease started, or after a Barrier that
//     began after the registration's Delete returned (pipe count > 0);
//   - OnEvent or a timer concurrent with another callback of the same
//     registration;
//   - an event whose handle, fd number or fd identity is not the
//     registration's own, at the time the handler runs;
//   - OnRelease while a hold is outstanding, twice, or never (checked
//     after Close); a Barrier that returns before the OnRelease of a
//     registration deleted before it (and never held);
//   - a release reason that does not match what happened (a successful
//     Delete, a final hang-up event delivered once, or Close);
//   - a timer that ran although stop reported it cancelled;
//   - an fd left open, or one of the test's closed, after Close; a
//     goroutine left (TestMain's goleak check);
//   - a panic in any callback.
//
// On a shared set the Overrun is short (20-100 µs), so that handlers that
// jitter hand their batches off, waiters grow and retire (joining and
// leaving the reclaimer) while all of the above goes on.
//
// -torture.duration sets the total run time, split evenly among the
// configurations (every topology times every reclaimer); each
// configuration runs rounds of a few hundred milliseconds, each round a new
// poller with 1 to 8 waiters and 2 to 40 registration lanes.

var (
	tortureDuration = flag.Duration("torture.duration", 9*time.Second,
		"TestTorture: total run time, split evenly among its configurations")
	tortureSeed = flag.Uint64("torture.seed", 0,
		"TestTorture: seed of the random choices (0: from the clock); the interleavings differ from run to run anyway")
)

func TestTorture(t *testing.T) {
	n := len(topologies) * len(reclaimers)
	per := *tortureDuration / time.Duration(n)
	seed := *tortureSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d, %v per configuration", seed, per)
	i, retired := 0, int64(0)
	grown := map[poller.Topology]int64{}
	defer func() {
		if !t.Failed() && retired == 0 {
			t.Errorf("no extra waiter retired in any shared-set configuration: the torture did not exercise leaving")
		}
		for topo, n := range grown {
			if !t.Failed() && n == 0 {
				t.Errorf("%v: no extra waiter started in any configuration: the torture did not exercise joining", topo)
			}
		}
	}()
	for _, topo := range topologies {
		for _, rk := range reclaimers {
			i++
			cfg := tortureConfig{topo: topo, rk: rk, duration: per, seed: seed + uint64(i)}
			t.Run(topo.String()+"/"+rk.String(), func(t *testing.T) {
				res := runTorture(t, cfg)
				res.summary(t, "torture "+topo.String()+"/"+rk.String())
				res.fail(t)
				// The run must have done what it claims to test.
				c := &res.c
				for _, m := range []struct {
					what string
					n    int64
				}{
					{"adds", c.adds.Load()}, {"events", c.events.Load()},
					{"releases", c.releases.Load()}, {"deletes", c.deletes.Load()},
					{"barriers", c.barriers.Load()},
				} {
					if m.n == 0 {
						t.Errorf("no %s in %v: the torture did not run", m.what, per)
					}
				}
				if topo != poller.PerWaiter {
					if c.handedOff.Load() == 0 {
						t.Errorf("shared set: no event handed off in %v: the torture did not exercise it", per)
					}
					grown[topo] += c.grown.Load()
					retired += c.retired.Load()
				}
			})
		}
	}
}

// tortureConfig is one configuration of the torture.
type tortureConfig struct {
	topo     poller.Topology
	rk       reclaimerKind
	duration time.Duration
	seed     uint64
	waiters  int           // per round; 0: random 1..8
	lanes    int           // per round; 0: random 2..40
	maxRound time.Duration // 0: 600 ms
	// stopEarly ends the run at the first violation (mutation tests).
	stopEarly bool
	// mutant relaxes the checks that a broken poller can make
	// meaningless (release accounting after Close); violations are still
	// counted.
	mutant bool
}

// tcounters are the torture's counters, across rounds.
type tcounters struct {
	ops, adds, events, releases, deletes, handlerDeletes, hangUps,
	finals, modifies, holds, timers, timersRun, timersStopped,
	barriers, closesInHandler, tcp, rounds,
	handedOff, grown, retired atomic.Int64 // events handed off, waiters started and retired
}

type tortureResult struct {
	c        tcounters
	viol     vlog // broken guarantees
	errs     vlog // unexpected errors (environment or API misuse)
	waiters  []int
	stale    uint64
	closeMax time.Duration
}

func (r *tortureResult) summary(t testing.TB, name string) {
	t.Helper()
	c := &r.c
	ws := slices.Compact(slices.Sorted(slices.Values(r.waiters)))
	t.Logf("%s W=%s: %d ops, %d violations (%d registrations, %d events, %d stale events dropped, %d deletes (%d in handlers), %d final hang-up events, %d modifies, %d holds, %d timers (%d ran, %d stopped), %d barriers, %d rounds (%d closed from a handler), slowest Close %v, %d events handed off, %d extra waiters started, %d retired)",
		name, intsString(ws), c.ops.Load(), r.viol.Count(), c.adds.Load(), c.events.Load(), r.stale,
		c.deletes.Load(), c.handlerDeletes.Load(), c.finals.Load(), c.modifies.Load(), c.holds.Load(),
		c.timers.Load(), c.timersRun.Load(), c.timersStopped.Load(), c.barriers.Load(),
		c.rounds.Load(), c.closesInHandler.Load(), r.closeMax.Round(time.Microsecond),
		c.handedOff.Load(), c.grown.Load(), c.retired.Load())
}

func (r *tortureResult) fail(t testing.TB) {
	t.Helper()
	if n := r.viol.Count(); n != 0 {
		t.Errorf("%d violations; the first:\n%s", n, r.viol.String())
	}
	if n := r.errs.Count(); n != 0 {
		t.Errorf("%d unexpected errors; the first:\n%s", n, r.errs.String())
	}
}

func intsString(a []int) string {
	s := make([]string, len(a))
	for i, v := range a {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}

// tkind is the kind of fd a registration watches.
type tkind int

const (
	kEventfd tkind = iota
	kPipe
	kSocketpair
	kTCP
)

func (k tkind) String() string {
	return [...]string{"eventfd", "pipe", "socketpair", "tcp"}[k]
}

// trec is one registration's record.
type trec struct {
	id      int64
	kind    tkind
	rd      int // the registered fd
	ref     int // eventfd: a dup of rd, to compare open files with kcmp; else -1
	dev     uint64
	ino     uint64
	base    poller.Events // interest set at Add
	closeFD bool
	h       atomic.Uint64

	mu       sync.Mutex // guards wr and released
	wr       int        // the peer or write end (pipe, socket); -1 once closed
	released bool       // OnRelease ran: no more writes

	inside    atomic.Int32 // OnEvent and timer calls running
	holds     atomic.Int32 // holds outstanding, as the holders count them
	poison    atomic.Bool  // OnRelease started
	pipe      atomic.Int32 // Barriers completed since its Delete returned
	claimed   atomic.Bool  // known to be deleted or hung up
	everHeld  atomic.Bool  // a Hold was tried: Barrier may not wait for it
	releases  atomic.Int32
	deletesOK atomic.Int32 // Deletes that returned nil
	finals    atomic.Int32 // final (hang-up) events
	reason    atomic.Int32 // release reason + 1

	tmu    sync.Mutex
	timers []*ttimer
}

// handle waits for the handle of a registration whose Add has returned
// (Close can release it before the adder stored it).
func (rec *trec) handle() poller.Handle {
	for range 100000 {
		if h := rec.h.Load(); h != 0 {
			return poller.Handle(h)
		}
		runtime.Gosched()
	}
	return 0
}

// ttimer is one AfterFunc timer.
type ttimer struct {
	ran     atomic.Int32
	stopped atomic.Bool // stop reported it cancelled
}

// tlane holds at most one registration the drivers work on; registrations
// deleted from handlers or hung up are replaced by the next driver that
// comes by.
type tlane struct {
	mu  sync.Mutex
	cur atomic.Pointer[trec]
}

// tround is one poller's life in the torture.
type tround struct {
	cfg  *tortureConfig
	res  *tortureResult
	c    *tcounters
	p    *poller.Poller
	rng  *rand.Rand // the round's own goroutine only
	seed uint64

	lanes    []tlane
	listener int        // loopback TCP listener, or -1
	lmu      sync.Mutex // connect and accept as one, or drivers swap peers
	nextID   atomic.Int64

	recMu sync.Mutex
	recs  []*trec

	pendMu sync.Mutex
	pend   []*trec // deleted since the last Barrier began

	idle           atomic.Bool
	closing        atomic.Bool
	closeInHandler atomic.Bool
	stop           chan struct{}
	wg             sync.WaitGroup // drivers and the Barrier loop
	holdWG         sync.WaitGroup // holders
	holdSem        chan struct{}
}

func runTorture(t *testing.T, cfg tortureConfig) *tortureResult {
	t.Helper()
	res := &tortureResult{}
	if cfg.maxRound == 0 {
		cfg.maxRound = 600 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x70727475))
	end := time.Now().Add(cfg.duration)
	for time.Now().Before(end) {
		if cfg.stopEarly && res.viol.Count() > 0 {
			break
		}
		d := min(time.Until(end), cfg.maxRound/4+time.Duration(rng.Int64N(int64(cfg.maxRound)*3/4)))
		runRound(t, &cfg, res, rng.Uint64(), d)
		if t.Failed() && !cfg.mutant {
			break
		}
	}
	return res
}

func runRound(t *testing.T, cfg *tortureConfig, res *tortureResult, seed uint64, d time.Duration) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	w := cfg.waiters
	if w == 0 {
		w = 1 + rng.IntN(8)
	}
	nl := cfg.lanes
	if nl == 0 {
		nl = 2 + rng.IntN(39)
	}
	res.waiters = append(res.waiters, w)
	before := fdTable(t)
	r := &tround{
		cfg: cfg, res: res, c: &res.c, rng: rng, seed: seed,
		lanes:    make([]tlane, nl),
		listener: -1,
		stop:     make(chan struct{}),
		holdSem:  make(chan struct{}, 8),
	}
	r.listener = newListener()
	opts := optsFor(cfg.topo, cfg.rk, w)
	if cfg.topo != poller.PerWaiter {
		// An Overrun that jittering handlers exceed often: batches are
		// handed off, waiters grow, and (after 4000 Overruns, 80-400 ms)
		// retire, all within a round.
		opts.Overrun = time.Duration(20+rng.IntN(80)) * time.Microsecond
		opts.MaxWaiters = w + 1 + rng.IntN(6)
	}
	opts.OnPanic = func(h poller.Handle, v any, stack []byte) {
		r.res.viol.Add("panic in a callback of %v: %v\n%s", h, v, firstLines(stack, 6))
	}
	p, err := poller.New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	r.p = p
	res.c.rounds.Add(1)

	drivers := 2 + rng.IntN(2)
	for i := range drivers {
		r.wg.Go(func() { r.driver(seed + uint64(i) + 100) })
	}
	r.wg.Go(func() { r.barrierLoop(seed + 99) })

	// Stutter: bursts of driver activity, sometimes followed by a pause
	// in which only handlers, holders and timers still run, then every
	// waiter blocks.
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cfg.stopEarly && res.viol.Count() > 0 {
			break
		}
		r.idle.Store(false)
		time.Sleep(time.Duration(2+rng.IntN(40)) * time.Millisecond)
		if rng.IntN(3) == 0 {
			r.idle.Store(true)
			pause := time.Duration(1+rng.IntN(20)) * time.Millisecond
			if opts.Overrun > 0 && rng.IntN(8) == 0 {
				pause = 4000*opts.Overrun + 10*time.Millisecond // long enough for extra waiters to retire
			}
			time.Sleep(pause)
		}
	}
	r.idle.Store(false)
	st := p.Stats()
	res.c.handedOff.Add(int64(st.HandedOff))
	res.c.grown.Add(int64(st.Grown))
	res.c.retired.Add(int64(st.Grown) - int64(p.Waiters()-w))

	// Close: quietly, under load, or from inside a handler.
	mode := rng.IntN(4)
	if mode == 0 {
		close(r.stop)
		r.wg.Wait()
	}
	start := time.Now()
	if mode == 3 {
		r.closeInHandler.Store(true)
		select {
		case <-p.Done():
			res.c.closesInHandler.Add(1)
		case <-time.After(200 * time.Millisecond):
			// No event came: close from outside.
		}
	}
	r.closing.Store(true)
	if err := closeWithin(t, p); err != nil {
		res.errs.Add("Close: %v", err)
	}
	if d := time.Since(start); d > res.closeMax {
		res.closeMax = d
	}
	if mode != 0 {
		close(r.stop)
		r.wg.Wait()
	}
	r.holdWG.Wait()
	if r.listener >= 0 {
		unix.Close(r.listener)
	}
	// Close does not wait for holds: a registration held at Close is
	// released when its last hold goes, just after, on another goroutine.
	// Wait for the poller to count every release finished (OnRelease
	// returned), not merely started.
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if st := p.Stats(); st.Releases == st.Added {
			break
		}
		time.Sleep(time.Millisecond)
	}
	r.check(t)
	st = p.Stats()
	res.stale += st.Stale
	if !cfg.mutant {
		if st.Live != 0 || st.ReleasedNotFree != 0 || st.Releases != st.Added || st.Added != uint64(len(r.recs)) {
			res.viol.Add("after Close: Added %d Deleted %d Releases %d Live %d ReleasedNotFree %d, for %d registrations added",
				st.Added, st.Deleted, st.Releases, st.Live, st.ReleasedNotFree, len(r.recs))
		}
		after := fdTable(t)
		for fd, target := range after {
			if _, ok := before[fd]; !ok {
				res.viol.Add("fd %d (%s) open after Close", fd, target)
			}
		}
		for fd, target := range before {
			if _, ok := after[fd]; !ok {
				res.viol.Add("fd %d (%s), not the poller's, closed", fd, target)
			}
		}
	}
}

// check verifies every registration's record after Close.
func (r *tround) check(t *testing.T) {
	t.Helper()
	for _, rec := range r.recs {
		n := rec.releases.Load()
		if n != 1 {
			r.res.viol.Add("registration %d (%s, %v): OnRelease ran %d times, want once", rec.id, rec.kind, poller.Handle(rec.h.Load()), n)
			continue
		}
		why := poller.Reason(rec.reason.Load() - 1)
		dels, finals := rec.deletesOK.Load(), rec.finals.Load()
		ok := false
		switch why {
		case poller.Deleted:
			ok = dels == 1 && finals == 0
		case poller.HungUp:
			ok = dels == 0 && finals == 1
		case poller.Closed:
			ok = dels == 0 && finals == 0
		}
		if !ok {
			r.res.viol.Add("registration %d (%s): released as %v after %d successful Deletes and %d final events", rec.id, rec.kind, why, dels, finals)
		}
		rec.tmu.Lock()
		for _, tm := range rec.timers {
			if tm.stopped.Load() && tm.ran.Load() != 0 {
				r.res.viol.Add("registration %d: a timer ran although stop reported it cancelled", rec.id)
			}
		}
		rec.tmu.Unlock()
	}
}

var (
	kcmpOnce sync.Once
	kcmpOK   bool
)

// sameFile reports whether fds a and b refer to one open file (kcmp), or
// true if kcmp is not available.
func sameFile(a, b int) bool {
	kcmpOnce.Do(func() {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		r, _, e := kcmp(fd, fd)
		kcmpOK = e == 0 && r == 0
	})
	if !kcmpOK {
		return true
	}
	r, _, e := kcmp(a, b)
	return e == 0 && r == 0
}

func kcmp(a, b int) (uintptr, uintptr, unix.Errno) {
	const kcmpFile = 0
	pid := uintptr(os.Getpid())
	return unix.Syscall6(unix.SYS_KCMP, pid, pid, kcmpFile, uintptr(a), uintptr(b), 0)
}

// identity checks that fd is rec's own open file.
func (r *tround) identity(rec *trec, fd int, where string) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		r.res.viol.Add("%s of registration %d (%s): fstat fd %d: %v", where, rec.id, rec.kind, fd, err)
		return false
	}
	if uint64(st.Dev) != rec.dev || uint64(st.Ino) != rec.ino {
		r.res.viol.Add("%s of registration %d (%s): fd %d is device %d inode %d, want %d/%d: the number was reused", where, rec.id, rec.kind, fd, st.Dev, st.Ino, rec.dev, rec.ino)
		return false
	}
	if rec.ref >= 0 && !sameFile(fd, rec.ref) {
		r.res.viol.Add("%s of registration %d (%s): fd %d is another eventfd: the number was reused", where, rec.id, rec.kind, fd)
		return false
	}
	return true
}

// drain reads what fd holds; gone reports EOF or a reset.
func drain(kind tkind, fd int) (gone bool) {
	if kind == kEventfd {
		readEventfd(fd)
		return false
	}
	var buf [4096]byte
	for {
		n, err := unix.Read(fd, buf[:])
		switch {
		case n > 0:
			continue
		case err == unix.EINTR:
			continue
		case err == nil: // EOF
			return true
		case err == unix.EAGAIN:
			return false
		default: // ECONNRESET and the like
			return true
		}
	}
}

// add creates a registration on lane l.
func (r *tround) add(l *tlane, rng *rand.Rand) {
	rec := &trec{id: r.nextID.Add(1), ref: -1, wr: -1, closeFD: rng.IntN(2) == 0}
	x := rng.IntN(100)
	var err error
	switch {
	case x < 35:
		rec.kind = kEventfd
		rec.rd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err == nil {
			rec.ref, err = unix.FcntlInt(uintptr(rec.rd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				unix.Close(rec.rd)
			}
		}
	case x < 70:
		rec.kind = kPipe
		var p [2]int
		err = unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK)
		rec.rd, rec.wr = p[0], p[1]
	case x < 96 || r.listener < 0:
		rec.kind = kSocketpair
		var p [2]int
		p, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		rec.rd, rec.wr = p[0], p[1]
	default:
		rec.kind = kTCP
		r.lmu.Lock()
		rec.rd, rec.wr, err = tcpPair(r.listener)
		r.lmu.Unlock()
		r.c.tcp.Add(1)
	}
	if err != nil {
		r.res.errs.Add("make %s: %v", rec.kind, err)
		time.Sleep(time.Millisecond)
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(rec.rd, &st); err != nil {
		r.res.errs.Add("fstat: %v", err)
	}
	rec.dev, rec.ino = uint64(st.Dev), uint64(st.Ino)
	rec.base = poller.Readable
	if rng.IntN(3) == 0 {
		rec.base |= poller.ReadHangUp
	}
	if rng.IntN(2) == 0 {
		rec.base |= poller.EdgeTriggered
	}
	h, err := r.p.Add(poller.Registration{
		FD: rec.rd, Events: rec.base, CloseFD: rec.closeFD,
		OnEvent:   r.onEvent(rec),
		OnRelease: r.onRelease(rec),
	})
	if err != nil {
		if !errors.Is(err, poller.ErrClosed) {
			r.res.errs.Add("Add %s fd %d: %v", rec.kind, rec.rd, err)
		}
		rec.released = true
		rec.closeAll(true)
		return
	}
	// No event can come before this store: nothing was written to the
	// fd, and its peer is open.
	rec.h.Store(uint64(h))
	r.recMu.Lock()
	r.recs = append(r.recs, rec)
	r.recMu.Unlock()
	l.cur.Store(rec)
	r.c.adds.Add(1)
}

// closeAll closes the test's fds of rec; rd too unless the poller owns it.
// Called with rec.mu held or before rec is shared.
func (rec *trec) closeAll(rdToo bool) {
	if rec.wr >= 0 {
		if rec.kind == kTCP {
			closeRST(rec.wr)
		} else {
			unix.Close(rec.wr)
		}
		rec.wr = -1
	}
	if rec.ref >= 0 {
		unix.Close(rec.ref)
		rec.ref = -1
	}
	if rdToo {
		unix.Close(rec.rd)
	}
}

// deleteRec deletes rec and does the bookkeeping; from says who.
func (r *tround) deleteRec(rec *trec, inHandler bool) {
	h := poller.Handle(rec.h.Load())
	err := r.p.Delete(h)
	switch {
	case err == nil:
		if n := rec.deletesOK.Add(1); n != 1 {
			r.res.viol.Add("registration %d: %d Deletes of %v succeeded", rec.id, n, h)
		}
		rec.claimed.Store(true)
		r.c.deletes.Add(1)
		if inHandler {
			r.c.handlerDeletes.Add(1)
		}
		r.pendMu.Lock()
		r.pend = append(r.pend, rec)
		r.pendMu.Unlock()
	case errors.Is(err, poller.ErrStale):
		rec.claimed.Store(true) // hung up, or deleted by someone else
	case errors.Is(err, poller.ErrClosed):
	default:
		r.res.errs.Add("Delete %v: %v", h, err)
	}
}

// modify sets rec's interest set to ev.
func (r *tround) modify(rec *trec, ev poller.Events) {
	err := r.p.Modify(poller.Handle(rec.h.Load()), ev)
	r.c.modifies.Add(1)
	if err != nil && !errors.Is(err, poller.ErrStale) && !errors.Is(err, poller.ErrClosed) {
		r.res.errs.Add("Modify %v to %v: %v", poller.Handle(rec.h.Load()), ev, err)
	}
}

// randomEvents is an interest set for Modify.
func randomEvents(rec *trec, x int) poller.Events {
	trig := rec.base & poller.EdgeTriggered
	switch x % 6 {
	case 0:
		return poller.Readable | trig
	case 1:
		return poller.Readable | poller.Writable | trig
	case 2:
		return poller.Readable | poller.ReadHangUp | trig
	case 3:
		return 0 | trig // only hang-ups and errors
	case 4:
		return poller.Readable | (trig ^ poller.EdgeTriggered) // switch trigger
	}
	return rec.base
}

func (r *tround) onEvent(rec *trec) func(poller.Event) {
	return func(e poller.Event) {
		r.c.events.Add(1)
		if n := rec.inside.Add(1); n != 1 {
			r.res.viol.Add("registration %d: OnEvent %v while %d other callbacks of it run", rec.id, e.Events, n-1)
		}
		defer rec.inside.Add(-1)
		if rec.poison.Load() {
			r.res.viol.Add("registration %d: OnEvent %v after its OnRelease started", rec.id, e.Events)
		}
		if n := rec.pipe.Load(); n > 0 {
			r.res.viol.Add("registration %d: OnEvent %v after %d Barriers completed since its Delete", rec.id, e.Events, n)
		}
		if rec.finals.Load() != 0 {
			r.res.viol.Add("registration %d: OnEvent %v after its final hang-up event", rec.id, e.Events)
		}
		h := poller.Handle(rec.h.Load())
		if e.Handle != h || e.FD != rec.rd {
			r.res.viol.Add("event for %v fd %d (%v) delivered to registration %d, handle %v fd %d", e.Handle, e.FD, e.Events, rec.id, h, rec.rd)
			return
		}
		if !r.identity(rec, e.FD, "OnEvent") {
			return
		}
		jitter()
		gone := drain(rec.kind, e.FD)
		if e.Events&(poller.HangUp|poller.Error) != 0 {
			if n := rec.finals.Add(1); n != 1 {
				r.res.viol.Add("registration %d: %d final hang-up events", rec.id, n)
			}
			rec.claimed.Store(true)
			r.c.finals.Add(1)
			return
		}
		if r.closeInHandler.CompareAndSwap(true, false) {
			start := time.Now()
			r.p.Close() // starts the shutdown; cannot wait for itself
			if d := time.Since(start); d > time.Second {
				r.res.viol.Add("Close from OnEvent took %v: it waited for itself", d)
			}
			return
		}
		if gone {
			r.deleteRec(rec, true)
			return
		}
		if e.Events&poller.Writable != 0 {
			// Level-triggered it would fire for ever.
			r.modify(rec, rec.base)
		}
		switch x := rand.IntN(1000); {
		case x < 25:
			r.deleteRec(rec, true)
		case x < 50:
			l := &r.lanes[rand.IntN(len(r.lanes))]
			if o := l.cur.Load(); o != nil && o != rec {
				r.deleteRec(o, true)
			}
		case x < 60:
			r.modify(rec, randomEvents(rec, x))
		case x < 70:
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := r.p.Barrier(ctx)
			cancel()
			if !errors.Is(err, poller.ErrInCallback) && !errors.Is(err, poller.ErrClosed) {
				r.res.viol.Add("Barrier in OnEvent = %v, want ErrInCallback", err)
			}
		case x < 90:
			r.afterFunc(rec, time.Duration(rand.IntN(2000))*time.Microsecond, false)
		}
	}
}

func (r *tround) onRelease(rec *trec) func(poller.Released) {
	return func(rel poller.Released) {
		if n := rec.releases.Add(1); n != 1 {
			r.res.viol.Add("registration %d: OnRelease ran %d times", rec.id, n)
		}
		rec.poison.Store(true)
		if n := rec.inside.Load(); n != 0 {
			r.res.viol.Add("registration %d: OnRelease while %d of its callbacks run", rec.id, n)
		}
		if n := rec.holds.Load(); n != 0 {
			r.res.viol.Add("registration %d: OnRelease while %d holds are outstanding", rec.id, n)
		}
		if h := rec.handle(); rel.Handle != h || rel.FD != rec.rd {
			r.res.viol.Add("release of %v fd %d delivered to registration %d, handle %v fd %d", rel.Handle, rel.FD, rec.id, h, rec.rd)
		}
		rec.reason.Store(int32(rel.Reason) + 1)
		if rand.IntN(10) == 0 {
			runtime.Gosched()
		}
		rec.mu.Lock()
		rec.released = true
		rec.closeAll(!rec.closeFD)
		rec.mu.Unlock()
		rec.claimed.Store(true)
		r.c.releases.Add(1)
	}
}

// afterFunc sets a timer on rec; it may stop it at once.
func (r *tround) afterFunc(rec *trec, d time.Duration, mayStop bool) {
	tm := &ttimer{}
	stop, err := r.p.AfterFunc(poller.Handle(rec.h.Load()), d, func() { r.timer(rec, tm) })
	if err != nil {
		if !errors.Is(err, poller.ErrStale) && !errors.Is(err, poller.ErrClosed) {
			r.res.errs.Add("AfterFunc: %v", err)
		}
		return
	}
	r.c.timers.Add(1)
	rec.tmu.Lock()
	rec.timers = append(rec.timers, tm)
	rec.tmu.Unlock()
	if mayStop && rand.IntN(4) == 0 {
		if d := min(d, 3*time.Millisecond); d > 0 && rand.IntN(2) == 0 {
			time.Sleep(time.Duration(rand.Int64N(int64(d))))
		}
		if stop() {
			tm.stopped.Store(true)
			r.c.timersStopped.Add(1)
		}
		if stop() {
			r.res.viol.Add("registration %d: a timer's stop reported true twice", rec.id)
		}
	}
}

// timer is an AfterFunc callback: it runs like OnEvent, on a waiter, never
// with another callback of the registration, never after OnRelease.
func (r *tround) timer(rec *trec, tm *ttimer) {
	tm.ran.Add(1)
	r.c.timersRun.Add(1)
	if n := rec.inside.Add(1); n != 1 {
		r.res.viol.Add("registration %d: timer while %d other callbacks of it run", rec.id, n-1)
	}
	defer rec.inside.Add(-1)
	if rec.poison.Load() {
		r.res.viol.Add("registration %d: timer after its OnRelease started", rec.id)
	}
	if n := rec.pipe.Load(); n > 0 {
		r.res.viol.Add("registration %d: timer after %d Barriers completed since its Delete", rec.id, n)
	}
	if rec.finals.Load() != 0 {
		r.res.viol.Add("registration %d: timer after its final hang-up event", rec.id)
	}
	if !r.identity(rec, rec.rd, "timer") {
		return
	}
	jitter()
	switch x := rand.IntN(10); {
	case x < 2: // a timeout: the registration goes
		r.deleteRec(rec, true)
	case x < 3:
		r.afterFunc(rec, time.Duration(rand.IntN(1000))*time.Microsecond, false)
	}
}

// hold holds rec for a random short time on another goroutine, using its
// fd meanwhile.
func (r *tround) hold(rec *trec, rng *rand.Rand) {
	select {
	case r.holdSem <- struct{}{}:
	default:
		return // enough holders
	}
	rec.everHeld.Store(true)
	release, err := r.p.Hold(poller.Handle(rec.h.Load()))
	if err != nil {
		<-r.holdSem
		if !errors.Is(err, poller.ErrStale) && !errors.Is(err, poller.ErrClosed) {
			r.res.errs.Add("Hold: %v", err)
		}
		return
	}
	r.c.holds.Add(1)
	rec.holds.Add(1)
	d := time.Duration(rng.IntN(2000)) * time.Microsecond
	deleteToo := rng.IntN(3) == 0
	r.holdWG.Go(func() {
		defer func() { <-r.holdSem }()
		if rec.poison.Load() {
			r.res.viol.Add("registration %d: OnRelease started while it was held", rec.id)
		}
		if deleteToo {
			r.deleteRec(rec, false) // the release must wait for the hold
		}
		end := time.Now().Add(d)
		for {
			r.identity(rec, rec.rd, "holder")
			if time.Now().After(end) {
				break
			}
			time.Sleep(time.Duration(50+rand.IntN(300)) * time.Microsecond)
		}
		if rec.poison.Load() {
			r.res.viol.Add("registration %d: OnRelease started while it was held", rec.id)
		}
		rec.holds.Add(-1)
		release()
		if rand.IntN(8) == 0 {
			release() // later calls do nothing
		}
	})
}

// write makes rec readable.
func (r *tround) write(rec *trec, rng *rand.Rand, n int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.released {
		return
	}
	fd := rec.wr
	if rec.kind == kEventfd {
		fd = rec.rd
	}
	if fd < 0 {
		return
	}
	var buf [64]byte
	for range n {
		var err error
		if rec.kind == kEventfd {
			putU64(buf[:8], 1)
			_, err = unix.Write(fd, buf[:8])
		} else {
			_, err = unix.Write(fd, buf[:1+rng.IntN(len(buf))])
		}
		if err != nil && err != unix.EAGAIN {
			r.res.errs.Add("write to registration %d (%s) fd %d: %v", rec.id, rec.kind, fd, err)
			return
		}
	}
}

// hangUp closes rec's peer: the registration sees a hang-up (pipe,
// socketpair, TCP reset) or end of file (TCP).
func (r *tround) hangUp(rec *trec, rng *rand.Rand) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.released || rec.wr < 0 {
		return
	}
	if rec.kind == kTCP && rng.IntN(2) == 0 {
		closeRST(rec.wr)
	} else {
		unix.Close(rec.wr)
	}
	rec.wr = -1
	r.c.hangUps.Add(1)
}

// driver picks random operations on random lanes.
func (r *tround) driver(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		if r.idle.Load() {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		l := &r.lanes[rng.IntN(len(r.lanes))]
		l.mu.Lock()
		r.step(l, rng)
		l.mu.Unlock()
		r.c.ops.Add(1)
		if rng.IntN(8) == 0 {
			runtime.Gosched()
		}
	}
}

func (r *tround) step(l *tlane, rng *rand.Rand) {
	rec := l.cur.Load()
	if rec == nil || rec.claimed.Load() {
		if !r.closing.Load() {
			r.add(l, rng)
		}
		return
	}
	switch x := rng.IntN(100); {
	case x < 40:
		r.write(rec, rng, 1)
	case x < 45:
		r.write(rec, rng, 1+rng.IntN(16))
	case x < 55:
		r.deleteRec(rec, false)
	case x < 62: // churn: replace at once, on the slot just freed if any
		r.write(rec, rng, 1) // an event in flight for the one going
		r.deleteRec(rec, false)
		if !r.closing.Load() {
			r.add(l, rng)
		}
	case x < 70:
		r.modify(rec, randomEvents(rec, rng.IntN(6)))
	case x < 76:
		if rec.kind == kEventfd {
			r.deleteRec(rec, false)
		} else {
			r.hangUp(rec, rng)
		}
	case x < 86:
		r.hold(rec, rng)
	case x < 98:
		d := time.Duration(rng.IntN(3000)) * time.Microsecond
		if rng.IntN(10) == 0 {
			d = time.Hour // must not delay the release
		}
		r.afterFunc(rec, d, true)
	default:
		r.write(rec, rng, 1)
		time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
	}
}

// barrierLoop calls Barrier over and over and checks that every
// registration deleted before each call was released by its return.
func (r *tround) barrierLoop(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		r.pendMu.Lock()
		batch := r.pend
		r.pend = nil
		r.pendMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := r.p.Barrier(ctx)
		cancel()
		switch {
		case err == nil:
			r.c.barriers.Add(1)
			for _, rec := range batch {
				// Barrier does not wait for holds.
				if !rec.poison.Load() && !rec.everHeld.Load() {
					r.res.viol.Add("registration %d: Barrier returned before its OnRelease, though Delete returned before Barrier began", rec.id)
				}
				rec.pipe.Add(1)
			}
		case errors.Is(err, poller.ErrClosed):
			return
		default:
			r.res.errs.Add("Barrier: %v", err)
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	}
}
