// Package epoch implements reclaim.Reclaimer as an epoch-based
// quiescent-state reclaimer (QSBR), in the manner of liburcu's urcu-qsbr with
// call_rcu: participants announce quiescent points by copying a global epoch
// into a per-participant counter, and one background goroutine per Reclaimer
// advances the epoch, waits for every participant to catch up or be offline,
// and then runs the release functions retired before it advanced.
//
// # Guarantees
//
// On top of the reclaim.Reclaimer contract:
//
//   - Quiesce with no grace period in progress costs one atomic load and a
//     compare with a participant-private field: no lock, no read-modify-write,
//     no allocation, no shared cache line written.
//   - Offline and Online cost one atomic store and one atomic load each. No
//     participant method ever runs a release function.
//   - Release functions run one at a time, in Retire order (FIFO), on the
//     Reclaimer's goroutine, or on Close's goroutine for those still pending
//     when Close is called. Retire is O(1) and never blocks on a
//     grace period.
//   - A release function that panics on the Reclaimer's goroutine crashes
//     the program, as a panic in any goroutine does: there is no caller to
//     return it to. One that panics during Close propagates out of Close,
//     and the releases after it never run.
//
// # Why it is safe
//
// The global epoch E only grows, and only the grace-period goroutine advances
// it, one grace period at a time. A deleter stores its delete (say, a slot
// marked released) before calling Retire; the grace-period goroutine takes
// the batch after that Retire and then advances E to T. It then reads every
// participant's counter (Go's sync/atomic operations are sequentially
// consistent, so all these accesses fall in one total order):
//
//   - counter >= T: the participant stored it after loading E >= T, hence
//     after the delete, at a quiescent point (or at Online, after which it
//     validates what it holds). Every reference it holds now was obtained
//     after it could see the delete.
//   - counter == 0: the participant was offline when read. Its next Online
//     store, and the validating loads after it, come later in the total order
//     and see the delete.
//
// Either way no participant can still use what the batch releases. Online
// stores the epoch it loaded; if E advanced in between, the participant looks
// behind and the grace period waits for its next Quiesce: conservative, and
// still safe.
//
// Offline alone does not make a blocking call safe: epoll_wait hands out
// references while its caller is offline. The caller must validate them after
// Online; see the reclaim package.
package epoch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gracepoll/gracepoll/reclaim"
)

// MaxParticipants is the largest participant count New accepts.
const MaxParticipants = 1 << 16

// cacheLine is the padding unit. 128 bytes rather than 64 because x86's
// adjacent-line prefetcher pulls cache lines in pairs, and some arm64 and
// ppc64 cores have 128-byte lines.
const cacheLine = 128

// Fallback poll while a grace period waits. Wake-ups are not lost by design
// (see waitGrace), so this only bounds the damage of a bug; it backs off so
// that a participant stuck online costs tens of wake-ups a second, not a
// thousand.
const (
	pollMin = time.Millisecond
	pollMax = 16 * time.Millisecond
)

// Queue chunks: 4 KiB each, one allocation per chunkSize Retires at worst,
// none in steady state. Unlike a slice that doubles, a chunk list never
// copies under the lock, so Retire is O(1) even after a burst. maxFree
// bounds what a burst leaves allocated.
const (
	chunkSize = 255
	maxFree   = 16
)

var _ reclaim.Reclaimer = (*Reclaimer)(nil)

var errNilRelease = fmt.Errorf("%w: nil release function", reclaim.ErrInvalid)

// participant is one participant's state, alone in its cache-line block so
// that participants announcing quiescent points do not slow each other down.
type participant struct {
	// ctr is 0 while offline, else the epoch the participant last
	// observed. Written only by the participant, read by the grace-period
	// goroutine.
	ctr atomic.Uint64
	// seen shadows ctr for the participant's goroutine alone, so the fast
	// path of Quiesce reads no shared line but E's.
	seen uint64
	// passed counts the slow-path quiescent points, at which this
	// participant let a grace period through; for Stats.
	passed atomic.Uint64
	_      [cacheLine - 24]byte
}

// Compile-time check that a participant fills exactly one padding unit.
var (
	_ [cacheLine - unsafe.Sizeof(participant{})]byte
	_ [unsafe.Sizeof(participant{}) - cacheLine]byte
)

// entry is one retired release function.
type entry struct {
	fn       func()
	internal bool // a Barrier sentinel, which no counter includes
}

type chunk struct {
	entries [chunkSize]entry
	n       int // entries in use
	next    *chunk
}

