// Package poller runs N waiter goroutines on epoll and lets any goroutine
// delete a registration while other waiters may still hold events for it.
//
// A registration is identified by a Handle: a slot index and a generation,
// which is what the kernel carries in epoll_event.data (never a pointer).
// Each slot has one atomic state word holding its generation and state; a
// waiter validates every event against that word with a single atomic
// operation after epoll_wait returns, and drops events whose registration
// was deleted or replaced. Delete marks the slot released, removes the fd
// from epoll, and hands the rest of the work (OnRelease, closing an owned
// fd, recycling the slot) to a deferred reclaimer, which runs it only after
// every waiter has passed a quiescent point. Waiters blocked in epoll_wait
// are offline and do not delay it, so no epoll_wait timeout is needed.
//
// Guarantees:
//
//   - An event is delivered only to the registration that was registered
//     when the kernel reported it, never to a later one that reuses the fd
//     number or the slot.
//   - Once a registration's OnRelease has started, its OnEvent never runs
//     again. OnRelease runs exactly once for every registration, those still
//     live at Close included, never inside Delete's call.
//   - An fd the poller owns (Registration.CloseFD) is closed after OnRelease
//     returns and never while a handler may use it.
//   - Two OnEvent calls for one registration never run at the same time, and
//     each happens before the next (the ordering goes through the slot's
//     state word, so the race detector sees it too).
//   - On hang-up or error the registration is removed from epoll before its
//     final event is delivered; that event is delivered once, then the
//     registration is released as if deleted.
//
// A handler that panics does not take the poller down: the panic is
// recovered, reported to Options.OnPanic (or logged with log/slog), and the
// registration is deleted, since its state is suspect.
//
// The package builds on every system; at run time it needs Linux, and New
// returns ErrUnsupported elsewhere.
package poller

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// Sentinel errors. Test with errors.Is; errors caused by a system call also
// wrap its errno (a unix.Errno).
var (
	// ErrClosed reports an operation on a closed poller.
	ErrClosed = errors.New("poller: closed")
	// ErrStale reports a handle that is deleted, released, never issued,
	// or the zero Handle.
	ErrStale = errors.New("poller: stale handle")
	// ErrInvalid reports a bad argument: a bad fd, an fd already
	// registered, unknown event bits, a nil OnEvent, or invalid Options.
	ErrInvalid = errors.New("poller: invalid argument")
	// ErrUnsupported reports a system without epoll.
	ErrUnsupported = errors.New("poller: epoll is not supported on this system")
	// ErrInCallback reports a call that would wait for the calling
	// callback itself to return (Barrier from OnEvent or OnRelease).
	ErrInCallback = errors.New("poller: call would deadlock inside a callback")
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
	// dispatch any registration, which balances uneven load. Serialisation
	// costs an EPOLLONESHOT re-arm syscall per event for level-triggered
	// registrations, an atomic pending bit for edge-triggered ones.
	Shared
)

// String returns "shared" or "per-waiter".
func (t Topology) String() string {
	switch t {
	case Shared:
		return "shared"
	case PerWaiter:
		return "per-waiter"
	}
	return fmt.Sprintf("Topology(%d)", int(t))
}

// ReclaimerKind selects the deferred reclaimer.
type ReclaimerKind int

const (
	// PassBuck is pass-the-buck reclamation that skips offline waiters
	// (package passbuck, SkipOffline mode): releases complete in
	// microseconds with waiters blocked indefinitely.
	PassBuck ReclaimerKind = iota
	// PassBuckClassic is the seed's scheme (passbuck Classic mode): every
	// waiter must wake up to pass the buck, so it needs WaitTimeout > 0 and
	// releases take up to about one timeout.
	PassBuckClassic
	// Epoch is epoch-based quiescent-state reclamation (package
	// reclaim/epoch), with grace periods detected on its own goroutine.
	Epoch
)

// String returns "passbuck", "passbuck-classic" or "epoch".
func (k ReclaimerKind) String() string {
	switch k {
	case PassBuck:
		return "passbuck"
	case PassBuckClassic:
		return "passbuck-classic"
	case Epoch:
		return "epoch"
	}
	return fmt.Sprintf("ReclaimerKind(%d)", int(k))
}

// Limits enforced by New.
const (
	MaxWaiters     = 1024
	MaxMaxEvents   = 1 << 16
	MaxWaitTimeout = time.Hour
)

