//go:build linux

package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"
	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

// Reserved handles, of generation 0, which no registration has: the
// eventfd that Close writes to wake every waiter, and each epoll set's
// mailbox eventfd, which says fired timers are waiting.
const (
	wakeHandle = Handle(math.MaxUint32)
	mailHandle = Handle(math.MaxUint32 - 1)
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
	waiters   []waiter
	wg        sync.WaitGroup

	// fds maps each fd number the poller has registered, or still owns
	// until its release closes it, to its handle; it rejects duplicates
	// across epoll sets, which the kernel cannot see.
	fds *xsync.MapOf[int, Handle]

	// ops fences Add, Modify and Delete (readers) against Close, which
	// closes the epoll fds once they have drained.
	ops       *xsync.RBMutex
	closing   atomic.Bool
	closeOnce sync.Once
	done      chan struct{}

	// releasing holds the goroutine ids running OnRelease, so that Close
	// and Barrier can refuse to wait for themselves.
	releasing *xsync.MapOf[int64, int]

	added, deleted, releases, panics *xsync.Counter

	base     time.Time // the clock's origin for every *At field
	logger   *slog.Logger
	mail     []mailbox // one per epoll set
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

// mailbox carries fired timers to the waiters of one epoll set.
type mailbox struct {
	efd int
	mu  sync.Mutex
	q   []posted
}

type posted struct {
	s *slot
	h Handle
}

// waiter is one waiter goroutine's state, padded against false sharing.
// Its counters are written only by that goroutine, once per epoll_wait.
type waiter struct {
	id       int
	name     string
	set      int // index of its epoll set and mailbox
	epfd     int
	goid     atomic.Int64
	tid      atomic.Int64
	attached atomic.Int64 // registrations it owns (PerWaiter)
	events   atomic.Uint64
	calls    uint64 // OnEvent calls in the current batch; this goroutine only
	stale    atomic.Uint64
	wakeups  atomic.Uint64
	waitNs   atomic.Int64 // total time in epoll_wait
	procNs   atomic.Int64 // total time outside it
	// phase is +t while waiting since t, -t while processing since t (ns
	// since Poller.base), 0 once stopped: Stats adds the running phase.
	phase atomic.Int64
	_     [64]byte
}

// New validates opts, creates the epoll sets and starts the waiters.
func New(opts Options) (*Poller, error) {
	if err := normalize(&opts); err != nil {
		return nil, err
	}
	p := &Poller{
		opts:      opts,
		timeoutMs: -1,
		fds:       xsync.NewMapOf[int, Handle](),
		ops:       xsync.NewRBMutex(),
		done:      make(chan struct{}),
		releasing: xsync.NewMapOf[int64, int](),
		added:     xsync.NewCounter(),
		deleted:   xsync.NewCounter(),
		releases:  xsync.NewCounter(),
		panics:    xsync.NewCounter(),
		wakefd:    -1,
		base:      time.Now(),
		logger:    opts.Logger,
		watchdog:  make(chan struct{}),
		wdDone:    make(chan struct{}),
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if opts.WaitTimeout > 0 {
		p.timeoutMs = int((opts.WaitTimeout + 999_999) / 1_000_000)
	}
	var err error
	switch opts.Reclaimer {
	case PassBuck:
		p.rec, err = passbuck.New(opts.Waiters, passbuck.Options{Mode: passbuck.SkipOffline})
	case PassBuckClassic:
		p.rec, err = passbuck.New(opts.Waiters, passbuck.Options{Mode: passbuck.Classic})
	case Epoch:
		p.rec, err = epoch.New(opts.Waiters, epoch.Options{})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := p.setup(); err != nil {
		p.teardown()
		p.rec.Close()
		p.cancel()
		return nil, err
	}
	p.baseWait = make([]int64, opts.Waiters)
	p.baseProc = make([]int64, opts.Waiters)
	p.wg.Add(opts.Waiters)
	for i := range p.waiters {
		go p.run(&p.waiters[i])
	}
	if opts.ReleaseWatchdog > 0 {
		go p.watch()
	} else {
		close(p.wdDone)
	}
	return p, nil
}

// now is the poller's clock: nanoseconds since New, monotonic.
func (p *Poller) now() int64 { return int64(time.Since(p.base)) }

func normalize(o *Options) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case o.Waiters < 0 || o.Waiters > MaxWaiters:
		return bad("Options.Waiters = %d, want 0..%d", o.Waiters, MaxWaiters)
	case o.WaitTimeout < 0 || o.WaitTimeout > MaxWaitTimeout:
		return bad("Options.WaitTimeout = %v, want 0..%v", o.WaitTimeout, MaxWaitTimeout)
	case o.MaxEvents < 0 || o.MaxEvents > MaxMaxEvents:
		return bad("Options.MaxEvents = %d, want 0..%d", o.MaxEvents, MaxMaxEvents)
	case o.Topology != Shared && o.Topology != PerWaiter:
		return bad("unknown Options.Topology %d", int(o.Topology))
	case o.Reclaimer != PassBuck && o.Reclaimer != PassBuckClassic && o.Reclaimer != Epoch:
		return bad("unknown Options.Reclaimer %d", int(o.Reclaimer))
	case o.ReleaseWatchdog > MaxWaitTimeout*24:
		return bad("Options.ReleaseWatchdog = %v, want at most %v", o.ReleaseWatchdog, MaxWaitTimeout*24)
	case o.Reclaimer == PassBuckClassic && o.WaitTimeout == 0:
		return bad("the classic pass-the-buck reclaimer needs Options.WaitTimeout > 0: a waiter blocked in epoll_wait forever never passes the buck")
	}
	if o.Waiters == 0 {
		o.Waiters = runtime.GOMAXPROCS(0)
	}
	if o.MaxEvents == 0 {
		o.MaxEvents = 128
	}
	if o.ReleaseWatchdog == 0 {
		o.ReleaseWatchdog = DefaultReleaseWatchdog
	}
	return nil
}

func (p *Poller) setup() error {
	var err error
	p.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("poller: eventfd: %w", err)
	}
	sets := 1
	if p.opts.Topology == PerWaiter {
		sets = p.opts.Waiters
	}
	p.mail = make([]mailbox, sets)
	for i := range p.mail {
		p.mail[i].efd = -1
	}
	for i := range sets {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return fmt.Errorf("poller: epoll_create1: %w", err)
		}
		p.epfds = append(p.epfds, epfd)
		ev := unix.EpollEvent{Events: unix.EPOLLIN}
		setData(&ev, wakeHandle)
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, p.wakefd, &ev); err != nil {
			return fmt.Errorf("poller: register wake eventfd: %w", err)
		}
		mfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return fmt.Errorf("poller: eventfd: %w", err)
		}
		p.mail[i].efd = mfd
		setData(&ev, mailHandle)
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, mfd, &ev); err != nil {
			return fmt.Errorf("poller: register mailbox eventfd: %w", err)
		}
	}
	p.waiters = make([]waiter, p.opts.Waiters)
	for i := range p.waiters {
		w := &p.waiters[i]
		w.id = i
		w.name = fmt.Sprintf("waiter-%d", i)
		w.set = i % sets
		w.epfd = p.epfds[w.set]
	}
	return nil
}

