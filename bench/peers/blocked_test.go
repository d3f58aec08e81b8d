//go:build linux

package peers

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

// BenchmarkBlockedRelease's flags.
var (
	blockedTime     = flag.Duration("blocked.time", 4*time.Second, "BenchmarkBlockedRelease: the measured load of each cell, server and round")
	blockedRate     = flag.Float64("blocked.rate", 1000, "BenchmarkBlockedRelease: connections opened per second")
	blockedRounds   = flag.Int("blocked.rounds", 3, "BenchmarkBlockedRelease: rounds, each running every cell with every server in turn")
	blockedServers  = flag.String("blocked.servers", "httpd,conn-http,conn-http-stealing", "BenchmarkBlockedRelease: the servers, comma-separated (Kind http or http-variant)")
	blockedPollIdle = flag.Bool("blocked.pollidle", true, "BenchmarkBlockedRelease: keep idle CPUs polling (/dev/cpu_dma_latency 0, needs root)")
)

// blockedTail is how much longer than the load the blocked handler
// sleeps: it is still blocked when the load's last connection has closed
// and the server has gone quiet, when the end figures are read.
const blockedTail = time.Second

// blockedSettle bounds the wait, after the load, for its last
// connections' releases: far above a release that nothing holds, far
// below blockedTail.
const blockedSettle = 200 * time.Millisecond

// blockedWarmup is an unmeasured load before each measurement, at the
// same rate: the server's buffers, pools and waiters grown.
const blockedWarmup = 200 * time.Millisecond

// blockedCells are BenchmarkBlockedRelease's cells: no handler blocked
// (the baseline), and one handler blocked for the whole load.
var blockedCells = []struct {
	name  string
	block bool
}{
	{"none", false},
	{"blocked", true},
}

// BenchmarkBlockedRelease measures how fast a server releases the
// connections its clients close while one handler is blocked: a waiter
// that runs one handler for a long time (a sleep standing for a slow
// database call or a slow inline download) passes no quiescent point
// meanwhile, and a reclaimer that waits for every waiter to pass one
// holds every release, so closed connections keep their descriptors
// (CLOSE-WAIT sockets) until the handler returns.
//
// Each server (-blocked.servers: httpd with its defaults, on a shared
// epoll set; ConnHTTP, the raw HTTP/1.1 server on package conn, on a
// shared set and on stealing; any HTTP server of this package may be
// named, those without a poller reporting descriptors only) runs in a
// process of its own pinned to the first CPU with GOMAXPROCS=1
// (cmd/serve), the client in this process pinned to the second. For each
// of -blocked.rounds rounds, each cell of blockedCells, each server in
// turn: a fresh server, an unmeasured warm-up (blockedWarmup), the
// server's descriptors counted once it is quiet (the baseline) and its
// poller's statistics reset; in the blocked cell one connection then
// sends GET /sleep?ms=N, N the load's length plus blockedTail, which
// holds its handler (inline on a waiter for httpd and ConnHTTP) past the
// load's end. The load: -blocked.rate connections opened a second on a
// fixed schedule for -blocked.time, each its own goroutine that dials,
// sends GET /plaintext, reads and checks the answer and closes (FIN).
// Meanwhile the server's open descriptors (/proc/PID/fd) are counted
// every 10 ms. Once the load is over and its last releases have had
// blockedSettle to run (the blocked handler still sleeping), the
// descriptors are counted again and the server's registrations released
// but not yet free read ("stats"); then
// the blocked answer is awaited (checked, and not early), the server's
// pending releases allowed to finish, and its release latencies read.
// It reports:
//
//   - release-p50-µs, release-p99-µs, release-max-µs, release-samples:
//     Delete to the start of the release (conn's OnClose, the close of
//     the descriptor after it), over the releases since the baseline
//     (poller.Stats.ReleaseLatency: the last 4096; the default load is
//     4,000 connections), read once the blocked handler has returned:
//     a release held by it counts with its whole wait;
//   - pending-at-end, oldest-pending-µs: registrations deleted and not
//     yet released, and the oldest one's age, at the load's end while
//     the handler is still blocked (poller.Stats.ReleasedNotFree and
//     OldestPending);
//   - fds-max-over-baseline, fds-end-over-baseline: the server's open
//     descriptors over the baseline, the most seen during the load and
//     at its end (the blocked connection itself counts 1): the
//     user-visible symptom, sockets the clients closed still held;
//   - cycle-p50-µs, cycle-p99-µs: the client's connections, from the
//     scheduled dial to the answer's last byte: the server still serves
//     while one handler blocks;
//   - server-util-%: the server's CPU time from the load's start to the
//     end figures over that time (a poller watching a blocked waiter
//     wakes now and then);
//   - conns/s, blocked-ms (the blocked request's own duration), steal-%
//     (see BenchmarkSkew).
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkBlockedRelease(b *testing.B) {
	if *blockedTime <= 0 || *blockedRate <= 0 || *blockedRounds < 1 {
		b.Fatal("-blocked.time, -blocked.rate and -blocked.rounds must be positive")
	}
	if hold := *blockedTime + blockedTail; hold > maxSleep {
		b.Fatalf("-blocked.time %v: the blocked handler would sleep %v, over /sleep's bound %v", *blockedTime, hold, maxSleep)
	}
	var servers []Named
	for _, name := range strings.Split(*blockedServers, ",") {
		s, ok := Lookup(strings.TrimSpace(name))
		if !ok || (s.Kind != "http" && s.Kind != "http-variant") {
			b.Fatalf("-blocked.servers: %q is not an HTTP server of this package", name)
		}
		servers = append(servers, s)
	}
	skipUnlessFiles(b, int(math.Ceil(*blockedRate*blockedTime.Seconds())))
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	polling := 0.0
	if *blockedPollIdle {
		release, err := pollIdle()
		if err != nil {
			b.Logf("idle CPUs not kept polling (%v)", err)
		} else {
			polling = 1
			defer release()
		}
	}
	for range *blockedRounds {
		for _, cell := range blockedCells {
			for _, s := range servers {
				b.Run(cell.name+"/"+s.Name, func(b *testing.B) {
					srv := startServer(b, s.Name, serverCPU)
					defer func() {
						if err := srv.stop(); err != nil {
							b.Error(err)
						}
					}()
					s0, err := stealTime(serverCPU, clientCPU)
					if err != nil {
						b.Fatal(err)
					}
					var hold time.Duration
					if cell.block {
						hold = *blockedTime + blockedTail
					}
					r, err := blockedRun(srv, *blockedTime, *blockedRate, hold)
					if err != nil {
						b.Fatal(err)
					}
					s1, err := stealTime(serverCPU, clientCPU)
					if err != nil {
						b.Fatal(err)
					}
					r.report(b)
					b.ReportMetric(polling, "idle-poll")
					b.ReportMetric(100*(s1-s0).Seconds()/r.elapsed.Seconds(), "steal-%")
				})
			}
		}
	}
}

