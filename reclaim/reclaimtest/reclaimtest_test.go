package reclaimtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestReference shows that the suite passes a correct reclaimer written
// independently of the module's implementations.
func TestReference(t *testing.T) {
	reclaimtest.Run(t, newRef)
}

// TestReferenceClassic exercises the NeedsQuiesce paths of the suite with a
// correct reclaimer that really needs quiescent points.
func TestReferenceClassic(t *testing.T) {
	reclaimtest.Run(t, newClassic, reclaimtest.NeedsQuiesce())
}

// TestBroken shows that the torture catches reclaimers that free too early.
func TestBroken(t *testing.T) {
	for _, tc := range []struct {
		name        string
		newR        reclaim.Factory
		gracePeriod bool // CheckGracePeriod must fail too
	}{
		{"Immediate", newImmediate, true},
		{"IgnoresOne", newIgnoresOne, true},
		// The naive "offline around the blocking call": a participant that
		// comes back online is still taken for offline.
		{"OnlineIgnored", mutant(onlineIgnored), false},
		{"LeaveSkipsRest", mutant(leaveSkipsRest), false},
		{"JoinStaysOffline", mutant(joinStaysOffline), false},
		{"CountsMembers", mutant(countsMembers), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := reclaimtest.Torture(tc.newR, reclaimtest.TortureConfig{})
			t.Logf("torture: %v", rep)
			if err == nil || rep.Violations() == 0 {
				t.Errorf("Torture: error %v, %d violations; want an error and violations", err, rep.Violations())
			}
			if !tc.gracePeriod {
				return
			}
			err = reclaimtest.CheckGracePeriod(tc.newR)
			if err == nil || !strings.Contains(err.Error(), "release ran before participant") {
				t.Errorf("CheckGracePeriod = %v, want a premature release reported", err)
			}
		})
	}
}

// TestMutants shows that each check can fail: each mutant of the reference
// reclaimer breaks one guarantee, and the check for it must report an error.
func TestMutants(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(reclaim.Factory, ...reclaimtest.Option) error
		newR  reclaim.Factory
		want  string // a failure the check must report, if set
	}{
		{"InlineRetire", reclaimtest.CheckNotOnCallerStack, mutant(inlineRetire), ""},
		{"OfflineNotSkipped", idleCheck, newClassic, ""},
		{"OnlineIgnored", idleCheck, mutant(onlineIgnored), ""},
		{"BarrierEarly", reclaimtest.CheckBarrier, mutant(barrierEarly), ""},
		{"BarrierIgnoresContext", reclaimtest.CheckBarrier, mutant(barrierIgnoresContext), ""},
		{"CloseDropsPending", reclaimtest.CheckClose, mutant(closeDropsPending), ""},
		{"AcceptsAfterClose", reclaimtest.CheckClose, mutant(acceptsAfterClose), ""},
		{"RunsTwice", reclaimtest.CheckExactlyOnce, mutant(runsTwice), ""},
		{"PendingStuck", reclaimtest.CheckStats, mutant(pendingStuck), ""},
		{"LeaveSkipsRest", reclaimtest.CheckMembership, mutant(leaveSkipsRest), "a release ran when participant 0 left, before participants [1 2] after it passed a quiescent point"},
		{"JoinStaysOffline", reclaimtest.CheckMembership, mutant(joinStaysOffline), "after Join(1): release ran before participant 1 passed a quiescent point"},
		{"CountsMembers", reclaimtest.CheckMembership, mutant(countsMembers), "after Leave(0): release ran before participant 2 passed a quiescent point"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // several mutants fail only by a timeout
			err := tc.check(tc.newR)
			if err == nil {
				t.Fatal("check passed a broken reclaimer")
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check failed without reporting %q: %v", tc.want, err)
			}
			t.Logf("caught: %v", err)
		})
	}
}

func idleCheck(newR reclaim.Factory, _ ...reclaimtest.Option) error {
	return reclaimtest.CheckIdleParticipants(newR)
}

