// Package epoch implements reclaim.Reclaimer as an epoch-based
// quiescent-state reclaimer (QSBR) in the manner of liburcu's urcu-qsbr:
// participants announce quiescent points by copying a global epoch into a
// per-participant counter. As in crossbeam-epoch, where threads advance the
// epoch themselves (try_advance) instead of waiting for a dedicated thread,
// the participants here decide that grace periods have ended and run the
// release functions whose grace period is over, at their quiescent points.
// A background goroutine does it only when nobody else will, because every
// participant is offline (an idle server).
//
// # How it works
//
// A global word holds the epoch E (starting at 1) and a pending bit, set
// while release functions wait in the queue. Each participant owns a counter:
// 0 while it is offline, otherwise the epoch it last observed at a quiescent
// point or at Online.
//
//   - Retire appends the release function to a FIFO queue, under the queue's
//     mutex, tagged with E loaded under that mutex. Tags are therefore
//     non-decreasing in queue order. A Retire that finds the queue empty
//     bumps E and sets the pending bit, in one atomic add, and wakes the
//     background goroutine: once per batch, not once per Retire. Retire never
//     runs a release function.
//   - Quiesce loads the word and compares it with a copy private to the
//     participant. If nothing changed, that is all it does. Otherwise it
//     stores the epoch in its counter and, if the pending bit is set,
//     drives.
//   - Offline stores 0 in the counter and, if the pending bit is set, drives
//     the same way (without publishing an epoch: it stays offline).
//   - Online stores the epoch it loads. It never drives: going online never
//     ends a grace period.
//   - Leave is an Offline that only Join undoes, and Join is Online: no
//     driver tells a participant that left from an offline one, since both
//     have counter 0, so the argument below covers membership changes too.
//   - Driving: load the word (E), then read every counter; let m be the
//     smallest of E and the counters of online participants. Entries tagged
//     below m are releasable. The driver takes that prefix of the queue and
//     runs it, on its own stack, holding a run token so that releases run
//     one at a time and in Retire order (FIFO), which Barrier relies on. If
//     entries tagged E remain, it bumps E with a compare-and-swap, so that
//     the participants' next quiescent points can release them. A
//     participant inside Quiesce publishes every new epoch it sees at once:
//     it is still at its quiescent point. A driver inside Quiesce or Offline
//     stops after two bumps and two runs, so that a participant is never
//     kept from its own work by a stream of Retires; see "Progress".
//
// A release therefore runs once every online participant has passed one
// quiescent point after its Retire: about one batch of a busy waiter.
//
// # Guarantees
//
// On top of the reclaim.Reclaimer contract:
//
//   - Quiesce with nothing to do costs one atomic load and a compare with a
//     participant-private field: no lock, no read-modify-write, no
//     allocation, no shared cache line written.
//   - Offline with nothing pending costs one atomic store and one atomic
//     load; Online, one atomic load and one atomic store.
//   - Release functions run one at a time, in Retire order (FIFO): on the
//     stack of a participant's Quiesce or Offline, on the Reclaimer's
//     goroutine, or on Close's goroutine for those still pending when Close
//     is called. Retire is O(1), never blocks on a grace period and never
//     runs a release function.
//   - A release function that panics inside Quiesce or Offline: the panic
//     goes up the participant's stack (the release counts as Released); the
//     releases after it in the prefix being run go back to the head of the
//     queue, still in order, and the Reclaimer's goroutine runs them. One that
//     panics on the Reclaimer's goroutine crashes the program, as a panic in
//     any goroutine does: there is no caller to return it to. One that
//     panics during Close propagates out of Close, and the releases after it
//     never run.
//
// # Why it is safe
//
// Go's sync/atomic operations are sequentially consistent: all of them fall
// in one total order, consistent with each goroutine's program order. The
// epoch only grows. A participant stores in its counter only a value it
// loaded from the word, so a counter read as v was stored after a load that
// returned v, hence after the bump that made the epoch v.
//
// A deleter stores its delete (a slot marked released, a pointer unlinked)
// before calling Retire, and Retire loads E = t after it. Take an entry
// tagged t that a driver releases: the driver loaded E' > t and then read
// the counters. Its load of E' came after the bump from t to t+1, which came
// after Retire's load of t (that load read the word before the bump changed
// it); so every counter read came after the delete. For each participant the
// driver read:
//
//   - a value above t: the participant stored it after loading it, so after
//     the bump to t+1 and after the delete, at a quiescent point (it held
//     nothing from before) or at Online (after which it validates what its
//     blocking call returned). It has not stored since, so everything it
//     holds now it obtained, or validated, after the delete, and it sees the
//     delete.
//   - 0: the participant was offline, or had left, and uses nothing. Its
//     next Online or Join stores after this read, and its validating loads
//     come later still, so they see the delete.
//
// Either way no participant can still use what the entry releases. The bound
// m <= E' matters when the counters read are all 0: an entry tagged E' may
// have been retired after the driver read them, and a participant read as
// offline may since have come online and obtained a reference before the
// delete.
//
// A counter may lag: Online (or a slow Quiesce) may store an epoch that has
// already been superseded. That only makes the participant look behind, so
// the entry waits for its next quiescent point: conservative, and still
// safe. Quiesce on an offline participant publishes nothing.
//
// Offline alone does not make a blocking call safe: epoll_wait hands out
// references while its caller is offline. The caller must validate them after
// Online; see the reclaim package.
//
// # Progress
//
// Whenever an entry could be released, or needs a bump, someone is bound to
// drive. Every participant stores its counter, then loads the word and, if
// the pending bit is set, reads the other counters (store, then scan). Of two
// participants doing so at once, the later store comes before the other's
// scan in the total order, so the last participant to catch up sees the
// others caught up (Dekker's argument). Leave, like Offline, stores 0 and
// then drives if the pending bit is set, so the last participant to leave
// ends what only it held up. A driver stops only when:
//
//   - nothing is pending;
//   - the oldest entry waits for an online participant that has not yet
//     published an epoch above its tag, and every entry's tag is below E:
//     that participant's counter is below E, so its next Quiesce sees a word
//     different from its private copy, and its next Offline sees the pending
//     bit; either way it drives;
//   - the run token is taken: its holder, after releasing the token, loads
//     the word, the counters and the queue's tags again and runs what became
//     releasable. A failed token acquisition reads the holder's acquisition,
//     so it comes before the holder's release, which comes before the
//     holder's re-check: nothing that was releasable before a failed
//     acquisition is missed;
//   - its budget is spent: Quiesce makes its participant's next Quiesce
//     drive again, and Offline wakes the Reclaimer's goroutine.
//
// The first entry of a batch bumps E itself. An entry tagged E that joins a
// non-empty queue is seen by whoever drives for the entries before it, or
// takes them, since the tail's tag is stored under the queue's mutex before
// either. With every participant offline or gone, the last one to go
// drives, and after that the Retire that finds the queue empty wakes the Reclaimer's
// goroutine, which drives without a budget. The goroutine never polls: it
// sleeps until woken.
package epoch