// blockedResult is what one blockedRun measured.
type blockedResult struct {
	cycles  []time.Duration // the load's connections, scheduled dial to answer, sorted
	wall    time.Duration   // the load: first scheduled dial to last answer
	elapsed time.Duration   // the whole run, warm-up to the last statistics
	// The server's open descriptors: the baseline, the most seen during
	// the load, and at its end.
	fdsBase, fdsMax, fdsEnd int
	// poller is false for a server without one: the release figures are
	// then zero.
	poller     bool
	pendingEnd int64         // released-not-free at the load's end
	oldestEnd  time.Duration // the oldest of those's age then
	release    poller.Latency
	blocked    time.Duration // the blocked request's duration; 0 if none
	// The server's CPU time from the load's start to the end figures,
	// and that window's length.
	serverCPU, window time.Duration
}

// report adds r's figures to b's metrics.
func (r blockedResult) report(b *testing.B) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	if r.poller {
		b.ReportMetric(us(r.release.P50), "release-p50-µs")
		b.ReportMetric(us(r.release.P99), "release-p99-µs")
		b.ReportMetric(us(r.release.Max), "release-max-µs")
		b.ReportMetric(float64(r.release.Samples), "release-samples")
		b.ReportMetric(float64(r.pendingEnd), "pending-at-end")
		b.ReportMetric(us(r.oldestEnd), "oldest-pending-µs")
	}
	b.ReportMetric(float64(r.fdsMax-r.fdsBase), "fds-max-over-baseline")
	b.ReportMetric(float64(r.fdsEnd-r.fdsBase), "fds-end-over-baseline")
	b.ReportMetric(us(quantile(r.cycles, 0.5)), "cycle-p50-µs")
	b.ReportMetric(us(quantile(r.cycles, 0.99)), "cycle-p99-µs")
	b.ReportMetric(float64(len(r.cycles))/r.wall.Seconds(), "conns/s")
	b.ReportMetric(100*r.serverCPU.Seconds()/r.window.Seconds(), "server-util-%")
	if r.blocked > 0 {
		b.ReportMetric(float64(r.blocked.Milliseconds()), "blocked-ms")
	}
}