// Options configures a Poller. The zero value is a good default: GOMAXPROCS
// waiters each on its own epoll set, blocking without timeout,
// pass-the-buck reclamation.
type Options struct {
	// Waiters is the number of waiter goroutines; 0 means GOMAXPROCS.
	Waiters int
	// WaitTimeout bounds each epoll_wait; 0 blocks indefinitely. It is
	// rounded up to a whole millisecond. Only PassBuckClassic needs it.
	WaitTimeout time.Duration
	// MaxEvents is the number of events one epoll_wait may return; 0
	// means 128.
	MaxEvents int
	// Topology is PerWaiter (default) or Shared.
	Topology Topology
	// Reclaimer selects the deferred reclaimer; default PassBuck.
	Reclaimer ReclaimerKind
	// LockOSThread wires each waiter goroutine to its own OS thread.
	LockOSThread bool
	// OnPanic, if set, is called with the handle, the recovered value and
	// the stack of a panic in OnEvent, OnRelease or a timer function.
	// When nil the panic is logged to Logger. Either way the poller goes
	// on, and a registration whose OnEvent panicked is deleted.
	OnPanic func(h Handle, value any, stack []byte)
	// Logger receives the watchdog's reports and unhandled panics; nil
	// means slog.Default().
	Logger *slog.Logger
	// ReleaseWatchdog reports, once per registration, a release pending
	// longer than this, and what holds it (waiters yet to pass a quiescent
	// point, or holds). It never releases early. 0 means 10 s; negative
	// disables the watchdog.
	ReleaseWatchdog time.Duration
	// TimeHandlers measures every OnEvent call, for
	// RegistrationStats.HandlerTime: one clock read per event, a few
	// percent of dispatch on VMs with a slow clock source. Per-waiter
	// processing and waiting times are always measured, per batch.
	TimeHandlers bool
}

// DefaultReleaseWatchdog is the watchdog threshold when
// Options.ReleaseWatchdog is 0.
const DefaultReleaseWatchdog = 10 * time.Second

// Events is a set of epoll event bits.
type Events uint32

// Event bits, with the values of their epoll counterparts.
const (
	Readable      Events = 0x1        // EPOLLIN
	Priority      Events = 0x2        // EPOLLPRI
	Writable      Events = 0x4        // EPOLLOUT
	Error         Events = 0x8        // EPOLLERR: always reported
	HangUp        Events = 0x10       // EPOLLHUP: always reported
	ReadHangUp    Events = 0x2000     // EPOLLRDHUP: the peer shut down writing
	EdgeTriggered Events = 0x80000000 // EPOLLET: report changes, not levels
)

// registrable are the bits a Registration may ask for.
const registrable = Readable | Priority | Writable | Error | HangUp | ReadHangUp | EdgeTriggered

// timerDue is an internal event bit, unused by epoll, that asks the
// dispatching waiter to run a registration's fired timers.
const timerDue Events = 1 << 27

