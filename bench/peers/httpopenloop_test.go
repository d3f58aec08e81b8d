//go:build linux

package peers

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkHTTPOpenLoop's flags.
var (
	httpRate     = flag.Float64("http.rate", 10_000, "BenchmarkHTTPOpenLoop: requests per second, all connections together")
	httpConns    = flag.Int("http.conns", 200, "BenchmarkHTTPOpenLoop: keep-alive connections")
	httpPollIdle = flag.Bool("http.pollidle", true, "BenchmarkHTTPOpenLoop: keep idle CPUs polling (/dev/cpu_dma_latency 0, needs root)")
)

// httpOpenCells are BenchmarkHTTPOpenLoop's loads: every request light
// (GET /plaintext), and 2 % of them GET /sleep?ms=5, a handler that
// blocks 5 ms as one waiting on a database does.
var httpOpenCells = []struct {
	name    string
	p       float64
	sleepMs int
}{
	{"none", 0, 0},
	{"p=2%/D=5ms", 0.02, 5},
}

// BenchmarkHTTPOpenLoop measures the latency of light requests under an
// open-loop load, each HTTP server (Kind "http") in a process of its own
// pinned to the first CPU with GOMAXPROCS=1 (cmd/serve), the client
// (httpOpenClient) one thread of this process pinned to the second CPU.
// The client sends -http.rate requests a second in all on a fixed
// schedule over -http.conns keep-alive connections, each request on a
// connection chosen at random among those with no request outstanding,
// as a pooling client does (no pipelining: a light request never waits
// behind a slow one on its connection, which HTTP/1.1 would impose on
// every server alike); if none is free it waits for the first that
// frees. A fraction p of the requests (the same random sequence for every
// server) is GET /sleep?ms=5. Every answer is checked (status, content
// type, body, and nothing after it). For each of -http.rounds rounds,
// each cell of httpOpenCells, each server in turn: a fresh server, the
// connections opened, an unmeasured 300 ms load without skew, then
// -http.time of the cell. Idle CPUs are kept polling (-http.pollidle, see
// pollIdle) as in BenchmarkSkew. It reports:
//
//   - light-p50-µs, light-p99-µs, light-p99.9-µs, light-max-µs: the
//     light requests' latency from the time the schedule gave them (not
//     the time the client got to send them) to the answer's last byte
//     read: a client that falls behind counts against the server, never
//     hides it;
//   - send-lag-p99-µs: how late the client's writes were behind the
//     schedule (the client's share of the latencies above, and of a
//     request waiting for a free connection);
//   - req/s, slow-reqs, idle-poll, steal-% (see BenchmarkSkew; a cell
//     above 2 % steal is left out by the report);
//   - cpu-µs/req, server-util-% and client-util-%;
//   - vol-csw/s and invol-csw/s, the server's context switches (its
//     threads', voluntary: it blocked; involuntary: it was preempted);
//   - slow-p50-µs and slow-p99-µs, the slow requests' latency: the
//     handler's sleep and how late its waiter resumed;
//   - for a server on the poller, waiters, running, grown and
//     handed-off (poller.Stats) at the end of the cell.
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkHTTPOpenLoop(b *testing.B) {
	if *httpConns < 1 || *httpRate <= 0 || *httpTime <= 0 {
		b.Fatal("-http.conns, -http.rate and -http.time must be positive")
	}
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	polling := 0.0
	if *httpPollIdle {
		release, err := pollIdle()
		if err != nil {
			b.Logf("idle CPUs not kept polling (%v): on a virtual machine the cross-CPU wake-ups may dominate the latencies", err)
		} else {
			polling = 1
			defer release()
		}
	}
	for range *httpRounds {
		for _, cell := range httpOpenCells {
			for _, s := range httpServers("http") {
				b.Run(cell.name+"/"+s.Name, func(b *testing.B) {
					srv := startServer(b, s.Name, serverCPU)
					defer func() {
						if err := srv.stop(); err != nil {
							b.Error(err)
						}
					}()
					cl, err := dialHTTPOpen(srv.addr, *httpConns)
					if err != nil {
						b.Fatal(err)
					}
					defer cl.close()
					if _, err := cl.run(skewWarmup, *httpRate, 0, 0); err != nil {
						b.Fatalf("warm-up: %v", err)
					}
					var r httpOpenResult
					var steal time.Duration
					var vcs, ivcs int64
					w, err := measure(srv.Pid(), b, func() error {
						s0, err := stealTime(serverCPU, clientCPU)
						if err != nil {
							return err
						}
						v0, iv0, err := ContextSwitches(srv.Pid())
						if err != nil {
							return err
						}
						if r, err = cl.run(*httpTime, *httpRate, cell.p, cell.sleepMs); err != nil {
							return err
						}
						v1, iv1, err := ContextSwitches(srv.Pid())
						if err != nil {
							return err
						}
						vcs, ivcs = v1-v0, iv1-iv0
						s1, err := stealTime(serverCPU, clientCPU)
						steal = s1 - s0
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
					b.ReportMetric(us(quantile(r.light, 0.50)), "light-p50-µs")
					b.ReportMetric(us(quantile(r.light, 0.99)), "light-p99-µs")
					b.ReportMetric(us(quantile(r.light, 0.999)), "light-p99.9-µs")
					b.ReportMetric(us(quantile(r.light, 1)), "light-max-µs")
					b.ReportMetric(us(quantile(r.lag, 0.99)), "send-lag-p99-µs")
					if len(r.slowLat) > 0 {
						b.ReportMetric(us(quantile(r.slowLat, 0.50)), "slow-p50-µs")
						b.ReportMetric(us(quantile(r.slowLat, 0.99)), "slow-p99-µs")
					}
					b.ReportMetric(float64(len(r.light)+r.slow)/r.wall.Seconds(), "req/s")
					b.ReportMetric(float64(r.slow), "slow-reqs")
					b.ReportMetric(polling, "idle-poll")
					b.ReportMetric(100*steal.Seconds()/r.wall.Seconds(), "steal-%")
					b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(len(r.light)+r.slow), "cpu-µs/req")
					b.ReportMetric(float64(vcs)/r.wall.Seconds(), "vol-csw/s")
					b.ReportMetric(float64(ivcs)/r.wall.Seconds(), "invol-csw/s")
					// A server on the poller: its waiters, and how many were
					// started while all were blocked and events handed off.
					if st, err := srv.ask("poller", "poller"); err == nil && len(st) > 0 {
						for _, k := range []string{"waiters", "running", "grown", "handed-off"} {
							b.ReportMetric(st[k], k)
						}
					}
					w.report(b)
				})
			}
		}
	}
}

// httpOpenClient is BenchmarkHTTPOpenLoop's client: its keep-alive
// connections to one server, driven by one loop on one locked OS thread
// over an epoll set of its own, which waits (epoll_pwait2, timer slack
// 1 ns) between sends rather than polling, as skewClient does and for the
// same reason: a polling client keeps both virtual CPUs busy and the
// hypervisor takes them away.
type httpOpenClient struct {
	conns []*httpOpenConn
	addr  string
	light []byte         // GET /plaintext, byte for byte what wrk would send
	slow  map[int][]byte // GET /sleep?ms=N by N
}

// httpOpenConn is one connection of the client, with at most one request
// outstanding.
type httpOpenConn struct {
	fd   int
	busy bool
	sent httpOpenSend // the request outstanding, while busy
	in   []byte       // the answer's bytes read so far
	out  []byte       // request bytes the socket did not take yet
}

// httpOpenSend is one request of the schedule.
type httpOpenSend struct {
	due     time.Duration // its scheduled send, since the run's start
	sleepMs int           // 0: light
}

// httpOpenResult is what one run measured.
type httpOpenResult struct {
	light []time.Duration // the light requests' latencies, sorted
	lag   []time.Duration // every write's lateness behind its schedule, sorted
	slow  int
	// slowLat are the slow requests' latencies, sorted: the handler's
	// sleep and how late the server let it resume
	slowLat []time.Duration
	wall    time.Duration // first scheduled send to last answer
}

// dialHTTPOpen opens n connections to addr (IPv4 host:port), blocking
// connects bounded by ioTimeout, then non-blocking with TCP_NODELAY.
func dialHTTPOpen(addr string, n int) (*httpOpenClient, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("dial %q: not an IPv4 host:port", addr)
	}
	sa := &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	cl := &httpOpenClient{addr: addr, light: RoutePlaintext.Request(addr), slow: map[int][]byte{}}
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			cl.close()
			return nil, err
		}
		cl.conns = append(cl.conns, &httpOpenConn{fd: fd, in: make([]byte, 0, 4096)})
		tv := unix.NsecToTimeval(ioTimeout.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			cl.close()
			return nil, err
		}
		if err := unix.Connect(fd, sa); err != nil {
			cl.close()
			return nil, fmt.Errorf("connect %s: %w", addr, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			cl.close()
			return nil, err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			cl.close()
			return nil, err
		}
	}
	return cl, nil
}

