//go:build linux

package peers

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkH2OpenLoop's flags.
var (
	h2OpenRate  = flag.Float64("h2.rate", 10_000, "BenchmarkH2OpenLoop: requests per second, all connections together")
	h2OpenConns = flag.Int("h2.conns", 20, "BenchmarkH2OpenLoop: HTTP/2 connections, each multiplexing its requests")
)

// BenchmarkH2OpenLoop is BenchmarkHTTPOpenLoop over HTTP/2 with prior
// knowledge (h2c): the latency of light requests under an open-loop
// load, the server in a process of its own pinned to the first CPU
// (GOMAXPROCS=1; nghttpd with one worker), the client (h2OpenClient)
// one thread of this process pinned to the second. The client sends
// -h2.rate requests a second in all on a fixed schedule over -h2.conns
// connections, each request a new stream on a connection chosen at
// random among those below the server's SETTINGS_MAX_CONCURRENT_STREAMS
// (all of them, at these rates): streams share connections, so a light
// request may now wait behind a slow one inside the server, which is
// what the cell with slow requests looks for. A fraction p of the
// requests (the same random sequence for every server) is GET
// /sleep?ms=5: httpOpenCells, as in BenchmarkHTTPOpenLoop; nghttpd, which
// serves files, runs the cell without them only. Every answer is checked
// (status, content type, body). For each of -h2.rounds rounds, each
// cell, each server of -h2.servers in turn (httpd, net/http, nghttpd): a
// fresh server, the connections opened (each with a first request
// answered), an unmeasured 300 ms load without skew, then -h2.time of
// the cell. Idle CPUs are kept polling (-http.pollidle, see pollIdle).
// It reports what BenchmarkHTTPOpenLoop does: light-p50-µs,
// light-p99-µs, light-p99.9-µs and light-max-µs from each request's
// scheduled time to its answer's last byte read, send-lag-p99-µs (the
// client's lateness), slow-p50-µs and slow-p99-µs, req/s, slow-reqs,
// idle-poll, steal-%, cpu-µs/req, vol-csw/s and invol-csw/s (the
// server's context switches), server-util-% and client-util-%, and for
// httpd the poller's waiters, running, grown and handed-off.
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkH2OpenLoop(b *testing.B) {
	if *h2OpenConns < 1 || *h2OpenRate <= 0 || *h2Time <= 0 {
		b.Fatal("-h2.conns, -h2.rate and -h2.time must be positive")
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
	peers := h2PeersNamed(func(p h2Peer) bool { return !p.h1 })
	for range *h2Rounds {
		for _, cell := range httpOpenCells {
			for _, p := range peers {
				if cell.p > 0 && p.plain == "" {
					continue // nghttpd has no /sleep
				}
				b.Run(cell.name+"/"+p.name, func(b *testing.B) {
					srv := p.start(b, false, serverCPU)
					defer func() {
						if err := srv.stop(); err != nil {
							b.Error(err)
						}
					}()
					cl, err := dialH2Open(srv.address(), *h2OpenConns, p.anyType)
					if err != nil {
						b.Fatal(err)
					}
					defer cl.close()
					if _, err := cl.run(skewWarmup, *h2OpenRate, 0, 0); err != nil {
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
						if r, err = cl.run(*h2Time, *h2OpenRate, cell.p, cell.sleepMs); err != nil {
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
					if c, ok := srv.(*child); ok {
						if st, err := c.ask("poller", "poller"); err == nil && len(st) > 0 {
							for _, k := range []string{"waiters", "running", "grown", "handed-off"} {
								b.ReportMetric(st[k], k)
							}
						}
					}
					w.report(b)
				})
			}
		}
	}
}

// h2OpenClient is BenchmarkH2OpenLoop's client: HTTP/2 connections to
// one server (h2Session each), driven by one loop on one locked OS
// thread over an epoll set of its own that waits (epoll_pwait2, timer
// slack 1 ns) between sends, as httpOpenClient does and for the same
// reasons.
type h2OpenClient struct {
	conns   []*h2OpenConn
	addr    string
	light   []byte         // GET /plaintext's header block
	slow    map[int][]byte // GET /sleep?ms=N's by N
	anyType bool           // see h2Stream.check
}

// h2OpenConn is one connection of the client.
type h2OpenConn struct {
	fd      int
	s       *h2Session
	writing bool // watched for Writable: s.out has bytes the socket did not take
}

// dialH2Open opens n h2c connections to addr (IPv4 host:port), each with
// a first GET /plaintext answered (checked) by blocking reads and writes
// bounded by ioTimeout, so that the server's SETTINGS are known; then
// non-blocking, with TCP_NODELAY.
func dialH2Open(addr string, n int, anyType bool) (*h2OpenClient, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("dial %q: not an IPv4 host:port", addr)
	}
	sa := &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	cl := &h2OpenClient{
		addr:    addr,
		light:   h2RequestBlock("http", addr, RoutePlaintext.Path),
		slow:    map[int][]byte{},
		anyType: anyType,
	}
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			cl.close()
			return nil, err
		}
		c := &h2OpenConn{fd: fd, s: newH2Session()}
		cl.conns = append(cl.conns, c)
		tv := unix.NsecToTimeval(ioTimeout.Nanoseconds())
		for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} {
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
				cl.close()
				return nil, err
			}
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			cl.close()
			return nil, err
		}
		if err := unix.Connect(fd, sa); err != nil {
			cl.close()
			return nil, fmt.Errorf("connect %s: %w", addr, err)
		}
		if err := c.first(cl.light, anyType); err != nil {
			cl.close()
			return nil, fmt.Errorf("connection %d: %w", len(cl.conns), err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			cl.close()
			return nil, err
		}
	}
	return cl, nil
}

