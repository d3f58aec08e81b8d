package epoch_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/reclaim"
	"github.com/gracepoll/gracepoll/reclaim/epoch"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// timeout bounds every wait that should succeed; it is generous because the
// test machine is small and shared.
const timeout = 5 * time.Second

func newR(t testing.TB, n int) *epoch.Reclaimer {
	t.Helper()
	r, err := epoch.New(n, epoch.Options{})
	if err != nil {
		t.Fatalf("New(%d): %v", n, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func allOffline(r *epoch.Reclaimer) {
	for p := range r.Participants() {
		r.Offline(p)
	}
}

func barrier(t testing.TB, r *epoch.Reclaimer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.Barrier(ctx); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

func TestNew(t *testing.T) {
	for _, n := range []int{0, -1, epoch.MaxParticipants + 1, 1 << 20} {
		r, err := epoch.New(n, epoch.Options{})
		if !errors.Is(err, reclaim.ErrInvalid) {
			t.Errorf("New(%d) = %v, %v; want ErrInvalid", n, r, err)
		}
	}
	for _, n := range []int{1, 3, epoch.MaxParticipants} {
		r := newR(t, n)
		if got := r.Participants(); got != n {
			t.Errorf("New(%d).Participants() = %d", n, got)
		}
	}
}

func TestInvalidAndClosed(t *testing.T) {
	r := newR(t, 2)
	if err := r.Retire(nil); !errors.Is(err, reclaim.ErrInvalid) {
		t.Errorf("Retire(nil) = %v, want ErrInvalid", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ran := false
	if err := r.Retire(func() { ran = true }); !errors.Is(err, reclaim.ErrClosed) {
		t.Errorf("Retire after Close = %v, want ErrClosed", err)
	}
	if err := r.Barrier(context.Background()); !errors.Is(err, reclaim.ErrClosed) {
		t.Errorf("Barrier after Close = %v, want ErrClosed", err)
	}
	// Participant calls after Close are harmless.
	r.Quiesce(0)
	r.Offline(1)
	r.Online(1)
	if ran {
		t.Error("release refused with ErrClosed ran")
	}
	if s := r.Stats(); s.Retired != 0 || s.Released != 0 {
		t.Errorf("Stats after refused Retire = %+v", s)
	}
}

func TestIndexOutOfRangePanics(t *testing.T) {
	r := newR(t, 2)
	for name, f := range map[string]func(int){"Quiesce": r.Quiesce, "Offline": r.Offline, "Online": r.Online} {
		for _, p := range []int{-1, 2} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s(%d) did not panic", name, p)
					}
				}()
				f(p)
			}()
		}
	}
}

func TestWaitsForOnlineParticipant(t *testing.T) {
	r := newR(t, 3)
	ran := make(chan struct{})
	if err := r.Retire(func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	// Participant 2 is online and never quiesces: nothing may run.
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		r.Quiesce(0)
		r.Quiesce(1)
		select {
		case <-ran:
			t.Fatal("release ran while participant 2 had not quiesced")
		default:
		}
		runtime.Gosched()
	}
	r.Quiesce(0)
	r.Quiesce(1)
	r.Quiesce(2)
	waitClosed(t, ran, "release after every participant quiesced")
}

func TestWaitsAcrossOnline(t *testing.T) {
	// Going offline lets a blocked grace period through; coming back
	// online makes later grace periods wait for the participant again.
	r := newR(t, 2)
	r.Offline(0)
	ran := make(chan struct{})
	if err := r.Retire(func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	select {
	case <-ran:
		t.Fatal("release ran while participant 1 was online and had not quiesced")
	default:
	}
	r.Offline(1)
	waitClosed(t, ran, "release after participant 1 went offline")
	r.Online(1) // and back: a later grace period waits for it again
	ran2 := make(chan struct{})
	if err := r.Retire(func() { close(ran2) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	select {
	case <-ran2:
		t.Fatal("release ran while participant 1 was back online and had not quiesced")
	default:
	}
	r.Quiesce(1)
	waitClosed(t, ran2, "release after participant 1 quiesced")
}

func TestAllOffline(t *testing.T) {
	r := newR(t, 4)
	allOffline(r)
	ran := make(chan struct{})
	if err := r.Retire(func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, ran, "release with every participant offline")
	barrier(t, r)
}

func TestNotOnRetireStack(t *testing.T) {
	r := newR(t, 1)
	allOffline(r)
	gate := make(chan struct{})
	ran := make(chan struct{})
	returned := make(chan error, 1)
	go func() {
		// If Retire ran the release inline, it would block on gate
		// and never return.
		returned <- r.Retire(func() {
			<-gate
			close(ran)
		})
	}()
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(timeout):
		close(gate) // unblock it so the test can clean up
		t.Fatal("Retire did not return: it ran the release on its own stack")
	}
	close(gate)
	waitClosed(t, ran, "release")
}

func TestFIFO(t *testing.T) {
	r := newR(t, 2)
	allOffline(r)
	const n = 1000
	var got []int // touched only by releases, which run one at a time
	for i := range n {
		if err := r.Retire(func() { got = append(got, i) }); err != nil {
			t.Fatal(err)
		}
	}
	barrier(t, r)
	if !slices.Equal(got, seq(n)) {
		t.Errorf("releases ran out of order: %v", got)
	}
}

func TestRetireFromRelease(t *testing.T) {
	r := newR(t, 1)
	allOffline(r)
	inner := make(chan struct{})
	if err := r.Retire(func() {
		if err := r.Retire(func() { close(inner) }); err != nil {
			t.Errorf("Retire from a release: %v", err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, inner, "release retired by a release")
}

func TestCloseRunsPending(t *testing.T) {
	r, err := epoch.New(2, epoch.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Offline(0) // participant 1 stays online and never quiesces
	const n = 100
	runs := make([]int, n)
	var order []int
	for i := range n {
		if err := r.Retire(func() { runs[i]++; order = append(order, i) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range runs {
		if c != 1 {
			t.Errorf("release %d ran %d times", i, c)
		}
	}
	if !slices.Equal(order, seq(n)) {
		t.Errorf("Close ran releases out of order: %v", order)
	}
	want := reclaim.Stats{Retired: n, Released: n}
	if diff := cmp.Diff(want, r.Stats(), cmpopts.IgnoreFields(reclaim.Stats{}, "GracePeriods", "Participants")); diff != "" {
		t.Errorf("Stats after Close (-want +got):\n%s", diff)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCloseRefusesRetireFromRelease(t *testing.T) {
	r, err := epoch.New(1, epoch.Options{}) // online, never quiesces: Close runs the release
	if err != nil {
		t.Fatal(err)
	}
	var inner error
	if err := r.Retire(func() { inner = r.Retire(func() {}) }); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if !errors.Is(inner, reclaim.ErrClosed) {
		t.Errorf("Retire from a release run by Close = %v, want ErrClosed", inner)
	}
}

func TestBarrierContext(t *testing.T) {
	r, err := epoch.New(1, epoch.Options{}) // online, never quiesces
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := r.Retire(func() { ran = true }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Barrier with a stuck participant = %v, want DeadlineExceeded", err)
	}
	// A Barrier waiting when Close is called returns.
	errc := make(chan error, 1)
	go func() { errc <- r.Barrier(context.Background()) }()
	time.Sleep(time.Millisecond)
	r.Close()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, reclaim.ErrClosed) {
			t.Errorf("Barrier across Close = %v, want nil or ErrClosed", err)
		}
	case <-time.After(timeout):
		t.Fatal("Barrier did not return after Close")
	}
	if !ran {
		t.Error("Close did not run the pending release")
	}
}

func TestStats(t *testing.T) {
	r := newR(t, 1)
	ignoreGP := cmpopts.IgnoreFields(reclaim.Stats{}, "GracePeriods", "Participants")
	if diff := cmp.Diff(reclaim.Stats{}, r.Stats(), cmpopts.IgnoreFields(reclaim.Stats{}, "Participants")); diff != "" {
		t.Errorf("fresh Stats (-want +got):\n%s", diff)
	}

	r.Offline(0)
	for range 3 {
		if err := r.Retire(func() {}); err != nil {
			t.Fatal(err)
		}
	}
	barrier(t, r)
	s := r.Stats()
	if diff := cmp.Diff(reclaim.Stats{Retired: 3, Released: 3}, s, ignoreGP); diff != "" {
		t.Errorf("Stats after 3 releases (-want +got):\n%s", diff)
	}
	if s.GracePeriods < 1 || s.GracePeriods > 4 {
		t.Errorf("GracePeriods = %d, want 1 to 4", s.GracePeriods)
	}

	// Online and not quiescing: two releases stay pending and age.
	r.Online(0)
	for range 2 {
		if err := r.Retire(func() {}); err != nil {
			t.Fatal(err)
		}
	}
	const age = 5 * time.Millisecond
	time.Sleep(age)
	s = r.Stats()
	if diff := cmp.Diff(reclaim.Stats{Retired: 5, Released: 3, Pending: 2}, s, ignoreGP, cmpopts.IgnoreFields(reclaim.Stats{}, "OldestAge")); diff != "" {
		t.Errorf("Stats with 2 blocked (-want +got):\n%s", diff)
	}
	if s.OldestAge < age || s.OldestAge > timeout {
		t.Errorf("OldestAge = %v, want at least %v", s.OldestAge, age)
	}

	r.Offline(0)
	barrier(t, r)
	if diff := cmp.Diff(reclaim.Stats{Retired: 5, Released: 5}, r.Stats(), ignoreGP); diff != "" {
		t.Errorf("Stats after draining (-want +got):\n%s", diff)
	}
}

// TestNoUseAfterRelease runs readers that load a shared object, check it is
// live, quiesce or go offline, while a writer replaces the object and retires
// the old one with a release that marks it dead. A reader seeing a dead
// object it loaded before its last quiescent point is a failure.
func TestNoUseAfterRelease(t *testing.T) {
	const readers = 2
	r := newR(t, readers)
	type object struct{ dead atomic.Bool }
	var cur atomic.Pointer[object]
	cur.Store(new(object))

	var stop atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	for p := range readers {
		wg.Go(func() {
			defer r.Offline(p)
			for i := 0; !stop.Load(); i++ {
				o := cur.Load()
				for range 4 {
					if o.dead.Load() {
						bad.Add(1)
					}
					runtime.Gosched()
				}
				if i%8 == 7 {
					// Blocking call: offline, then online, and
					// revalidate by loading afresh.
					r.Offline(p)
					time.Sleep(10 * time.Microsecond)
					r.Online(p)
				} else {
					r.Quiesce(p)
				}
			}
		})
	}
	var released atomic.Int64
	var wwg sync.WaitGroup
	wwg.Go(func() {
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
			old := cur.Swap(new(object))
			if err := r.Retire(func() { old.dead.Store(true); released.Add(1) }); err != nil {
				t.Error(err)
				return
			}
			runtime.Gosched()
		}
	})
	wwg.Go(func() { // Barrier and Stats run concurrently with the rest
		for !stop.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			if err := r.Barrier(ctx); err != nil {
				t.Errorf("Barrier: %v", err)
			}
			cancel()
			_ = r.Stats()
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wwg.Wait()
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("readers saw a released object %d times", n)
	}
	barrier(t, r) // every reader is offline now
	s := r.Stats()
	if s.Released != uint64(released.Load()) || s.Released != s.Retired || s.Released == 0 {
		t.Errorf("Stats = %+v, release functions ran %d times", s, released.Load())
	}
	t.Logf("%d releases in %d grace periods", s.Released, s.GracePeriods)
}

// TestCloseRace closes while other goroutines Retire and Barrier: every
// accepted release runs exactly once, and nothing deadlocks.
func TestCloseRace(t *testing.T) {
	for range 20 {
		r, err := epoch.New(2, epoch.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r.Offline(0) // participant 1 is stuck online: some work is blocked
		var accepted, ran atomic.Int64
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for {
					if err := r.Retire(func() { ran.Add(1) }); err != nil {
						if !errors.Is(err, reclaim.ErrClosed) {
							t.Errorf("Retire: %v", err)
						}
						return
					}
					accepted.Add(1)
				}
			})
		}
		wg.Go(func() {
			for {
				err := r.Barrier(context.Background())
				if errors.Is(err, reclaim.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Barrier: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			for {
				r.Quiesce(1) // occasionally lets a grace period through
				time.Sleep(100 * time.Microsecond)
				_ = r.Stats()
				if err := r.Retire(func() { ran.Add(1) }); err != nil {
					return
				}
				accepted.Add(1)
			}
		})
		time.Sleep(time.Millisecond)
		var cwg sync.WaitGroup
		for range 2 { // two concurrent Closes: both return after the releases ran
			cwg.Go(func() {
				r.Close()
				// Every Retire counted in a returned before Close
				// began, so its release has run.
				a := accepted.Load()
				if n := ran.Load(); n < a {
					t.Errorf("Close returned with %d of %d releases run", n, a)
				}
			})
		}
		cwg.Wait()
		wg.Wait()
		if a, n := accepted.Load(), ran.Load(); a != n {
			t.Fatalf("accepted %d releases, ran %d", a, n)
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func BenchmarkQuiesceIdle(b *testing.B) {
	r := newR(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		r.Quiesce(0)
	}
}

func BenchmarkRetire(b *testing.B) {
	r := newR(b, 1)
	allOffline(r)
	release := func() {}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Retire(release); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	barrier(b, r)
}

func BenchmarkRetireParallel(b *testing.B) {
	r := newR(b, 1)
	allOffline(r)
	release := func() {}
	b.ReportAllocs()
	b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0))) // about 4 goroutines
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := r.Retire(release); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	barrier(b, r)
}

// benchGracePeriod measures Retire-to-release latency, one release at a
// time, and reports the median and 99th percentile besides the mean.
func benchGracePeriod(b *testing.B, r *epoch.Reclaimer) {
	done := make(chan struct{}, 1)
	release := func() { done <- struct{}{} }
	// The last len(lat) samples, preallocated so that B/op is the
	// reclaimer's alone.
	lat := make([]time.Duration, 1<<16)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := r.Retire(release); err != nil {
			b.Fatal(err)
		}
		<-done
		lat[n%len(lat)] = time.Since(start)
		n++
	}
	b.StopTimer()
	lat = lat[:min(n, len(lat))]
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

func BenchmarkGracePeriodOffline(b *testing.B) {
	r := newR(b, 2)
	allOffline(r)
	benchGracePeriod(b, r)
}

func BenchmarkGracePeriodQuiescing(b *testing.B) {
	const n = 2
	r := newR(b, n)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for p := range n {
		wg.Go(func() {
			defer r.Offline(p)
			for !stop.Load() {
				r.Quiesce(p)
				runtime.Gosched() // a waiter does other work between quiescent points
			}
		})
	}
	benchGracePeriod(b, r)
	stop.Store(true)
	wg.Wait()
}

func TestPanicInCloseRelease(t *testing.T) {
	r, err := epoch.New(1, epoch.Options{}) // online, never quiesces: Close runs the releases
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Retire(func() { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if got := recover(); got != "boom" {
				t.Errorf("Close recovered %v, want the release's panic", got)
			}
		}()
		r.Close()
	}()
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	waitClosed(t, done, "second Close after a panicking release")
}

// A panicking release run by Quiesce goes up the participant's stack; the
// releases after it still run, in order, and Barrier completes.
func TestPanicInQuiesceKeepsRest(t *testing.T) {
	// The Reclaimer's goroutine, woken by Retire, may also find the
	// releases ripe once a Quiesce has advanced the epoch, and run them
	// itself: there a panic would end the test binary. So the release
	// panics only on the participant's goroutine, and a round in which
	// the Reclaimer's goroutine ran it is tried again.
	for round := 0; round < 100; round++ {
		if panicInQuiesceRound(t) {
			return
		}
	}
	t.Fatal("in 100 rounds no Quiesce ran the panicking release")
}

// inQuiesce reports whether its caller runs in Reclaimer.Quiesce: on the
// participant's goroutine, not the Reclaimer's.
func inQuiesce() bool {
	pc := make([]uintptr, 32)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*Reclaimer).Quiesce") {
			return true
		}
		if !more {
			return false
		}
	}
}

// panicInQuiesceRound is one round of TestPanicInQuiesceKeepsRest; it
// reports false if the release ran elsewhere than in a Quiesce.
func panicInQuiesceRound(t *testing.T) bool {
	r := newR(t, 1)
	var got []int // touched only by releases, which run one at a time
	r.Retire(func() { got = append(got, 1) })
	r.Retire(func() {
		if inQuiesce() {
			panic("boom")
		}
		got = append(got, 2)
	})
	r.Retire(func() { got = append(got, 3) })
	r.Retire(func() { got = append(got, 4) })
	panicked := false
	for try := 0; try < 1000 && !panicked && r.Stats().Released < 2; try++ {
		func() {
			defer func() {
				if v := recover(); v != nil {
					panicked = true
					if v != "boom" {
						t.Errorf("Quiesce recovered %v, want the release's panic", v)
					}
				}
			}()
			r.Quiesce(0) // one participant, online: it drives the grace periods itself
		}()
	}
	r.Offline(0)
	barrier(t, r)
	if !panicked {
		if !slices.Equal(got, []int{1, 2, 3, 4}) {
			t.Errorf("releases ran as %v, want [1 2 3 4]", got)
		}
		return false
	}
	if !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("releases around the panic ran as %v, want [1 3 4]", got)
	}
	if s := r.Stats(); s.Retired != 4 || s.Released != 4 || s.Pending != 0 {
		t.Errorf("Stats after a panicking release = %+v, want 4 retired, 4 released, none pending", s)
	}
	return true
}

// Participants drive grace periods themselves: with the Reclaimer's goroutine
// unable to help (participants online), a release runs on the stack of the
// participant whose quiescent point completes its grace period.
func TestParticipantsDrive(t *testing.T) {
	r := newR(t, 2)
	var ran atomic.Int32
	if err := r.Retire(func() { ran.Add(1) }); err != nil {
		t.Fatal(err)
	}
	// Each participant's Quiesce must be able to run at most what its
	// predecessor's quiescent points allowed; alternating, the release
	// runs within a few calls and synchronously.
	for i := 0; i < 8 && ran.Load() == 0; i++ {
		r.Quiesce(i % 2)
	}
	if ran.Load() != 1 {
		t.Fatalf("release did not run on a participant's stack after 8 alternating Quiesce calls")
	}
	// With one participant offline, the other's single Quiesce runs the
	// release.
	r.Offline(1)
	if err := r.Retire(func() { ran.Add(1) }); err != nil {
		t.Fatal(err)
	}
	r.Quiesce(0)
	if ran.Load() != 2 {
		t.Fatalf("one Quiesce with the other participant offline did not run the release")
	}
	// Going offline last runs what the others let through.
	r.Online(1)
	if err := r.Retire(func() { ran.Add(1) }); err != nil {
		t.Fatal(err)
	}
	r.Quiesce(1)
	r.Offline(0)
	r.Offline(1)
	waitRan := time.Now().Add(timeout)
	for ran.Load() != 3 && time.Now().Before(waitRan) {
		runtime.Gosched()
	}
	if ran.Load() != 3 {
		t.Fatal("release did not run after every participant went offline")
	}
}

// A participant's Quiesce never runs more than its budget while Retires keep
// coming: it returns, and the next Quiesce carries on.
func TestQuiesceIsBounded(t *testing.T) {
	r := newR(t, 1)
	var ran atomic.Int64
	var release func()
	release = func() {
		if ran.Add(1) < 1000 {
			r.Retire(release) // a stream of Retires that never dries up on its own
		}
	}
	r.Retire(release)
	calls := 0
	for ran.Load() < 1000 {
		r.Quiesce(0)
		calls++
		if calls > 100000 {
			t.Fatalf("after %d Quiesce calls only %d releases ran", calls, ran.Load())
		}
	}
	if calls < 100 {
		t.Errorf("1000 chained releases ran in %d Quiesce calls: Quiesce is not bounded", calls)
	}
}