// teardown closes the epoll sets and the wake eventfd.
func (p *Poller) teardown() {
	for _, fd := range p.epfds {
		unix.Close(fd)
	}
	p.epfds = nil
	if p.wakefd >= 0 {
		unix.Close(p.wakefd)
		p.wakefd = -1
	}
	for i := range p.mail {
		// Under the mailbox's mutex: a timer firing now must not write to
		// a closed fd number, which the kernel may have reused.
		mb := &p.mail[i]
		mb.mu.Lock()
		if mb.efd >= 0 {
			unix.Close(mb.efd)
			mb.efd = -1
		}
		mb.mu.Unlock()
	}
}

func setData(ev *unix.EpollEvent, h Handle) {
	ev.Fd = int32(uint32(h))
	ev.Pad = int32(uint32(h >> 32))
}

func dataOf(ev *unix.EpollEvent) Handle {
	return Handle(uint64(uint32(ev.Pad))<<32 | uint64(uint32(ev.Fd)))
}

// epollBits returns the epoll interest set for ev: level-triggered
// registrations on a shared set are one-shot, re-armed after each dispatch,
// so that only one waiter at a time is handed the fd.
func (p *Poller) epollBits(ev Events) uint32 {
	bits := uint32(ev)
	if p.opts.Topology == Shared && ev&EdgeTriggered == 0 {
		bits |= unix.EPOLLONESHOT
	}
	return bits
}