// ref is a deliberately simple, correct reclaimer. Each participant
// publishes a word: a counter, bumped at each quiescent point, shifted left
// by one, and an offline bit. A worker goroutine takes the whole queue as a
// batch, snapshots the words, and polls until each participant was offline at
// the snapshot or has changed its word since (it passed a quiescent point
// after the batch was taken, hence after every Retire in it); then it runs the
// batch in order. In classic mode offline participants are not skipped: they
// must pass a quiescent point (Offline counts as one) like everybody else.
type ref struct {
	classic bool
	mut     mutation // a deliberate bug, for TestMutants
	words   []paddedWord

	mu      sync.Mutex
	queue   []entry // retired, not yet taken by the worker
	batch   []entry // taken by the worker
	next    int     // batch[next:] have not started
	closed  bool
	wake    chan struct{}
	quit    chan struct{}
	stopped chan struct{}

	retired, released, gracePeriods atomic.Uint64
	pending                         atomic.Int64

	// For the membership mutants: participants gone, and the participant
	// whose Leave last cut a grace period short (leaveSkipsRest), with a
	// generation bumped at each cut.
	gone            atomic.Int64
	cutFrom, cutGen atomic.Int64

	// Per participant, for Stats: releases it holds up, grace periods it
	// let through.
	holding []atomic.Int64
	passed  []atomic.Uint64
}

type paddedWord struct {
	atomic.Uint64
	_ [56]byte // keep participants off each other's cache line
}

type entry struct {
	release func()
	at      time.Time
	barrier chan struct{} // set for a Barrier's marker instead of release
}

func newRef(n int) (reclaim.Reclaimer, error) { return newRefMode(n, false, correct) }

func newClassic(n int) (reclaim.Reclaimer, error) { return newRefMode(n, true, correct) }

// A mutation is a bug that a mutant of the reference reclaimer has.
type mutation int

const (
	correct               mutation = iota
	inlineRetire                   // Retire runs the release at once, on its own stack
	onlineIgnored                  // Online does nothing, so a participant stays "offline"
	barrierEarly                   // Barrier returns at once
	barrierIgnoresContext          // Barrier waits regardless of its context
	closeDropsPending              // Close forgets pending releases
	acceptsAfterClose              // Retire after Close returns nil and drops the release
	runsTwice                      // each release runs twice
	pendingStuck                   // Stats.Pending never goes down
	// Leave ends the grace period in progress for the participants after
	// the leaver: as a pass-the-buck ring that hands the batch parked on
	// the leaver straight to the end.
	leaveSkipsRest
	// Join clears the left flag but leaves the participant offline, so
	// grace periods pass it while it holds references taken after Join.
	joinStaysOffline
	// Grace periods wait for participants 0..M-1, M the number of members:
	// a membership count taken for a set, one participant too few per
	// participant gone.
	countsMembers
)

func mutant(m mutation) reclaim.Factory {
	return func(n int) (reclaim.Reclaimer, error) { return newRefMode(n, false, m) }
}

