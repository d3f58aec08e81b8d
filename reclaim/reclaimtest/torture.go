package reclaimtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/reclaim"
)

// TortureConfig sets up a [Torture] run. The zero value is a good default.
type TortureConfig struct {
	Participants int           // reader goroutines, one per participant; 0 means 4
	Duration     time.Duration // how long the writer keeps replacing the record; 0 means 300 ms
	NeedsQuiesce bool          // see [NeedsQuiesce]: simulated blocking calls last at most 1 ms
	Seed         int64         // seeds the random delays; 0 picks one from the clock
}

// TortureReport is the outcome of a [Torture] run. Poisoned, PipeTooLong,
// Reused, Repeated and Unreleased count violations; the rest describe the
// run.
type TortureReport struct {
	Participants int
	Duration     time.Duration // the writer's run time
	Seed         int64
	Reads        uint64        // read sections
	Leaves       uint64        // spells away from the reclaimer: Leave, then Join
	Retires      uint64        // release functions accepted by Retire
	Releases     uint64        // release function runs
	Stats        reclaim.Stats // the reclaimer's counters just before Close

	Poisoned    uint64 // reads that saw their record released to the freelist
	PipeTooLong uint64 // reads that saw their record's grace period end
	Reused      uint64 // reads whose record was handed out again under them
	Repeated    uint64 // release functions that ran more than once
	Unreleased  uint64 // accepted release functions that had not run when Close returned
}

// Violations returns the number of violations the run observed.
func (r TortureReport) Violations() uint64 {
	return r.Poisoned + r.PipeTooLong + r.Reused + r.Repeated + r.Unreleased
}

// String summarises the run and its violations on one line.
func (r TortureReport) String() string {
	return fmt.Sprintf("%d participants, %v, seed %d: %d reads, %d leaves, %d retires, %d releases, %d grace periods; "+
		"violations: %d poisoned, %d pipe too long, %d reused, %d repeated, %d unreleased",
		r.Participants, r.Duration, r.Seed, r.Reads, r.Leaves, r.Retires, r.Releases, r.Stats.GracePeriods,
		r.Poisoned, r.PipeTooLong, r.Reused, r.Repeated, r.Unreleased)
}

// A record is what readers read and the writer replaces: the stand-in for a
// registration. Its fields are atomic so that a reader racing with its reuse
// (a bug in the reclaimer) reports the bug instead of a data race.
type record struct {
	poisoned atomic.Bool   // set when the record goes back on the freelist
	pipe     atomic.Int32  // 0 published, 1 removed, +1 per grace period since
	gen      atomic.Uint64 // bumped at each reuse
}

type torture struct {
	r       reclaim.Reclaimer
	cfg     TortureConfig
	current atomic.Pointer[record]

	freeMu sync.Mutex
	free   []*record

	reads, leaves, retires, releases    atomic.Uint64
	poisoned, pipeTooLong, reused, reps atomic.Uint64

	errMu sync.Mutex
	errs  []error // reasons the run could not proceed
}

