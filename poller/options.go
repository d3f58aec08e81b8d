package poller

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/gracepoll/gracepoll/passbuck"
	"github.com/gracepoll/gracepoll/reclaim"
)

// Topology says how registrations map to epoll sets.
type Topology int

const (
	// PerWaiter (the default) gives each waiter its own epoll set; a
	// registration belongs to the waiter with the fewest registrations
	// when it is added (or the one Registration.Waiter names), and only
	// that waiter dispatches it, so serialisation is free: no re-arm, no
	// atomic per event. It is what gnet and netpoll do with their loops.
	PerWaiter Topology = iota
	// Shared is one epoll set that every waiter waits on: any waiter may
	// dispatch any registration, which balances uneven load. A waiter
	// blocked in one handler hands the rest of its batch to the others,
	// and when all block another waiter starts (Options.Overrun,
	// Options.MaxWaiters), so a slow or blocking handler delays only its
	// own registration. Choose it for handlers of uneven cost or that may
	// block; PerWaiter for uniform, tiny handlers. Serialisation costs an
	// EPOLLONESHOT re-arm syscall per event for level-triggered
	// registrations, an atomic pending bit for edge-triggered ones, and
	// every waiter contends for the one set's locks in the kernel.
	Shared
	// Stealing gives each waiter its own epoll set, as PerWaiter does
	// (a registration's home is the waiter Registration.Waiter picks), but
	// any waiter may dispatch any registration, serialised by the running
	// bit as on a shared set: the rest of a blocked waiter's batch is
	// handed off, and while every waiter of a set is blocked another
	// starts on that set (Options.Overrun, Options.MaxWaiters), so events
	// float only when a waiter is stuck: work stealing, as in ZygOS. It
	// dispatches at about the speed of PerWaiter, with no re-arm and no
	// shared kernel lock; the price is that a blocked waiter's other
	// registrations wait until the monitor notices it, an Overrun and
	// some tens of microseconds, where a shared set gives them to a free
	// waiter at once.
	Stealing
)

// String returns "shared", "per-waiter" or "stealing".
func (t Topology) String() string {
	switch t {
	case Shared:
		return "shared"
	case PerWaiter:
		return "per-waiter"
	case Stealing:
		return "stealing"
	}
	return fmt.Sprintf("Topology(%d)", int(t))
}