// A batch is a FIFO list of entries: the queue that Retire appends to, or a
// queue taken by the grace-period goroutine.
type batch struct {
	head, tail *chunk
	users      int   // user (non-internal) entries
	start      int64 // stamp of the first user entry, 0 if none
}

// concat appends b's entries to a's.
func (a *batch) concat(b batch) {
	if b.head == nil {
		return
	}
	if a.head == nil {
		*a = b
		return
	}
	a.tail.next = b.head
	a.tail = b.tail
	a.users += b.users
	if a.start == 0 {
		a.start = b.start
	}
}

// Reclaimer is an epoch-based reclaimer. Create it with New and stop it with
// Close; its methods are safe for concurrent use as the reclaim.Reclaimer
// contract describes.
//
// Fields are grouped by who writes them, each group padded to its own
// cache-line block: the read-mostly group that every Quiesce reads, the
// Retire group under mu, and the counters the grace-period goroutine writes.
type Reclaimer struct {
	// Read on every participant call; written twice per grace period.
	epoch    atomic.Uint64 // E: starts at 1, advanced at each grace period
	gpActive atomic.Bool   // a grace period is waiting for participants
	parts    []participant // immutable slice header
	kick     chan struct{} // wakes the grace-period goroutine; capacity 1
	_        [cacheLine]byte

	// Retire side.
	mu      sync.Mutex
	queue   batch  // retired, not yet taken by the grace-period goroutine
	free    *chunk // recycled chunks
	nfree   int
	retired uint64 // user entries accepted
	idle    bool   // grace-period goroutine is waiting for work
	closed  bool
	_       [cacheLine]byte

	// Written by whoever runs releases (the grace-period goroutine, then
	// Close after joining it); read by Stats.
	started      atomic.Uint64 // user entries whose release has begun
	released     atomic.Uint64 // user entries whose release has returned
	gracePeriods atomic.Uint64
	gpTarget     atomic.Uint64 // epoch the current grace period waits for, 0 if none
	gpUsers      atomic.Int64  // user releases in the batch it waits for
	batchStart   atomic.Int64  // start of the batch taken, 0 once its user entries have all started

	// Lifecycle; immutable after New except as noted.
	base      time.Time     // monotonic origin of stamps
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the grace-period goroutine exits
	closeDone chan struct{} // closed when the first Close returns
	leftover  batch         // batch abandoned at Close; read after done
}

// Options configures a Reclaimer. It has no settings yet: the zero value is
// the only configuration. It exists so that every reclaimer in this module
// has the same constructor shape, New(participants, Options).
type Options struct{}

// Factory returns a reclaim.Factory that makes Reclaimers with opts, for
// poller.Options.Reclaimer and the conformance suite.
func Factory(opts Options) reclaim.Factory {
	return func(participants int) (reclaim.Reclaimer, error) { return New(participants, opts) }
}

