//go:build linux

package bench

import (
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// raiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit once. Go has
// done this at start-up since 1.19, but doing it here makes the scale
// benchmark's assumption explicit and independent of how it is started.
var raiseNoFile = sync.OnceValue(func() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
			unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
		}
	}
	return lim.Cur
})

// openFDs counts the process's open file descriptors.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// fdsFit reports whether k more descriptors, plus a margin for the poller
// and the test binary, fit under the soft limit.
func fdsFit(k int) bool {
	const margin = 64
	return uint64(openFDs()+k+margin) <= raiseNoFile()
}

// eventfd returns a non-blocking eventfd with the given initial count.
func eventfd(b *testing.B, initval uint) int {
	fd, err := unix.Eventfd(initval, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	return fd
}

// reportPercentiles reports the p50 and p99 of samples in microseconds,
// the units the release-latency targets are stated in.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		i := int(q*float64(len(samples))+0.999999) - 1
		return float64(samples[max(0, min(i, len(samples)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}
