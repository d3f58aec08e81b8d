//go:build linux

package peers

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// serverProfileDir, if set, makes BenchmarkConnCycle run every server with
// -cpuprofile DIR/NAME.pprof: a profile of the server process's whole life.
var serverProfileDir = flag.String("serverprofile", "", "BenchmarkConnCycle: write each server process's CPU profile to `dir`/<server>.pprof")

// cycleWorkers is the number of client goroutines, each one connection
// cycle at a time.
var cycleWorkers = flag.Int("cycleworkers", 4, "BenchmarkConnCycle: client goroutines")

const cycleSize = 64 // bytes echoed per connection

// BenchmarkConnCycle measures each server's CPU time per connection cycle,
// with the server and the client in separate processes on separate cores:
// the server is cmd/echoserve, a child process pinned to one CPU with
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
	serverCPU, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	path, err := buildLauncher()
	if err != nil {
		b.Fatal(err)
	}
	// This process is the client, on one CPU.
	var orig unix.CPUSet // this thread's, which is the process's
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		b.Fatal(err)
	}
	if err := PinProcessToCPU(clientCPU); err != nil {
		b.Fatal(err)
	}
	procs := runtime.GOMAXPROCS(*cycleWorkers) // a P per blocked worker
	b.Cleanup(func() {
		runtime.GOMAXPROCS(procs)
		if err := PinProcess(&orig); err != nil {
			b.Errorf("restore CPU affinity: %v", err)
		}
	})

	for _, s := range Servers {
		var srv *child
		b.Run(s.Name, func(b *testing.B) {
			if srv == nil {
				args := []string{"-server", s.Name, "-cpu", fmt.Sprint(serverCPU)}
				if *serverProfileDir != "" {
					args = append(args, "-cpuprofile", filepath.Join(*serverProfileDir, s.Name+".pprof"))
				}
				c, err := startChild(path, args, []string{"GOMAXPROCS=1"}, serverCPU, startTimeout)
				if err != nil {
					b.Fatal(err)
				}
				srv = c
				if err := checkPinned(srv.Pid(), serverCPU); err != nil {
					b.Fatal(err)
				}
			}
			m, err := connCycles(srv.addr, srv.Pid(), *cycleWorkers, b.N, b)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(m.serverCPU.Seconds()*1e6/float64(b.N), "server-cpu-µs/cycle")
			b.ReportMetric(100*m.serverCPU.Seconds()/m.wall.Seconds(), "server-util-%")
			b.ReportMetric(100*m.clientCPU.Seconds()/m.wall.Seconds(), "client-util-%")
			b.ReportMetric(float64(b.N)/m.wall.Seconds(), "cycles/s")
			b.ReportMetric(m.p50.Seconds()*1e6, "p50-µs")
			b.ReportMetric(m.p99.Seconds()*1e6, "p99-µs")
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
			return fmt.Errorf("server thread %d may run on %d CPUs, want only CPU %d", tid, got.Count(), cpu)
		}
	}
	return nil
}

// cycleResult is what one run of connCycles measured.
type cycleResult struct {
	serverCPU time.Duration // the server's CPU time over the window
	clientCPU time.Duration // this process's CPU time during the cycles
	wall      time.Duration // wall time of the cycles
	p50, p99  time.Duration // client cycle latency
}

// warmCycles are run, untimed, just before every timed window: a server
// (and a virtual CPU) that has just been idle for the quiet period is
// slower for its first connections, which would weigh on a small b.N.
const warmCycles = 100

// connCycles runs n connection cycles against addr over workers goroutines
// and measures the CPU time of process pid meanwhile. b, if not nil, has its
// timer running only during the n cycles.
//
// The window: wait until the server is quiet, run warmCycles untimed,
// read the server's CPU time, run the n cycles, wait until the server is
// quiet again (its work for the last connections, reading end-of-file,
// deleting, releasing, closing, may still be running) and read its CPU
// time again. The warm-up's tail falls into the window as the window's own
// tail would fall into the next in a continuous run.
func connCycles(addr string, pid, workers, n int, b *testing.B) (cycleResult, error) {
	var r cycleResult
	if b != nil {
		b.StopTimer()
	}
	d, err := newDialer(addr)
	if err != nil {
		return r, err
	}
	if err := quiet(pid); err != nil {
		return r, err
	}
	if _, _, err := d.run(workers, warmCycles); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
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
	wall, lat, err := d.run(workers, n)
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
	return r, nil
}