// New returns a Reclaimer for participants participants, indexed from 0,
// all online as if each had just called Online, and starts its grace-period
// goroutine. It returns an error wrapping reclaim.ErrInvalid if participants
// is not in [1, MaxParticipants]. Call Close to stop the goroutine.
//
// Every participant must take part: one that never calls Quiesce or Offline
// holds up every grace period, and nothing is released until Close.
func New(participants int, _ Options) (*Reclaimer, error) {
	if participants < 1 || participants > MaxParticipants {
		return nil, fmt.Errorf("%w: %d participants, want 1 to %d",
			reclaim.ErrInvalid, participants, MaxParticipants)
	}
	r := &Reclaimer{
		parts:     make([]participant, participants),
		kick:      make(chan struct{}, 1),
		base:      time.Now(),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	r.epoch.Store(1)
	for i := range r.parts {
		r.parts[i].ctr.Store(1)
		r.parts[i].seen = 1
	}
	go r.run()
	return r, nil
}

// Participants returns the number of participants.
func (r *Reclaimer) Participants() int { return len(r.parts) }

// Quiesce announces that participant p holds no reference obtained before
// the call. Unless a grace period began since p's last announcement it is
// one atomic load. It never runs release functions.
func (r *Reclaimer) Quiesce(p int) {
	part := &r.parts[p]
	e := r.epoch.Load()
	if e == part.seen {
		return
	}
	r.quiesceSlow(part, e)
}

// quiesceSlow publishes a newly observed epoch. Kept out of Quiesce so that
// Quiesce inlines.
func (r *Reclaimer) quiesceSlow(part *participant, e uint64) {
	part.seen = e
	part.ctr.Store(e)
	part.passed.Add(1)
	// The epoch moved, so a grace period started; it may be waiting for p.
	// gpActive was set before the epoch moved, so this load sees it unless
	// that grace period is already over.
	if r.gpActive.Load() {
		r.wake()
	}
}

// Offline announces that participant p is entering an extended quiescent
// state and holds no reference. It never runs release functions.
func (r *Reclaimer) Offline(p int) {
	part := &r.parts[p]
	part.ctr.Store(0)
	part.seen = 0 // the next Quiesce after Online must not take the fast path on a stale epoch
	// Dekker with waitGrace, which stores gpActive and then loads ctr: either
	// it sees 0 or this load sees true and wakes it.
	if r.gpActive.Load() {
		r.wake()
	}
}

// Online ends participant p's extended quiescent state. What p obtained
// while offline must be validated after Online returns. It never runs
// release functions.
func (r *Reclaimer) Online(p int) {
	part := &r.parts[p]
	e := r.epoch.Load()
	part.seen = e
	part.ctr.Store(e)
}

// Retire schedules release to run on another goroutine after a grace
// period. It returns an error wrapping reclaim.ErrInvalid for a nil release
// and reclaim.ErrClosed after Close.
func (r *Reclaimer) Retire(release func()) error {
	if release == nil {
		return errNilRelease
	}
	return r.enqueue(release, false)
}

// enqueue appends an entry and wakes the grace-period goroutine if it is
// idle.
func (r *Reclaimer) enqueue(fn func(), internal bool) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return reclaim.ErrClosed
	}
	q := &r.queue
	if q.tail == nil || q.tail.n == chunkSize {
		c := r.free
		if c != nil {
			r.free, c.next = c.next, nil
			r.nfree--
		} else {
			c = new(chunk)
		}
		if q.tail == nil {
			q.head = c
		} else {
			q.tail.next = c
		}
		q.tail = c
	}
	q.tail.entries[q.tail.n] = entry{fn: fn, internal: internal}
	q.tail.n++
	if !internal {
		r.retired++
		q.users++
		// Only the first user entry of a batch reads the clock: on a
		// VM's kvm-clock that read costs about as much as the rest of
		// Retire, and the first entry is the oldest, which is what
		// OldestAge reports.
		if q.start == 0 {
			q.start = r.stamp()
		}
	}
	// idle is set under mu by next after it found the queue empty, so
	// either it sees this entry or we see idle: no lost wake-up, and only
	// the first Retire after idling sends on the channel.
	wake := r.idle
	r.idle = false
	r.mu.Unlock()
	if wake {
		r.wake()
	}
	return nil
}

// wake nudges the grace-period goroutine without blocking. A token already
// in the channel is as good as ours.
func (r *Reclaimer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Barrier returns nil once every release retired before the call has
// returned, ctx's error if ctx ends first, or reclaim.ErrClosed if the
// Reclaimer is already closed. It must not be called from a release
// function. It needs every online participant to reach a quiescent point, or
// Close to be called.
func (r *Reclaimer) Barrier(ctx context.Context) error {
	// Releases run in FIFO order on one goroutine at a time, so a sentinel
	// runs after everything retired before it has returned.
	ran := make(chan struct{})
	if err := r.enqueue(func() { close(ran) }, true); err != nil {
		return err
	}
	// No need to watch for Close: it runs every accepted entry, the
	// sentinel included, before returning.
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns a snapshot of the counters. Pending counts releases retired
// and not yet started; OldestAge is the age of the oldest of them, exact
// while it waits for its grace period. Releases are stamped per batch, so
// while a batch runs OldestAge is that of the batch's first release until
// the batch's last release has started: an overestimate by at most the time
// the batch took to gather.
func (r *Reclaimer) Stats() reclaim.Stats {
	// Load started before retired so Pending cannot go negative.
	started := r.started.Load()
	r.mu.Lock()
	retired := r.retired
	// A batch is older than every queued entry. batchStart becomes
	// nonzero only under mu, as the queue is taken.
	oldest := r.batchStart.Load()
	if oldest == 0 {
		oldest = r.queue.start
	}
	r.mu.Unlock()
	s := reclaim.Stats{
		Retired:      retired,
		Released:     r.released.Load(),
		Pending:      int64(retired - started),
		GracePeriods: r.gracePeriods.Load(),
		Participants: make([]reclaim.ParticipantStats, len(r.parts)),
	}
	t := r.gpTarget.Load()
	for i := range r.parts {
		ps := &s.Participants[i]
		ps.Passed = r.parts[i].passed.Load()
		if c := r.parts[i].ctr.Load(); t != 0 && c != 0 && c < t {
			ps.Holding = r.gpUsers.Load()
		}
	}
	if oldest != 0 {
		s.OldestAge = max(0, time.Duration(r.stamp()-oldest))
	}
	return s
}

// Close stops the grace-period goroutine and runs every pending release on
// the caller's goroutine, in Retire order, without waiting for a grace
// period: the caller promises that participants hold no references. Later
// Retire and Barrier calls return reclaim.ErrClosed. Close is idempotent;
// a concurrent second call returns once the first has finished. It always
// returns nil. It must not be called from a release function.
func (r *Reclaimer) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.closeDone
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	defer close(r.closeDone) // even if a release panics

	close(r.stop)
	<-r.done // lets a running batch finish; abandons a grace-period wait

	r.mu.Lock()
	// The abandoned batch was retired before anything still queued.
	b := r.leftover
	b.concat(r.queue)
	r.leftover, r.queue, r.free, r.nfree = batch{}, batch{}, nil, 0
	r.batchStart.Store(b.start)
	r.mu.Unlock()
	_ = r.runBatch(b) // the chunks go to the garbage collector
	return nil
}

// run is the grace-period goroutine: take the whole queue, wait for a grace
// period, run the batch, repeat. Entries retired meanwhile form the next
// batch.
func (r *Reclaimer) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var used *chunk // chunks of the last batch, to recycle
	for {
		b, ok := r.next(used)
		if !ok {
			return
		}
		r.gpUsers.Store(int64(b.users))
		if !r.waitGrace(timer) {
			r.leftover = b // Close runs it after joining us
			return
		}
		r.gracePeriods.Add(1)
		used = r.runBatch(b)
	}
}