import (
	"context"
	"fmt"
	"math"
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

// The global word: the epoch shifted left by one, and the pending bit.
const (
	pendingBit = 1
	epochUnit  = 2
	// staleWord is never the global word (the epoch is never 0): as a
	// participant's private copy, it sends the next Quiesce to the slow
	// path.
	staleWord = pendingBit
	// noTag is Reclaimer.headTag while the queue is empty.
	noTag = math.MaxUint64
)

// A participant's driving budget in one Quiesce or Offline call.
const (
	driveBumps = 2
	driveRuns  = 2
)

// Queue chunks: about 4 KiB each. A chunk holds entries of one tag only, so
// that the releasable prefix of the queue is a run of whole chunks, taken in
// O(1) each. Unlike a slice that doubles, a chunk list never copies under the
// lock, so Retire is O(1) even after a burst; recycled chunks make steady
// state allocation-free. maxFree bounds what a burst leaves allocated.
const (
	chunkSize = 250
	maxFree   = 16
)

var _ reclaim.Reclaimer = (*Reclaimer)(nil)

var errNilRelease = fmt.Errorf("%w: nil release function", reclaim.ErrInvalid)

// participantState is what a participant keeps, alone in its cache-line block
// so that participants announcing quiescent points do not slow each other
// down.
type participantState struct {
	// ctr is 0 while offline, else the epoch the participant last
	// published. Written only by the participant, read by drivers.
	ctr atomic.Uint64
	// seen is, for the participant's goroutine alone, the global word at
	// its last publication, so that the fast path of Quiesce reads no
	// shared line but the word's; 0 (never the word) while offline, and
	// staleWord to send the next Quiesce to the slow path.
	seen uint64
	// passed counts the quiescent points at which this participant found
	// work pending and drove; for Stats.
	passed atomic.Uint64
	// left is set by Leave and cleared by Join, by the participant alone;
	// drivers never read it (ctr is 0 meanwhile), only Stats does.
	left atomic.Bool
}

type participant struct {
	participantState
	_ [cacheLine - unsafe.Sizeof(participantState{})%cacheLine]byte
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
	tag     uint64 // the epoch every entry in it was retired in
	start   int64  // stamp of its first user entry, 0 if none
	users   int    // user entries in entries[off:n]
	off, n  int    // entries[off:n] have not run
	next    *chunk
	entries [chunkSize]entry
}

// A batch is a FIFO list of chunks: the queue that Retire appends to, or a
// prefix of it taken to run.
type batch struct {
	head, tail *chunk
	users      int   // user (non-internal) entries
	start      int64 // stamp of the first user entry, 0 if none
}

// splice appends o's chunks to b's.
func (b *batch) splice(o batch) {
	if o.head == nil {
		return
	}
	if b.head == nil {
		*b = o
		return
	}
	b.tail.next = o.head
	b.tail = o.tail
	b.users += o.users
	if b.start == 0 {
		b.start = o.start
	}
}

// restamp recomputes start from the chunks, for a batch whose head changed.
// It stops at the first chunk with a user entry, normally the first.
func (b *batch) restamp() {
	b.start = 0
	for c := b.head; c != nil; c = c.next {
		if c.users > 0 {
			b.start = c.start
			return
		}
	}
}

// Reclaimer is an epoch-based reclaimer. Create it with New and stop it with
// Close; its methods are safe for concurrent use as the reclaim.Reclaimer
// contract describes.
//
// Fields are grouped by who writes them, each group padded to its own
// cache-line block: the group that every participant call reads, the Retire
// group under mu, and the counters that release runners write.
type Reclaimer struct {
	// Padding before the hot group too: the line before it may belong to
	// another object in the same span, written by someone else.
	_ [cacheLine]byte
	// Read on every participant call; written about twice per batch
	// (epoch bumped with pending set, pending cleared).
	word    atomic.Uint64 // epoch<<1 | pendingBit
	headTag atomic.Uint64 // tag of the queue's oldest entry; noTag if empty
	tailTag atomic.Uint64 // tag of the queue's newest entry; 0 if empty
	parts   []participant // immutable slice header
	_       [cacheLine]byte

	// Retire side.
	mu      sync.Mutex
	queue   batch  // retired, not yet taken to run
	free    *chunk // recycled chunks
	nfree   int
	retired uint64 // user entries accepted
	closed  bool
	_       [cacheLine]byte

	// Written by release runners; read by Stats.
	running      atomic.Bool   // the run token: held while taking and running releases; Close keeps it
	started      atomic.Uint64 // user entries whose release has begun
	released     atomic.Uint64 // user entries whose release has returned (or panicked)
	gracePeriods atomic.Uint64 // releasable prefixes taken with user entries in them
	runStart     atomic.Int64  // stamp of the prefix being run, 0 once its user entries have all started
	_            [cacheLine]byte

	// Lifecycle; immutable after New.
	kick      chan struct{} // wakes the Reclaimer's goroutine; capacity 1
	base      time.Time     // monotonic origin of stamps
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the Reclaimer's goroutine exits
	closeDone chan struct{} // closed when the first Close returns
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
// all online as if each had just called Online, and starts its goroutine. It
// returns an error wrapping reclaim.ErrInvalid if participants is not in
// [1, MaxParticipants]. Call Close to stop the goroutine.
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
	r.word.Store(1 * epochUnit)
	r.headTag.Store(noTag)
	for i := range r.parts {
		p := &r.parts[i]
		p.ctr.Store(1)
		p.seen = 1 * epochUnit
	}
	go r.background()
	return r, nil
}

// Participants returns the number of participants.
func (r *Reclaimer) Participants() int { return len(r.parts) }

// Quiesce announces that participant p holds no reference obtained before
// the call. Unless the global word changed since p's last announcement it is
// one atomic load. Otherwise it publishes the epoch and, with releases
// pending, it may run release functions whose grace period is over (and
// bump the epoch).
func (r *Reclaimer) Quiesce(p int) {
	if r.word.Load() != r.parts[p].seen {
		r.quiesceSlow(p)
	}
}

// quiesceSlow is Quiesce when the word moved. Kept out of Quiesce so that
// Quiesce inlines.
func (r *Reclaimer) quiesceSlow(p int) {
	part := &r.parts[p]
	w := r.word.Load()
	if part.seen == 0 {
		// Offline: nothing to publish. Help if there is work.
		if w&pendingBit != 0 && r.drive(nil, true) {
			r.wake()
		}
		return
	}
	if w&pendingBit == 0 {
		publish(part, w)
		return
	}
	part.passed.Add(1)
	if r.drive(part, true) {
		part.seen = staleWord // budget spent: the next Quiesce drives again
	}
}

// publish records that part, online and at a quiescent point, observed word
// w. It stores the counter only if the epoch changed.
func publish(part *participant, w uint64) {
	if e := w / epochUnit; e != part.seen/epochUnit {
		part.ctr.Store(e)
	}
	part.seen = w
}

// Offline announces that participant p is entering an extended quiescent
// state and holds no reference. With releases pending it may run release
// functions whose grace period is over (and bump the epoch).
func (r *Reclaimer) Offline(p int) {
	part := &r.parts[p]
	part.ctr.Store(0)
	part.seen = 0
	// Store, then load: the mirror image of a driver that loads the word
	// and then reads the counters.
	if r.word.Load()&pendingBit != 0 {
		r.offlineSlow(p)
	}
}

func (r *Reclaimer) offlineSlow(p int) {
	r.parts[p].passed.Add(1)
	if r.drive(nil, true) {
		r.wake() // budget spent: nobody else may be coming
	}
}

// Online ends participant p's extended quiescent state. What p obtained
// while offline must be validated after Online returns. On an online
// participant it does nothing. It never runs release functions.
func (r *Reclaimer) Online(p int) {
	part := &r.parts[p]
	if part.seen != 0 {
		return
	}
	w := r.word.Load()
	part.seen = w
	part.ctr.Store(w / epochUnit)
}

// Leave announces that participant p stops taking part. It is Offline that
// Online does not undo: the counter is 0, so no driver waits for p, and with
// releases pending it drives like Offline. On a participant that has left
// it does nothing.
func (r *Reclaimer) Leave(p int) {
	part := &r.parts[p]
	if part.left.Load() {
		return
	}
	part.left.Store(true)
	r.Offline(p)
}

// Join makes participant p, which left, take part again: it publishes the
// epoch it loads, as Online does, and never drives. On a participant that
// has not left it does nothing.
func (r *Reclaimer) Join(p int) {
	part := &r.parts[p]
	if !part.left.Load() {
		return
	}
	part.left.Store(false)
	r.Online(p)
}

// drive runs releasable entries and bumps the epoch while it can, for a
// participant at a quiescent point (part, which republishes each new epoch),
// for an offline participant (part nil, bounded) or for the Reclaimer's
// goroutine (part nil, unbounded). It reports whether it stopped because its
// budget was spent with work possibly left to do; the caller must then make
// sure somebody drives again. See "Progress" in the package comment.
func (r *Reclaimer) drive(part *participant, bounded bool) (spent bool) {
	bumps, runs := 0, 0
	for {
		w := r.word.Load()
		if part != nil && w != part.seen {
			publish(part, w)
		}
		if w&pendingBit == 0 {
			return false
		}
		e := w / epochUnit
		// Entries tagged below m are releasable: m was computed from
		// counters read after this load of e.
		if m := r.horizon(e, r.headTag.Load()); m != 0 {
			if bounded && runs == driveRuns {
				return true
			}
			if !r.running.CompareAndSwap(false, true) {
				return false // the holder re-checks after releasing it
			}
			runs++
			r.runRipe(m)
			continue // the re-check
		}
		if r.tailTag.Load() < e {
			// Every entry's tag is behind e: they wait for an online
			// participant behind them, which will drive.
			return false
		}
		// Entries tagged e need a later epoch to be observed.
		if bounded && bumps == driveBumps {
			return true
		}
		if r.word.CompareAndSwap(w, w+epochUnit) {
			bumps++
		}
	}
}

// horizon returns the smallest of e and the online participants' counters,
// if the queue's head (tagged head) is below it, else 0.
func (r *Reclaimer) horizon(e, head uint64) uint64 {
	if head >= e {
		return 0
	}
	m := e
	for i := range r.parts {
		if c := r.parts[i].ctr.Load(); c != 0 && c < m {
			if c <= head {
				return 0
			}
			m = c
		}
	}
	return m
}

// runRipe takes the queue's releasable prefix and runs it. The caller holds
// the run token; runRipe releases it, also if a release panics, after
// handing the rest of the prefix back to the queue and waking the
// Reclaimer's goroutine to run it.
func (r *Reclaimer) runRipe(m uint64) {
	r.mu.Lock()
	b := r.takeRipe(m)
	r.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			r.running.Store(false)
			r.wake()
		}
	}()
	used := r.runBatch(b, true)
	ok = true
	if used != nil {
		r.mu.Lock()
		r.recycle(used)
		r.mu.Unlock()
	}
	r.running.Store(false)
}

