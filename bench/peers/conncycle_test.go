//go:build linux

package peers

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/examples/echo/loadgen"
	"github.com/gracepoll/gracepoll/poller"
)

// serverProfileDir, if set, makes BenchmarkConnCycle and the TLS
// benchmarks run every server with -cpuprofile DIR/NAME.pprof: a profile
// of the server process's whole life.
var serverProfileDir = flag.String("serverprofile", "", "BenchmarkConnCycle and the TLS benchmarks: write each server process's CPU profile to `dir`/<server>.pprof")

// cycleWorkers is the number of client goroutines, each one connection
// cycle at a time.
var cycleWorkers = flag.Int("cycleworkers", 4, "BenchmarkConnCycle: client goroutines")

const cycleSize = 64 // bytes echoed per connection

// BenchmarkConnCycle measures each server's CPU time per connection cycle,
// with the server and the client in separate processes on separate cores:
// the server is cmd/serve, a child process pinned to one CPU with
// GOMAXPROCS=1; this process, the client, is pinned to another CPU.
// -cycleworkers goroutines (4) each dial, write 64 bytes, read the
// 64-byte echo back (checked byte for byte) and close, b.N cycles in all, so
// that the server always has a connection to serve.
//
// Where one client core cannot saturate the server, cycles/s says more about
// the client than the server; the server's CPU time per cycle does not. It
// reports:
//
//   - server-cpu-µs/cycle: the child's CPU time (user and system, all its
//     threads, from its process CPU clock) over the timed window, divided by
//     b.N. The window starts after 100 untimed warm-up cycles and ends once
//     the server has gone quiet, so the deferred work of its connections
//     (releases, closes) is counted in the window of those connections.
//   - server-util-%: that CPU time over the wall time of the cycles; near
//     100 the server was the bottleneck.
//   - client-util-%: this process's CPU time over the same wall time; near
//     100 the client was the bottleneck (and its core was never idle).
//   - cycles/s, and p50-µs and p99-µs: the client's cycle latency.
//   - release-p50-µs and release-p99-µs, for the servers on gracepoll's
//     poller: Delete to the start of the release (conn's OnClose) of the
//     connections of the window (the poller's last 4096), as the server
//     reports it (poller.Stats.ReleaseLatency, the launcher's "latency").
//
// The loopback's kernel work runs on the sending side's CPU: the handshake
// and the request's delivery are the client's, the reply's delivery is the
// server's. That is the same for every server.
//
// Run it on its own (it pins this process); -serverprofile DIR profiles
// the servers:
//
//	go test -run '^$' -bench ConnCycle -benchtime=3s -count=3 .
func BenchmarkConnCycle(b *testing.B) {
	serverCPU, ok := pinClient(b, *cycleWorkers) // a P per blocked worker
	if !ok {
		return
	}
	for _, s := range OfKind("echo") {
		var srv *child
		b.Run(s.Name, func(b *testing.B) {
			if srv == nil {
				var args []string
				if *serverProfileDir != "" {
					args = append(args, "-cpuprofile", filepath.Join(*serverProfileDir, s.Name+".pprof"))
				}
				srv = startServer(b, s.Name, serverCPU, args...)
			}
			m, err := connCycles(srv, *cycleWorkers, b.N, b)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(m.serverCPU.Seconds()*1e6/float64(b.N), "server-cpu-µs/cycle")
			b.ReportMetric(100*m.serverCPU.Seconds()/m.wall.Seconds(), "server-util-%")
			b.ReportMetric(100*m.clientCPU.Seconds()/m.wall.Seconds(), "client-util-%")
			b.ReportMetric(float64(b.N)/m.wall.Seconds(), "cycles/s")
			b.ReportMetric(m.p50.Seconds()*1e6, "p50-µs")
			b.ReportMetric(m.p99.Seconds()*1e6, "p99-µs")
			if m.release.Samples > 0 {
				b.ReportMetric(m.release.P50.Seconds()*1e6, "release-p50-µs")
				b.ReportMetric(m.release.P99.Seconds()*1e6, "release-p99-µs")
			}
		})
		if srv != nil {
			if err := srv.stop(); err != nil {
				b.Error(err)
			}
		}
	}
}