// run runs n cycles over workers goroutines, each one cycle at a time,
// taking cycles from a shared budget so that the run ends with no
// straggler. It returns the wall time and every cycle's latency, and fails
// on the first error or on any reply that differs from its request.
func (d *dialer) run(workers, n int) (time.Duration, []time.Duration, error) {
	var (
		budget     atomic.Int64
		mismatches atomic.Int64
		wg         sync.WaitGroup
		errOnce    sync.Once
		firstErr   error
		lat        = make([][]time.Duration, workers)
	)
	budget.Store(int64(n))
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, reply := make([]byte, cycleSize), make([]byte, cycleSize)
			ls := make([]time.Duration, 0, n/workers+1)
			for i := uint64(1); budget.Add(-1) >= 0; i++ {
				fill(msg, uint64(w+1)<<32|i, i)
				t0 := time.Now()
				if err := d.cycle(msg, reply); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				ls = append(ls, time.Since(t0))
				if !bytes.Equal(msg, reply) {
					mismatches.Add(1)
				}
			}
			lat[w] = ls
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if firstErr != nil {
		return wall, nil, firstErr
	}
	if m := mismatches.Load(); m > 0 {
		return wall, nil, fmt.Errorf("%d of %d replies differ from their requests", m, n)
	}
	return wall, slices.Concat(lat...), nil
}

// dialer is the client side of a connection cycle, in blocking system
// calls: on loopback the handshake completes inside connect(2), and a
// worker blocked in read(2) holds its own thread and P (the client runs
// GOMAXPROCS=workers), so the client spends its core on the sockets rather
// than on the runtime's netpoller. Every call is bounded by ioTimeout
// (SO_SNDTIMEO, SO_RCVTIMEO; connect obeys the first).
type dialer struct {
	sa unix.SockaddrInet4
	tv unix.Timeval
}

func newDialer(addr string) (*dialer, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("server address %q: want IPv4 host:port (%v)", addr, err)
	}
	return &dialer{
		sa: unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())},
		tv: unix.NsecToTimeval(ioTimeout.Nanoseconds()),
	}, nil
}

// cycle is one connection: dial, write msg, read len(msg) bytes into reply,
// close (the client closes first, so the server reads end-of-file).
func (d *dialer) cycle(msg, reply []byte) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &d.tv); err != nil {
		return err
	}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &d.tv); err != nil {
		return err
	}
	if err := retry(func() error { return unix.Connect(fd, &d.sa) }); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	for done := 0; done < len(msg); {
		var n int
		err := retry(func() (err error) { n, err = unix.Write(fd, msg[done:]); return err })
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		done += n
	}
	for done := 0; done < len(reply); {
		var n int
		err := retry(func() (err error) { n, err = unix.Read(fd, reply[done:]); return err })
		switch {
		case err == unix.EAGAIN:
			return fmt.Errorf("read: no reply within %v", ioTimeout)
		case err != nil:
			return fmt.Errorf("read: %w", err)
		case n == 0:
			return fmt.Errorf("read: end-of-file after %d of %d bytes", done, len(reply))
		}
		done += n
	}
	return nil
}

// retry calls f again while it fails with EINTR.
func retry(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
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
// that does not start is an error, not a hang. It builds cmd/echoserve
// (a few seconds on a cold build cache), so -short skips it.
func TestConnCycleLauncher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/echoserve")
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
	r, err := connCycles(srv.addr, srv.Pid(), 2, 50, nil)
	if err != nil {
		t.Error(err)
	}
	if r.serverCPU <= 0 || r.serverCPU > r.wall+time.Second {
		t.Errorf("server CPU %v over %v of cycles", r.serverCPU, r.wall)
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
