package reclaimtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/reclaimtest"
)

// TestRing shows that the suite passes a second correct reclaimer, shaped
// like pass-the-buck, whose mutant TestRingMutants breaks it.
func TestRing(t *testing.T) {
	reclaimtest.Run(t, func(n int) (reclaim.Reclaimer, error) { return newRing(n, false) })
}

// TestRingMutants shows that CheckMembership and the torture catch a ring
// whose Leave runs the batch parked on the leaver instead of handing it to
// the next participant.
func TestRingMutants(t *testing.T) {
	leaveRuns := func(n int) (reclaim.Reclaimer, error) { return newRing(n, true) }
	err := reclaimtest.CheckMembership(leaveRuns)
	const want = "a release ran when participant 0 left, before participants [1 2] after it passed a quiescent point"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckMembership = %v, want it to report %q", err, want)
	}
	rep, err := reclaimtest.Torture(leaveRuns, reclaimtest.TortureConfig{})
	t.Logf("torture: %v", rep)
	if err == nil || rep.Violations() == 0 {
		t.Errorf("Torture: error %v, %d violations; want an error and violations", err, rep.Violations())
	}
}

// ring is a deliberately simple pass-the-buck reclaimer: one mutex guards
// every participant's list. Retire appends to participant 0's list; a
// participant's quiescent point moves its list to the end of the next
// participant's, through participants that are offline or gone, which hold
// nothing it could release; a list moved past the last participant goes to
// a worker goroutine, which runs it. A list goes onto the end of the next
// one, whose items are older, so releases run in Retire order, which
// Barrier's marker relies on.
type ring struct {
	leaveRuns bool // the mutant: Leave runs the leaver's list at once

	mu     sync.Mutex
	lists  [][]ringEntry
	state  []ringState
	passed []uint64
	done   []ringEntry // past the last participant, for the worker
	closed bool
	gps    uint64

	wake          chan struct{}
	quit, stopped chan struct{}

	retired, started, released atomic.Uint64
}

type ringState int

const (
	ringOnline ringState = iota
	ringOffline
	ringLeft
)

type ringEntry struct {
	release func()
	marker  chan struct{} // a Barrier's, instead of release
	at      time.Time
}

func newRing(n int, leaveRuns bool) (*ring, error) {
	if n < 1 {
		return nil, fmt.Errorf("ring: %d participants: %w", n, reclaim.ErrInvalid)
	}
	r := &ring{
		leaveRuns: leaveRuns,
		lists:     make([][]ringEntry, n),
		state:     make([]ringState, n),
		passed:    make([]uint64, n),
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	go r.work()
	return r, nil
}

func (r *ring) Participants() int { return len(r.lists) }

// set changes participant p's state and moves its list on. The index is
// checked before the lock, so that a bad one panics without leaving it held.
func (r *ring) set(p int, s ringState, move bool) {
	_ = r.state[p]
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state[p] == ringLeft && s != ringOnline {
		return // gone: Leave again does nothing
	}
	r.state[p] = s
	if !move {
		return
	}
	if s == ringLeft && r.leaveRuns {
		r.passed[p]++
		r.finish(r.lists[p])
		r.lists[p] = nil
		return
	}
	r.carry(p)
}

func (r *ring) Quiesce(p int) { r.set(p, r.stateOf(p), true) }
func (r *ring) Offline(p int) { r.set(p, ringOffline, true) }
func (r *ring) Online(p int)  { r.set(p, ringOnline, false) }
func (r *ring) Leave(p int)   { r.set(p, ringLeft, true) }

func (r *ring) Join(p int) {
	if r.stateOf(p) == ringLeft {
		r.set(p, ringOnline, false)
	}
}

func (r *ring) stateOf(p int) ringState {
	_ = r.state[p]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state[p]
}

// carry moves participant k's list on, through every participant after it
// that is not online, past the last one to the worker. Called with mu held.
func (r *ring) carry(k int) {
	for ; k < len(r.lists); k++ {
		if len(r.lists[k]) == 0 {
			return
		}
		r.passed[k]++
		b := r.lists[k]
		r.lists[k] = nil
		if k+1 == len(r.lists) {
			r.finish(b)
			return
		}
		r.lists[k+1] = append(r.lists[k+1], b...)
		if r.state[k+1] == ringOnline {
			return
		}
	}
}

// finish hands b, whose grace period is over, to the worker. Called with mu
// held.
func (r *ring) finish(b []ringEntry) {
	if len(b) == 0 {
		return
	}
	r.gps++
	r.done = append(r.done, b...)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *ring) Retire(release func()) error {
	if release == nil {
		return reclaim.ErrInvalid
	}
	return r.enqueue(ringEntry{release: release, at: time.Now()})
}

func (r *ring) enqueue(e ringEntry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return reclaim.ErrClosed
	}
	if e.release != nil {
		r.retired.Add(1)
	}
	r.lists[0] = append(r.lists[0], e)
	if r.state[0] != ringOnline {
		r.carry(0)
	}
	return nil
}

func (r *ring) Barrier(ctx context.Context) error {
	ch := make(chan struct{})
	if err := r.enqueue(ringEntry{marker: ch}); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// work runs what passed the last participant, until Close.
func (r *ring) work() {
	defer close(r.stopped)
	for {
		select {
		case <-r.wake:
		case <-r.quit:
			return
		}
		r.mu.Lock()
		b := r.done
		r.done = nil
		r.mu.Unlock()
		r.run(b)
	}
}

func (r *ring) run(b []ringEntry) {
	for _, e := range b {
		if e.marker != nil {
			close(e.marker)
			continue
		}
		r.started.Add(1)
		e.release()
		r.released.Add(1)
	}
}

func (r *ring) Stats() reclaim.Stats {
	s := reclaim.Stats{Released: r.released.Load()}
	started := r.started.Load()
	s.Retired = r.retired.Load()
	s.Pending = int64(s.Retired - started)
	r.mu.Lock()
	defer r.mu.Unlock()
	s.GracePeriods = r.gps
	var oldest time.Time
	consider := func(es []ringEntry) (users int64) {
		for _, e := range es {
			if e.release != nil {
				users++
				if oldest.IsZero() || e.at.Before(oldest) {
					oldest = e.at
				}
			}
		}
		return users
	}
	consider(r.done)
	for k := range r.lists {
		s.Participants = append(s.Participants, reclaim.ParticipantStats{
			Holding: consider(r.lists[k]),
			Passed:  r.passed[k],
			Left:    r.state[k] == ringLeft,
		})
	}
	if !oldest.IsZero() && s.Pending > 0 {
		s.OldestAge = max(time.Since(oldest), 1)
	}
	return s
}

func (r *ring) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.stopped
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.quit)
	<-r.stopped
	r.mu.Lock()
	all := r.done
	r.done = nil
	for k := len(r.lists) - 1; k >= 0; k-- {
		all = append(all, r.lists[k]...)
		r.lists[k] = nil
	}
	r.mu.Unlock()
	r.run(all)
	return nil
}