// first sends the preface and GET /plaintext on the blocking socket and
// reads until the answer, checked, has come; then writes what the
// session has to say (the SETTINGS acknowledgement).
func (c *h2OpenConn) first(block []byte, anyType bool) error {
	st := c.s.request(block, RoutePlaintext)
	buf := make([]byte, 16<<10)
	done := false
	for {
		for len(c.s.out) > 0 {
			n, err := unix.Write(c.fd, c.s.out)
			if err != nil {
				return fmt.Errorf("write: %w", err)
			}
			c.s.out = c.s.out[:copy(c.s.out, c.s.out[n:])]
		}
		if done {
			return st.check(anyType)
		}
		n, err := unix.Read(c.fd, buf)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return errors.New("closed by the server before the first answer")
		}
		if err := c.s.feed(buf[:n], func(*h2Stream) error { done = true; return nil }); err != nil {
			return err
		}
	}
}

// close closes every connection.
func (cl *h2OpenClient) close() {
	for _, c := range cl.conns {
		unix.Close(c.fd)
	}
}

// run sends requests on schedule, one every 1/rate s for d, a fraction p
// of them GET /sleep?ms=sleepMs and the rest GET /plaintext, reads and
// checks every answer, and returns once all have come. A request whose
// time has come is sent even if the client is late, and its latency
// counts from its scheduled time.
func (cl *h2OpenClient) run(d time.Duration, rate, p float64, sleepMs int) (httpOpenResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The default timer slack lets a timed wait end up to 50 µs late.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return httpOpenResult{}, fmt.Errorf("PR_SET_TIMERSLACK: %w", err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0)
	// No GC during the run: with one P its mark phase would take the
	// loop's thread for a slice, and a send or read waiting on it would
	// count against the server. The client keeps a stream, its body
	// and some header strings per request: a few megabytes a run.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	if p > 0 && cl.slow[sleepMs] == nil {
		cl.slow[sleepMs] = h2RequestBlock("http", cl.addr, RouteSleep(sleepMs).Path)
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return httpOpenResult{}, err
	}
	defer unix.Close(epfd)
	for i, c := range cl.conns {
		c.writing = false
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			return httpOpenResult{}, err
		}
		if err := cl.flush(epfd, i); err != nil {
			return httpOpenResult{}, err
		}
	}
	total := int(math.Ceil(d.Seconds() * rate))
	interval := float64(time.Second) / rate
	due := func(i int) time.Duration { return time.Duration(float64(i) * interval) }
	limit := d + time.Duration(p*float64(total))*time.Duration(sleepMs)*time.Millisecond + ioTimeout

	r := httpOpenResult{light: make([]time.Duration, 0, total), lag: make([]time.Duration, 0, total)}
	rng := rand.New(rand.NewPCG(80, uint64(len(cl.conns))))
	var backlog []h2Stream // due, waiting for a connection below the server's stream limit
	buf := make([]byte, 64<<10)
	events := make([]unix.EpollEvent, 256)
	free := make([]int, 0, len(cl.conns))
	var last time.Duration
	sent, outstanding := 0, 0
	start := time.Now()
	// send opens a stream for s on connection ci.
	send := func(ci int, s h2Stream) error {
		c := cl.conns[ci]
		route, block := RoutePlaintext, cl.light
		if s.sleepMs > 0 {
			route, block = RouteSleep(s.sleepMs), cl.slow[s.sleepMs]
		}
		st := c.s.request(block, route)
		st.due, st.sleepMs = s.due, s.sleepMs
		if err := cl.flush(epfd, ci); err != nil {
			return err
		}
		r.lag = append(r.lag, time.Since(start)-s.due)
		return nil
	}
	var at time.Duration // when the answers being fed were read
	answered := func(st *h2Stream) error {
		if err := st.check(cl.anyType); err != nil {
			return err
		}
		outstanding--
		if st.sleepMs > 0 {
			r.slow++
			r.slowLat = append(r.slowLat, at-st.due)
		} else {
			r.light = append(r.light, at-st.due)
		}
		last = at
		return nil
	}
	for sent < total || outstanding > 0 {
		now := time.Since(start)
		for ; sent < total && due(sent) <= now; sent++ {
			s := h2Stream{due: due(sent)}
			if rng.Float64() < p {
				s.sleepMs = sleepMs
			}
			outstanding++
			free = free[:0]
			for i, c := range cl.conns {
				if uint32(c.s.open()) < c.s.maxStreams {
					free = append(free, i)
				}
			}
			if len(free) == 0 {
				backlog = append(backlog, s)
				continue
			}
			if err := send(free[rng.IntN(len(free))], s); err != nil {
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
				if err := cl.flush(epfd, ci); err != nil {
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
			at = time.Since(start)
			if err != nil {
				return r, fmt.Errorf("connection %d: read: %w", ci, err)
			}
			if m == 0 {
				return r, fmt.Errorf("connection %d: closed by the server (%d streams open)", ci, c.s.open())
			}
			if err := c.s.feed(buf[:m], answered); err != nil {
				return r, fmt.Errorf("connection %d: %w", ci, err)
			}
			for len(backlog) > 0 && uint32(c.s.open()) < c.s.maxStreams {
				s := backlog[0]
				backlog = backlog[1:]
				if err := send(ci, s); err != nil {
					return r, err
				}
			}
			// What the frames asked for: SETTINGS and PING
			// acknowledgements, the connection's window.
			if err := cl.flush(epfd, ci); err != nil {
				return r, err
			}
		}
	}
	slices.Sort(r.light)
	slices.Sort(r.slowLat)
	slices.Sort(r.lag)
	r.wall = last
	return r, nil
}

// flush writes what connection ci's session has to send; a remainder
// the socket did not take stays queued and the connection is watched
// for Writable until it is gone.
func (cl *h2OpenClient) flush(epfd, ci int) error {
	c := cl.conns[ci]
	if len(c.s.out) > 0 {
		n, err := unix.Write(c.fd, c.s.out)
		if err != nil && err != unix.EAGAIN && err != unix.EINTR {
			return fmt.Errorf("connection %d: write: %w", ci, err)
		}
		c.s.out = c.s.out[:copy(c.s.out, c.s.out[max(n, 0):])]
	}
	if blocked := len(c.s.out) > 0; blocked != c.writing {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ci)}
		if blocked {
			ev.Events |= unix.EPOLLOUT
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			return err
		}
		c.writing = blocked
	}
	return nil
}