// next recycles used, then waits for work and takes the whole queue as a
// batch. It returns false when Close has been called and nothing is left to
// take.
func (r *Reclaimer) next(used *chunk) (batch, bool) {
	for {
		r.mu.Lock()
		for used != nil && r.nfree < maxFree {
			c := used
			used = c.next
			c.next = r.free
			r.free = c
			r.nfree++
		}
		used = nil
		if r.queue.head != nil {
			b := r.queue
			r.queue = batch{}
			r.batchStart.Store(b.start)
			r.mu.Unlock()
			return b, true
		}
		r.idle = true
		r.mu.Unlock()
		select {
		case <-r.kick:
		case <-r.stop:
			// Close set closed before closing stop, so the queue
			// cannot grow; one more pass hands over what is there.
			r.mu.Lock()
			empty := r.queue.head == nil
			r.mu.Unlock()
			if empty {
				return batch{}, false
			}
		}
	}
}

// waitGrace advances the epoch and waits until every participant is offline
// or has observed the new epoch. It returns false if Close was called first.
//
// Wake-ups are not lost: a participant that makes progress stores its
// counter and then loads gpActive, while this goroutine stores gpActive and
// then loads the counters, so one of them sees the other (sequentially
// consistent atomics); a wake sent after the load lands in the buffered kick
// channel and is consumed by the select below.
func (r *Reclaimer) waitGrace(timer *time.Timer) bool {
	select {
	case <-r.stop:
		return false
	default:
	}
	r.gpActive.Store(true)
	defer r.gpActive.Store(false)
	t := r.epoch.Add(1)
	r.gpTarget.Store(t)
	defer r.gpTarget.Store(0)
	poll := pollMin
	i := 0 // participants before i are done for this grace period and stay done
	for {
		for ; i < len(r.parts); i++ {
			if c := r.parts[i].ctr.Load(); c != 0 && c < t {
				break
			}
		}
		if i == len(r.parts) {
			timer.Stop()
			return true
		}
		timer.Reset(poll)
		select {
		case <-r.kick:
		case <-timer.C:
			poll = min(2*poll, pollMax)
		case <-r.stop:
			timer.Stop()
			return false
		}
	}
}

// runBatch runs a batch in order, outside every lock, keeping the counters
// and batchStart current for Stats. It returns the batch's chunks, cleared,
// for recycling.
func (r *Reclaimer) runBatch(b batch) *chunk {
	users := b.users
	if users == 0 {
		r.batchStart.Store(0)
	}
	for c := b.head; c != nil; c = c.next {
		for i := range c.n {
			e := c.entries[i]
			if e.internal {
				e.fn()
				continue
			}
			users--
			if users == 0 {
				r.batchStart.Store(0) // nothing in this batch is pending now
			}
			r.started.Add(1)
			e.fn()
			r.released.Add(1)
		}
		clear(c.entries[:c.n]) // drop the functions for the garbage collector
		c.n = 0
	}
	return b.head
}

// stamp returns a nonzero monotonic timestamp. time.Since reads only the
// monotonic clock since base has a monotonic reading.
func (r *Reclaimer) stamp() int64 { return int64(time.Since(r.base)) + 1 }
