//go:build linux

package peers

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var hiccupTime = flag.Duration("hiccup.time", 4*time.Second, "BenchmarkHiccup: how long each CPU is probed")

// hiccupPeriod is how long the probe sleeps between two looks at the
// clock: the inter-arrival time of BenchmarkSkew's requests.
const hiccupPeriod = 100 * time.Microsecond

// BenchmarkHiccup measures the machine, not a server: how late a thread
// that sleeps 100 µs at a time on each of the two CPUs wakes up, with idle
// CPUs kept polling as BenchmarkSkew keeps them (-skew.pollidle). A server
// mostly idle between requests is woken the same way, so a wake-up that
// comes a millisecond late here (the hypervisor ran something else on the
// virtual CPU, or the host was slow to deliver the timer's interrupt) is a
// millisecond that any server on that CPU loses at that moment, whatever
// its design: BenchmarkSkew's light requests wait it out. The sleeping
// probe uses no CPU between wake-ups; a spinning one would keep the
// virtual CPU busy, which on the machine of bench/run.sh is what makes the
// hypervisor take it away. It reports, for each CPU:
//
//   - late-p50-µs, late-p99-µs, late-max-µs: how late the wake-ups were
//     behind the requested 100 µs;
//   - stalls-500µs/s: wake-ups 500 µs or more late, per second;
//   - stalled-ms/s: the time lost in those, per second.
func BenchmarkHiccup(b *testing.B) {
	server, client, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	if *skewPoll {
		release, err := pollIdle()
		if err != nil {
			b.Logf("idle CPUs not kept polling: %v", err)
		} else {
			defer release()
		}
	}
	prev := runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 3))
	defer runtime.GOMAXPROCS(prev)
	type result struct {
		late []time.Duration
		err  error
	}
	cpus := []int{server, client}
	results := make([]chan result, len(cpus))
	for i, cpu := range cpus {
		results[i] = make(chan result, 1)
		go func() {
			late, err := probeCPU(cpu, *hiccupTime)
			results[i] <- result{late, err}
		}()
	}
	for i, cpu := range cpus {
		r := <-results[i]
		if r.err != nil {
			b.Fatal(r.err)
		}
		b.Run(fmt.Sprintf("cpu=%d", cpu), func(b *testing.B) {
			slices.Sort(r.late)
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			var stalls int
			var lost time.Duration
			for _, l := range r.late {
				if l >= 500*time.Microsecond {
					stalls++
					lost += l
				}
			}
			secs := hiccupTime.Seconds()
			b.ReportMetric(us(quantile(r.late, 0.50)), "late-p50-µs")
			b.ReportMetric(us(quantile(r.late, 0.99)), "late-p99-µs")
			b.ReportMetric(us(quantile(r.late, 1)), "late-max-µs")
			b.ReportMetric(float64(stalls)/secs, "stalls-500µs/s")
			b.ReportMetric(lost.Seconds()*1e3/secs, "stalled-ms/s")
		})
	}
}

// probeCPU sleeps hiccupPeriod at a time for d on a thread pinned to cpu,
// with a timer slack of 1 ns, and returns how late each wake-up was.
func probeCPU(cpu int, d time.Duration) ([]time.Duration, error) {
	runtime.LockOSThread()
	// The thread ends with the goroutine: its mask and timer slack go
	// with it.
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pin the probe to CPU %d: %w", cpu, err)
	}
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("PR_SET_TIMERSLACK: %w", err)
	}
	late := make([]time.Duration, 0, int(d/hiccupPeriod))
	ts := unix.NsecToTimespec(hiccupPeriod.Nanoseconds())
	for end := time.Now().Add(d); ; {
		t0 := time.Now()
		if t0.After(end) {
			return late, nil
		}
		if err := unix.Nanosleep(&ts, nil); err != nil && err != unix.EINTR {
			return nil, err
		}
		late = append(late, time.Since(t0)-hiccupPeriod)
	}
}