// takeRipe detaches the queue's releasable prefix: the chunks tagged below m.
// Called with mu and the run token held.
func (r *Reclaimer) takeRipe(m uint64) batch {
	q := &r.queue
	var b batch
	for c := q.head; c != nil && c.tag < m; c = q.head {
		q.head = c.next
		c.next = nil
		b.splice(batch{head: c, tail: c, users: c.users, start: c.start})
	}
	if b.head == nil {
		return b
	}
	q.users -= b.users
	if q.head == nil {
		q.tail = nil
		q.start = 0
		r.headTag.Store(noTag)
		r.tailTag.Store(0)
		r.word.And(^uint64(pendingBit))
	} else {
		q.restamp()
		r.headTag.Store(q.head.tag)
	}
	if b.users > 0 {
		r.runStart.Store(b.start)
		r.gracePeriods.Add(1)
	}
	return b
}

// recycle keeps up to maxFree chunks of list h for reuse. Called with mu
// held.
func (r *Reclaimer) recycle(h *chunk) {
	for h != nil && r.nfree < maxFree {
		c := h
		h = c.next
		c.next = r.free // runBatch cleared the rest
		r.free = c
		r.nfree++
	}
}

// Retire schedules release to run after a grace period, never on the
// caller's stack. It returns an error wrapping reclaim.ErrInvalid for a nil
// release and reclaim.ErrClosed after Close.
func (r *Reclaimer) Retire(release func()) error {
	if release == nil {
		return errNilRelease
	}
	return r.enqueue(release, false)
}