// String lists the bits, such as "Readable|Writable".
func (e Events) String() string {
	names := []struct {
		bit  Events
		name string
	}{
		{Readable, "Readable"}, {Priority, "Priority"}, {Writable, "Writable"},
		{Error, "Error"}, {HangUp, "HangUp"}, {ReadHangUp, "ReadHangUp"},
		{EdgeTriggered, "EdgeTriggered"},
	}
	var parts []string
	for _, n := range names {
		if e&n.bit != 0 {
			parts = append(parts, n.name)
			e &^= n.bit
		}
	}
	if e != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(e)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// A Handle identifies one registration: a slot index in the low 32 bits and
// the slot's generation in the high 32. Generations start at 1, so the zero
// Handle is never valid.
type Handle uint64

func makeHandle(slot, gen uint32) Handle { return Handle(uint64(gen)<<32 | uint64(slot)) }

// Slot returns the slot index.
func (h Handle) Slot() uint32 { return uint32(h) }

// Gen returns the generation.
func (h Handle) Gen() uint32 { return uint32(h >> 32) }

// String returns "slot/gen".
func (h Handle) String() string { return fmt.Sprintf("%d/%d", h.Slot(), h.Gen()) }

// Registration describes an fd to watch.
type Registration struct {
	// FD is the file descriptor. It must be open and not registered with
	// this poller already.
	FD int
	// Events is the interest set. Level-triggered unless EdgeTriggered is
	// set; an edge-triggered handler must read until EAGAIN. Error and
	// HangUp are always reported.
	Events Events
	// OnEvent is called for each event, on a waiter goroutine, never
	// concurrently with itself for this registration. It must not block
	// for long: its waiter dispatches nothing else meanwhile. Required.
	OnEvent func(Event)
	// OnRelease, if set, is called once after the registration was deleted
	// (or hung up, or the poller closed) and every waiter has passed a
	// quiescent point: no OnEvent call for it is running or will run.
	OnRelease func(Released)
	// CloseFD hands the fd to the poller, which closes it after OnRelease
	// returns. Until then the fd number cannot be registered again.
	// Without it the fd stays the caller's, who must not close it before
	// OnRelease starts (see Delete).
	CloseFD bool
	// Waiter chooses the owning waiter in the PerWaiter topology: the one
	// with the fewest attached registrations (the zero value), or
	// OnWaiter(i). It is ignored with Shared.
	Waiter WaiterChoice
}

// WaiterChoice picks a registration's waiter; the zero value is
// LeastLoaded.
type WaiterChoice int

// LeastLoaded assigns a registration to the waiter with the fewest
// attached registrations, as Zap assigns endpoints to IO threads.
const LeastLoaded WaiterChoice = 0

// OnWaiter names waiter i (0-based).
func OnWaiter(i int) WaiterChoice { return WaiterChoice(i + 1) }

// Event is one readiness report for a registration.
type Event struct {
	Handle Handle
	FD     int
	Events Events
	Waiter int // index of the waiter dispatching it
}

// Released tells OnRelease which registration ended and why. The
// registration is still attached to its waiter while OnRelease runs: the
// waiter's statistics are a snapshot taken just before the call.
type Released struct {
	Handle Handle
	FD     int
	// Waiter is the waiter the registration belonged to (PerWaiter), or
	// the last one that dispatched it (Shared); -1 if none did.
	Waiter       int
	Reason       Reason            // why it was released
	Registration RegistrationStats // its own counters, final
	WaiterStats  WaiterStats       // Waiter's, if Waiter >= 0
}

// RegistrationStats are one registration's own counters.
type RegistrationStats struct {
	Events      uint64        `json:"events"`       // OnEvent calls
	BytesIn     uint64        `json:"bytes_in"`     // as reported with CountBytes
	BytesOut    uint64        `json:"bytes_out"`    // as reported with CountBytes
	HandlerTime time.Duration `json:"handler_time"` // in OnEvent; needs Options.TimeHandlers
	Age         time.Duration `json:"age"`          // since Add
}

// Info describes a registration that is live, or released and not yet
// freed: the disconnect path can still read its waiter and counters.
type Info struct {
	Handle Handle `json:"handle"`
	FD     int    `json:"fd"`
	// Registered: in epoll, events still delivered. False once released.
	Registered bool `json:"registered"`
	// Attached: counted in its waiter's Attached; true until its
	// OnRelease has returned.
	Attached     bool              `json:"attached"`
	Waiter       int               `json:"waiter"` // as in Released
	Registration RegistrationStats `json:"registration"`
	WaiterStats  WaiterStats       `json:"waiter_stats"` // Waiter's, if Waiter >= 0
}

// Reason says why a registration was released.
type Reason int

const (
	// Deleted: Delete was called.
	Deleted Reason = iota
	// HungUp: the fd reported HangUp or Error; its final event was
	// delivered first.
	HungUp
	// Panicked: its OnEvent panicked.
	Panicked
	// Closed: the poller closed while the registration was live.
	Closed
)

// String returns the reason in lower case.
func (r Reason) String() string {
	switch r {
	case Deleted:
		return "deleted"
	case HungUp:
		return "hung-up"
	case Panicked:
		return "panicked"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// WaiterStats are one waiter's statistics, in the manner of Zap's
// thread_stats. Counters are totals since New; Utilisation covers the
// window since New or the last ResetStats.
type WaiterStats struct {
	Index      int           `json:"index"`
	Name       string        `json:"name"`
	TID        int           `json:"tid,omitempty"` // OS thread id, with Options.LockOSThread
	Attached   int64         `json:"attached"`      // registrations it owns (PerWaiter)
	Events     uint64        `json:"events"`        // OnEvent calls
	Wakeups    uint64        `json:"wakeups"`       // epoll_wait returns
	Stale      uint64        `json:"stale"`         // events dropped by validation
	Waiting    time.Duration `json:"waiting"`       // in epoll_wait
	Processing time.Duration `json:"processing"`    // everything else
	// Utilisation is processing / (processing + waiting) over Window, or
	// -1 when the window holds no time yet.
	Utilisation float64       `json:"utilisation"`
	Window      time.Duration `json:"window"`
	// Holding counts releases waiting for this waiter's next quiescent
	// point; GracePeriods the quiescent points at which it let releases
	// through.
	Holding      int64  `json:"holding"`
	GracePeriods uint64 `json:"grace_periods"`
}

// Latency summarises release latencies (Delete to the start of the
// release) over the stats window.
type Latency struct {
	P50     time.Duration `json:"p50"`
	P99     time.Duration `json:"p99"`
	Max     time.Duration `json:"max"`
	Samples int           `json:"samples"`
}

// Stats is a snapshot of a poller's statistics. Each waiter's counters are
// read together, waiter by waiter, while the poller runs: totals may be
// skewed by work in flight, never torn.
type Stats struct {
	Waiters         []WaiterStats `json:"waiters"`
	Live            int64         `json:"live"`              // registrations active now
	ReleasedNotFree int64         `json:"released_not_free"` // deleted, release not yet done
	Added           uint64        `json:"added"`
	Deleted         uint64        `json:"deleted"`  // by Delete, hang-up, panic or Close
	Releases        uint64        `json:"releases"` // release work completed
	Events          uint64        `json:"events"`   // OnEvent calls
	Stale           uint64        `json:"stale"`    // events dropped by validation
	Wakeups         uint64        `json:"wakeups"`  // epoll_wait returns
	Panics          uint64        `json:"panics"`
	// ReleaseLatency covers releases since New or the last ResetStats.
	ReleaseLatency Latency `json:"release_latency"`
	// OldestPending is the age of the oldest released-but-not-free
	// registration, 0 if none.
	OldestPending time.Duration `json:"oldest_pending"`
	Window        time.Duration `json:"window"`
	Reclaim       reclaim.Stats `json:"reclaim"`
}
