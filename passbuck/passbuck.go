// Package passbuck implements pass-the-buck deferred reclamation, the scheme
// Paolo Bonzini proposed on LKML in 2012 for freeing epoll registrations
// that other threads may still hold events for, extended so that it needs
// no finite epoll_wait timeout.
//
// Each participant k owns a pending list behind its own mutex. Retire
// appends to participant 0's list in O(1). At its quiescent point,
// participant k splices its whole list onto participant k+1's: O(1)
// whatever the list's length, one mutex held at a time, no per-item lock.
// A release function that leaves the last participant's list has been
// carried past a quiescent point of every participant after its Retire: the
// last participant runs the batch, outside every lock.
//
// In the Classic mode, the original pass-the-buck scheme, that is all. Its
// weakness, pointed out in the same LKML thread: a participant blocked
// indefinitely never passes the buck, so every blocking call needs a finite
// timeout, trading release latency against idle wake-ups.
//
// The SkipOffline mode (the default) removes the weakness. A participant
// about to block calls Offline; whoever hands a batch to an offline
// participant carries it on through that participant, since it holds
// nothing it has validated. The check that a participant is offline and the
// taking of its list happen under its mutex, after every item in the list
// was appended, so the check covers each of them. If participant 0 is
// offline when Retire appends to its empty list, nobody may come to pass the
// buck: Retire signals the Reclaimer's own goroutine, which carries the list
// through the offline participants and runs a batch that reaches the end.
// Retires that find the list non-empty need not signal, since whoever takes
// the list takes their items too: the goroutine is woken once per batch, not
// once per Retire. Retire thus takes one mutex whatever N is, and release
// functions never run on its stack. All this is safe only because the
// caller validates, after Online, everything its blocking call returned
// (see package reclaim and docs/design.md).
//
// A participant that leaves is carried through in both modes, as an offline
// one is in SkipOffline mode, and for the same reason: Leave stores the
// participant's left flag (in SkipOffline mode also offline, the flag that
// passers there load), then passes its list on; a passer appends to the
// list and stores has, then loads the flag, under the list's mutex. Of two
// sequentially consistent store-then-load sequences, at least one load sees
// the other's store, so either Leave passes on what was appended, or the
// passer carries it on itself. Either way the batch goes on to the
// participants after the leaver: a Leave moves the buck one step and never
// ends a grace period. When participant 0 has left, Retire wakes the
// Reclaimer's goroutine as it does for an offline participant 0. Join clears
// the flag. A passer that loads it after the Join parks its batch there. One
// that loaded it before had appended every item it carries before that
// load, hence before the Join, and the participant validates after Join
// what it obtains, so it sees those items' deletes.
//
// Release functions need not run in Retire order; Barrier tracks completion
// by sequence number instead.
package passbuck

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gracepoll/gracepoll/reclaim"
)

// Mode selects how the buck moves.
type Mode int

const (
	// SkipOffline passes the buck through offline participants; grace
	// periods complete with participants blocked indefinitely.
	SkipOffline Mode = iota
	// Classic is the original pass-the-buck scheme: every participant
	// must call Quiesce (or Offline) for a grace period to complete, so
	// blocking calls need a finite timeout. Online is a no-op.
	Classic
)