// enqueue appends an entry tagged with the current epoch. The first entry
// of a batch bumps the epoch, so that the participants' next quiescent
// points publish an epoch above its tag, sets the pending bit, and wakes the
// Reclaimer's goroutine in case every participant is offline.
func (r *Reclaimer) enqueue(fn func(), internal bool) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return reclaim.ErrClosed
	}
	// Loaded under mu, after the caller's delete: see "Why it is safe".
	e := r.word.Load() / epochUnit
	q := &r.queue
	first := q.head == nil
	c := q.tail
	if c == nil || c.tag != e {
		r.tailTag.Store(e) // an atomic store costs; only when it changes
	}
	if c == nil || c.tag != e || c.n == chunkSize {
		c = r.free
		if c != nil {
			r.free, c.next = c.next, nil
			r.nfree--
		} else {
			c = new(chunk)
		}
		c.tag = e
		if first {
			q.head = c
		} else {
			q.tail.next = c
		}
		q.tail = c
	}
	c.entries[c.n] = entry{fn: fn, internal: internal}
	c.n++
	if !internal {
		r.retired++
		q.users++
		c.users++
		// Only a chunk's first user entry reads the clock: on a VM's
		// kvm-clock that read costs about as much as the rest of
		// Retire, and the first entry is the oldest, which is what
		// OldestAge reports.
		if c.start == 0 {
			c.start = r.stamp()
			if q.start == 0 {
				q.start = c.start
			}
		}
	}
	if first {
		r.headTag.Store(e)
		// The pending bit is clear while the queue is empty (both
		// change only under mu), so one add sets it and bumps.
		r.word.Add(epochUnit + pendingBit)
	}
	r.mu.Unlock()
	if first {
		r.wake()
	}
	return nil
}