// TestH2OpenClient runs BenchmarkH2OpenLoop's client briefly against
// each HTTP/2 peer with /sleep (httpd and net/http, h2c), with and
// without slow requests, and against nghttpd without: every answer
// checked, the slow ones counted, the light ones timed.
func TestH2OpenClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, p := range h2Peers {
		if p.h1 {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			if p.name == "httpd" {
				skipUnlessHTTPDSpeaksH2(t)
			}
			srv := p.start(t, false, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			cl, err := dialH2Open(srv.address(), 4, p.anyType)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.close()
			ps := []float64{0, 0.1}
			if p.plain == "" {
				ps = ps[:1] // nghttpd has no /sleep
			}
			for _, frac := range ps {
				r, err := cl.run(200*time.Millisecond, 2000, frac, 2)
				if err != nil {
					t.Fatalf("p=%v: %v", frac, err)
				}
				if n := len(r.light) + r.slow; n != 400 {
					t.Errorf("p=%v: %d answers, want 400", frac, n)
				}
				if (r.slow > 0) != (frac > 0) {
					t.Errorf("p=%v: %d slow requests", frac, r.slow)
				}
				if len(r.light) == 0 || r.light[0] <= 0 {
					t.Errorf("p=%v: light latencies %v...", frac, r.light[:min(len(r.light), 3)])
				}
			}
		})
	}
}