// twoCPUs returns the first two CPUs of this process's affinity mask: the
// server's and the client's.
func twoCPUs() (server, client int, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, 0, err
	}
	var cpus []int
	for i := 0; i < len(set)*64 && len(cpus) < 2; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return 0, 0, errNoCPUs
	}
	return cpus[0], cpus[1], nil
}

// checkPinned checks that every thread of process pid may run on cpu only.
func checkPinned(pid, cpu int) error {
	var want unix.CPUSet
	want.Set(cpu)
	return checkAffinity(pid, want)
}

// checkAffinity checks that every thread of process pid may run on the
// CPUs of want and no others.
func checkAffinity(pid int, want unix.CPUSet) error {
	tids, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	if err != nil || len(tids) == 0 {
		return fmt.Errorf("threads of process %d: %v", pid, err)
	}
	for _, t := range tids {
		var tid int
		fmt.Sscan(filepath.Base(t), &tid)
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err != nil {
			continue // exited
		}
		if got != want {
			return fmt.Errorf("server thread %d may run on %d CPUs, want the %d of its set", tid, got.Count(), want.Count())
		}
	}
	return nil
}

// cycleResult is what one run of connCycles measured.
type cycleResult struct {
	serverCPU time.Duration  // the server's CPU time over the window
	clientCPU time.Duration  // this process's CPU time during the cycles
	wall      time.Duration  // wall time of the cycles
	p50, p99  time.Duration  // client cycle latency
	release   poller.Latency // the server's release latency; Samples 0 if it has no poller
}

// warmCycles are run, untimed, just before every timed window: a server
// (and a virtual CPU) that has just been idle for the quiet period is
// slower for its first connections, which would weigh on a small b.N.
const warmCycles = 100

// connCycles runs n connection cycles against srv over workers goroutines
// and measures its CPU time meanwhile. b, if not nil, has its timer running
// only during the n cycles.
//
// The window: wait until the server is quiet, run warmCycles untimed,
// reset the server's statistics and read its CPU time, run the n cycles,
// wait until the server is quiet again (its work for the last connections,
// reading end-of-file, deleting, releasing, closing, may still be running)
// and read its CPU time and release latency. The warm-up's tail falls into
// the window as the window's own tail would fall into the next in a
// continuous run.
func connCycles(srv *child, workers, n int, b *testing.B) (cycleResult, error) {
	var r cycleResult
	if b != nil {
		b.StopTimer()
		b.ResetTimer() // the set-up before this call is not the benchmark's
	}
	pid := srv.Pid()
	d, err := loadgen.NewCycler(srv.addr, ioTimeout)
	if err != nil {
		return r, err
	}
	if err := quiet(pid); err != nil {
		return r, err
	}
	if _, _, err := d.Run(workers, warmCycles, cycleSize); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := srv.ask("reset", "ok"); err != nil {
		return r, err
	}
	cpu0, err := ProcessCPUTime(pid)
	if err != nil {
		return r, err
	}
	self0, err := ProcessCPUTime(unix.Getpid())
	if err != nil {
		return r, err
	}
	if b != nil {
		b.StartTimer()
	}
	wall, lat, err := d.Run(workers, n, cycleSize)
	if b != nil {
		b.StopTimer()
	}
	if err != nil {
		return r, err
	}
	self1, err := ProcessCPUTime(unix.Getpid())
	if err != nil {
		return r, err
	}
	r.clientCPU = self1 - self0
	if err := quiet(pid); err != nil {
		return r, err
	}
	cpu1, err := ProcessCPUTime(pid)
	if err != nil {
		return r, err
	}
	r.serverCPU, r.wall = cpu1-cpu0, wall
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p50 = lat[len(lat)/2]
		r.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	if l, err := srv.ask("latency", "latency"); err != nil {
		return r, err
	} else if l["samples"] > 0 {
		r.release = poller.Latency{
			Samples: int(l["samples"]),
			P50:     time.Duration(l["p50-ns"]),
			P99:     time.Duration(l["p99-ns"]),
			Max:     time.Duration(l["max-ns"]),
		}
	}
	return r, nil
}