// Torture stresses a Reclaimer in the manner of Linux's rcutorture, making a
// premature release observable as a use-after-free.
//
// A writer keeps replacing the record published in an atomic pointer and
// retires the old one. Its release advances the record's pipe count and
// retires it again until it has been through two grace periods, then poisons
// it and puts it on a freelist, from which the writer reuses it. Each
// participant is a reader: it loads the current record, dwells in the read
// section for a random time (nothing, a spin, a short sleep, now and then a
// millisecond), checks that the record is not poisoned, has not seen a grace
// period end (pipe below 2) and was not reused, then passes a quiescent
// point, or sometimes goes offline for a simulated blocking call and loads
// the record afresh once back online, or now and then leaves, joins again a
// while later and loads the record afresh: a reference obtained after Join
// counts from the Join, like one obtained after Online. After Duration it
// calls Barrier, stops the readers and closes the Reclaimer, checking that
// every accepted release ran exactly once.
//
// The error is non-nil if the run observed a violation or could not proceed
// (newR failed, Retire failed, Barrier or Close failed or hung).
func Torture(newR reclaim.Factory, cfg TortureConfig) (TortureReport, error) {
	if cfg.Participants <= 0 {
		cfg.Participants = 4
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 300 * time.Millisecond
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	rep := TortureReport{Participants: cfg.Participants, Seed: cfg.Seed}
	r, err := start(newR, cfg.Participants)
	if err != nil {
		return rep, fmt.Errorf("torture: %w", err)
	}
	t := &torture{r: r, cfg: cfg}
	t.current.Store(new(record))

	quit := make(chan struct{})
	var readers sync.WaitGroup
	for p := range cfg.Participants {
		readers.Go(func() { t.reader(p, quit) })
	}
	begin := time.Now()
	t.write(begin.Add(cfg.Duration))
	rep.Duration = time.Since(begin)

	t.fail(barrier(r, eventually))
	close(quit)
	if hung := within(hangLimit, readers.Wait); hung != nil {
		t.fail(fmt.Errorf("reader stuck in the reclaimer: %w", hung))
	}
	rep.Stats = r.Stats()
	t.fail(shut(r))

	rep.Reads = t.reads.Load()
	rep.Leaves = t.leaves.Load()
	rep.Retires = t.retires.Load()
	rep.Releases = t.releases.Load()
	rep.Poisoned = t.poisoned.Load()
	rep.PipeTooLong = t.pipeTooLong.Load()
	rep.Reused = t.reused.Load()
	rep.Repeated = t.reps.Load()
	if rep.Retires > rep.Releases {
		rep.Unreleased = rep.Retires - rep.Releases
	}
	t.errMu.Lock()
	errs := t.errs
	t.errMu.Unlock()
	if v := rep.Violations(); v > 0 {
		errs = append([]error{fmt.Errorf("%d violations", v)}, errs...)
	}
	if len(errs) > 0 {
		return rep, fmt.Errorf("torture: %w; %v", errors.Join(errs...), rep)
	}
	return rep, nil
}

func (t *torture) fail(err error) {
	if err == nil {
		return
	}
	t.errMu.Lock()
	t.errs = append(t.errs, err)
	t.errMu.Unlock()
}

// write replaces the current record until end.
func (t *torture) write(end time.Time) {
	rng := rand.New(rand.NewPCG(uint64(t.cfg.Seed), 0))
	for time.Now().Before(end) {
		rec := t.alloc()
		rec.poisoned.Store(false)
		rec.pipe.Store(0)
		rec.gen.Add(1)
		old := t.current.Swap(rec)
		old.pipe.Store(1)
		if err := t.retire(old); err != nil {
			t.fail(fmt.Errorf("Retire(release): %w", err))
			return
		}
		switch {
		case t.retires.Load()-t.releases.Load() > 10000:
			// Let grace periods catch up rather than pile up records.
			time.Sleep(100 * time.Microsecond)
		case rng.IntN(4) == 0:
			time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
		default:
			runtime.Gosched()
		}
	}
}

func (t *torture) alloc() *record {
	t.freeMu.Lock()
	defer t.freeMu.Unlock()
	if n := len(t.free); n > 0 {
		rec := t.free[n-1]
		t.free = t.free[:n-1]
		return rec
	}
	return new(record)
}

// retire hands rec to the reclaimer for one grace period.
func (t *torture) retire(rec *record) error {
	var ran atomic.Bool
	t.retires.Add(1) // before Retire, so that Releases never exceeds Retires
	err := t.r.Retire(func() {
		if ran.Swap(true) {
			t.reps.Add(1)
			return
		}
		t.releases.Add(1)
		t.advance(rec)
	})
	if err != nil {
		t.retires.Add(^uint64(0))
	}
	return err
}

// advance runs after a grace period of rec: it retires rec again until rec
// has seen two, then poisons it and frees it for reuse.
func (t *torture) advance(rec *record) {
	if rec.pipe.Add(1) < 3 {
		err := t.retire(rec)
		if err == nil {
			return
		}
		if !errors.Is(err, reclaim.ErrClosed) { // refused during Close: free it now
			t.fail(fmt.Errorf("Retire(release) from a release: %w", err))
		}
	}
	rec.poisoned.Store(true)
	t.freeMu.Lock()
	t.free = append(t.free, rec)
	t.freeMu.Unlock()
}

// reader is participant p's loop.
func (t *torture) reader(p int, quit <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(t.cfg.Seed), uint64(p)+1))
	var reads uint64
	defer func() { t.reads.Add(reads) }()
	for {
		select {
		case <-quit:
			return
		default:
		}
		// Read section. After an Online, this load is the validation of
		// what the participant may use.
		rec := t.current.Load()
		gen := rec.gen.Load()
		seen := check(rec, gen)
		t.dwell(rng)
		t.count(seen | check(rec, gen))
		reads++

		switch k := rng.IntN(32); {
		case k == 0:
			t.r.Leave(p)
			t.block(rng) // away for as long as a blocking call
			t.r.Join(p)
			t.leaves.Add(1)
		case k < 4:
			t.r.Offline(p)
			t.block(rng)
			t.r.Online(p)
		default:
			t.r.Quiesce(p)
		}
	}
}

// Violations a read can see, as bits.
const (
	sawPoisoned = 1 << iota
	sawPipeTooLong
	sawReused
)

// check returns the violations visible on rec, read at generation gen.
func check(rec *record, gen uint64) int {
	seen := 0
	if rec.poisoned.Load() {
		seen |= sawPoisoned
	}
	if rec.pipe.Load() >= 2 {
		seen |= sawPipeTooLong
	}
	if rec.gen.Load() != gen {
		seen |= sawReused
	}
	return seen
}

func (t *torture) count(seen int) {
	if seen&sawPoisoned != 0 {
		t.poisoned.Add(1)
	}
	if seen&sawPipeTooLong != 0 {
		t.pipeTooLong.Add(1)
	}
	if seen&sawReused != 0 {
		t.reused.Add(1)
	}
}

// dwell spends a random time in a read section. The long dwells give a
// grace period that wrongly ignores this reader time to end under it.
func (t *torture) dwell(rng *rand.Rand) {
	switch k := rng.IntN(100); {
	case k < 40:
	case k < 75:
		spin(time.Duration(rng.IntN(20)) * time.Microsecond)
	case k < 95:
		time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
	default:
		time.Sleep(200*time.Microsecond + time.Duration(rng.IntN(800))*time.Microsecond)
	}
}

// block simulates a blocking call made offline.
func (t *torture) block(rng *rand.Rand) {
	d := time.Duration(rng.IntN(200)) * time.Microsecond
	if rng.IntN(8) == 0 {
		d = time.Duration(rng.IntN(2000)) * time.Microsecond
	}
	if t.cfg.NeedsQuiesce {
		d = min(d, time.Millisecond)
	}
	time.Sleep(d)
}

func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