// wake nudges the Reclaimer's goroutine without blocking. A token already
// in the channel is as good as ours.
func (r *Reclaimer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// background is the Reclaimer's goroutine: it drives whenever woken, until
// Close.
func (r *Reclaimer) background() {
	defer close(r.done)
	for {
		select {
		case <-r.kick:
		case <-r.stop:
			return
		}
		r.drive(nil, false)
	}
}

// Barrier returns nil once every release retired before the call has
// returned, ctx's error if ctx ends first, or reclaim.ErrClosed if the
// Reclaimer is already closed. It must not be called from a release
// function. It needs every online participant to reach a quiescent point, or
// Close to be called.
func (r *Reclaimer) Barrier(ctx context.Context) error {
	// Releases run in FIFO order one at a time, so a sentinel runs after
	// everything retired before it has returned.
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
// and not yet started; OldestAge is the age of the oldest of them. Releases
// are stamped per chunk (one epoch's Retires), so while a prefix runs
// OldestAge is that of its first release until its last release has started:
// an overestimate by at most the time the chunk took to fill. A participant
// is Holding every queued release while it is online and has not published
// an epoch above the oldest one's tag: the oldest waits for it.
func (r *Reclaimer) Stats() reclaim.Stats {
	// Each counter is read before the one it cannot exceed, so that
	// Released <= Retired and Pending >= 0.
	released := r.released.Load()
	started := r.started.Load()
	r.mu.Lock()
	retired := r.retired
	queued := r.queue.users
	// A prefix being run is older than every queued entry.
	oldest := r.runStart.Load()
	if oldest == 0 {
		oldest = r.queue.start
	}
	r.mu.Unlock()
	s := reclaim.Stats{
		Retired:      retired,
		Released:     released,
		Pending:      int64(retired - started),
		GracePeriods: r.gracePeriods.Load(),
		Participants: make([]reclaim.ParticipantStats, len(r.parts)),
	}
	head := r.headTag.Load()
	for i := range r.parts {
		ps := &s.Participants[i]
		ps.Passed = r.parts[i].passed.Load()
		ps.Left = r.parts[i].left.Load()
		if c := r.parts[i].ctr.Load(); queued > 0 && c != 0 && c <= head {
			ps.Holding = int64(queued)
		}
	}
	if oldest != 0 {
		s.OldestAge = max(0, time.Duration(r.stamp()-oldest))
	}
	return s
}

// Close stops the Reclaimer's goroutine and runs every pending release on the
// caller's goroutine, in Retire order, without waiting for a grace period:
// the caller promises that participants hold no references. Later Retire and
// Barrier calls return reclaim.ErrClosed; later participant calls do nothing
// of note. Close is idempotent; a concurrent second call returns once the
// first has finished. It always returns nil. It must not be called from a
// release function.
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
	<-r.done // lets a drive in progress finish
	// Wait for a release runner on a participant's stack, if any, and keep
	// the token: nothing runs releases after this but Close.
	for !r.running.CompareAndSwap(false, true) {
		time.Sleep(10 * time.Microsecond)
	}

	r.mu.Lock()
	b := r.queue
	r.queue, r.free, r.nfree = batch{}, nil, 0
	r.headTag.Store(noTag)
	r.tailTag.Store(0)
	r.word.And(^uint64(pendingBit))
	if b.users > 0 {
		r.runStart.Store(b.start)
	}
	r.mu.Unlock()
	r.runBatch(b, false) // the chunks go to the garbage collector
	return nil
}

// runBatch runs a batch in order, outside every lock, keeping the counters
// and runStart current for Stats. It returns the batch's chunks, cleared,
// for recycling. If a release panics and handBack is set, the entries after
// it go back to the head of the queue before the panic goes on.
func (r *Reclaimer) runBatch(b batch, handBack bool) *chunk {
	users := b.users
	c, i := b.head, 0
	user, finished := false, false
	defer func() {
		if finished {
			return
		}
		if user {
			r.released.Add(1) // it is over, if not returned
		}
		if handBack {
			r.handBack(c, i+1)
		}
	}()
	for ; c != nil; c = c.next {
		for i = c.off; i < c.n; i++ {
			e := c.entries[i]
			user = !e.internal
			if user {
				users--
				if users == 0 {
					r.runStart.Store(0) // nothing in this batch is pending now
				}
				r.started.Add(1)
			}
			e.fn()
			if user {
				r.released.Add(1)
			}
		}
		clear(c.entries[:c.n]) // drop the functions for the garbage collector
		c.off, c.n, c.users, c.start = 0, 0, 0, 0
	}
	finished = true
	return b.head
}

// handBack puts the entries of a panicked run that follow the panicking one
// (entries[off:] of c, and the chunks after c) back at the head of the
// queue, in order. The chunks before c go to the garbage collector.
func (r *Reclaimer) handBack(c *chunk, off int) {
	clear(c.entries[:off])
	c.off = off
	c.users = 0
	for j := off; j < c.n; j++ {
		if !c.entries[j].internal {
			c.users++
		}
	}
	if c.users == 0 {
		c.start = 0
	} // else c.start stays: the stamp of an older entry, an overestimate
	rest := batch{head: c}
	if c.off == c.n {
		rest.head = c.next // the panicking entry was c's last
	}
	r.runStart.Store(0)
	if rest.head == nil {
		return
	}
	for h := rest.head; h != nil; h = h.next {
		rest.tail = h
		rest.users += h.users
	}
	r.mu.Lock()
	q := &r.queue
	first := q.head == nil
	rest.splice(*q)
	rest.restamp()
	*q = rest
	r.headTag.Store(q.head.tag)
	if first {
		r.tailTag.Store(q.tail.tag)
		r.word.Or(pendingBit)
	}
	r.mu.Unlock()
}

// stamp returns a nonzero monotonic timestamp. time.Since reads only the
// monotonic clock since base has a monotonic reading.
func (r *Reclaimer) stamp() int64 { return int64(time.Since(r.base)) + 1 }