func (p *Poller) epfdOf(s *slot) int {
	if s.waiter >= 0 {
		return p.waiters[s.waiter].epfd
	}
	return p.epfds[0]
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

// Add registers reg and returns its handle.
func (p *Poller) Add(reg Registration) (Handle, error) {
	switch {
	case reg.FD < 0:
		return 0, fmt.Errorf("%w: negative fd %d", ErrInvalid, reg.FD)
	case reg.OnEvent == nil:
		return 0, fmt.Errorf("%w: nil OnEvent for fd %d", ErrInvalid, reg.FD)
	case reg.Events&^registrable != 0:
		return 0, fmt.Errorf("%w: unsupported event bits %v", ErrInvalid, reg.Events&^registrable)
	case reg.Waiter < 0 || int(reg.Waiter) > len(p.waiters):
		return 0, fmt.Errorf("%w: Registration.Waiter names waiter %d of %d", ErrInvalid, int(reg.Waiter)-1, len(p.waiters))
	}
	tok, err := p.enter()
	if err != nil {
		return 0, err
	}
	defer p.ops.RUnlock(tok)
	if _, loaded := p.fds.LoadOrStore(reg.FD, 0); loaded {
		return 0, fmt.Errorf("%w: fd %d is already registered (or owned until its release)", ErrInvalid, reg.FD)
	}
	idx, ok := p.tab.alloc()
	if !ok {
		p.fds.Delete(reg.FD)
		return 0, fmt.Errorf("poller: slot table full: %w", unix.ENOSPC)
	}
	s := p.tab.get(idx)
	gen := genOf(s.state.Load())
	h := makeHandle(idx, gen)
	s.fd, s.closeFD, s.onEvent, s.onRelease = reg.FD, reg.CloseFD, reg.OnEvent, reg.OnRelease
	s.addedAt = p.now()
	s.waiter = -1
	if p.opts.Topology == PerWaiter {
		s.waiter = int(reg.Waiter) - 1
		if reg.Waiter == LeastLoaded {
			s.waiter = p.leastLoaded()
		}
		s.attached = true
		p.waiters[s.waiter].attached.Add(1)
	}
	s.events.Store(uint32(reg.Events))
	p.fds.Store(reg.FD, h)
	// Read the slot before publishing it: once EPOLL_CTL_ADD has run, a
	// waiter may deliver an event, delete and release the registration,
	// and clear the slot, ordered after this goroutine only through the
	// kernel, which the race detector cannot see.
	epfd := p.epfdOf(s)
	s.state.Store(word(gen, stActive)) // publishes the fields above
	ev := unix.EpollEvent{Events: p.epollBits(reg.Events)}
	setData(&ev, h)
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, reg.FD, &ev); err != nil {
		// The kernel never saw h, so no event can carry it: free the slot
		// at once, same generation. A Delete that guessed the unissued
		// handle may have claimed it meanwhile; its release then owns it.
		if s.state.CompareAndSwap(word(gen, stActive), word(gen, stFree)) {
			if s.waiter >= 0 {
				p.waiters[s.waiter].attached.Add(-1)
			}
			s.clear()
			p.tab.recycle(idx)
			p.fds.Delete(reg.FD)
		}
		switch err {
		case unix.EBADF:
			return 0, fmt.Errorf("%w: fd %d is not open: %w", ErrInvalid, reg.FD, err)
		case unix.EPERM:
			return 0, fmt.Errorf("%w: fd %d does not support epoll: %w", ErrInvalid, reg.FD, err)
		case unix.EEXIST, unix.EINVAL, unix.ELOOP:
			return 0, fmt.Errorf("%w: fd %d: %w", ErrInvalid, reg.FD, err)
		}
		return 0, fmt.Errorf("poller: add fd %d: %w", reg.FD, err)
	}
	p.added.Inc()
	return h, nil
}

// clear resets a slot for its next registration. Only its owner touches
// it: Add before publishing, or the release after the grace period.
func (s *slot) clear() {
	s.fd, s.closeFD, s.onEvent, s.onRelease = -1, false, nil, nil
	s.waiter, s.reason, s.attached, s.addedAt = -1, Deleted, false, 0
	s.pend.Store(0)
	s.lastWaiter.Store(-1)
	s.nEvents.Store(0)
	s.handlerNs.Store(0)
	s.bytesIn.Store(0)
	s.bytesOut.Store(0)
	s.deletedAt.Store(0)
	s.warned.Store(false)
}

