// Package poller runs N waiter goroutines on epoll and lets any goroutine
// delete a registration while other waiters may still hold events for it.
//
// A registration is identified by a Handle: a slot index and a generation,
// which is what the kernel carries in epoll_event.data (never a pointer).
// Each slot has one atomic state word holding its generation and state; a
// waiter validates every event against that word with a single atomic
// load after epoll_wait returns, and drops events whose registration was
// deleted or replaced. Delete marks the slot released, removes the fd from
// epoll, and hands the rest of the work (OnRelease, closing an owned fd,
// recycling the slot) to a deferred reclaimer, which runs it only after
// every waiter has passed a quiescent point: pass-the-buck reclamation
// (Bonzini, LKML 2012) by default. Waiters blocked in epoll_wait count as
// offline and do not delay it, so no epoll_wait timeout is needed; this is
// safe only because every event is validated after its waiter comes back
// online.
//
// Guarantees, each with the function that keeps it:
//
//   - An event is delivered only to the registration that was registered
//     when the kernel reported it, never to a later one that reuses the fd
//     number or the slot. (slot.validate: one load of generation and state
//     together, after the waiter is online again.)
//   - Once a registration's OnRelease has started, its OnEvent never runs
//     again. (Poller.retire: the release waits for a grace period, so every
//     waiter that could hold an event has validated or dropped it.)
//   - OnRelease runs exactly once for every registration, those still live
//     at Close included, never inside Delete's call. (slot.claim: one
//     winner moves the slot to released; Poller.shutdown releases the rest.)
//   - An fd the poller owns (Registration.CloseFD) is closed after OnRelease
//     returns and never while a handler or a Hold may use it.
//     (Poller.release, after slot.toFreeing, which waits for the last hold.)
//   - Two OnEvent calls for one registration never run at the same time, and
//     each happens before the next, visibly to the race detector.
//     (PerWaiter: one waiter owns it, Poller.dispatchOwned; Shared and
//     Stealing: the running bit, slot.enterRun and slot.finishRun.)
//   - On hang-up or error the registration is removed from epoll before its
//     final event is delivered; that event is delivered once, then the
//     registration is released as if deleted. The fd is still open in that
//     final OnEvent, so data that arrived before the hang-up can still be
//     read. (Poller.hangUp.)
//   - A forged or stale handle never disturbs a live registration: every
//     operation validates the generation, and a Delete cannot come between
//     Add's publish and its EPOLL_CTL_ADD. (Poller.Add holds slot.ctlMu.)
//
// On a shared set (Topology Shared) a slow handler delays only its own
// registration: a waiter blocked in one handler for Options.Overrun hands
// the events of its batch it has not reached to the other waiters, which
// validate them like fresh events, and is detached: taken offline in the
// reclaimer on its behalf until the handler returns, so that releases of
// other registrations do not wait for it (the one it runs stays pinned by
// its running bit, and its release waits for the handler, Barrier
// included); and when every waiter is blocked while
// events wait, another waiter starts, up to Options.MaxWaiters, joining the
// reclaimer before its first epoll_wait; an idle extra waiter leaves it and
// ends. Topology Stealing does the same on per-waiter sets, starting a
// stand-in on a blocked waiter's own set, and so dispatches as fast as
// PerWaiter while nothing blocks. Neither lets a release through early: a handed-off event holds no
// reference until it is validated, a waiter leaves only between
// batches, and a detached waiter validates every event it claims after
// its handler returns. With PerWaiter nothing is handed off or detached: a
// handler that blocks holds back every release until it returns.
//
// A handler that panics does not take the poller down: the panic is
// recovered, reported to Options.OnPanic (or logged with log/slog), and the
// registration is deleted, since its state is suspect.
//
// The package compiles with the same API on every system; at run time it
// needs Linux, and New returns ErrUnsupported elsewhere.
package poller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/gracepoll/gracepoll/reclaim"
)

// Sentinel errors. Test with errors.Is; errors caused by a system call also
// wrap its errno.
var (
	// ErrClosed reports an operation on a closed poller.
	ErrClosed = errors.New("poller: closed")
	// ErrStale reports a handle that is deleted, released, never issued,
	// or the zero Handle.
	ErrStale = errors.New("poller: stale handle")
	// ErrInvalid reports a bad argument: a bad fd, an fd already
	// registered, one of the poller's own fds, unknown event bits, a nil
	// OnEvent, or invalid Options.
	ErrInvalid = errors.New("poller: invalid argument")
	// ErrUnsupported reports a system without epoll.
	ErrUnsupported = errors.New("poller: epoll is not supported on this system")
	// ErrInCallback reports a call that would wait for the calling
	// callback itself to return (Barrier from OnEvent or OnRelease).
	ErrInCallback = errors.New("poller: call would deadlock inside a callback")
)