func newRefMode(n int, classic bool, mut mutation) (*ref, error) {
	if n < 1 {
		return nil, fmt.Errorf("ref: %d participants: %w", n, reclaim.ErrInvalid)
	}
	r := &ref{
		classic: classic,
		mut:     mut,
		words:   make([]paddedWord, n),
		holding: make([]atomic.Int64, n),
		passed:  make([]atomic.Uint64, n),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go r.work()
	return r, nil
}

func (r *ref) Participants() int { return len(r.words) }

// A participant's word: a counter in units of wordUnit, bumped at each
// quiescent point, and two flags.
const (
	offlineBit = 1
	leftBit    = 2 // set with offlineBit
	wordUnit   = 4
)

// Each participant's word has one writer, so a load and a store will do.
func (r *ref) Quiesce(p int) { w := &r.words[p]; w.Store(w.Load() + wordUnit) }
func (r *ref) Offline(p int) { w := &r.words[p]; w.Store((w.Load() + wordUnit) | offlineBit) }
func (r *ref) Online(p int) {
	w := &r.words[p]
	if r.mut != onlineIgnored {
		w.Store(w.Load() &^ offlineBit)
	}
}

func (r *ref) Leave(p int) {
	w := &r.words[p]
	v := w.Load()
	if v&leftBit != 0 {
		return
	}
	r.gone.Add(1)
	if r.mut == leaveSkipsRest {
		r.cutFrom.Store(int64(p))
		r.cutGen.Add(1)
	}
	w.Store((v + wordUnit) | offlineBit | leftBit)
}

func (r *ref) Join(p int) {
	w := &r.words[p]
	v := w.Load()
	if v&leftBit == 0 {
		return
	}
	r.gone.Add(-1)
	if r.mut == joinStaysOffline {
		w.Store(v &^ leftBit)
		return
	}
	w.Store(v &^ (offlineBit | leftBit))
}

func (r *ref) Retire(release func()) error {
	if release == nil {
		return reclaim.ErrInvalid
	}
	if r.mut == inlineRetire {
		release()
		return nil
	}
	return r.enqueue(entry{release: release, at: time.Now()})
}

func (r *ref) enqueue(e entry) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		if r.mut == acceptsAfterClose {
			return nil
		}
		return reclaim.ErrClosed
	}
	r.queue = append(r.queue, e)
	if e.release != nil {
		r.retired.Add(1)
		r.pending.Add(1)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

func (r *ref) Barrier(ctx context.Context) error {
	done := make(chan struct{})
	if err := r.enqueue(entry{barrier: done}); err != nil {
		return err
	}
	switch r.mut {
	case barrierEarly:
		return nil
	case barrierIgnoresContext:
		<-done
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *ref) Stats() reclaim.Stats {
	s := reclaim.Stats{Released: r.released.Load()} // first, so it never exceeds Retired
	s.Retired = r.retired.Load()
	s.Pending = r.pending.Load()
	s.GracePeriods = r.gracePeriods.Load()
	s.Participants = make([]reclaim.ParticipantStats, len(r.words))
	for i := range s.Participants {
		s.Participants[i] = reclaim.ParticipantStats{
			Holding: r.holding[i].Load(),
			Passed:  r.passed[i].Load(),
			Left:    r.words[i].Load()&leftBit != 0,
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, es := range [][]entry{r.batch[r.next:], r.queue} {
		for _, e := range es {
			if e.release != nil {
				s.OldestAge = max(time.Since(e.at), 1)
				return s
			}
		}
	}
	return s
}

func (r *ref) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.quit)
	}
	r.mu.Unlock()
	<-r.stopped
	return nil
}

func (r *ref) work() {
	defer close(r.stopped)
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	for {
		r.mu.Lock()
		r.batch, r.queue, r.next = r.queue, nil, 0
		batch, closed := r.batch, r.closed
		r.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			select {
			case <-r.wake:
			case <-r.quit:
			}
			continue
		}
		if !closed {
			var users int64
			for _, e := range batch {
				if e.release != nil {
					users++
				}
			}
			if r.waitGracePeriod(poll, users) {
				r.gracePeriods.Add(1)
			} else {
				closed = true // cut short by Close
			}
		}
		for i, e := range batch {
			r.mu.Lock()
			r.next = i + 1
			r.mu.Unlock()
			if e.barrier != nil {
				close(e.barrier)
				continue
			}
			if r.mut != pendingStuck {
				r.pending.Add(-1)
			}
			if closed && r.mut == closeDropsPending {
				continue
			}
			e.release()
			if r.mut == runsTwice {
				e.release()
			}
			r.released.Add(1)
		}
	}
}

