// Package reclaim defines the contract of a deferred reclaimer: the piece of
// gracepoll that decides when memory, slots and file descriptors that a
// waiter might still reference can be released.
//
// A Reclaimer serves a fixed set of participants, indexed 0..N-1 (in
// gracepoll, the waiter goroutines of a poller). A participant obtains
// references during a read-side section (for a waiter, the events returned
// by one epoll_wait call) and drops all of them at a quiescent point, which
// it announces with Quiesce. A release function passed to Retire runs only
// after every participant has passed a quiescent point that began after the
// Retire call: the grace period.
//
// The set of participants may change: a participant may Leave (it stops
// taking part, and grace periods stop waiting for it, whatever the
// implementation) and later Join again, as when a poller starts extra
// waiters under load and retires them when idle. A membership change never
// lets a release through early: a participant that leaves holds no
// reference, and one that joins holds none obtained before it joined and
// validates what it obtains afterwards, exactly as after Online.
//
// A participant about to block (in epoll_wait, say) may instead go Offline,
// an extended quiescent state that lets grace periods complete without it,
// and come back Online when the call returns. Offline is only safe when the
// participant validates, after Online, everything the blocking call gave it:
// epoll_wait copies out references while the caller is offline, so a naive
// "offline around epoll_wait" is a use-after-free. gracepoll's poller
// validates each event against its slot's state word after Online; see
// docs/design.md.
//
// Guarantees every implementation gives, and that
// [github.com/gracepoll/gracepoll/reclaim/reclaimtest] checks:
//
//   - A release function runs at most once, never on the stack of the Retire
//     that submitted it, and never before the grace period that began at its
//     Retire has completed.
//   - Every release retired before Close runs exactly once, by the time Close
//     returns.
//   - Releases retired before a Barrier call have all returned when Barrier
//     returns nil.
//
// Implementations in this module: the pass-the-buck reclaimer
// ([github.com/gracepoll/gracepoll/passbuck]) in its classic and
// skip-offline modes, and the epoch-based quiescent-state reclaimer
// ([github.com/gracepoll/gracepoll/reclaim/epoch]).
package reclaim

import (
	"context"
	"errors"
	"time"
)

// A Factory makes a Reclaimer for the given number of participants. It is
// how a user plugs a reclaimer into gracepoll's poller
// (poller.Options.Reclaimer) and how the conformance suite
// (package reclaimtest) makes the Reclaimers it checks.
type Factory func(participants int) (Reclaimer, error)

// NeedsQuiesce reports whether r cannot complete a grace period while a
// participant stays offline indefinitely, as in classic pass-the-buck,
// where every participant must reach a quiescent point itself. Such a
// Reclaimer has a method NeedsQuiesce() bool that returns true; a caller
// whose participants block must then bound every blocking call.
func NeedsQuiesce(r Reclaimer) bool {
	q, ok := r.(interface{ NeedsQuiesce() bool })
	return ok && q.NeedsQuiesce()
}

// Sentinel errors returned by every Reclaimer. Test with errors.Is.
var (
	// ErrClosed reports a call on a closed Reclaimer. A Retire that
	// returns it did not take the release function: the caller still owns
	// whatever the function would have released.
	ErrClosed = errors.New("reclaim: reclaimer closed")

	// ErrInvalid reports a bad argument, such as a nil release function or
	// a participant count below one.
	ErrInvalid = errors.New("reclaim: invalid argument")
)

// A Reclaimer defers release functions until every participant has passed a
// quiescent point after their Retire.
//
// Participant methods (Quiesce, Offline, Online, Leave, Join) take the participant's
// index p, which must be in [0, N); each participant's methods are called by
// one goroutine at a time. They panic on an index out of range, like a slice
// index: that is a bug in the caller, not a runtime condition. Participants
// start online, so a participant that never calls Quiesce or Offline holds
// up every grace period; Online on an online participant does nothing.
// Participant methods must not be called after Close; Stats may be.
//
// Barrier may retire internal markers; they are not counted in Stats. A
// Retire made by a release function that Close runs may be accepted (and
// then run before Close returns) or refused with ErrClosed.
type Reclaimer interface {
	// Participants returns N, the number of participants.
	Participants() int

	// Retire schedules release to run after a grace period. It is O(1),
	// safe from any goroutine (including a participant inside a release
	// function or an event handler), and never runs release on the
	// caller's stack. It returns ErrInvalid for a nil release and
	// ErrClosed after Close; in both cases release will never run.
	Retire(release func()) error

	// Quiesce announces that participant p holds no reference obtained
	// before this call. With nothing pending it costs one atomic load: no
	// lock, no atomic read-modify-write, no allocation. It may run
	// release functions on the caller's stack.
	Quiesce(p int)

	// Offline announces that participant p enters an extended quiescent
	// state (it is about to block) and holds no reference. While offline
	// it must not use any reference. It implies Quiesce and may run
	// release functions on the caller's stack.
	Offline(p int)

	// Online ends participant p's extended quiescent state. Whatever p
	// obtained while offline (the events of the blocking call) must be
	// validated after Online returns, before use.
	Online(p int)

	// Leave announces that participant p stops taking part: it holds no
	// reference, and no grace period waits for it until it joins again,
	// even in an implementation where an offline participant holds grace
	// periods up (NeedsQuiesce). It implies Offline and may run release
	// functions on the caller's stack. Until Join, p's only call is Join;
	// Leave on a participant that has left does nothing.
	Leave(p int)

	// Join makes participant p, which left, take part again, online. It
	// holds no reference obtained before Join, and must validate what it
	// obtains afterwards, as after Online. Grace periods that began before
	// Join may or may not wait for it. Join on a participant that has not
	// left does nothing.
	Join(p int)

	// Barrier returns nil when every release function retired before the
	// call has returned, or the context's error if ctx ends first, or
	// ErrClosed if the Reclaimer is closed. It must not be called from a
	// release function, and it needs the participants to make progress
	// (quiescent points, or being offline where the implementation allows
	// that).
	Barrier(ctx context.Context) error

	// Stats returns a snapshot of the reclaimer's counters.
	Stats() Stats

	// Close runs every pending release function exactly once and stops the
	// Reclaimer's goroutines. Call it after the participants have stopped
	// using references; it does not wait for a grace period. Later Retire
	// and Barrier calls return ErrClosed. Close is idempotent and must not
	// be called from a release function.
	Close() error
}

// Stats is a snapshot of a Reclaimer's counters. Counters are read one at a
// time, so under concurrent use they may be skewed by in-flight operations
// (Released can briefly exceed Retired minus Pending, never Retired).
type Stats struct {
	Retired      uint64        `json:"retired"`       // release functions accepted by Retire
	Released     uint64        `json:"released"`      // release functions that have returned
	Pending      int64         `json:"pending"`       // retired and not yet started
	GracePeriods uint64        `json:"grace_periods"` // grace periods completed with work in them
	OldestAge    time.Duration `json:"oldest_age"`    // age of the oldest pending release, 0 if none

	// Participants has one entry per participant, by index.
	Participants []ParticipantStats `json:"participants"`
}

// ParticipantStats is one participant's part in a Reclaimer's progress.
type ParticipantStats struct {
	// Holding counts releases waiting for this participant's next
	// quiescent point: the ones parked on it, or the batch whose grace
	// period it is the one holding up.
	Holding int64 `json:"holding"`
	// Passed counts the quiescent points at which this participant let
	// pending releases through (not the idle ones, which cost nothing).
	Passed uint64 `json:"passed"`
	// Left reports that the participant has left (Leave) and not joined
	// again. Its counters stay readable.
	Left bool `json:"left,omitempty"`
}