// MarshalText returns the name String gives a known topology, for flags
// (flag.TextVar) and configuration files.
func (t Topology) MarshalText() ([]byte, error) {
	if t < PerWaiter || t > Stealing {
		return nil, fmt.Errorf("%w: unknown Topology %d", ErrInvalid, int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText sets t from "per-waiter", "shared" or "stealing".
func (t *Topology) UnmarshalText(text []byte) error {
	for _, v := range []Topology{PerWaiter, Shared, Stealing} {
		if string(text) == v.String() {
			*t = v
			return nil
		}
	}
	return fmt.Errorf("%w: unknown topology %q, want per-waiter, shared or stealing", ErrInvalid, text)
}

// Limits enforced by New.
const (
	MaxWaiters     = 1024
	MaxMaxEvents   = 1 << 16
	MaxWaitTimeout = time.Hour
)

// DefaultOverrun is Options.Overrun's default: a handler running longer
// than this is no longer a short callback, most likely blocked.
const DefaultOverrun = 250 * time.Microsecond

// DefaultReleaseWatchdog is the watchdog threshold when
// Options.ReleaseWatchdog is 0.
const DefaultReleaseWatchdog = 10 * time.Second

// Options configures a Poller. The zero value is a good default: GOMAXPROCS
// waiters each on its own epoll set, blocking without timeout,
// pass-the-buck reclamation that skips offline waiters.
type Options struct {
	// Waiters is the number of waiter goroutines; 0 means GOMAXPROCS.
	Waiters int
	// WaitTimeout bounds each epoll_wait; 0 blocks indefinitely. It is
	// rounded up to a whole millisecond. Only a reclaimer that needs
	// every waiter to wake up (reclaim.NeedsQuiesce) needs it.
	WaitTimeout time.Duration
	// MaxEvents is the number of events one epoll_wait may return; 0
	// means 128.
	MaxEvents int
	// Topology is PerWaiter (default), Shared or Stealing.
	Topology Topology
	// Reclaimer makes the deferred reclaimer, with one participant per
	// waiter that may run (MaxWaiters: those not running have left, see
	// reclaim.Reclaimer's Leave and Join); nil means pass-the-buck
	// skipping offline waiters, passbuck.Factory(passbuck.Options{}). Any
	// reclaimer that passes package reclaimtest's conformance suite may be
	// plugged in, such as epoch.Factory(epoch.Options{}), or the original
	// pass-the-buck scheme, passbuck.Factory(passbuck.Options{Mode:
	// passbuck.Classic}), which needs WaitTimeout > 0 and releases in about
	// Waiters/2 timeouts.
	Reclaimer reclaim.Factory
	// LockOSThread wires each waiter goroutine to its own OS thread.
	LockOSThread bool
	// OnPanic, if set, is called with the handle, the recovered value and
	// the stack of a panic in OnEvent, OnRelease or a timer function.
	// When nil the panic is logged to Logger. Either way the poller goes
	// on, and a registration whose OnEvent panicked is deleted.
	OnPanic func(h Handle, value any, stack []byte)
	// Logger receives the watchdog's reports, misuse reports and
	// unhandled panics; nil means slog.Default(). conn.Options.Logger
	// and httpd.Server.ErrorLog flow into it when it is nil.
	Logger *slog.Logger
	// ReleaseWatchdog reports releases pending longer than this, one line
	// per cause with a count: a waiter that has not passed a quiescent
	// point (a callback blocked on it), holds, the registration's own
	// handler still running, or OnRelease; again when a cause's count
	// doubles. It never releases early. 0 means 10 s; negative disables
	// the watchdog.
	ReleaseWatchdog time.Duration
	// Overrun is how long one OnEvent call (or timer function) may run
	// on a shared set (Shared or Stealing) before its waiter counts as
	// blocked. The events of a blocked waiter's batch that it has not
	// reached go to other waiters, which validate and dispatch them like
	// fresh ones; the blocked waiter is detached (taken offline in the
	// reclaimer until its handler returns, so that releases of other
	// registrations do not wait for it); and when every waiter of an
	// epoll set is blocked while events wait, another waiter starts on
	// it, up to MaxWaiters. 0 means DefaultOverrun; negative turns all
	// three off. With PerWaiter it is ignored: a registration's events can
	// only go to its own waiter, and a handler that blocks holds back
	// every release until it returns.
	Overrun time.Duration
	// MaxWaiters bounds the waiters of a shared set (Shared or Stealing),
	// counting the extra ones started when all are blocked; 0 means 16 ×
	// Waiters (at most the package's MaxWaiters). An extra waiter retires
	// once no waiter has been blocked for 4000 Overruns (a second at the
	// default), and with Stealing as soon as a waiter started before it
	// on its set is free again. With PerWaiter it must be 0 or Waiters.
	MaxWaiters int
	// TimeHandlers measures every OnEvent call, for
	// RegistrationStats.HandlerTime: one clock read per event, a few
	// percent of dispatch on VMs with a slow clock source. Per-waiter
	// processing and waiting times are always measured, per batch.
	TimeHandlers bool
}

// normalize validates o and fills in defaults.
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
	case o.Topology < PerWaiter || o.Topology > Stealing:
		return bad("unknown Options.Topology %d", int(o.Topology))
	case o.Overrun > MaxWaitTimeout:
		return bad("Options.Overrun = %v, want at most %v", o.Overrun, MaxWaitTimeout)
	case o.MaxWaiters < 0 || o.MaxWaiters > MaxWaiters:
		return bad("Options.MaxWaiters = %d, want 0..%d", o.MaxWaiters, MaxWaiters)
	case o.ReleaseWatchdog > MaxWaitTimeout*24:
		return bad("Options.ReleaseWatchdog = %v, want at most %v", o.ReleaseWatchdog, MaxWaitTimeout*24)
	}
	if o.Waiters == 0 {
		o.Waiters = runtime.GOMAXPROCS(0)
	}
	switch {
	case o.Topology == PerWaiter && o.MaxWaiters != 0 && o.MaxWaiters != o.Waiters:
		return bad("Options.MaxWaiters = %d with PerWaiter, want 0 or Waiters (%d): only a shared set can grow", o.MaxWaiters, o.Waiters)
	case o.MaxWaiters != 0 && o.MaxWaiters < o.Waiters:
		return bad("Options.MaxWaiters = %d, below Options.Waiters = %d", o.MaxWaiters, o.Waiters)
	case o.Topology == PerWaiter || o.Overrun < 0:
		o.MaxWaiters = o.Waiters
	case o.MaxWaiters == 0:
		o.MaxWaiters = min(16*o.Waiters, MaxWaiters)
	}
	if o.Overrun == 0 {
		o.Overrun = DefaultOverrun
	}
	if o.MaxEvents == 0 {
		o.MaxEvents = 128
	}
	if o.ReleaseWatchdog == 0 {
		o.ReleaseWatchdog = DefaultReleaseWatchdog
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// newReclaimer makes o's reclaimer and checks it can work with o.
func newReclaimer(o *Options) (reclaim.Reclaimer, error) {
	f := o.Reclaimer
	if f == nil {
		f = passbuck.Factory(passbuck.Options{})
	}
	rec, err := f(o.MaxWaiters)
	if err != nil {
		return nil, fmt.Errorf("%w: Options.Reclaimer: %w", ErrInvalid, err)
	}
	if rec == nil || rec.Participants() != o.MaxWaiters {
		if rec != nil {
			rec.Close()
		}
		return nil, fmt.Errorf("%w: Options.Reclaimer made no reclaimer with %d participants", ErrInvalid, o.MaxWaiters)
	}
	if reclaim.NeedsQuiesce(rec) && o.WaitTimeout == 0 {
		rec.Close()
		return nil, fmt.Errorf("%w: this reclaimer needs Options.WaitTimeout > 0: it completes a grace period only when every waiter wakes up, and a waiter blocked in epoll_wait without a timeout never does", ErrInvalid)
	}
	return rec, nil
}