// blockedRun runs one measurement of BenchmarkBlockedRelease against srv
// (see there): a warm-up, then d of connections opened at rate, with a
// handler blocked for hold from before the load's start if hold > 0.
func blockedRun(srv *child, d time.Duration, rate float64, hold time.Duration) (blockedResult, error) {
	var r blockedResult
	t0 := time.Now()
	pid := srv.Pid()
	if _, _, err := blockedCycles(srv.addr, blockedWarmup, rate); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	if err := quiet(pid); err != nil {
		return r, err
	}
	var err error
	if r.fdsBase, err = countFDs(pid); err != nil {
		return r, err
	}
	if _, err := srv.ask("reset", "ok"); err != nil {
		return r, err
	}
	type answer struct {
		took time.Duration
		err  error
	}
	var blocked chan answer
	if hold > 0 {
		ms := int(hold / time.Millisecond)
		bc, err := net.DialTimeout("tcp4", srv.addr, ioTimeout)
		if err != nil {
			return r, err
		}
		defer bc.Close()
		bc.SetDeadline(time.Now().Add(hold + ioTimeout))
		blocked = make(chan answer, 1)
		sent := time.Now()
		go func() {
			resp, err := roundTripHTTP(bc, RouteSleep(ms).Request(srv.addr), make([]byte, 0, 512))
			if err == nil {
				err = RouteSleep(ms).Check(resp)
			}
			took := time.Since(sent)
			if err == nil && took < hold {
				err = fmt.Errorf("GET /sleep?ms=%d answered after %v", ms, took)
			}
			blocked <- answer{took, err}
		}()
		// The request reaches its handler in microseconds.
		time.Sleep(20 * time.Millisecond)
	}

	// The descriptors are counted every 10 ms during the load.
	stop := make(chan struct{})
	type sample struct {
		most int
		err  error
	}
	sampled := make(chan sample, 1)
	go func(most int) {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			n, err := countFDs(pid)
			if err != nil {
				sampled <- sample{most, err}
				return
			}
			most = max(most, n)
			select {
			case <-stop:
				sampled <- sample{most, nil}
				return
			case <-tick.C:
			}
		}
	}(r.fdsBase)
	cpu0, err := ProcessCPUTime(pid)
	if err != nil {
		close(stop)
		<-sampled
		return r, err
	}
	w0 := time.Now()
	r.cycles, r.wall, err = blockedCycles(srv.addr, d, rate)
	close(stop)
	fds := <-sampled
	if err == nil {
		err = fds.err
	}
	if err != nil {
		return r, err
	}
	r.fdsMax = fds.most
	// The load's last connections have their releases settle, for
	// blockedSettle at most: not until the server is quiet, as a server
	// whose poller watches a blocked waiter is never quite idle, and
	// not until the blocked handler returns.
	st, err := srv.stats()
	for settle := time.Now().Add(blockedSettle); err == nil && st.Poller != nil && st.Poller.ReleasedNotFree > 0 && time.Now().Before(settle); {
		time.Sleep(5 * time.Millisecond)
		st, err = srv.stats()
	}
	if err != nil {
		return r, err
	}
	if st.Poller == nil {
		time.Sleep(blockedSettle)
	}
	if r.fdsEnd, err = countFDs(pid); err != nil {
		return r, err
	}
	cpu1, err := ProcessCPUTime(pid)
	if err != nil {
		return r, err
	}
	r.serverCPU, r.window = cpu1-cpu0, time.Since(w0)
	r.fdsMax = max(r.fdsMax, r.fdsEnd)
	if r.poller = st.Poller != nil; r.poller {
		r.pendingEnd, r.oldestEnd = st.Poller.ReleasedNotFree, st.Poller.OldestPending
	}
	if hold > 0 && len(blocked) > 0 {
		return r, fmt.Errorf("the blocked handler returned before the load's end figures were read: raise blockedTail (%v)", blockedTail)
	}

	if hold > 0 {
		select {
		case a := <-blocked:
			if a.err != nil {
				return r, fmt.Errorf("the blocked request: %w", a.err)
			}
			r.blocked = a.took
		case <-time.After(hold + 2*ioTimeout):
			return r, errors.New("the blocked request: no answer")
		}
	}
	// The releases the handler held run once it has returned: wait for
	// them (their latencies are recorded when they start), at most 2 s.
	if r.poller {
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if st, err = srv.stats(); err != nil {
				return r, err
			}
			if st.Poller.ReleasedNotFree == 0 || time.Now().After(deadline) {
				break
			}
		}
		r.release = st.Poller.ReleaseLatency
	}
	r.elapsed = time.Since(t0)
	return r, nil
}

