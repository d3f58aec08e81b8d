//go:build linux

package peers

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startServerOnCPUs starts the server called name in a process of its own
// on cpus with GOMAXPROCS=len(cpus), for BenchmarkSkew's busy-loop cells,
// and checks that every one of its threads may run on exactly those CPUs.
// The child inherits the CPU mask of the thread that forks it, so a
// goroutine of its own forks it (startChild, cmd/serve -cpu -1) from a
// thread with that mask for the moment, as startOn does for one CPU.
func startServerOnCPUs(tb testing.TB, name string, cpus ...int) *child {
	tb.Helper()
	path, err := buildLauncher()
	if err != nil {
		tb.Fatal(err)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	type started struct {
		c   *child
		err error
	}
	done := make(chan started, 1)
	go func() {
		// The child dies with this thread (Pdeathsig), so the thread
		// must outlive it: its mask is restored and it goes back to the
		// pool. If that fails it stays locked and ends with this
		// goroutine, and the child with it.
		runtime.LockOSThread()
		var saved unix.CPUSet
		if err := unix.SchedGetaffinity(0, &saved); err != nil {
			done <- started{nil, err}
			return
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- started{nil, fmt.Errorf("widen the forking thread to CPUs %v: %w", cpus, err)}
			return
		}
		c, err := startChild(path, []string{"-server", name, "-cpu", "-1"}, []string{fmt.Sprintf("GOMAXPROCS=%d", len(cpus))}, -1, startTimeout)
		if rerr := unix.SchedSetaffinity(0, &saved); rerr != nil {
			if c != nil {
				c.kill()
			}
			done <- started{nil, fmt.Errorf("restore the forking thread's CPU mask: %w", rerr)}
			return
		}
		runtime.UnlockOSThread()
		done <- started{c, err}
	}()
	st := <-done
	c, err := st.c, st.err
	if err != nil {
		tb.Fatal(err)
	}
	if err := checkAffinity(c.Pid(), set); err != nil {
		c.kill()
		tb.Fatalf("%v (CPUs %v)", err, cpus)
	}
	return c
}

// pollIdle asks the kernel, through the PM QoS interface, to keep every
// idle CPU in its polling state (a wake-up latency limit of 0 µs) until
// the returned function is called. On a virtual machine whose idle CPUs
// halt, a wake-up across CPUs is otherwise the hypervisor's: measured on
// the 2-vCPU machine of bench/run.sh, a pipe round trip between the two
// CPUs took 75-100 µs at the median and 200-360 µs at p99 with halting
// idle, 17-20 µs and 70-97 µs with polling idle, and the skew benchmark's
// light-request p99 without skew was in milliseconds for every server.
// A polling CPU leaves the idle loop as soon as a task becomes runnable,
// so it takes no CPU from any process; it does keep the virtual CPUs
// busy in the host's eyes while held. Writing the file needs root; err
// says why it could not be done.
func pollIdle() (release func(), err error) {
	f, err := os.OpenFile("/dev/cpu_dma_latency", os.O_WRONLY, 0)
	if err != nil {
		return func() {}, err
	}
	var zero [4]byte // a 32-bit latency limit in µs, native order; 0 is 0 either way
	if _, err := f.Write(zero[:]); err != nil {
		f.Close()
		return func() {}, err
	}
	// The limit holds while the file is open.
	return func() { f.Close() }, nil
}

// stealTime returns the time the hypervisor ran something else while
// cpus had work (the steal column of /proc/stat), summed over cpus: what
// no process inside the machine can see or avoid.
func stealTime(cpus ...int) (time.Duration, error) { return cpuStatTime([]int{8}, cpus...) }

// cpuStatTime sums columns cols (1 is user) of cpus' lines in /proc/stat,
// in USER_HZ ticks (100 a second on Linux).
func cpuStatTime(cols []int, cpus ...int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, c := range cpus {
		prefix := fmt.Sprintf("cpu%d ", c)
		found := false
		for line := range strings.Lines(string(data)) {
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			f := strings.Fields(line)
			for _, i := range cols {
				if i >= len(f) {
					return 0, fmt.Errorf("/proc/stat: %q has no column %d", line, i)
				}
				ticks, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
				}
				sum += time.Duration(ticks) * time.Second / 100
			}
			found = true
		}
		if !found {
			return 0, fmt.Errorf("/proc/stat has no line for CPU %d", c)
		}
	}
	return sum, nil
}