// close closes every connection.
func (cl *httpOpenClient) close() {
	for _, c := range cl.conns {
		unix.Close(c.fd)
	}
}

// run sends requests on schedule, one every 1/rate s for d, a fraction p
// of them GET /sleep?ms=sleepMs and the rest GET /plaintext, reads and
// checks every answer, and returns once all have come. A request whose
// time has come is sent even if the client is late, and its latency
// counts from its scheduled time.
func (cl *httpOpenClient) run(d time.Duration, rate, p float64, sleepMs int) (httpOpenResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The default timer slack lets a timed wait end up to 50 µs late.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return httpOpenResult{}, fmt.Errorf("PR_SET_TIMERSLACK: %w", err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
	if p > 0 && cl.slow[sleepMs] == nil {
		cl.slow[sleepMs] = RouteSleep(sleepMs).Request(cl.addr)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return httpOpenResult{}, err
	}
	defer unix.Close(epfd)
	idle := make([]int, 0, len(cl.conns)) // connections with no request outstanding
	for i, c := range cl.conns {
		c.busy, c.in, c.out = false, c.in[:0], c.out[:0]
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			return httpOpenResult{}, err
		}
		idle = append(idle, i)
	}
	total := int(math.Ceil(d.Seconds() * rate))
	interval := float64(time.Second) / rate
	due := func(i int) time.Duration { return time.Duration(float64(i) * interval) }
	limit := d + time.Duration(p*float64(total))*time.Duration(sleepMs)*time.Millisecond + ioTimeout

	r := httpOpenResult{light: make([]time.Duration, 0, total), lag: make([]time.Duration, 0, total)}
	rng := rand.New(rand.NewPCG(80, uint64(len(cl.conns))))
	var backlog []httpOpenSend // due, waiting for a free connection
	buf := make([]byte, 64<<10)
	events := make([]unix.EpollEvent, 256)
	var last time.Duration
	sent, outstanding := 0, 0
	start := time.Now()
	// send writes s on connection ci, now free.
	send := func(ci int, s httpOpenSend) error {
		c := cl.conns[ci]
		c.busy, c.sent = true, s
		req := cl.light
		if s.sleepMs > 0 {
			req = cl.slow[s.sleepMs]
		}
		if err := cl.write(epfd, ci, req); err != nil {
			return err
		}
		r.lag = append(r.lag, time.Since(start)-s.due)
		return nil
	}
	for sent < total || outstanding > 0 {
		now := time.Since(start)
		for ; sent < total && due(sent) <= now; sent++ {
			s := httpOpenSend{due: due(sent)}
			if rng.Float64() < p {
				s.sleepMs = sleepMs
			}
			outstanding++
			if len(idle) == 0 {
				backlog = append(backlog, s)
				continue
			}
			k := rng.IntN(len(idle))
			ci := idle[k]
			idle[k] = idle[len(idle)-1]
			idle = idle[:len(idle)-1]
			if err := send(ci, s); err != nil {
				return r, err
			}
		}
		var wait time.Duration
		if sent < total {
			wait = max(due(sent)-time.Since(start), 0)
		} else if wait = limit - time.Since(start); wait <= 0 {
			return r, fmt.Errorf("%d answers missing %v after the first send", outstanding, limit)
		}
		n, err := epollWaitFor(epfd, events, wait)
		if err != nil {
			return r, err
		}
		for _, ev := range events[:n] {
			ci := int(ev.Fd)
			c := cl.conns[ci]
			if ev.Events&unix.EPOLLOUT != 0 {
				if err := cl.write(epfd, ci, nil); err != nil {
					return r, err
				}
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
				continue
			}
			m, err := unix.Read(c.fd, buf)
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			at := time.Since(start)
			if err != nil {
				return r, fmt.Errorf("connection %d: read: %w", ci, err)
			}
			if m == 0 {
				return r, fmt.Errorf("connection %d: closed by the server (busy %v)", ci, c.busy)
			}
			if !c.busy {
				return r, fmt.Errorf("connection %d: %q with no request outstanding", ci, buf[:m])
			}
			c.in = append(c.in, buf[:m]...)
			resp, err := ParseHTTPResponse(c.in)
			if err == errIncomplete {
				continue
			}
			if err != nil {
				return r, fmt.Errorf("connection %d: %w", ci, err)
			}
			route := RoutePlaintext
			if c.sent.sleepMs > 0 {
				route = RouteSleep(c.sent.sleepMs)
			}
			if err := route.Check(resp); err != nil {
				return r, fmt.Errorf("connection %d: %w", ci, err)
			}
			if resp.Len != len(c.in) {
				return r, fmt.Errorf("connection %d: %d bytes after the answer", ci, len(c.in)-resp.Len)
			}
			c.in = c.in[:0]
			c.busy = false
			outstanding--
			if c.sent.sleepMs > 0 {
				r.slow++
				r.slowLat = append(r.slowLat, at-c.sent.due)
			} else {
				r.light = append(r.light, at-c.sent.due)
			}
			last = at
			if len(backlog) > 0 {
				s := backlog[0]
				backlog = backlog[1:]
				if err := send(ci, s); err != nil {
					return r, err
				}
			} else {
				idle = append(idle, ci)
			}
		}
	}
	slices.Sort(r.light)
	slices.Sort(r.slowLat)
	slices.Sort(r.lag)
	r.wall = last
	return r, nil
}