// waitGracePeriod returns true when every participant has passed a quiescent
// point since the call, or false if Close cut it short.
func (r *ref) waitGracePeriod(poll *time.Timer, users int64) bool {
	snap := make([]uint64, len(r.words))
	for i := range snap {
		snap[i] = r.words[i].Load()
	}
	members := len(r.words) - int(r.gone.Load())
	cutGen := r.cutGen.Load()
	through := make([]bool, len(r.words))
	defer func() {
		for i := range r.holding {
			r.holding[i].Store(0)
		}
	}()
	for {
		done := true
		for i, s := range snap {
			// A participant that has left is skipped in every mode.
			offline := s&leftBit != 0 || (s&offlineBit != 0 && !r.classic)
			switch {
			case r.mut == countsMembers && i >= members:
				offline = true
			case r.mut == leaveSkipsRest && r.cutGen.Load() != cutGen && int64(i) > r.cutFrom.Load():
				offline = true
			}
			if !offline && r.words[i].Load() == s {
				done = false
				r.holding[i].Store(users)
				continue
			}
			r.holding[i].Store(0)
			if !through[i] {
				through[i] = true
				r.passed[i].Add(1)
			}
		}
		if done {
			return true
		}
		poll.Reset(50 * time.Microsecond)
		select {
		case <-poll.C:
		case <-r.quit:
			return false
		}
	}
}

// immediate is broken: it runs each release on a new goroutine at once,
// without waiting for any grace period.
type immediate struct {
	n                 int
	mu                sync.Mutex
	closed            bool
	running           sync.WaitGroup
	retired, released atomic.Uint64
}

func newImmediate(n int) (reclaim.Reclaimer, error) {
	if n < 1 {
		return nil, reclaim.ErrInvalid
	}
	return &immediate{n: n}, nil
}

func (r *immediate) Participants() int { return r.n }
func (r *immediate) Quiesce(p int)     { r.check(p) }
func (r *immediate) Offline(p int)     { r.check(p) }
func (r *immediate) Online(p int)      { r.check(p) }
func (r *immediate) Leave(p int)       { r.check(p) }
func (r *immediate) Join(p int)        { r.check(p) }

func (r *immediate) check(p int) {
	if p < 0 || p >= r.n {
		panic(fmt.Sprintf("participant %d out of range", p))
	}
}

func (r *immediate) Retire(release func()) error {
	if release == nil {
		return reclaim.ErrInvalid
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return reclaim.ErrClosed
	}
	r.retired.Add(1)
	r.running.Go(func() {
		release()
		r.released.Add(1)
	})
	return nil
}

func (r *immediate) Barrier(ctx context.Context) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return reclaim.ErrClosed
	}
	for target := r.retired.Load(); r.released.Load() < target; time.Sleep(50 * time.Microsecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (r *immediate) Stats() reclaim.Stats {
	released := r.released.Load()
	retired := r.retired.Load()
	return reclaim.Stats{Retired: retired, Released: released, Pending: int64(retired - released)}
}

func (r *immediate) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.running.Wait()
	return nil
}

// ignoresOne is broken: it wraps the reference reclaimer and ignores the last
// participant, as if that participant were always offline.
type ignoresOne struct {
	*ref
}

func newIgnoresOne(n int) (reclaim.Reclaimer, error) {
	r, err := newRefMode(n, false, correct)
	if err != nil {
		return nil, err
	}
	r.Offline(n - 1)
	return ignoresOne{r}, nil
}

func (r ignoresOne) ignored(p int) bool {
	_ = &r.words[p] // panic on an index out of range
	return p == len(r.words)-1
}

func (r ignoresOne) Quiesce(p int) {
	if !r.ignored(p) {
		r.ref.Quiesce(p)
	}
}

func (r ignoresOne) Offline(p int) {
	if !r.ignored(p) {
		r.ref.Offline(p)
	}
}

func (r ignoresOne) Online(p int) {
	if !r.ignored(p) {
		r.ref.Online(p)
	}
}

func (r ignoresOne) Leave(p int) {
	if !r.ignored(p) {
		r.ref.Leave(p)
	}
}

func (r ignoresOne) Join(p int) {
	if !r.ignored(p) {
		r.ref.Join(p)
	}
}