// quiet waits until process pid uses less than 1% of a CPU over 5 ms, for
// at most 2 s, so that a window's start and end do not cut through the
// server's work.
func quiet(pid int) error {
	const step, idle = 5 * time.Millisecond, 50 * time.Microsecond
	prev, err := ProcessCPUTime(pid)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(step)
		cur, err := ProcessCPUTime(pid)
		if err != nil {
			return err
		}
		if cur-prev < idle {
			return nil
		}
		prev = cur
	}
	return nil // busy in the background; measure anyway
}

// TestProcessCPUTime checks the process CPU clock against this process's
// own CLOCK_PROCESS_CPUTIME_ID and /proc's schedstat.
func TestProcessCPUTime(t *testing.T) {
	pid := unix.Getpid()
	// Burn a little CPU so that the figures are well above their noise.
	for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	got, err := ProcessCPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	self := time.Duration(ts.Nano())
	if got < self || got > self+50*time.Millisecond {
		t.Errorf("ProcessCPUTime(self) = %v, CLOCK_PROCESS_CPUTIME_ID = %v", got, self)
	}
	ss, err := schedstatCPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if ss < 10*time.Millisecond || ss > got+50*time.Millisecond {
		t.Errorf("schedstat sum = %v, process clock = %v", ss, got)
	}
}

// TestConnCycleLauncher runs a few connection cycles against a server in
// its own process, as BenchmarkConnCycle does, and checks that a server
// that does not start is an error, not a hang. It builds cmd/serve
// (a few seconds on a cold build cache), so -short skips it.
func TestConnCycleLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	path, err := buildLauncher()
	if err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	srv, err := startChild(path, []string{"-server", "net", "-cpu", "0"}, []string{"GOMAXPROCS=1"}, 0, startTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPinned(srv.Pid(), 0); err != nil {
		t.Error(err)
	}
	r, err := connCycles(srv, 2, 50, nil)
	if err != nil {
		t.Error(err)
	}
	if r.serverCPU <= 0 || r.serverCPU > r.wall+time.Second {
		t.Errorf("server CPU %v over %v of cycles", r.serverCPU, r.wall)
	}
	if r.release.Samples != 0 {
		t.Errorf("net server reported release latencies: %+v", r.release)
	}
	if m, err := srv.ask("mem", "mem"); err != nil || m["heap-inuse"] <= 0 || m["goroutines"] < 1 {
		t.Errorf("mem: %v, %v", m, err)
	}
	if _, err := srv.ask("nonsense", "ok"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: %v", err)
	}
	if err := srv.stop(); err != nil {
		t.Error(err)
	}

	// A server on the poller reports the release latency of the cycles.
	srv, err = startChild(path, []string{"-server", "gracepoll-conn", "-cpu", "0"}, []string{"GOMAXPROCS=1"}, 0, startTimeout)
	if err != nil {
		t.Fatal(err)
	}
	r, err = connCycles(srv, 2, 50, nil)
	if err != nil {
		t.Error(err)
	}
	if r.release.Samples < 40 || r.release.P50 <= 0 || r.release.P99 < r.release.P50 {
		t.Errorf("gracepoll-conn release latency over 50 cycles: %+v", r.release)
	}
	if err := srv.stop(); err != nil {
		t.Error(err)
	}

	_, err = startChild(path, []string{"-server", "no-such-server"}, nil, -1, startTimeout)
	if err == nil || !strings.Contains(err.Error(), `unknown server "no-such-server"`) {
		t.Errorf("unknown server: err = %v, want the launcher's message", err)
	}
	t0 := time.Now()
	_, err = startChild("/bin/sh", []string{"-c", "exec sleep 30"}, nil, 0, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not print its address") || time.Since(t0) > 5*time.Second {
		t.Errorf("silent child: err = %v after %v", err, time.Since(t0))
	}
	// Every pipe and socket is closed; the pipe readers' goroutines may
	// take a moment to see end-of-file.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		now := openFDs(t)
		if now <= fds {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d file descriptors open before, %d after", fds, now)
			break
		}
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