// leastLoaded returns the waiter with the fewest registrations.
func (p *Poller) leastLoaded() int {
	best, min := 0, p.waiters[0].attached.Load()
	for i := 1; i < len(p.waiters); i++ {
		if n := p.waiters[i].attached.Load(); n < min {
			best, min = i, n
		}
	}
	return best
}

// lookup returns h's slot, or nil if h was never issued.
func (p *Poller) lookup(h Handle) *slot {
	if h.Gen() == 0 {
		return nil
	}
	return p.tab.get(h.Slot())
}

// Modify replaces the interest set of h.
func (p *Poller) Modify(h Handle, events Events) error {
	if events&^registrable != 0 {
		return fmt.Errorf("%w: unsupported event bits %v", ErrInvalid, events&^registrable)
	}
	tok, err := p.enter()
	if err != nil {
		return err
	}
	defer p.ops.RUnlock(tok)
	s := p.lookup(h)
	if s == nil {
		return ErrStale
	}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	w := s.state.Load()
	if genOf(w) != h.Gen() || w&stMask != stActive {
		return ErrStale
	}
	s.events.Store(uint32(events))
	ev := unix.EpollEvent{Events: p.epollBits(events)}
	setData(&ev, h)
	if err := unix.EpollCtl(p.epfdOf(s), unix.EPOLL_CTL_MOD, s.fd, &ev); err != nil {
		return fmt.Errorf("poller: modify fd %d: %w", s.fd, err)
	}
	return nil
}

// Delete ends registration h. It returns at once: the fd leaves epoll
// before Delete returns, OnRelease runs later on another goroutine, or on a
// waiter, after every waiter has passed a quiescent point. It may be called
// from any goroutine, OnEvent included. A second Delete, or a Delete of a
// stale handle, returns ErrStale. If the caller closed the fd already, the
// lifecycle still completes.
//
// An OnEvent call dispatched before Delete may still be running, or even
// start, after Delete returns; every such call is over once OnRelease
// starts. So close or reuse an fd you own (CloseFD false) only in or after
// OnRelease, or hand it to the poller with CloseFD: otherwise that late
// handler may read from whatever the kernel gives the number to next.
func (p *Poller) Delete(h Handle) error {
	tok, err := p.enter()
	if err != nil {
		return err
	}
	defer p.ops.RUnlock(tok)
	s := p.lookup(h)
	if s == nil || !p.claim(s, h, Deleted) {
		return ErrStale
	}
	p.unregister(s, h)
	p.retire(s, h)
	return nil
}

// claim moves h's slot from active to released, keeping the dispatch bits;
// only one caller can win it.
func (p *Poller) claim(s *slot, h Handle, why Reason) bool {
	for {
		w := s.state.Load()
		if genOf(w) != h.Gen() || w&stMask != stActive {
			return false
		}
		if s.state.CompareAndSwap(w, w&^stMask|stReleased) {
			s.reason = why
			s.deletedAt.Store(p.now())
			p.deleted.Inc()
			p.stopWork(s)
			return true
		}
	}
}

// unregister removes a claimed registration's fd from epoll. EBADF and
// ENOENT mean the user closed the fd already, and epoll dropped it: the
// lifecycle goes on either way.
func (p *Poller) unregister(s *slot, h Handle) {
	s.ctlMu.Lock()
	unix.EpollCtl(p.epfdOf(s), unix.EPOLL_CTL_DEL, s.fd, nil)
	s.ctlMu.Unlock()
	if !s.closeFD {
		p.forgetFD(s.fd, h)
	}
}

func (p *Poller) forgetFD(fd int, h Handle) {
	p.fds.Compute(fd, func(old Handle, loaded bool) (Handle, bool) {
		return old, !loaded || old == h
	})
}

// retire hands a claimed slot to the reclaimer.
func (p *Poller) retire(s *slot, h Handle) {
	if mutation == mutNoGrace {
		go p.release(s, h)
		return
	}
	if err := p.rec.Retire(func() { p.release(s, h) }); err != nil {
		// Only after the reclaimer closed, when the waiters are gone:
		// no grace period is needed.
		go p.release(s, h)
	}
}

// release finishes a registration after its grace period: unless holds
// remain (then the last one retires it again), it moves the slot to
// freeing, runs OnRelease, closes an owned fd, detaches the registration
// from its waiter, then bumps the generation and recycles the slot.
func (p *Poller) release(s *slot, h Handle) { p.releaseOn(s, h, false) }

