package reclaimtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// CheckInvalid checks that newR rejects fewer than one participant with
// ErrInvalid, that Participants reports the count asked for, that Retire(nil)
// returns ErrInvalid without counting a retirement, and that Quiesce,
// Offline, Online, Leave and Join panic on an index out of range.
func CheckInvalid(newR reclaim.Factory, opts ...Option) error {
	var errs []error
	for _, n := range []int{0, -1} {
		r, err := newR(n)
		if !errors.Is(err, reclaim.ErrInvalid) {
			errs = append(errs, fmt.Errorf("new(%d) error = %v, want ErrInvalid", n, err))
		}
		if err == nil && r != nil {
			errs = append(errs, shut(r))
		}
	}
	for _, n := range []int{1, 3} {
		errs = append(errs, with(newR, n, func(r reclaim.Reclaimer) error {
			var errs []error
			if err := r.Retire(nil); !errors.Is(err, reclaim.ErrInvalid) {
				errs = append(errs, fmt.Errorf("Retire(nil) = %v, want ErrInvalid", err))
			}
			if s := r.Stats(); s.Retired != 0 || s.Pending != 0 {
				errs = append(errs, fmt.Errorf("after a rejected Retire(nil): Stats() = %+v, want nothing retired or pending", s))
			}
			methods := []struct {
				name string
				f    func(int)
			}{{"Quiesce", r.Quiesce}, {"Offline", r.Offline}, {"Online", r.Online}, {"Leave", r.Leave}, {"Join", r.Join}}
			for _, m := range methods {
				for _, p := range []int{-1, n} {
					if !panics(func() { m.f(p) }) {
						errs = append(errs, fmt.Errorf("%d participants: %s(%d) did not panic", n, m.name, p))
					}
				}
			}
			return errors.Join(errs...)
		}))
	}
	return errors.Join(errs...)
}

func panics(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}

// CheckGracePeriod checks, for one and three participants and with each
// participant in turn holding out (online, never quiescing), that a release
// does not run while the others keep quiescing, and that it runs once the
// hold-out quiesces too.
func CheckGracePeriod(newR reclaim.Factory, opts ...Option) error {
	var errs []error
	for _, n := range []int{1, 3} {
		for hold := range n {
			err := with(newR, n, func(r reclaim.Reclaimer) error {
				return gracePeriod(r, hold)
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("%d participants, participant %d holding out: %w", n, hold, err))
			}
		}
	}
	return errors.Join(errs...)
}

func gracePeriod(r reclaim.Reclaimer, hold int) error {
	return gracePeriodAmong(r, all(r.Participants()), hold)
}

// gracePeriodAmong is gracePeriod with only members taking part (the others
// have left): hold, one of them, holds out while the other members quiesce.
func gracePeriodAmong(r reclaim.Reclaimer, members []int, hold int) error {
	pr := newProbe()
	if err := r.Retire(pr.release); err != nil {
		return fmt.Errorf("Retire(release): %w", err)
	}
	var others []int
	for _, p := range members {
		if p != hold {
			others = append(others, p)
		}
	}
	for end := time.Now().Add(notYet); time.Now().Before(end); time.Sleep(tick) {
		for _, p := range others {
			r.Quiesce(p)
		}
		if pr.hasRun() {
			return fmt.Errorf("release ran before participant %d passed a quiescent point", hold)
		}
	}
	for deadline := time.Now().Add(eventually); !pr.hasRun(); time.Sleep(tick) {
		if time.Now().After(deadline) {
			return fmt.Errorf("release did not run within %v while participants %v kept quiescing", eventually, members)
		}
		for _, p := range members {
			r.Quiesce(p)
		}
	}
	return pr.once()
}

