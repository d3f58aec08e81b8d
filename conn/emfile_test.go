//go:build linux

package conn

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Out of file descriptors. In a child process (this test binary,
// re-executed: a lowered RLIMIT_NOFILE would starve the other tests) the
// limit is set a few descriptors above what is open, and an echo server is
// connected to until accept4 fails with EMFILE. The child measures and
// prints one result line; the parent checks it:
//
//   - the connections accepted before keep echoing while accepting is
//     paused;
//   - ServerStats.AcceptPauses > 0, and the condition is logged once;
//   - the process's CPU time over 1 s while paused stays near idle;
//   - after some clients close, the server accepts the waiting
//     connections by itself, and they are echoed.

const emfChildEnv = "GRACEPOLL_CONN_EMFILE_CHILD"

// emfMaxCPU is the most CPU the paused server may use, in percent of one
// core. Idle is about 0; a server spinning on accept would be near 100. The
// bound is loose because the test machine is shared.
const emfMaxCPU = 30.0

var emfLine = regexp.MustCompile(`EMFILE-RESULT (.*)`)

func TestConnEMFILE(t *testing.T) {
	if os.Getenv(emfChildEnv) != "" {
		t.Skip("in the EMFILE child process")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestConnEMFILEChild$", "-test.v", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(os.Environ(), emfChildEnv+"=1")
	out, runErr := cmd.CombinedOutput()
	m := emfLine.FindSubmatch(out)
	if m == nil {
		t.Fatalf("child ended without a result (%v):\n%s", runErr, emfTail(out, 40))
	}
	line := string(m[1])
	t.Logf("child: %s", line)
	if runErr != nil {
		t.Errorf("child failed (%v):\n%s", runErr, emfTail(out, 40))
	}
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		f[k] = v
	}
	num := func(k string) float64 {
		x, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			t.Fatalf("result field %s=%q: %v", k, f[k], err)
		}
		return x
	}
	if e := f["err"]; e != `""` {
		t.Errorf("child reported: %s", e)
	}
	if num("accepted_before") < 2 {
		t.Errorf("only %v connections accepted before EMFILE: want at least 2 to keep echoing", f["accepted_before"])
	}
	if num("pauses") == 0 {
		t.Errorf("ServerStats.AcceptPauses is 0 after accept4 ran out of descriptors")
	}
	if n := num("logs"); n != 1 {
		t.Errorf("running out of descriptors was logged %v times, want once", n)
	}
	for _, k := range []string{"echoed_before", "echoed_paused", "resumed"} {
		got, want, _ := strings.Cut(f[k], "/")
		if got != want || want == "" || want == "0" {
			t.Errorf("%s=%s: want all echoed", k, f[k])
		}
	}
	if cpu := num("cpu_pct"); cpu > emfMaxCPU {
		t.Errorf("CPU while accepting is paused: %.1f%% of a core, want < %.0f%% (idle is about 0)", cpu, emfMaxCPU)
	}
}

func emfTail(out []byte, n int) string {
	lines := strings.Split(string(out), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// emfEcho echoes.
type emfEcho struct{}

func (emfEcho) OnOpen(*Conn) {}
func (emfEcho) OnData(c *Conn) {
	b, _ := c.Next(c.Buffered())
	c.Write(b)
}
func (emfEcho) OnClose(*Conn, Reason, error) {}

// emfLogs counts the warnings about running out of descriptors.
type emfLogs struct{ n atomic.Int64 }

func (l *emfLogs) Enabled(context.Context, slog.Level) bool { return true }
func (l *emfLogs) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "out of file descriptors") {
		l.n.Add(1)
	}
	return nil
}
func (l *emfLogs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *emfLogs) WithGroup(string) slog.Handler      { return l }