// releaseOn is release; marked says the calling goroutine is already known
// to be in a callback.
func (p *Poller) releaseOn(s *slot, h Handle, marked bool) {
	for {
		v := s.state.Load()
		if holdsOf(v) > 0 {
			if s.state.CompareAndSwap(v, v|bitWaitHolds) {
				return
			}
			continue
		}
		if s.state.CompareAndSwap(v, v&^(stMask|bitWaitHolds)|stFreeing) {
			break
		}
	}
	p.latency.add(time.Duration(p.now() - s.deletedAt.Load()))
	if s.onRelease != nil {
		r := Released{Handle: h, FD: s.fd, Reason: s.reason}
		r.Waiter, r.Registration = p.regStats(s)
		if r.Waiter >= 0 {
			r.WaiterStats = p.waiterStats(r.Waiter)
		}
		p.callRelease(s, r, marked)
	}
	if s.closeFD {
		// Forget the number before closing it: once closed, the kernel
		// may hand it to the next accept or open at once, and an Add of
		// that new fd must not find the old registration's claim.
		p.forgetFD(s.fd, h)
		unix.Close(s.fd)
	}
	if s.attached {
		p.waiters[s.waiter].attached.Add(-1)
	}
	s.clear()
	if next := h.Gen() + 1; next != 0 {
		s.state.Store(word(next, stFree))
		p.tab.recycle(h.Slot())
	} // else: the generation would wrap; retire the slot for good
	p.releases.Inc()
}

// regStats reads a slot's own counters and its waiter, for Released and
// Info. The caller keeps the slot from being freed.
func (p *Poller) regStats(s *slot) (int, RegistrationStats) {
	w := s.waiter
	if w < 0 {
		w = int(s.lastWaiter.Load())
	}
	return w, RegistrationStats{
		Events:      s.nEvents.Load(),
		BytesIn:     s.bytesIn.Load(),
		BytesOut:    s.bytesOut.Load(),
		HandlerTime: time.Duration(s.handlerNs.Load()),
		Age:         time.Duration(p.now() - s.addedAt),
	}
}

// callRelease runs OnRelease, with the goroutine marked as in a callback
// unless the caller is already (the shutdown goroutine marks itself once).
func (p *Poller) callRelease(s *slot, r Released, marked bool) {
	if !marked {
		id := goid()
		p.releasing.Compute(id, func(n int, _ bool) (int, bool) { return n + 1, false })
		defer p.releasing.Compute(id, func(n int, _ bool) (int, bool) { return n - 1, n == 1 })
	}
	defer func() {
		if v := recover(); v != nil {
			p.reportPanic(r.Handle, v)
		}
	}()
	s.onRelease(r)
}

func (p *Poller) reportPanic(h Handle, v any) {
	p.panics.Inc()
	stack := debug.Stack()
	if p.opts.OnPanic != nil {
		p.opts.OnPanic(h, v, stack)
		return
	}
	p.logger.Error("poller: callback panicked", "handle", h.String(), "panic", fmt.Sprint(v), "stack", string(stack))
}

// run is one waiter's loop.
func (p *Poller) run(w *waiter) {
	defer p.wg.Done()
	if p.opts.LockOSThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		w.tid.Store(int64(unix.Gettid()))
	}
	w.goid.Store(goid())
	evs := make([]unix.EpollEvent, p.opts.MaxEvents)
	// Time is read twice per epoll_wait, never per event (unless
	// TimeHandlers): waiting is the call, processing everything else.
	last := p.now()
	w.phase.Store(-last)
	defer w.phase.Store(0)
	for {
		// Offline is this waiter's quiescent point: it holds no event of
		// the previous batch. It may run releases that completed here.
		p.rec.Offline(w.id)
		t := p.now()
		w.procNs.Add(t - last)
		w.phase.Store(t)
		n, err := unix.EpollWait(w.epfd, evs, p.timeoutMs)
		last = p.now()
		w.waitNs.Add(last - t)
		w.phase.Store(-last)
		p.rec.Online(w.id)
		if p.closing.Load() {
			p.rec.Offline(w.id)
			return
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			// Only a bug can make epoll_wait fail otherwise; report it
			// rather than spin.
			p.reportPanic(0, fmt.Errorf("poller: epoll_wait: %w", err))
			p.rec.Offline(w.id)
			return
		}
		var stale uint64
		for i := range evs[:n] {
			h := dataOf(&evs[i])
			if h == wakeHandle {
				continue
			}
			if h == mailHandle {
				p.deliverTimers(w)
				continue
			}
			s := p.lookup(h)
			if s == nil {
				stale++
				continue
			}
			if !p.dispatch(w, s, h, Events(evs[i].Events)) {
				stale++
			}
		}
		w.wakeups.Add(1)
		// Count OnEvent calls, not validated events: on a shared set an
		// event merged into a running handler's next run, or a final
		// event that lost to a Delete, calls nothing.
		if w.calls != 0 {
			w.events.Add(w.calls)
			w.calls = 0
		}
		if stale != 0 {
			w.stale.Add(stale)
		}
	}
}

