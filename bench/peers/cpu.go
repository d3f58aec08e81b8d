//go:build linux

package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PinProcess sets the CPU affinity of every thread of this process to set.
// Threads created later inherit the mask of the thread that creates them,
// which is then pinned too. It walks /proc/self/task until a pass finds no
// thread it has not pinned, so a thread started during the walk is caught.
func PinProcess(set *unix.CPUSet) error {
	done := map[int]bool{}
	for pass := 0; pass < 100; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("sched_setaffinity(thread %d): %w", tid, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
	return fmt.Errorf("threads kept appearing while pinning the process")
}

// PinProcessToCPU pins every thread of this process to one CPU.
func PinProcessToCPU(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return PinProcess(&set)
}

// ProcessCPUTime returns the CPU time (user and system) that process pid
// has used so far, its threads past and present included, in nanoseconds.
// It reads the process's CPU-time clock (the clock clock_getcpuclockid(3)
// returns, which Linux lets any process read for any other process, as it
// does /proc/<pid>/stat); if the kernel refuses, it falls back to the sum of
// the first field of /proc/<pid>/task/*/schedstat (nanoseconds on a CPU, of
// the threads still alive).
func ProcessCPUTime(pid int) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err == nil {
		return time.Duration(ts.Nano()), nil
	}
	return schedstatCPUTime(pid)
}

// processCPUClock is the kernel's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED):
// the clock of a whole process's CPU time at scheduler precision.
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return int32(^uint32(pid)<<3 | cpuclockSched)
}

func schedstatCPUTime(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, e.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// ContextSwitches returns the voluntary and involuntary context switches of
// process pid's threads still alive (voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches of /proc/<pid>/task/*/status).
func ContextSwitches(pid int) (voluntary, involuntary int64, err error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue // exited
		}
		for line := range strings.Lines(string(data)) {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "voluntary_ctxt_switches":
				voluntary += n
			case "nonvoluntary_ctxt_switches":
				involuntary += n
			}
		}
	}
	return voluntary, involuntary, nil
}