// Reserved handles, of generation 0, which no registration has: the
// eventfd that Close writes to wake every waiter, each epoll set's mailbox
// eventfd, which says fired timers are waiting, and the shared set's
// hand-off eventfd, which says events handed off by a blocked waiter are.
const (
	wakeHandle    = Handle(1<<32 - 1)
	mailHandle    = Handle(1<<32 - 2)
	handoffHandle = Handle(1<<32 - 3)
)

// Poller runs waiter goroutines on epoll. Its methods are safe for
// concurrent use.
type Poller struct {
	opts      Options
	timeoutMs int
	rec       reclaim.Reclaimer
	tab       table
	epfds     []int // one per waiter (PerWaiter) or one shared
	wakefd    int
	mail      []mailbox // one per epoll set
	// waiters has MaxWaiters entries: Waiters run from New to Close, the
	// others when the monitor starts them. highWater counts the entries
	// that have ever run.
	waiters   []waiter
	highWater atomic.Int32
	// nrunning counts the waiters running; procs is GOMAXPROCS at New.
	// While more waiters run than there are Ps, a waiter blocks in the
	// netpoller (parker) rather than in epoll_wait.
	nrunning atomic.Int32
	holders  atomic.Int32 // waiters blocked in epoll_wait while nrunning > procs
	procs    int32
	wg       sync.WaitGroup

	// mon and hq hand a blocked waiter's events to others and grow the
	// waiters (monitor.go); mon is nil unless the set is shared and
	// Options.Overrun is positive.
	mon       *monitor
	hq        handoff
	handedOff atomic.Uint64 // events moved to hq; written by the monitor
	grown     atomic.Uint64 // extra waiters started; written by the monitor
	disarms   atomic.Uint64 // Stealing entries disarmed (dispatchShared)
	detaches  atomic.Uint64 // blocked waiters taken offline; written by the monitor
	pins      pinWaits      // releases waiting for a detached waiter's handler

	// own names the poller's own fds, which Add refuses; a waiter's
	// parker comes and goes with the waiter.
	own *xsync.MapOf[int, string]
	// setGen counts each set's renewals: a waiter's parker duplicates the
	// set it was made for, and is made again after a renewal.
	setGen []atomic.Uint32

	// fds maps each fd number the poller has registered, or still owns
	// until its release closes it, to its handle; it rejects duplicates
	// across epoll sets, which the kernel cannot see.
	fds *xsync.MapOf[int, Handle]

	// ops fences Add, Modify, Delete, Hold and AfterFunc (readers) against
	// Close, which closes the epoll fds once they have drained.
	ops       *xsync.RBMutex
	closing   atomic.Bool
	closeOnce sync.Once
	done      chan struct{}

	// releasing counts OnRelease calls running now: inCallback looks for
	// one on the caller's stack only when it is not zero.
	releasing atomic.Int64

	added, deleted, releases, panics, closedEarly *xsync.Counter
	earlyWarned                                   atomic.Bool

	base     time.Time // the clock's origin for every ns-since field
	latency  latencyWindow
	ctx      context.Context // parent of registration contexts; cancelled at Close
	cancel   context.CancelFunc
	watchdog chan struct{} // closed to stop the watchdog
	wdDone   chan struct{}

	// statsMu guards the window baselines for utilisation.
	statsMu     sync.Mutex
	windowStart int64
	baseWait    []int64
	baseProc    []int64
}

// New validates opts, creates the epoll sets and starts the waiters.
func New(opts Options) (*Poller, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	if err := normalize(&opts); err != nil {
		return nil, err
	}
	rec, err := newReclaimer(&opts)
	if err != nil {
		return nil, err
	}
	p := &Poller{
		opts:        opts,
		timeoutMs:   -1,
		rec:         testHookReclaimer(rec),
		wakefd:      -1,
		own:         xsync.NewMapOf[int, string](),
		fds:         xsync.NewMapOf[int, Handle](),
		ops:         xsync.NewRBMutex(),
		done:        make(chan struct{}),
		added:       xsync.NewCounter(),
		deleted:     xsync.NewCounter(),
		releases:    xsync.NewCounter(),
		panics:      xsync.NewCounter(),
		closedEarly: xsync.NewCounter(),
		base:        time.Now(),
		watchdog:    make(chan struct{}),
		wdDone:      make(chan struct{}),
		baseWait:    make([]int64, opts.MaxWaiters),
		baseProc:    make([]int64, opts.MaxWaiters),
	}
	p.hq.efd = -1
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if opts.WaitTimeout > 0 {
		p.timeoutMs = int((opts.WaitTimeout + time.Millisecond - 1) / time.Millisecond)
	}
	if err := p.setup(); err != nil {
		p.teardown()
		p.rec.Close()
		p.cancel()
		return nil, err
	}
	// The waiters that are not running yet are not participants.
	for i := opts.Waiters; i < opts.MaxWaiters; i++ {
		p.rec.Leave(i)
	}
	p.highWater.Store(int32(opts.Waiters))
	p.procs = int32(runtime.GOMAXPROCS(0))
	p.nrunning.Store(int32(opts.Waiters))
	p.wg.Add(opts.Waiters)
	for i := range opts.Waiters {
		p.waiters[i].running.Store(true)
		go p.run(&p.waiters[i])
	}
	if p.mon != nil {
		go p.monitor()
	}
	if opts.ReleaseWatchdog > 0 {
		go p.watch()
	} else {
		close(p.wdDone)
	}
	return p, nil
}