// CheckNotOnCallerStack checks that a release never runs on the stack of the
// Retire that submitted it, with participants idle and with participants
// busy, and that a release may itself call Retire, whose release then runs
// later, not on that Retire's stack either.
func CheckNotOnCallerStack(newR reclaim.Factory, opts ...Option) error {
	c := newConfig(opts)
	modes := []struct {
		name     string
		progress func(r reclaim.Reclaimer) func() error
	}{
		{"idle participants", func(r reclaim.Reclaimer) func() error { return c.idle(r, all(2)...) }},
		{"busy participants", func(r reclaim.Reclaimer) func() error { return busy(r, all(2)...) }},
	}
	var errs []error
	for _, m := range modes {
		err := with(newR, 2, func(r reclaim.Reclaimer) error {
			stop := m.progress(r)
			return errors.Join(notOnStack(r), nestedRetire(r), stop())
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
		}
	}
	return errors.Join(errs...)
}

// afterReturn returns a release function that succeeds only if it runs after
// returned is closed. Run inline by the Retire that takes it, it would wait
// for its own caller: it gives up after a second and reports that instead of
// deadlocking.
func afterReturn(returned <-chan struct{}, result chan<- error, what string) func() {
	return func() {
		t := time.NewTimer(soon)
		defer t.Stop()
		err := error(nil)
		select {
		case <-returned:
		case <-t.C:
			err = fmt.Errorf("%s ran on the stack of its Retire (it was still running %v later, before Retire returned)", what, soon)
		}
		select {
		case result <- err:
		default: // a second run; other checks report it
		}
	}
}

func notOnStack(r reclaim.Reclaimer) error {
	returned := make(chan struct{})
	result := make(chan error, 1)
	if err := r.Retire(afterReturn(returned, result, "release")); err != nil {
		return fmt.Errorf("Retire(release): %w", err)
	}
	close(returned)
	return await(result, "release")
}

func nestedRetire(r reclaim.Reclaimer) error {
	innerReturned := make(chan struct{})
	inner := make(chan error, 1)
	outer := make(chan error, 1)
	var once sync.Once
	err := r.Retire(func() {
		once.Do(func() {
			err := r.Retire(afterReturn(innerReturned, inner, "release retired by a release"))
			close(innerReturned)
			if err != nil {
				err = fmt.Errorf("Retire(release) from a release: %w", err)
			}
			outer <- err
		})
	})
	if err != nil {
		return fmt.Errorf("Retire(release): %w", err)
	}
	if err := await(outer, "release that retires another"); err != nil {
		return err
	}
	return await(inner, "release retired by a release")
}

// await waits for a release to report its result on ch.
func await(ch <-chan error, what string) error {
	t := time.NewTimer(eventually)
	defer t.Stop()
	select {
	case err := <-ch:
		return err
	case <-t.C:
		return fmt.Errorf("%s did not run within %v although participants made progress", what, eventually)
	}
}

// CheckIdleParticipants checks that a release runs within a second when every
// participant is offline and nobody calls Quiesce (an idle server must not
// wait for a waiter's timeout), and that a participant that went offline and
// came back online, without a quiescent point since, holds up a release
// retired after its Online. It does not apply to NeedsQuiesce reclaimers.
func CheckIdleParticipants(newR reclaim.Factory) error {
	const n = 3
	var errs []error
	err := with(newR, n, func(r reclaim.Reclaimer) error {
		for p := range n {
			r.Offline(p)
		}
		pr := newProbe()
		if err := r.Retire(pr.release); err != nil {
			return fmt.Errorf("Retire(release): %w", err)
		}
		if !pr.waitRun(soon) {
			return fmt.Errorf("with every participant offline, release did not run within %v", soon)
		}
		return pr.once()
	})
	if err != nil {
		errs = append(errs, err)
	}
	for back := range n {
		err := with(newR, n, func(r reclaim.Reclaimer) error {
			for p := range n {
				r.Offline(p)
			}
			r.Online(back)
			pr := newProbe()
			if err := r.Retire(pr.release); err != nil {
				return fmt.Errorf("Retire(release): %w", err)
			}
			if pr.waitRun(notYet) {
				return errors.New("release ran although the participant came online before the Retire and has not passed a quiescent point since")
			}
			r.Offline(back)
			if !pr.waitRun(soon) {
				return fmt.Errorf("release did not run within %v of every participant being offline again", soon)
			}
			return pr.once()
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("participant %d back online: %w", back, err))
		}
	}
	return errors.Join(errs...)
}

// CheckOfflineIsQuiescent checks, with each of three participants in turn
// holding a reference while the others quiesce, that the release waits for
// the holder and that the holder's Offline, with no Quiesce, lets it run. For
// a NeedsQuiesce reclaimer the holder then comes back online within a
// millisecond and keeps quiescing.
func CheckOfflineIsQuiescent(newR reclaim.Factory, opts ...Option) error {
	c := newConfig(opts)
	const n = 3
	var errs []error
	for hold := range n {
		err := with(newR, n, func(r reclaim.Reclaimer) error {
			stopOthers := busy(r, except(n, hold)...)
			err := offlineIsQuiescent(c, r, hold)
			return errors.Join(err, stopOthers())
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("participant %d holding: %w", hold, err))
		}
	}
	return errors.Join(errs...)
}

func offlineIsQuiescent(c config, r reclaim.Reclaimer, hold int) (err error) {
	pr := newProbe()
	if err := r.Retire(pr.release); err != nil {
		return fmt.Errorf("Retire(release): %w", err)
	}
	if pr.waitRun(notYet) {
		return errors.New("release ran while the holder was online without a quiescent point")
	}
	r.Offline(hold)
	if c.needsQuiesce {
		time.Sleep(time.Millisecond)
		r.Online(hold)
		stop := busy(r, hold)
		defer func() { err = errors.Join(err, stop()) }()
	}
	if !pr.waitRun(eventually) {
		return fmt.Errorf("release did not run within %v of the holder going offline", eventually)
	}
	return pr.once()
}

// CheckBarrier checks that Barrier returns nil only after every earlier
// release has returned; that with progress blocked by a participant that
// never quiesces it returns promptly with the context's error, for a
// cancelled context and for a deadline; and that it returns ErrClosed after
// Close.
func CheckBarrier(newR reclaim.Factory, opts ...Option) error {
	c := newConfig(opts)
	var errs []error
	errs = append(errs, with(newR, 2, func(r reclaim.Reclaimer) (err error) {
		stop := c.idle(r, all(2)...)
		defer func() { err = errors.Join(err, stop()) }()
		if err := barrier(r, eventually); err != nil {
			return fmt.Errorf("with nothing pending: %w", err)
		}
		var done [5]atomic.Bool
		for i := range done {
			err := r.Retire(func() {
				time.Sleep(2 * time.Millisecond)
				done[i].Store(true)
			})
			if err != nil {
				return fmt.Errorf("Retire(release): %w", err)
			}
		}
		if err := barrier(r, eventually); err != nil {
			return err
		}
		for i := range done {
			if !done[i].Load() {
				return fmt.Errorf("Barrier(ctx) returned before release %d of %d returned", i+1, len(done))
			}
		}
		return nil
	}))

	r, err := start(newR, 2)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	// Participant 0 stays online and never quiesces.
	stop := c.idle(r, 1)
	pr := newProbe()
	if err := r.Retire(pr.release); err != nil {
		errs = append(errs, fmt.Errorf("Retire(release): %w", err))
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	errs = append(errs, blockedBarrier(r, cancelled, context.Canceled))
	timed, cancel := context.WithTimeout(context.Background(), notYet)
	defer cancel()
	errs = append(errs, blockedBarrier(r, timed, context.DeadlineExceeded))
	if pr.hasRun() {
		errs = append(errs, errors.New("release ran while participant 0 was online without a quiescent point"))
	}
	errs = append(errs, stop(), shut(r))
	if pr.runs.Load() != 1 {
		errs = append(errs, fmt.Errorf("release pending at Close ran %d times by the time Close returned, want once", pr.runs.Load()))
	}
	var berr error
	if hung := within(soon, func() { berr = r.Barrier(context.Background()) }); hung != nil {
		errs = append(errs, fmt.Errorf("Barrier(ctx) after Close: %w", hung))
	} else if !errors.Is(berr, reclaim.ErrClosed) {
		errs = append(errs, fmt.Errorf("Barrier(ctx) after Close = %v, want ErrClosed", berr))
	}
	return errors.Join(errs...)
}

func blockedBarrier(r reclaim.Reclaimer, ctx context.Context, want error) error {
	var err error
	if hung := within(soon, func() { err = r.Barrier(ctx) }); hung != nil {
		return fmt.Errorf("Barrier(ctx) with progress blocked and context ending (%v): %w", want, hung)
	}
	if !errors.Is(err, want) {
		return fmt.Errorf("Barrier(ctx) with progress blocked = %v, want %v", err, want)
	}
	return nil
}

// CheckClose checks that Close runs exactly once every release still pending
// because a participant never quiesced, before it returns; that Retire after
// Close returns ErrClosed and its release never runs; that a second Close
// returns nil; and that of Retires racing with Close, each that returned nil
// had its release run exactly once and each that returned ErrClosed never.
func CheckClose(newR reclaim.Factory, opts ...Option) error {
	c := newConfig(opts)
	var errs []error

	r, err := start(newR, 2)
	if err != nil {
		return err
	}
	// Participant 0 stays online and never quiesces.
	stop := c.idle(r, 1)
	var runs [10]atomic.Int32
	for i := range runs {
		if err := r.Retire(func() { runs[i].Add(1) }); err != nil {
			errs = append(errs, fmt.Errorf("Retire(release): %w", err))
		}
	}
	time.Sleep(notYet)
	for i := range runs {
		if runs[i].Load() != 0 {
			errs = append(errs, errors.New("a release ran while participant 0 was online without a quiescent point"))
			break
		}
	}
	errs = append(errs, stop(), shut(r))
	wrong := 0
	for i := range runs {
		if runs[i].Load() != 1 {
			wrong++
		}
	}
	if wrong > 0 {
		errs = append(errs, fmt.Errorf("when Close returned, %d of %d releases pending at Close had not run exactly once", wrong, len(runs)))
	}
	if s := r.Stats(); s.Pending != 0 || s.Released != s.Retired {
		errs = append(errs, fmt.Errorf("after Close: Stats() = %+v, want nothing pending and Released == Retired", s))
	}
	late := newProbe()
	if err := r.Retire(late.release); !errors.Is(err, reclaim.ErrClosed) {
		errs = append(errs, fmt.Errorf("Retire(release) after Close = %v, want ErrClosed", err))
	}
	var err2 error
	if hung := within(soon, func() { err2 = r.Close() }); hung != nil {
		errs = append(errs, fmt.Errorf("second Close: %w", hung))
	} else if err2 != nil {
		errs = append(errs, fmt.Errorf("second Close = %v, want nil", err2))
	}
	time.Sleep(notYet)
	if late.runs.Load() != 0 {
		errs = append(errs, errors.New("release refused with ErrClosed ran"))
	}

	errs = append(errs, closeRace(c, newR))
	return errors.Join(errs...)
}

// closeRace retires from several goroutines while Close runs.
func closeRace(c config, newR reclaim.Factory) error {
	const goroutines = 4
	r, err := start(newR, 2)
	if err != nil {
		return err
	}
	stop := c.idle(r, all(2)...)
	type attempt struct {
		runs atomic.Int32
		err  error
	}
	results := make([][]*attempt, goroutines)
	var accepted atomic.Int64
	var closed atomic.Bool // set when Close has returned
	var giveUp atomic.Bool // set if Close hangs, so that the Retires stop
	var wg sync.WaitGroup
	var errs []error
	for g := range goroutines {
		wg.Go(func() {
			// Go on after the first ErrClosed, to see that it sticks, and
			// stop a few attempts after Close returned in any case.
			for refused, late := 0, 0; refused < 3 && late < 3 && !giveUp.Load(); {
				if closed.Load() {
					late++
				}
				a := new(attempt)
				a.err = r.Retire(func() { a.runs.Add(1) })
				results[g] = append(results[g], a)
				switch {
				case a.err == nil:
					accepted.Add(1)
				case errors.Is(a.err, reclaim.ErrClosed):
					refused++
				default:
					return
				}
			}
		})
	}
	// Let the Retires get going, so that Close lands among them.
	for deadline := time.Now().Add(soon); accepted.Load() < 200 && time.Now().Before(deadline); {
		time.Sleep(tick)
	}
	errs = append(errs, stop()) // participants stop before Close, as the contract asks
	closeErr := shut(r)
	closed.Store(true)
	if closeErr != nil {
		giveUp.Store(true)
	}
	errs = append(errs, closeErr)
	if hung := within(hangLimit, wg.Wait); hung != nil {
		giveUp.Store(true)
		return errors.Join(append(errs, fmt.Errorf("Retire(release) racing with Close: %w", hung))...)
	}
	time.Sleep(notYet) // a refused release that runs anyway may run late
	var ok, refused, doubled, lost, ranRefused int
	for _, as := range results {
		for _, a := range as {
			n := a.runs.Load()
			switch {
			case a.err == nil:
				ok++
				if n == 0 {
					lost++
				} else if n > 1 {
					doubled++
				}
			case errors.Is(a.err, reclaim.ErrClosed):
				refused++
				if n != 0 {
					ranRefused++
				}
			default:
				errs = append(errs, fmt.Errorf("Retire(release) racing with Close = %v, want nil or ErrClosed", a.err))
			}
		}
	}
	if lost+doubled+ranRefused > 0 {
		errs = append(errs, fmt.Errorf("Retire(release) racing with Close: of %d accepted releases %d never ran and %d ran more than once; %d of %d refused releases ran",
			ok, lost, doubled, ranRefused, refused))
	}
	return errors.Join(errs...)
}

// CheckExactlyOnce checks that thousands of releases retired concurrently from
// several goroutines, some of them retiring more releases in turn, while
// participants quiesce, hold, go offline, and leave and rejoin at random,
// each run exactly once: those retired from outside a release by the time
// Barrier returns, all of them by the time Close returns. Meanwhile Stats
// must never show more releases than retirements, nor negative Pending.
func CheckExactlyOnce(newR reclaim.Factory, opts ...Option) error {
	c := newConfig(opts)
	const (
		n          = 3
		retirers   = 4
		perRetirer = 2000
		nestEvery  = 50 // one release in nestEvery retires another
		paceEvery  = 50 // a retirer pauses after every paceEvery Retires
	)
	r, err := start(newR, n)
	if err != nil {
		return err
	}
	var errs []error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}

	var stops []func() error
	for p := range n {
		rng := rand.New(rand.NewPCG(uint64(p), 1))
		stops = append(stops, loop(func() { randomParticipant(c, r, p, rng) }))
	}
	stopStats := loop(func() {
		if s := r.Stats(); s.Released > s.Retired || s.Pending < 0 {
			fail(fmt.Errorf("inconsistent Stats() = %+v", s))
		}
		time.Sleep(time.Millisecond)
	})

	direct := make([]atomic.Int32, retirers*perRetirer)
	nested := make([]atomic.Int32, retirers*perRetirer/nestEvery)
	var wg sync.WaitGroup
	for g := range retirers {
		wg.Go(func() {
			for i := g * perRetirer; i < (g+1)*perRetirer; i++ {
				release := func() { direct[i].Add(1) }
				if i%nestEvery == 0 {
					release = func() {
						if direct[i].Add(1) != 1 {
							return // don't retire twice for a release that ran twice
						}
						if err := r.Retire(func() { nested[i/nestEvery].Add(1) }); err != nil {
							fail(fmt.Errorf("Retire(release) from a release: %w", err))
						}
					}
				}
				if err := r.Retire(release); err != nil {
					fail(fmt.Errorf("Retire(release): %w", err))
					return
				}
				if i%paceEvery == 0 {
					// Spread the Retires over many grace periods.
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	errs = append(errs, barrier(r, eventually))
	notYetRun := func(counts []atomic.Int32) (missing, repeated int) {
		for i := range counts {
			switch counts[i].Load() {
			case 0:
				missing++
			case 1:
			default:
				repeated++
			}
		}
		return missing, repeated
	}
	if missing, repeated := notYetRun(direct); missing+repeated > 0 {
		errs = append(errs, fmt.Errorf("when Barrier returned, %d of %d releases had not run and %d had run more than once", missing, len(direct), repeated))
	}
	for _, stop := range stops {
		errs = append(errs, stop())
	}
	errs = append(errs, stopStats(), shut(r))
	missing, repeated := notYetRun(direct)
	nmissing, nrepeated := notYetRun(nested)
	if missing+repeated+nmissing+nrepeated > 0 {
		errs = append(errs, fmt.Errorf("after Close: %d releases never ran and %d ran more than once; of releases retired by releases, %d never ran and %d ran more than once",
			missing, repeated, nmissing, nrepeated))
	}
	if s := r.Stats(); s.Pending != 0 || s.Released != s.Retired || s.Retired < uint64(len(direct)+len(nested)) {
		errs = append(errs, fmt.Errorf("after Close: Stats() = %+v, want nothing pending and Released == Retired >= %d", s, len(direct)+len(nested)))
	}
	errMu.Lock()
	defer errMu.Unlock()
	return errors.Join(errs...)
}

// randomParticipant does one random step of participant p: a quiescent
// point, a read section held for a while, a simulated blocking call, or now
// and then a spell away (Leave, Join).
func randomParticipant(c config, r reclaim.Reclaimer, p int, rng *rand.Rand) {
	switch k := rng.IntN(40); {
	case k == 0:
		r.Leave(p)
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
		r.Join(p)
	case k < 28:
		r.Quiesce(p)
		time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
	case k < 36:
		r.Offline(p)
		max := 2000
		if c.needsQuiesce {
			max = 1000
		}
		time.Sleep(time.Duration(rng.IntN(max)) * time.Microsecond)
		r.Online(p)
	default:
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		r.Quiesce(p)
	}
}

// CheckStats checks the counters along a known sequence: all zero on a new
// Reclaimer; three releases retired and held up by a participant that never
// quiesces are Retired and Pending, with a positive OldestAge; once they have
// run, Released equals Retired, nothing is Pending, OldestAge is zero and at
// least one grace period is counted.
func CheckStats(newR reclaim.Factory, opts ...Option) error {
	c := newConfig(opts)
	return with(newR, 2, func(r reclaim.Reclaimer) (err error) {
		s0 := r.Stats()
		if len(s0.Participants) != 2 {
			return fmt.Errorf("new Reclaimer: Stats().Participants has %d entries, want 2", len(s0.Participants))
		}
		for _, ps := range s0.Participants {
			if ps != (reclaim.ParticipantStats{}) {
				return fmt.Errorf("new Reclaimer: Stats() = %+v, want all zero", s0)
			}
		}
		if s0.Retired != 0 || s0.Released != 0 || s0.Pending != 0 || s0.GracePeriods != 0 || s0.OldestAge != 0 {
			return fmt.Errorf("new Reclaimer: Stats() = %+v, want all zero", s0)
		}
		// Participant 0 holds; participant 1 lets grace periods through.
		stop := c.idle(r, 1)
		defer func() { err = errors.Join(err, stop()) }()
		var released atomic.Int32
		for range 3 {
			if err := r.Retire(func() { released.Add(1) }); err != nil {
				return fmt.Errorf("Retire(release): %w", err)
			}
		}
		time.Sleep(5 * time.Millisecond)
		var errs []error
		if released.Load() != 0 {
			errs = append(errs, errors.New("a release ran while participant 0 was online without a quiescent point"))
		}
		s := r.Stats()
		if s.Retired != 3 || s.Released != 0 || s.Pending != 3 || s.OldestAge <= 0 {
			errs = append(errs, fmt.Errorf("3 releases held up: Stats() = %+v, want Retired 3, Released 0, Pending 3, OldestAge > 0", s))
		}
		if len(s.Participants) != 2 || s.Participants[0].Holding < 1 || s.Participants[1].Holding != 0 {
			errs = append(errs, fmt.Errorf("3 releases held up by participant 0: Stats().Participants = %+v, want participant 0 holding at least 1, participant 1 none", s.Participants))
		}
		stopHolder := busy(r, 0)
		defer func() { err = errors.Join(err, stopHolder()) }()
		for deadline := time.Now().Add(eventually); r.Stats().Released < 3; time.Sleep(tick) {
			if time.Now().After(deadline) {
				return errors.Join(append(errs, fmt.Errorf("Stats().Released did not reach 3 within %v: %+v", eventually, r.Stats()))...)
			}
		}
		s = r.Stats()
		if s.Retired != 3 || s.Released != 3 || s.Pending != 0 || s.OldestAge != 0 || s.GracePeriods < 1 {
			errs = append(errs, fmt.Errorf("3 releases run: Stats() = %+v, want Retired 3, Released 3, Pending 0, OldestAge 0, GracePeriods >= 1", s))
		}
		if released.Load() != 3 {
			errs = append(errs, fmt.Errorf("Stats().Released is 3 but %d releases ran", released.Load()))
		}
		if len(s.Participants) != 2 || s.Participants[0].Holding != 0 || s.Participants[0].Passed < 1 {
			errs = append(errs, fmt.Errorf("3 releases run: Stats().Participants = %+v, want participant 0 holding none, passed at least once", s.Participants))
		}
		return errors.Join(errs...)
	})
}