// TestConnEMFILEChild is the child's side: it runs the scenario and prints
// the result line. It fails only if it cannot set the scenario up; the
// parent judges the figures.
func TestConnEMFILEChild(t *testing.T) {
	if os.Getenv(emfChildEnv) == "" {
		t.Skip("run by TestConnEMFILE")
	}
	const (
		clients = 24 // client sockets, made before the limit is lowered
		spare   = 4  // descriptors left to the server above the highest open one
		pending = 3  // connections left waiting in the backlog
		closeN  = 2  // accepted clients closed to free descriptors
	)
	var (
		r      = map[string]string{"err": `""`}
		order  = []string{"err"}
		report = func(k, format string, a ...any) {
			if _, ok := r[k]; !ok {
				order = append(order, k)
			}
			r[k] = fmt.Sprintf(format, a...)
		}
	)
	defer func() {
		var b strings.Builder
		for _, k := range order {
			fmt.Fprintf(&b, " %s=%s", k, r[k])
		}
		fmt.Printf("EMFILE-RESULT%s\n", b.String())
	}()
	fail := func(format string, a ...any) {
		report("err", "%q", fmt.Sprintf(format, a...))
	}

	logs := &emfLogs{}
	s, err := NewServer(emfEcho{}, Options{Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Close()
		<-s.Done()
	}()
	addr, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet4{Port: emfPort(addr.String())}
	copy(sa.Addr[:], []byte{127, 0, 0, 1})
	var cli []int
	defer func() {
		for _, fd := range cli {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	for range clients {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
		cli = append(cli, fd)
	}

	// Lower the limit to a few above the highest open descriptor.
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// Fill the free numbers below the highest open one (a process may
	// inherit a high fd), so that exactly spare are left to the server.
	highest := emfHighestFD(t)
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fd > highest {
			unix.Close(fd)
			break
		}
		defer unix.Close(fd)
	}
	limit := uint64(highest + 1 + spare)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	report("limit", "%d", limit)

	// Connect until the server pauses accepting.
	accepted, waiting := 0, 0
	for i := range cli {
		if err := unix.Connect(cli[i], sa); err != nil {
			fail("connect %d: %v", i, err)
			return
		}
		// accept4 takes a descriptor before it looks for a connection:
		// the server may pause right after accepting the last one it can.
		wait := 2 * time.Second
		if s.Stats().AcceptPauses > 0 {
			wait = 100 * time.Millisecond
		}
		switch {
		case emfWait(wait, func() bool { return s.Stats().Accepted == int64(accepted+1) }):
			accepted++
		case s.Stats().AcceptPauses > 0:
			waiting++
		default:
			fail("connection %d neither accepted nor refused by a pause", i)
			return
		}
		if waiting == pending {
			break
		}
	}
	report("accepted_before", "%d", accepted)
	if waiting < pending {
		fail("accepting never paused: %d connections accepted with RLIMIT_NOFILE %d", accepted, limit)
		return
	}
	alive, queued := cli[:accepted], cli[accepted:accepted+pending]

	echoAll := func(fds []int, tag string) int {
		ok := 0
		for i, fd := range fds {
			if emfEchoOnce(fd, fmt.Sprintf("%s-%d", tag, i)) {
				ok++
			}
		}
		return ok
	}
	report("echoed_before", "%d/%d", echoAll(alive, "before"), len(alive))
	// The waiting clients send now; they are answered once accepted.
	for i, fd := range queued {
		unix.Write(fd, []byte(fmt.Sprintf("queued-%d", i)))
	}

	// CPU over one second while paused.
	var r0, r1 unix.Rusage
	p0 := s.Stats().AcceptPauses
	unix.Getrusage(unix.RUSAGE_SELF, &r0)
	t0 := time.Now()
	time.Sleep(time.Second)
	unix.Getrusage(unix.RUSAGE_SELF, &r1)
	wall := time.Since(t0)
	cpu := time.Duration(r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano())
	report("cpu_pct", "%.2f", 100*cpu.Seconds()/wall.Seconds())
	report("cpu", "%v/%v", cpu.Round(time.Microsecond), wall.Round(time.Millisecond))
	report("retries_in_window", "%d", s.Stats().AcceptPauses-p0)
	report("echoed_paused", "%d/%d", echoAll(alive, "paused"), len(alive))
	if got := s.Stats().Accepted; got != int64(accepted) {
		fail("%d connections accepted while paused, want %d", got, accepted)
	}

	// Free descriptors: accepting resumes by itself.
	start := time.Now()
	for i := range closeN {
		unix.Close(alive[i])
		alive[i] = -1
	}
	resumed := 0
	for i, fd := range queued {
		if emfRead(fd, fmt.Sprintf("queued-%d", i)) {
			resumed++
		}
	}
	report("resumed", "%d/%d", resumed, len(queued))
	report("resume_ms", "%.1f", float64(time.Since(start).Microseconds())/1000)
	report("pauses", "%d", s.Stats().AcceptPauses)
	report("logs", "%d", logs.n.Load())
	report("echoed_after", "%d/%d", echoAll(alive[closeN:], "after"), len(alive)-closeN)
}

// emfHighestFD returns the highest open fd.
func emfHighestFD(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			highest = max(highest, n)
		}
	}
	return highest
}

func emfPort(hostport string) int {
	i := strings.LastIndexByte(hostport, ':')
	p, _ := strconv.Atoi(hostport[i+1:])
	return p
}

// emfWait polls cond for up to d.
func emfWait(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// emfEchoOnce sends msg and reads it back.
func emfEchoOnce(fd int, msg string) bool {
	if _, err := unix.Write(fd, []byte(msg)); err != nil {
		return false
	}
	return emfRead(fd, msg)
}

// emfRead reads len(msg) bytes (the socket times reads out) and compares.
func emfRead(fd int, msg string) bool {
	got := make([]byte, 0, len(msg))
	buf := make([]byte, len(msg))
	for len(got) < len(msg) {
		n, err := unix.Read(fd, buf[:len(msg)-len(got)])
		if err == unix.EINTR {
			continue
		}
		if n <= 0 {
			return false
		}
		got = append(got, buf[:n]...)
	}
	return bytes.Equal(got, []byte(msg))
}