// write writes p (nil: only what is queued) to connection ci, behind
// anything the socket did not take before; a remainder is queued and the
// connection watched for Writable until it is gone. A request is tens of
// bytes: this is for correctness, not speed.
func (cl *httpOpenClient) write(epfd, ci int, p []byte) error {
	c := cl.conns[ci]
	queued := len(c.out) > 0
	c.out = append(c.out, p...)
	n, err := unix.Write(c.fd, c.out)
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		return fmt.Errorf("connection %d: write: %w", ci, err)
	}
	c.out = c.out[:copy(c.out, c.out[max(n, 0):])]
	if blocked := len(c.out) > 0; blocked != queued {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ci)}
		if blocked {
			ev.Events |= unix.EPOLLOUT
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			return err
		}
	}
	return nil
}

// TestHTTPOpenClient runs BenchmarkHTTPOpenLoop's client briefly against
// each HTTP server, with and without slow requests: every answer checked,
// the slow ones counted, the light ones timed.
func TestHTTPOpenClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, s := range OfKind("http") {
		t.Run(s.Name, func(t *testing.T) {
			srv := startServer(t, s.Name, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			cl, err := dialHTTPOpen(srv.addr, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.close()
			for _, p := range []float64{0, 0.1} {
				r, err := cl.run(200*time.Millisecond, 2000, p, 2)
				if err != nil {
					t.Fatalf("p=%v: %v", p, err)
				}
				if n := len(r.light) + r.slow; n != 400 {
					t.Errorf("p=%v: %d answers, want 400", p, n)
				}
				if (r.slow > 0) != (p > 0) {
					t.Errorf("p=%v: %d slow requests", p, r.slow)
				}
				if len(r.light) == 0 || r.light[0] <= 0 {
					t.Errorf("p=%v: light latencies %v...", p, r.light[:min(len(r.light), 3)])
				}
			}
		})
	}
}
