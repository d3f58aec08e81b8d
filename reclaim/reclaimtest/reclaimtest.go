// Package reclaimtest checks that an implementation of [reclaim.Reclaimer]
// keeps the guarantees documented in package reclaim, in the manner of
// testing/fstest. An implementation's test calls [Run]:
//
//	func TestConformance(t *testing.T) {
//		reclaimtest.Run(t, mypkg.Factory(mypkg.Options{}))
//	}
//
// Run runs these checks, each as a subtest and each also callable on its own:
//
//   - Invalid ([CheckInvalid]): fewer than one participant and Retire(nil)
//     are rejected with ErrInvalid, Participants reports N, and participant
//     methods panic on an index out of range.
//   - GracePeriod ([CheckGracePeriod]): a release does not run while one
//     participant (each in turn) stays online without a quiescent point, and
//     runs once every participant quiesces.
//   - NotOnCallerStack ([CheckNotOnCallerStack]): a release never runs on the
//     stack of its Retire, also when Retire is called from a release.
//   - IdleParticipants ([CheckIdleParticipants]): with every participant
//     offline a release runs without anyone calling Quiesce, and a
//     participant that came back online blocks later releases. Skipped for a
//     [NeedsQuiesce] reclaimer.
//   - OfflineIsQuiescent ([CheckOfflineIsQuiescent]): a participant going
//     offline counts as a quiescent point.
//   - Barrier ([CheckBarrier]): Barrier waits for earlier releases to return,
//     honours a cancelled context while progress is blocked, and returns
//     ErrClosed after Close.
//   - Close ([CheckClose]): Close runs every pending release exactly once
//     before it returns, later Retire calls fail with ErrClosed and their
//     releases never run, Close is idempotent, and Retire racing with Close
//     either runs its release exactly once or refuses it.
//   - ExactlyOnce ([CheckExactlyOnce]): thousands of concurrent Retires, with
//     participants quiescing, going offline, leaving and joining at random,
//     each run exactly once; Stats stays consistent meanwhile.
//   - Stats ([CheckStats]): the counters match a known sequence of calls.
//   - Membership ([CheckMembership]): a participant that left holds no grace
//     period up, in every mode; one that joined again holds up releases
//     retired after its Join; releases parked on a participant that leaves
//     still wait for the others, and none is lost; Stats reports Left.
//   - Torture ([Torture]): an rcutorture-style stress that makes a premature
//     release observable as a use-after-free.
//
// A Check function returns every failure it found, joined, or nil, so that a
// test can rerun one check, or show that a deliberately broken Reclaimer
// fails it. They take Run's options, except CheckIdleParticipants, which
// does not apply to a NeedsQuiesce reclaimer.
//
// The suite calls Online for every participant of a new Reclaimer before it
// uses it, so participants may start online or offline, but Online on an
// online participant must be harmless. Each check makes its own Reclaimers
// and closes them. Run fails a subtest that leaks goroutines, so it must not
// run in parallel with other tests.
//
// Checks for something that must not happen yet (a premature release) watch
// for a short window (about 20 ms): a correct implementation can never fail
// them, however slow the machine. Checks for something that must eventually
// happen allow seconds. A call that hangs (a deadlocked Close, say) fails its
// check after 10 s instead of hanging the test binary; its goroutine is then
// left behind.
//
// [Benchmark] measures any Reclaimer with the same sub-benchmarks, so that
// implementations can be compared.
package reclaimtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/reclaim"
)

// An Option adjusts the suite to a kind of Reclaimer.
type Option struct{ apply func(*config) }

type config struct {
	needsQuiesce bool
}

// NeedsQuiesce declares that the reclaimer cannot complete a grace period
// while a participant stays offline indefinitely, as in classic
// pass-the-buck, where every blocking call needs a finite timeout. The suite
// then simulates blocking calls that return within about a millisecond, after
// which the participant comes online and quiesces, and it skips the
// IdleParticipants check.
func NeedsQuiesce() Option {
	return Option{func(c *config) { c.needsQuiesce = true }}
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	return c
}

// Run runs every check on Reclaimers made by newR, each as a subtest of t.
func Run(t *testing.T, newR reclaim.Factory, opts ...Option) {
	t.Helper()
	c := newConfig(opts)
	checks := []struct {
		name string
		skip bool // not applicable to a NeedsQuiesce reclaimer
		run  func(t *testing.T) error
	}{
		{"Invalid", false, func(*testing.T) error { return CheckInvalid(newR, opts...) }},
		{"GracePeriod", false, func(*testing.T) error { return CheckGracePeriod(newR, opts...) }},
		{"NotOnCallerStack", false, func(*testing.T) error { return CheckNotOnCallerStack(newR, opts...) }},
		{"IdleParticipants", c.needsQuiesce, func(*testing.T) error { return CheckIdleParticipants(newR) }},
		{"OfflineIsQuiescent", false, func(*testing.T) error { return CheckOfflineIsQuiescent(newR, opts...) }},
		{"Barrier", false, func(*testing.T) error { return CheckBarrier(newR, opts...) }},
		{"Close", false, func(*testing.T) error { return CheckClose(newR, opts...) }},
		{"ExactlyOnce", false, func(*testing.T) error { return CheckExactlyOnce(newR, opts...) }},
		{"Stats", false, func(*testing.T) error { return CheckStats(newR, opts...) }},
		{"Membership", false, func(*testing.T) error { return CheckMembership(newR, opts...) }},
		{"Torture", false, func(t *testing.T) error {
			rep, err := Torture(newR, TortureConfig{NeedsQuiesce: c.needsQuiesce})
			t.Logf("torture: %v", rep)
			return err
		}},
	}
	for _, ch := range checks {
		t.Run(ch.name, func(t *testing.T) {
			if ch.skip {
				t.Skip("not applicable: the reclaimer NeedsQuiesce")
			}
			// IgnoreCurrent is evaluated now, so only goroutines started
			// by this check count as leaks.
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			if err := ch.run(t); err != nil {
				t.Error(err)
			}
		})
	}
}