// blockedCycles opens connections to addr at rate for d, on a fixed
// schedule, each on a goroutine of its own: dial, GET /plaintext, the
// answer read and checked, close. It returns the connections' times from
// their scheduled dial to their answer's last byte, sorted, and the time
// from the first scheduled dial to the last answer.
func blockedCycles(addr string, d time.Duration, rate float64) ([]time.Duration, time.Duration, error) {
	n := int(math.Ceil(d.Seconds() * rate))
	interval := float64(time.Second) / rate
	req := RoutePlaintext.Request(addr)
	lat := make([]time.Duration, n)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		last  time.Duration
	)
	start := time.Now()
	for i := range n {
		due := time.Duration(float64(i) * interval)
		if w := due - time.Since(start); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp4", addr, ioTimeout)
			if err == nil {
				c.SetDeadline(time.Now().Add(ioTimeout))
				var resp HTTPResponse
				if resp, err = roundTripHTTP(c, req, make([]byte, 0, 512)); err == nil {
					err = RoutePlaintext.Check(resp)
				}
				at := time.Since(start)
				lat[i] = at - due
				c.Close()
				mu.Lock()
				last = max(last, at)
				mu.Unlock()
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("connection %d of %d: %w", i+1, n, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, 0, first
	}
	slices.Sort(lat)
	return lat, last, nil
}

// countFDs counts process pid's open file descriptors (/proc/PID/fd).
func countFDs(pid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(1024)
		n += len(names)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// serveStats is the launcher's answer to "stats" (cmd/serve's Stats).
type serveStats struct {
	Poller *poller.Stats     `json:"poller,omitempty"`
	Server *conn.ServerStats `json:"server,omitempty"`
}

// stats asks the child for its statistics ("stats").
func (c *child) stats() (serveStats, error) {
	var st serveStats
	line, err := c.askLine("stats")
	if err != nil {
		return st, err
	}
	j, ok := strings.CutPrefix(line, "stats ")
	if !ok {
		return st, fmt.Errorf("server process %d answered %.200q to \"stats\"", c.Pid(), line)
	}
	if err := json.Unmarshal([]byte(j), &st); err != nil {
		return st, fmt.Errorf("server process %d: stats: %w", c.Pid(), err)
	}
	return st, nil
}

// askLine sends cmd on the child's stdin and returns its one-line answer.
func (c *child) askLine(cmd string) (string, error) {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return "", fmt.Errorf("server process %d: send %q: %w", c.Pid(), cmd, err)
	}
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("server process %d exited before answering %q; stderr:\n%s", c.Pid(), cmd, c.stderr)
		}
		return l, nil
	case <-time.After(10 * time.Second):
		return "", fmt.Errorf("server process %d did not answer %q within 10s", c.Pid(), cmd)
	}
}

// TestBlockedRelease runs BenchmarkBlockedRelease's measurement briefly
// against httpd (which must report its poller's statistics) and ConnHTTP
// on stealing, with a handler blocked: every answer checked, the blocked
// one not early, the figures present and consistent. It asserts nothing
// about their size: that is the benchmark's to report.
func TestBlockedRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, name := range []string{"httpd", "conn-http-stealing"} {
		t.Run(name, func(t *testing.T) {
			srv := startServer(t, name, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			// The handler must still be blocked when the load's end
			// figures are read, after blockedSettle at most.
			const d, rate = 200 * time.Millisecond, 500
			const hold = d + blockedSettle + 400*time.Millisecond
			r, err := blockedRun(srv, d, rate, hold)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.cycles) != 100 || r.wall <= 0 {
				t.Errorf("%d connections in %v, want 100", len(r.cycles), r.wall)
			}
			if !r.poller || r.release.Samples < 100 || r.release.Max < r.release.P99 || r.release.P99 < r.release.P50 {
				t.Errorf("release latency %+v (poller %v), want one per connection at least", r.release, r.poller)
			}
			if r.fdsBase < 3 || r.fdsMax < r.fdsEnd || r.pendingEnd < 0 {
				t.Errorf("descriptors: baseline %d, max %d, end %d; %d pending at the end", r.fdsBase, r.fdsMax, r.fdsEnd, r.pendingEnd)
			}
			if r.blocked < hold {
				t.Errorf("blocked request answered after %v", r.blocked)
			}
			st, err := srv.stats()
			if err != nil || st.Server == nil || st.Poller == nil || len(st.Poller.Waiters) == 0 || st.Server.Accepted < 100 {
				t.Errorf("stats: %+v, %v", st, err)
			}
		})
	}
}
