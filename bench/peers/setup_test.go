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

// ioTimeout bounds every client dial, read and write: a broken server shows
// up as an error, not a hang.
const ioTimeout = 10 * time.Second

// pinClient pins this process, the client, to the second CPU of its
// affinity mask with procs Ps, and returns the first CPU, the servers'. It
// restores both when b ends. With fewer than two CPUs it skips b and
// returns false.
func pinClient(b *testing.B, procs int) (serverCPU int, ok bool) {
	serverCPU, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
		return 0, false
	}
	var orig unix.CPUSet // this thread's, which is the process's
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		b.Fatal(err)
	}
	if err := PinProcessToCPU(clientCPU); err != nil {
		b.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(procs)
	b.Cleanup(func() {
		runtime.GOMAXPROCS(prev)
		if err := PinProcess(&orig); err != nil {
			b.Errorf("restore CPU affinity: %v", err)
		}
	})
	return serverCPU, true
}

// startServer starts the server called name in a process of its own (the
// launcher, cmd/serve) pinned to cpu with GOMAXPROCS=1, and checks that
// every one of its threads is pinned; cpu -1 leaves it unpinned.
func startServer(tb testing.TB, name string, cpu int, args ...string) *child {
	tb.Helper()
	path, err := buildLauncher()
	if err != nil {
		tb.Fatal(err)
	}
	args = append([]string{"-server", name, "-cpu", strconv.Itoa(cpu)}, args...)
	c, err := startChild(path, args, []string{"GOMAXPROCS=1"}, cpu, startTimeout)
	if err != nil {
		tb.Fatal(err)
	}
	if cpu < 0 {
		return c
	}
	if err := checkPinned(c.Pid(), cpu); err != nil {
		c.kill()
		tb.Fatal(err)
	}
	return c
}

// window is what a measured stretch of load cost.
type window struct {
	serverCPU time.Duration // the server's CPU time, its tail until quiet included
	clientCPU time.Duration // this process's CPU time during the load
	wall      time.Duration // wall time of the load
}

// measure waits until process pid is quiet, runs load with b's timer
// running (if b is not nil), waits until pid is quiet again, and returns
// the CPU times of pid and of this process and the load's wall time.
func measure(pid int, b *testing.B, load func() error) (window, error) {
	var w window
	if b != nil {
		b.StopTimer()
	}
	if err := quiet(pid); err != nil {
		return w, err
	}
	cpu0, err := ProcessCPUTime(pid)
	if err != nil {
		return w, err
	}
	// b's timer reads the heap statistics when it starts and stops:
	// this process's CPU time and the wall time are read inside.
	if b != nil {
		b.StartTimer()
	}
	self0, err := ProcessCPUTime(unix.Getpid())
	if err != nil {
		return w, err
	}
	t0 := time.Now()
	err = load()
	w.wall = time.Since(t0)
	self1, serr := ProcessCPUTime(unix.Getpid())
	if b != nil {
		b.StopTimer()
	}
	if err != nil {
		return w, err
	}
	if serr != nil {
		return w, serr
	}
	if err := quiet(pid); err != nil {
		return w, err
	}
	cpu1, err := ProcessCPUTime(pid)
	if err != nil {
		return w, err
	}
	w.serverCPU, w.clientCPU = cpu1-cpu0, self1-self0
	return w, nil
}

// report adds the window's utilisations to b's metrics.
func (w window) report(b *testing.B) {
	b.ReportMetric(100*w.serverCPU.Seconds()/w.wall.Seconds(), "server-util-%")
	b.ReportMetric(100*w.clientCPU.Seconds()/w.wall.Seconds(), "client-util-%")
}

// vmRSS returns process pid's resident set size in bytes (VmRSS of
// /proc/<pid>/status).
func vmRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: %q", pid, line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}