// Timing of the checks. See the package comment.
const (
	notYet     = 20 * time.Millisecond // window in which a premature release would show
	soon       = time.Second           // deadline for what needs no help from participants
	eventually = 5 * time.Second       // deadline for what needs participants' progress
	hangLimit  = 10 * time.Second      // after this, a call counts as hung
	tick       = 50 * time.Microsecond // pause of a polling loop
)

// start makes a Reclaimer with n participants and brings them all online.
func start(newR reclaim.Factory, n int) (reclaim.Reclaimer, error) {
	r, err := newR(n)
	if err != nil {
		return nil, fmt.Errorf("new(%d): %w", n, err)
	}
	if r == nil {
		return nil, fmt.Errorf("new(%d) returned a nil Reclaimer and no error", n)
	}
	if got := r.Participants(); got != n {
		return nil, errors.Join(fmt.Errorf("new(%d): Participants() = %d", n, got), shut(r))
	}
	for p := range n {
		r.Online(p)
	}
	return r, nil
}

// with runs body on a new Reclaimer with n participants and closes it.
func with(newR reclaim.Factory, n int, body func(r reclaim.Reclaimer) error) error {
	r, err := start(newR, n)
	if err != nil {
		return err
	}
	return errors.Join(body(r), shut(r))
}

// shut closes r, failing if Close fails or hangs.
func shut(r reclaim.Reclaimer) error {
	var err error
	if hung := within(hangLimit, func() { err = r.Close() }); hung != nil {
		return fmt.Errorf("Close(): %w", hung)
	}
	if err != nil {
		return fmt.Errorf("Close(): %w", err)
	}
	return nil
}

// barrier calls Barrier with a deadline, failing if it does not return nil.
func barrier(r reclaim.Reclaimer, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var err error
	if hung := within(d+hangLimit, func() { err = r.Barrier(ctx) }); hung != nil {
		return fmt.Errorf("Barrier(ctx) ignored its context: %w", hung)
	}
	if err != nil {
		return fmt.Errorf("Barrier(ctx): %w", err)
	}
	return nil
}

// within runs f and fails if it has not returned after d. A hung f is left
// running on its goroutine.
func within(d time.Duration, f func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("did not return within %v", d)
	}
}

// loop runs body repeatedly on a new goroutine until stop is called. stop
// waits for the goroutine and fails if body is stuck.
func loop(body func()) (stop func() error) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-quit:
				return
			default:
			}
			body()
		}
	})
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			close(quit)
			if hung := within(hangLimit, wg.Wait); hung != nil {
				err = fmt.Errorf("participant goroutine stuck in the reclaimer: %w", hung)
			}
		})
		return err
	}
}

// idle lets participants ps stop holding references the way waiters blocked
// in epoll_wait do: they go offline, or, for a NeedsQuiesce reclaimer, keep
// making short simulated blocking calls (offline, about 200 µs, online,
// quiesce). stop brings them back online.
func (c config) idle(r reclaim.Reclaimer, ps ...int) (stop func() error) {
	if !c.needsQuiesce {
		for _, p := range ps {
			r.Offline(p)
		}
		return func() error {
			for _, p := range ps {
				r.Online(p)
			}
			return nil
		}
	}
	return loop(func() {
		for _, p := range ps {
			r.Offline(p)
		}
		time.Sleep(200 * time.Microsecond)
		for _, p := range ps {
			r.Online(p)
			r.Quiesce(p)
		}
	})
}

// busy keeps participants ps online, passing a quiescent point about every
// 100 µs, until stop.
func busy(r reclaim.Reclaimer, ps ...int) (stop func() error) {
	return loop(func() {
		for _, p := range ps {
			r.Quiesce(p)
		}
		time.Sleep(tick)
	})
}

// all returns the participant indexes 0..n-1.
func all(n int) []int {
	ps := make([]int, n)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// except returns the participant indexes 0..n-1 other than h.
func except(n, h int) []int {
	var ps []int
	for p := range n {
		if p != h {
			ps = append(ps, p)
		}
	}
	return ps
}

// probe is a release function that counts its runs and signals the first.
type probe struct {
	runs atomic.Int32
	ran  chan struct{}
}

func newProbe() *probe { return &probe{ran: make(chan struct{})} }

func (p *probe) release() {
	if p.runs.Add(1) == 1 {
		close(p.ran)
	}
}

// hasRun reports whether the release has run.
func (p *probe) hasRun() bool {
	select {
	case <-p.ran:
		return true
	default:
		return false
	}
}

// waitRun waits up to d for the release to run.
func (p *probe) waitRun(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ran:
		return true
	case <-t.C:
		return false
	}
}

// once fails unless the release ran exactly once.
func (p *probe) once() error {
	if n := p.runs.Load(); n != 1 {
		return fmt.Errorf("release ran %d times, want exactly once", n)
	}
	return nil
}