// String returns "skip-offline" or "classic".
func (m Mode) String() string {
	switch m {
	case SkipOffline:
		return "skip-offline"
	case Classic:
		return "classic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configures a Reclaimer. The zero value is the default:
// SkipOffline.
type Options struct {
	Mode Mode
}

// MaxParticipants is the largest participant count New accepts: a bound
// so that a typo does not allocate gigabytes.
const MaxParticipants = 1 << 16

// A node carries one release function through the lists.
type node struct {
	fn   func()
	next *node
	seq  uint64 // Retire order, for Barrier
	at   int64  // Retire time in ns since Reclaimer.base, if a list head
}

// batch is a singly linked list segment, head to tail, and its length.
type batch struct {
	head, tail *node
	n          int64
}

func (b *batch) push(n *node) {
	if b.tail == nil {
		b.head = n
	} else {
		b.tail.next = n
	}
	b.tail = n
	b.n++
}

func (b *batch) splice(o batch) {
	if o.head == nil {
		return
	}
	if b.tail == nil {
		*b = o
		return
	}
	b.tail.next = o.head
	b.tail = o.tail
	b.n += o.n
}

// cacheLine is the padding unit. 128 bytes rather than 64 because x86's
// adjacent-line prefetcher pulls cache lines in pairs, and some arm64 and
// ppc64 cores have 128-byte lines.
const cacheLine = 128

// participantState is one pending list.
type participantState struct {
	mu      sync.Mutex
	list    batch         // guarded by mu
	has     atomic.Bool   // list is non-empty; stored under mu, loaded without it
	offline atomic.Bool   // written only by the owner (SkipOffline mode)
	left    atomic.Bool   // written only by the owner: Leave, cleared by Join
	passed  atomic.Uint64 // non-empty lists taken from it, for Stats
}

// participant is padded to its own cache-line block: passers write has and
// the list, the owner writes offline, and participants passing the buck at
// once do not slow each other down.
type participant struct {
	participantState
	_ [cacheLine - unsafe.Sizeof(participantState{})%cacheLine]byte
}

// Compile-time check that a participant fills exactly one padding unit.
var (
	_ [cacheLine - unsafe.Sizeof(participant{})]byte
	_ [unsafe.Sizeof(participant{}) - cacheLine]byte
)

// Reclaimer is a pass-the-buck reclaim.Reclaimer. Its methods are safe for
// concurrent use within the rules of reclaim.Reclaimer.
type Reclaimer struct {
	mode  Mode
	parts []participant
	base  time.Time

	// Guarded by parts[0].mu: the next sequence number and the closed flag,
	// so that Retire and Close agree on which releases were accepted.
	seq    uint64
	closed bool

	// The Reclaimer's own goroutine carries the buck when participant 0 is
	// offline at Retire, and runs batches handed off after a panic.
	// bgSignalled coalesces wake-ups: it is set by the waker and cleared
	// by the goroutine before it looks for work.
	bgMu        sync.Mutex
	bgQueue     batch // guarded by bgMu
	bgSignalled atomic.Bool
	bgWakeups   atomic.Uint64 // times the goroutine woke, for tests
	bgWake      chan struct{}
	bgStop      chan struct{}
	bgDone      chan struct{}

	// Completion tracking for Barrier and Stats, guarded by doneMu. low is
	// the smallest sequence number whose release has not returned; ahead
	// holds completed numbers above it (releases may finish out of order).
	doneMu   sync.Mutex
	low      uint64
	ahead    map[uint64]struct{}
	released uint64
	waiters  []barrierWaiter
	gps      uint64

	started   atomic.Uint64 // releases started, for Stats.Pending
	closeOnce sync.Once
}

type barrierWaiter struct {
	target uint64 // every seq below it must be complete
	ch     chan struct{}
}

var _ reclaim.Reclaimer = (*Reclaimer)(nil)

var nodePool = sync.Pool{New: func() any { return new(node) }}

// New returns a Reclaimer for the given number of participants, all of
// them online. It returns an error wrapping reclaim.ErrInvalid for a count
// outside [1, 65536] or an unknown mode.
func New(participants int, opts Options) (*Reclaimer, error) {
	if participants < 1 || participants > MaxParticipants {
		return nil, fmt.Errorf("%w: passbuck: %d participants, want 1..%d", reclaim.ErrInvalid, participants, MaxParticipants)
	}
	if opts.Mode != SkipOffline && opts.Mode != Classic {
		return nil, fmt.Errorf("%w: passbuck: unknown mode %d", reclaim.ErrInvalid, int(opts.Mode))
	}
	r := &Reclaimer{
		mode:   opts.Mode,
		parts:  make([]participant, participants),
		base:   time.Now(),
		ahead:  make(map[uint64]struct{}),
		bgWake: make(chan struct{}, 1),
		bgStop: make(chan struct{}),
		bgDone: make(chan struct{}),
	}
	go r.background()
	return r, nil
}

// Factory returns a reclaim.Factory that makes Reclaimers with opts, for
// poller.Options.Reclaimer and the conformance suite.
func Factory(opts Options) reclaim.Factory {
	return func(participants int) (reclaim.Reclaimer, error) { return New(participants, opts) }
}

// NeedsQuiesce reports whether grace periods need every participant to call
// Quiesce or Offline itself: true in Classic mode, where a participant
// blocked indefinitely holds every release up (see reclaim.NeedsQuiesce).
func (r *Reclaimer) NeedsQuiesce() bool { return r.mode == Classic }

// Mode returns the mode the Reclaimer was made with.
func (r *Reclaimer) Mode() Mode { return r.mode }

// Participants returns the number of participants.
func (r *Reclaimer) Participants() int { return len(r.parts) }

// Retire appends release to participant 0's list. If the list was empty
// and participant 0 is offline (SkipOffline mode) or has left (either mode),
// it wakes the Reclaimer's goroutine, which carries the buck on through the
// offline or absent participants and runs a batch that reaches the end.
func (r *Reclaimer) Retire(release func()) error {
	if release == nil {
		return fmt.Errorf("%w: passbuck: nil release function", reclaim.ErrInvalid)
	}
	n := nodePool.Get().(*node)
	n.fn = release
	p := &r.parts[0]
	p.mu.Lock()
	if r.closed {
		p.mu.Unlock()
		n.fn = nil
		nodePool.Put(n)
		return reclaim.ErrClosed
	}
	n.seq = r.seq
	r.seq++
	first := p.list.head == nil
	if first {
		// Only a list's head is ever read for OldestAge, and every head
		// starts as the head of participant 0's list: stamp just those,
		// sparing the clock read (tens of ns on some VMs) on the rest.
		n.at = int64(time.Since(r.base))
	}
	p.list.push(n)
	// has is stored before offline is loaded, the mirror image of
	// Offline. Only the first item of a list signals: a later one joins
	// a list that its first item's signal, or participant 0's next
	// quiescent point, will take whole.
	idle := false
	if first {
		p.has.Store(true)
		idle = r.skips(p)
	}
	p.mu.Unlock()
	if idle {
		r.signal()
	}
	return nil
}

// signal wakes the Reclaimer's goroutine unless a wake-up is pending.
func (r *Reclaimer) signal() {
	if !r.bgSignalled.Load() && r.bgSignalled.CompareAndSwap(false, true) {
		select {
		case r.bgWake <- struct{}{}:
		default:
		}
	}
}

// Quiesce passes participant p's list to participant p+1 (through offline
// participants in SkipOffline mode). If the list leaves the last
// participant, Quiesce runs its release functions before returning.
func (r *Reclaimer) Quiesce(p int) {
	if !r.parts[p].has.Load() {
		return
	}
	r.carry(p+1, r.take(p), true)
}

// Offline marks participant p offline and passes its list, which it no
// longer needs to hold. In Classic mode it is Quiesce.
func (r *Reclaimer) Offline(p int) {
	if r.mode == SkipOffline {
		// Store first, then look at the list: a passer appends first, then
		// looks at offline. Sequential consistency lets at least one of
		// the two see the other, so a batch is never parked on a
		// participant that is blocked.
		r.parts[p].offline.Store(true)
	}
	r.Quiesce(p)
}

// Online marks participant p online. The caller must validate what it
// obtained while offline. In Classic mode it does nothing.
func (r *Reclaimer) Online(p int) {
	pt := &r.parts[p] // bounds check in both modes
	if r.mode == SkipOffline {
		pt.offline.Store(false)
	}
}

// Leave marks participant p as gone, so that passers carry batches on
// through it in either mode, and passes its list on. In SkipOffline mode it
// is also an Offline that Online does not undo: it stores offline too, and
// passers look at offline alone.
func (r *Reclaimer) Leave(p int) {
	pt := &r.parts[p]
	if pt.left.Load() {
		return
	}
	// Store, then look at the list, as in Offline: a passer that appends
	// to p's list after this store sees p gone and carries the list on;
	// one that appended before it left its items for Quiesce to take.
	pt.left.Store(true)
	r.Offline(p)
}

// Join makes participant p, which left, take part again, online. Like
// Online, it leaves the caller to validate what it obtains afterwards.
func (r *Reclaimer) Join(p int) {
	pt := &r.parts[p]
	if !pt.left.Load() {
		return
	}
	pt.left.Store(false)
	if r.mode == SkipOffline {
		pt.offline.Store(false)
	}
}

// skips reports whether a passer may carry a batch on through participant
// p, which holds nothing validated that the batch could release: p is
// offline (SkipOffline mode) or has left (either mode; in SkipOffline mode
// leaving sets offline). The caller has appended to p's list and stored has
// before this load.
func (r *Reclaimer) skips(p *participant) bool {
	if r.mode == SkipOffline {
		return p.offline.Load()
	}
	return p.left.Load()
}

// take empties participant k's list and returns it.
func (r *Reclaimer) take(k int) batch {
	p := &r.parts[k]
	p.mu.Lock()
	b := p.list
	p.list = batch{}
	p.has.Store(false)
	p.mu.Unlock()
	if b.head != nil {
		p.passed.Add(1)
	}
	return b
}

// carry appends b to participant k's list and, in SkipOffline mode, while
// that participant is offline, takes its whole list on to the next one. A
// batch that passes the last participant has completed its grace period:
// it runs here if runHere, otherwise on the Reclaimer's goroutine.
func (r *Reclaimer) carry(k int, b batch, runHere bool) {
	for ; k < len(r.parts); k++ {
		p := &r.parts[k]
		p.mu.Lock()
		p.list.splice(b)
		if p.list.head == nil {
			p.mu.Unlock()
			return
		}
		// has is stored before offline (or left) is loaded, the mirror
		// image of Offline and Leave; see there.
		p.has.Store(true)
		if !r.skips(p) {
			p.mu.Unlock()
			return // p passes it at its next quiescent point
		}
		// p was offline, or gone, after every item in its list was
		// appended: it holds nothing validated that any of them could
		// release.
		b = p.list
		p.list = batch{}
		p.has.Store(false)
		p.mu.Unlock()
		p.passed.Add(1)
	}
	r.gracePeriod(b, runHere)
}

// gracePeriod runs or hands off a batch whose grace period is complete.
func (r *Reclaimer) gracePeriod(b batch, runHere bool) {
	if runHere {
		r.run(b.head)
		return
	}
	r.bgMu.Lock()
	r.bgQueue.splice(b)
	r.bgMu.Unlock()
	r.signal()
}

// background carries the buck from an offline participant 0 and runs
// handed-off batches, until Close.
func (r *Reclaimer) background() {
	defer close(r.bgDone)
	for {
		select {
		case <-r.bgWake:
		case <-r.bgStop:
			return
		}
		r.bgWakeups.Add(1)
		r.bgSignalled.Store(false)
		if r.parts[0].has.Load() {
			r.carry(0, batch{}, true)
		}
		r.bgMu.Lock()
		b := r.bgQueue
		r.bgQueue = batch{}
		r.bgMu.Unlock()
		if b.head != nil {
			r.run(b.head)
		}
	}
}

// run calls the release functions of list h in order. If one panics, the
// panic goes on up the caller's stack after the functions before it are
// accounted for and the rest are handed to the Reclaimer's goroutine.
func (r *Reclaimer) run(h *node) {
	var cnt uint64
	for n := h; n != nil; n = n.next {
		cnt++
	}
	r.started.Add(cnt)
	n := h
	defer func() {
		if n == nil {
			return
		}
		rest := n.next
		n.next = nil
		r.finish(h)
		if rest != nil {
			t, c := rest, uint64(1)
			for ; t.next != nil; t = t.next {
				c++
			}
			r.started.Add(^(c - 1)) // not started after all
			r.gracePeriod(batch{rest, t, int64(c)}, false)
		}
	}()
	for ; n != nil; n = n.next {
		n.fn()
	}
	r.finish(h)
}

// finish records the completion of list h, wakes satisfied Barrier calls
// and recycles the nodes.
func (r *Reclaimer) finish(h *node) {
	r.doneMu.Lock()
	r.gps++
	for n := h; n != nil; n = n.next {
		r.released++
		if n.seq != r.low {
			r.ahead[n.seq] = struct{}{}
			continue
		}
		r.low++
		for len(r.ahead) > 0 {
			if _, ok := r.ahead[r.low]; !ok {
				break
			}
			delete(r.ahead, r.low)
			r.low++
		}
	}
	if len(r.waiters) > 0 {
		w := r.waiters[:0]
		for _, bw := range r.waiters {
			if r.low >= bw.target {
				close(bw.ch)
			} else {
				w = append(w, bw)
			}
		}
		clear(r.waiters[len(w):])
		r.waiters = w
	}
	r.doneMu.Unlock()
	for n := h; n != nil; {
		next := n.next
		*n = node{}
		nodePool.Put(n)
		n = next
	}
}

// Barrier returns when every release function retired before the call has
// returned, when ctx ends (its error), or ErrClosed if the Reclaimer is
// closed. In Classic mode it needs every participant that has not left to
// keep calling Quiesce.
func (r *Reclaimer) Barrier(ctx context.Context) error {
	p := &r.parts[0]
	p.mu.Lock()
	closed, target := r.closed, r.seq
	p.mu.Unlock()
	if closed {
		return reclaim.ErrClosed
	}
	r.doneMu.Lock()
	if r.low >= target {
		r.doneMu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	r.waiters = append(r.waiters, barrierWaiter{target, ch})
	r.doneMu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		r.dropWaiter(ch)
		return ctx.Err()
	}
}

func (r *Reclaimer) dropWaiter(ch chan struct{}) {
	r.doneMu.Lock()
	defer r.doneMu.Unlock()
	for i, w := range r.waiters {
		if w.ch == ch {
			r.waiters = append(r.waiters[:i], r.waiters[i+1:]...)
			return
		}
	}
}

// Stats returns a snapshot of the counters. OldestAge is read from the
// head of every list, one lock at a time.
func (r *Reclaimer) Stats() reclaim.Stats {
	// Completion first, then starts, then retirements: each is read before
	// the one it cannot exceed, so Released <= Retired and Pending >= 0.
	r.doneMu.Lock()
	released, gps := r.released, r.gps
	r.doneMu.Unlock()
	started := r.started.Load()
	var oldest int64 = -1
	consider := func(b batch) {
		if b.head != nil && (oldest < 0 || b.head.at < oldest) {
			oldest = b.head.at
		}
	}
	var retired uint64
	parts := make([]reclaim.ParticipantStats, len(r.parts))
	for k := len(r.parts) - 1; k >= 0; k-- {
		p := &r.parts[k]
		p.mu.Lock()
		if k == 0 {
			retired = r.seq
		}
		consider(p.list)
		parts[k].Holding = p.list.n
		p.mu.Unlock()
		parts[k].Passed = p.passed.Load()
		parts[k].Left = p.left.Load()
	}
	r.bgMu.Lock()
	consider(r.bgQueue)
	r.bgMu.Unlock()
	s := reclaim.Stats{
		Retired:      retired,
		Released:     released,
		Pending:      int64(retired) - int64(started),
		GracePeriods: gps,
		Participants: parts,
	}
	if oldest >= 0 {
		s.OldestAge = max(time.Since(r.base)-time.Duration(oldest), 0)
	}
	return s
}

// Close stops accepting releases, stops the Reclaimer's goroutine (letting
// a batch it is running finish),
// and then runs every pending release function on the caller's goroutine.
// It returns nil; later calls do nothing.
func (r *Reclaimer) Close() error {
	r.closeOnce.Do(func() {
		p := &r.parts[0]
		p.mu.Lock()
		r.closed = true
		p.mu.Unlock()
		close(r.bgStop)
		<-r.bgDone
		var all batch
		// The last participant's list holds the oldest releases.
		for k := len(r.parts) - 1; k >= 0; k-- {
			all.splice(r.take(k))
		}
		r.bgMu.Lock()
		all.splice(r.bgQueue)
		r.bgQueue = batch{}
		r.bgMu.Unlock()
		if all.head != nil {
			r.run(all.head)
		}
	})
	return nil
}