// dispatch validates and runs one event (or fired timers) for h's slot, by
// the topology's serialisation. It reports false for a stale event.
func (p *Poller) dispatch(w *waiter, s *slot, h Handle, e Events) bool {
	if p.opts.Topology == Shared {
		return p.dispatchShared(w, s, h, e)
	}
	return p.dispatchOwned(w, s, h, e)
}

// validate is the one validating load after Online: generation and
// lifecycle read together, so the slot cannot be released and reused
// between two reads. It returns the word it read.
func validate(s *slot, gen uint32) (uint64, bool) {
	v := s.state.Load()
	switch mutation {
	case mutTwoLoads:
		g := genOf(v)
		runtime.Gosched() // widen the window the second load opens
		v = s.state.Load()
		return v, g == gen && v&stMask == stActive
	case mutNoValidate:
		return v, true
	}
	return v, genOf(v) == gen && v&stMask == stActive
}

// dispatchOwned runs an event on the registration's own waiter (PerWaiter).
// It reports false for a stale event.
func (p *Poller) dispatchOwned(w *waiter, s *slot, h Handle, e Events) bool {
	if _, ok := validate(s, h.Gen()); !ok {
		return false
	}
	if e&(HangUp|Error) != 0 {
		p.hangUp(w, s, h, e)
		return true
	}
	if p.callEvent(w, s, h, e) {
		p.deleteFromWaiter(s, h, Panicked)
	}
	return true
}

// dispatchShared serialises the registration's OnEvent across waiters with
// the running and pending bits of its state word. It reports false for a
// stale event.
func (p *Poller) dispatchShared(w *waiter, s *slot, h Handle, e Events) bool {
	gen := h.Gen()
	for {
		v, ok := validate(s, gen)
		if !ok {
			return false
		}
		if v&bitRunning != 0 {
			// Another waiter is in OnEvent: leave the events to it.
			s.pend.Or(uint32(e))
			if s.state.CompareAndSwap(v, v|bitPending) {
				return true
			}
			continue
		}
		if s.state.CompareAndSwap(v, v|bitRunning) {
			break
		}
	}
	for {
		if e&(HangUp|Error) != 0 {
			p.hangUp(w, s, h, e)
			p.stopRunning(s)
			return true
		}
		if p.callEvent(w, s, h, e) {
			p.deleteFromWaiter(s, h, Panicked)
		}
		var rerun bool
		e, rerun = p.finishRun(s)
		if !rerun {
			break
		}
	}
	if s.state.Load()&stMask == stActive && Events(s.events.Load())&EdgeTriggered == 0 {
		p.rearm(s, h)
	}
	return true
}

// finishRun clears the running bit, or, if events arrived meanwhile and the
// registration is still active, takes them for another run.
func (p *Poller) finishRun(s *slot) (Events, bool) {
	for {
		v := s.state.Load()
		if v&bitPending != 0 && v&stMask == stActive {
			if s.state.CompareAndSwap(v, v&^bitPending) {
				return Events(s.pend.Swap(0)), true
			}
			continue
		}
		if s.state.CompareAndSwap(v, v&^(bitRunning|bitPending)) {
			return 0, false
		}
	}
}

func (p *Poller) stopRunning(s *slot) {
	for {
		v := s.state.Load()
		if s.state.CompareAndSwap(v, v&^(bitRunning|bitPending)) {
			return
		}
	}
}