// setup creates the epoll sets, the wake eventfd and the mailboxes.
func (p *Poller) setup() error {
	var err error
	if p.wakefd, err = newEventfd(); err != nil {
		return err
	}
	p.own.Store(p.wakefd, "wake-up eventfd")
	sets := 1
	if p.opts.Topology != Shared {
		sets = p.opts.Waiters
	}
	p.mail = make([]mailbox, sets)
	for i := range p.mail {
		p.mail[i].efd = -1
	}
	for i := range sets {
		epfd, err := epollCreate()
		if err != nil {
			return err
		}
		p.epfds = append(p.epfds, epfd)
		p.own.Store(epfd, "epoll set")
		if err := epollAdd(epfd, p.wakefd, uint32(Readable), wakeHandle); err != nil {
			return fmt.Errorf("poller: register wake eventfd: %w", err)
		}
		if p.mail[i].efd, err = newEventfd(); err != nil {
			return err
		}
		p.own.Store(p.mail[i].efd, "timer mailbox eventfd")
		if err := epollAdd(epfd, p.mail[i].efd, uint32(Readable), mailHandle); err != nil {
			return fmt.Errorf("poller: register mailbox eventfd: %w", err)
		}
	}
	handoffs := p.opts.Topology != PerWaiter && p.opts.Overrun > 0
	if handoffs {
		if p.hq.efd, err = newEventfd(); err != nil {
			return err
		}
		p.own.Store(p.hq.efd, "hand-off eventfd")
		for _, epfd := range p.epfds {
			if err := p.addHandoff(epfd); err != nil {
				return err
			}
		}
		p.mon = newMonitor(p.opts.Overrun, sets)
		if p.mon.alarm, err = newAlarm(); err != nil {
			return err
		}
		p.own.Store(p.mon.alarm.fd, "timerfd (the monitor's alarm)")
	}
	p.waiters = make([]waiter, p.opts.MaxWaiters)
	for i := range p.waiters {
		w := &p.waiters[i]
		w.id = i
		w.name = fmt.Sprintf("waiter-%d", i)
		w.set = i % sets
		w.epfd = p.epfds[w.set]
		w.on.Store(int32(w.set))
		w.b.init(p.opts.MaxEvents, handoffs)
		w.attach = make(chan struct{}, 1)
	}
	p.setGen = make([]atomic.Uint32, sets)
	for i := range p.opts.Waiters {
		if err := p.park(&p.waiters[i]); err != nil {
			return err
		}
	}
	return nil
}

// park makes waiter w's parker (the first time) and has it watch w's set.
// The parker's fd is the poller's own.
func (p *Poller) park(w *waiter) error {
	if w.parker == nil {
		k, err := newParker()
		if err != nil {
			return err
		}
		p.own.Store(k.fd, "epoll set (a waiter's parker)")
		w.parker = k
	}
	w.parkGen = p.setGen[w.set].Load()
	return w.parker.watch(w.epfd)
}

// addHandoff adds the hand-off eventfd to epoll set epfd: in every set of a
// Stealing topology, where it wakes one waiter of one set.
func (p *Poller) addHandoff(epfd int) error {
	bits := uint32(Readable)
	if len(p.epfds) > 1 {
		bits |= exclusive
	}
	if err := epollAdd(epfd, p.hq.efd, bits, handoffHandle); err != nil {
		return fmt.Errorf("poller: register hand-off eventfd: %w", err)
	}
	return nil
}