// rearm re-enables a one-shot registration after its dispatch.
func (p *Poller) rearm(s *slot, h Handle) {
	s.ctlMu.Lock()
	if s.state.Load()&stMask == stActive && genOf(s.state.Load()) == h.Gen() {
		ev := unix.EpollEvent{Events: p.epollBits(Events(s.events.Load()))}
		setData(&ev, h)
		// ENOENT or EBADF: the user closed the fd; Delete still works.
		unix.EpollCtl(p.epfdOf(s), unix.EPOLL_CTL_MOD, s.fd, &ev)
	}
	s.ctlMu.Unlock()
}

// hangUp delivers a registration's final event: it leaves epoll first, the
// event is delivered once, then the registration is released as if deleted.
func (p *Poller) hangUp(w *waiter, s *slot, h Handle, e Events) {
	if !p.claim(s, h, HungUp) {
		return // deleted meanwhile: no more events
	}
	p.unregister(s, h)
	p.callEvent(w, s, h, e)
	p.retire(s, h)
}

// deleteFromWaiter deletes a registration from inside a waiter, which
// needs no ops fence: Close joins the waiters before closing epoll sets.
func (p *Poller) deleteFromWaiter(s *slot, h Handle, why Reason) {
	if p.claim(s, h, why) {
		p.unregister(s, h)
		p.retire(s, h)
	}
}

// callEvent runs OnEvent and reports whether it panicked.
func (p *Poller) callEvent(w *waiter, s *slot, h Handle, e Events) (panicked bool) {
	if e&timerDue != 0 {
		p.runTimers(s, h)
		if e &^= timerDue; e == 0 {
			return false
		}
	}
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			p.reportPanic(h, v)
		}
	}()
	w.calls++
	s.nEvents.Add(1)
	if s.waiter < 0 && s.lastWaiter.Load() != int32(w.id) {
		s.lastWaiter.Store(int32(w.id))
	}
	if p.opts.TimeHandlers {
		t := p.now()
		defer func() { s.handlerNs.Add(p.now() - t) }()
	}
	s.onEvent(Event{Handle: h, FD: s.fd, Events: e, Waiter: w.id})
	return false
}

// inCallback reports whether the caller is a waiter or is running
// OnRelease.
func (p *Poller) inCallback() bool {
	id := goid()
	for i := range p.waiters {
		if p.waiters[i].goid.Load() == id {
			return true
		}
	}
	_, ok := p.releasing.Load(id)
	return ok
}

// Barrier returns when every release of a registration deleted before the
// call has completed (OnRelease returned, owned fd closed), or when ctx
// ends. Called from OnEvent or OnRelease it returns ErrInCallback instead of
// waiting for itself.
func (p *Poller) Barrier(ctx context.Context) error {
	if p.closing.Load() {
		return ErrClosed
	}
	if p.inCallback() {
		return ErrInCallback
	}
	err := p.rec.Barrier(ctx)
	if errors.Is(err, reclaim.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Close stops and joins every waiter, releases every registration (pending
// and live ones, each exactly once), closes owned fds and the epoll sets.
// It is idempotent. It does not wait for holds: a registration still held
// is released when its last hold goes. Called from OnEvent or OnRelease it starts the shutdown
// and returns without waiting for it, which would wait for itself; Done
// reports when it has finished.
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

func (p *Poller) shutdown() {
	defer close(p.done)
	p.cancel()
	p.ops.Lock() // wait for Add, Modify, Delete, Hold, AfterFunc in flight
	//lint:ignore SA2001 the empty critical section is that fence
	p.ops.Unlock()
	signal(p.wakefd)
	p.wg.Wait()
	close(p.watchdog)
	<-p.wdDone
	// From here this goroutine runs releases (the reclaimer's pending ones,
	// then every live registration's): mark it once as in a callback, so
	// Close or Barrier from OnRelease does not wait for itself, instead
	// of paying for a goroutine id per release.
	me := goid()
	p.releasing.Compute(me, func(n int, _ bool) (int, bool) { return n + 1, false })
	p.rec.Close() // runs every pending release
	for i := range p.tab.used() {
		s := p.tab.get(i)
		v := s.state.Load()
		if v&stMask != stActive {
			continue
		}
		h := makeHandle(i, genOf(v))
		if p.claim(s, h, Closed) {
			if !s.closeFD {
				p.forgetFD(s.fd, h)
			}
			p.releaseOn(s, h, true)
		}
	}
	p.teardown()
}

// signal adds to an eventfd: native-endian 1 on little-endian machines,
// and non-zero, which is all a wake-up needs, elsewhere.
func signal(efd int) {
	one := [8]byte{1}
	unix.Write(efd, one[:])
}