// teardown closes the epoll sets and the eventfds.
func (p *Poller) teardown() {
	for i := range p.waiters {
		if k := p.waiters[i].parker; k != nil {
			k.close()
		}
	}
	for _, fd := range p.epfds {
		closeFD(fd)
	}
	p.epfds = nil
	if p.wakefd >= 0 {
		closeFD(p.wakefd)
		p.wakefd = -1
	}
	for i := range p.mail {
		p.mail[i].close()
	}
	if p.hq.efd >= 0 {
		closeFD(p.hq.efd)
		p.hq.efd = -1
	}
	if p.mon != nil && p.mon.alarm != nil {
		p.mon.alarm.close()
		p.mon.alarm = nil
	}
}

// now is the poller's clock: nanoseconds since New, monotonic.
func (p *Poller) now() int64 { return int64(time.Since(p.base)) }

// MaxWaiters returns the most waiters the poller may run
// (Options.MaxWaiters, or Waiters on per-waiter sets): every Event.Waiter
// is below it, so per-waiter state can be a slice of this length.
func (p *Poller) MaxWaiters() int { return len(p.waiters) }

// Waiters returns the number of waiter goroutines running now: Waiters,
// and on a shared set the extra ones started while all were blocked.
func (p *Poller) Waiters() int {
	n := 0
	for i := range int(p.highWater.Load()) {
		if p.waiters[i].running.Load() {
			n++
		}
	}
	return n
}

// enter takes the ops fence; it fails once Close has begun.
func (p *Poller) enter() (*xsync.RToken, error) {
	if p.closing.Load() {
		return nil, ErrClosed
	}
	t := p.ops.RLock()
	if p.closing.Load() {
		p.ops.RUnlock(t)
		return nil, ErrClosed
	}
	return t, nil
}

func (p *Poller) reportPanic(h Handle, v any) {
	p.panics.Inc()
	stack := debug.Stack()
	if p.opts.OnPanic != nil {
		p.opts.OnPanic(h, v, stack)
		return
	}
	p.opts.Logger.Error("poller: callback panicked", "handle", h.String(), "panic", fmt.Sprint(v), "stack", string(stack))
}

// Close stops and joins every waiter, releases every registration (pending
// and live ones, each exactly once), closes owned fds and the epoll sets.
// It is idempotent. It does not wait for holds: a registration still held
// is released when its last hold goes. Called from OnEvent or OnRelease it
// starts the shutdown and returns without waiting for it, which would wait
// for itself; Done reports when it has finished.
func (p *Poller) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		go p.shutdown()
	})
	if !p.inCallback() {
		<-p.done
	}
	return nil
}

// Done returns a channel closed when Close has finished.
func (p *Poller) Done() <-chan struct{} { return p.done }

// shutdown is Close's work, on a goroutine of its own.
func (p *Poller) shutdown() {
	defer close(p.done)
	p.cancel()
	p.ops.Lock() // wait for Add, Modify, Delete, Hold, AfterFunc in flight
	//lint:ignore SA2001 the empty critical section is that fence
	p.ops.Unlock()
	if p.mon != nil {
		close(p.mon.stop) // no waiter starts after this
		<-p.mon.done
	}
	signal(p.wakefd)
	p.wg.Wait()
	close(p.watchdog)
	<-p.wdDone
	p.rec.Close() // runs every pending release
	// The waiters are gone, so live registrations need no grace period.
	for i := range p.tab.used() {
		s := p.tab.get(i)
		if v := s.load(); v.life() == lifeActive {
			if p.end(s, v.gen(), Closed) {
				p.release(s)
			}
		}
	}
	p.teardown()
}

// InCallback reports whether the caller runs inside one of this poller's
// callbacks: OnEvent or a timer function on a waiter, or an OnRelease. A
// layer built on the poller uses it to refuse, or to hand to another
// goroutine, a call that would wait for the callback itself. It costs a
// stack walk: call it on such calls only, never per event.
func (p *Poller) InCallback() bool { return p.inCallback() }

// inCallback reports whether the caller is one of this poller's waiters
// (in OnEvent or a timer) or is running an OnRelease. It costs a stack
// walk, so only calls that would otherwise wait for themselves (Close,
// Barrier) make it; nothing on the event or release path pays for it.
func (p *Poller) inCallback() bool {
	if p.releasing.Load() > 0 && onStack(runOnRelease) {
		// Some OnRelease is on this stack, and this poller runs one: a
		// release of another poller at the same moment would be taken
		// for ours, which only makes Barrier refuse, never deadlock.
		return true
	}
	id := goid()
	for i := range p.waiters {
		if p.waiters[i].goid.Load() == id {
			return true
		}
	}
	return false
}

// onStack reports whether a frame of fn is on the calling goroutine's
// stack.
func onStack(fn func(*Poller, func(Released), Released)) bool {
	entry := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Entry()
	var pcs [64]uintptr
	for skip := 2; ; skip += len(pcs) {
		n := runtime.Callers(skip, pcs[:])
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if f.Entry == entry {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
	}
}
