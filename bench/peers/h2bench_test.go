//go:build linux

package peers

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The HTTP/2 benchmarks' flags.
var (
	h2Time       = flag.Duration("h2.time", 5*time.Second, "HTTP/2 benchmarks: the measured load of each cell, server and round")
	h2Rounds     = flag.Int("h2.rounds", 5, "HTTP/2 benchmarks: rounds, each running every cell with every server in turn")
	h2Only       = flag.String("h2.servers", "", "HTTP/2 benchmarks: only these servers, comma-separated (httpd, net/http, nghttpd, fasthttp-h1; default: all)")
	h2Transports = flag.String("h2.transports", "h2c,tls", "BenchmarkH2 and BenchmarkH2IdleMemory: h2c (prior knowledge), tls (h2 by ALPN), or both, comma-separated")
)

// h2Warmup is an unmeasured h2load run before each measured one: every
// connection made, the server's buffers and pools grown.
const h2Warmup = time.Second

// h2Peer is a server of the HTTP/2 comparison, under one name in the
// benchmarks whether plain or over TLS.
type h2Peer struct {
	name string
	// h1: HTTP/1.1 only, driven by h2load --h1 (-m requests pipelined
	// on each connection): the reference row of a server without
	// HTTP/2.
	h1 bool
	// The launcher's servers (cmd/serve) plain and over TLS; both
	// empty for nghttpd, which the benchmarks start themselves.
	plain, tls string
	// anyType: the server sends no content type (nghttpd: its files
	// have no extension), which the checks accept.
	anyType bool
}

// h2Peers are the servers compared: httpd and net/http serving the same
// handler (H2Handler), h2c with prior knowledge and h2 over TLS by ALPN;
// nghttpd (nghttp2's server, in C, the library most HTTP/2 servers
// outside Go build on) serving the routes as static files, one worker;
// and fasthttp over HTTP/1.1 with pipelining, a server without HTTP/2,
// for scale.
var h2Peers = []h2Peer{
	{name: "httpd", plain: "httpd-h2c", tls: "httpd-h2"},
	{name: "net/http", plain: "net/http-h2c", tls: "net/http-h2"},
	{name: "nghttpd", anyType: true},
	{name: "fasthttp-h1", h1: true, plain: "fasthttp", tls: "fasthttp-tls"},
}

// h2PeersNamed returns the peers named in -h2.servers (all if it is
// empty) among those with want's property.
func h2PeersNamed(want func(h2Peer) bool) []h2Peer {
	var out []h2Peer
	for _, p := range h2Peers {
		if !want(p) {
			continue
		}
		if *h2Only == "" {
			out = append(out, p)
			continue
		}
		for f := range strings.SplitSeq(*h2Only, ",") {
			if strings.TrimSpace(f) == p.name {
				out = append(out, p)
			}
		}
	}
	return out
}

// h2TransportList returns -h2.transports' entries, each "h2c" or "tls".
func h2TransportList(tb testing.TB) []string {
	var out []string
	for f := range strings.SplitSeq(*h2Transports, ",") {
		switch f = strings.TrimSpace(f); f {
		case "h2c", "tls":
			out = append(out, f)
		default:
			tb.Fatalf("-h2.transports: %q is neither h2c nor tls", f)
		}
	}
	return out
}

// start starts the peer in a process of its own on cpu (-1: unpinned),
// over TLS (the test certificate) if useTLS.
func (p h2Peer) start(tb testing.TB, useTLS bool, cpu int) h2Proc {
	tb.Helper()
	switch {
	case p.plain == "":
		return startNghttpd(tb, useTLS, cpu)
	case useTLS:
		return startTLSServer(tb, p.tls, cpu)
	}
	return startServer(tb, p.plain, cpu)
}

// proto is the protocol h2load must report for the peer: "h2c", "h2"
// or "http/1.1".
func (p h2Peer) proto(useTLS bool) string {
	switch {
	case p.h1:
		return "http/1.1"
	case useTLS:
		return "h2"
	}
	return "h2c"
}

// probe checks route's answer on a connection of its own: HTTP/1.1 for
// an h1 peer, else HTTP/2 with prior knowledge or by ALPN.
func (p h2Peer) probe(tb testing.TB, addr string, useTLS bool, route HTTPRoute) error {
	if p.h1 {
		_, err := probeHTTP(addr, useTLS, route)
		return err
	}
	var cfg *tls.Config
	if useTLS {
		cfg = benchClientConfig(tb)
	}
	return probeH2(addr, cfg, route, p.anyType)
}

// h2Row is one load of BenchmarkH2: h2load with conns connections, each
// with streams requests in flight, on one route.
type h2Row struct {
	route          HTTPRoute
	conns, streams int
}

func (r h2Row) String() string {
	return fmt.Sprintf("%s/c=%d/m=%d", strings.TrimPrefix(r.route.Path, "/"), r.conns, r.streams)
}

// h2Rows: many connections with a few streams each (a proxy's or a
// load balancer's fan-in), and few connections with many streams each
// (clients multiplexing, which HTTP/2 is for), on the two small routes.
var h2Rows = []h2Row{
	{RoutePlaintext, 50, 10},
	{RoutePlaintext, 10, 100},
	{RouteJSON, 50, 10},
	{RouteJSON, 10, 100},
}

// BenchmarkH2 measures the HTTP/2 servers (h2Peers) under h2load, each
// server in a process of its own pinned to the first CPU (the Go ones
// with GOMAXPROCS=1, cmd/serve; nghttpd with one worker), h2load -t1
// pinned to the second (it inherits this process's mask, see pinClient).
// For each of -h2.rounds rounds, each transport of -h2.transports (h2c
// with prior knowledge; tls, h2 by ALPN, TLS 1.3 with
// h2loadTLS13Cipher), each row of h2Rows, each server in turn (so that a
// burst of outside load hits one round of every server, not every round
// of one): a fresh server process, a probe that checks the route's
// answer over the protocol (HTTP/2 for all but the HTTP/1.1 reference,
// fasthttp-h1, which h2load drives with --h1 and -m requests pipelined),
// an unmeasured h2load run of h2Warmup, then h2load -D -h2.time. h2load's
// summary must show the protocol wanted, every request a 2xx success
// and the body bytes those of the answers. Each round of a cell is a
// sub-benchmark of its own ("#01", "#02" after the first). It reports:
//
//   - cpu-µs/req: the server's CPU time (utime+stime of the process,
//     its tail until quiet included, connection set-up and the TLS
//     handshakes too) per request h2load completed: the figure that
//     ranks servers when the client core, not the server, is the limit;
//   - req/s: requests over the harness's own wall time around h2load
//     (its start and connects included), and h2load-req/s, h2load's own
//     figure over its measured duration: the two must agree within a few
//     per cent, or the harness measures something else than h2load;
//   - h2load-mean-µs: h2load's mean time per request (it gives no
//     percentiles);
//   - server-util-% and client-util-% (h2load's CPU time over the wall
//     time): a client near 100 % is the limit of req/s, and then only
//     cpu-µs/req compares servers; client-µs/req, h2load's CPU time per
//     request: what the server's way of writing (frames per packet,
//     writes per response) costs the client;
//   - writes/req, reads/req and wbytes/req: the server's read and write
//     system calls (sockets' included; /proc/<pid>/io's syscr, syscw)
//     and the bytes it wrote, per request, over h2load's run: how many
//     answers a write carries;
//   - steal-%: the time the hypervisor took from the two CPUs (see
//     BenchmarkSkew); the report leaves out a cell above 2 %.
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkH2(b *testing.B) {
	if _, err := exec.LookPath("h2load"); err != nil {
		b.Skip("h2load is not installed (Debian: nghttp2-client): skipped")
	}
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	transports := h2TransportList(b)
	peers := h2PeersNamed(func(h2Peer) bool { return true })
	for range *h2Rounds {
		for _, tr := range transports {
			useTLS := tr == "tls"
			for _, row := range h2Rows {
				for _, p := range peers {
					b.Run(tr+"/"+row.String()+"/"+p.name, func(b *testing.B) {
						srv := p.start(b, useTLS, serverCPU)
						defer func() {
							if err := srv.stop(); err != nil {
								b.Error(err)
							}
						}()
						h2loadCell(b, p, srv, useTLS, row, serverCPU, clientCPU)
					})
				}
			}
		}
	}
}

// h2loadArgs returns h2load's arguments for row against srv, load
// ("-D", h2loadDuration(d) or "-n", N) saying how long.
func h2loadArgs(p h2Peer, srv h2Proc, useTLS bool, row h2Row, load ...string) []string {
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	args := append([]string{"-c" + strconv.Itoa(row.conns), "-m" + strconv.Itoa(row.streams)}, load...)
	if p.h1 {
		args = append(args, "--h1")
	}
	return append(args, scheme+"://"+srv.address()+row.route.Path)
}

// h2loadDuration is d as h2load's -D reads it.
func h2loadDuration(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

// h2loadCell is one cell of BenchmarkH2: probe, warm-up, measured run,
// checks and metrics.
func h2loadCell(b *testing.B, p h2Peer, srv h2Proc, useTLS bool, row h2Row, serverCPU, clientCPU int) {
	if err := p.probe(b, srv.address(), useTLS, row.route); err != nil {
		b.Fatal(err)
	}
	proto, bodyLen := p.proto(useTLS), len(row.route.Body)
	warm, err := runH2load(h2loadArgs(p, srv, useTLS, row, "-D", h2loadDuration(h2Warmup))...)
	if err == nil {
		err = warm.check(proto, bodyLen)
	}
	if err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	var r h2loadResult
	var steal time.Duration
	var io0, io1 procIO
	w, err := measure(srv.Pid(), b, func() error {
		s0, err := stealTime(serverCPU, clientCPU)
		if err != nil {
			return err
		}
		if io0, err = readProcIO(srv.Pid()); err != nil {
			return err
		}
		if r, err = runH2load(h2loadArgs(p, srv, useTLS, row, "-D", h2loadDuration(*h2Time))...); err != nil {
			return err
		}
		if io1, err = readProcIO(srv.Pid()); err != nil {
			return err
		}
		s1, err := stealTime(serverCPU, clientCPU)
		steal = s1 - s0
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.check(proto, bodyLen); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(r.done), "cpu-µs/req")
	b.ReportMetric(float64(r.done)/w.wall.Seconds(), "req/s")
	b.ReportMetric(r.rps, "h2load-req/s")
	b.ReportMetric(float64(r.reqMean.Nanoseconds())/1e3, "h2load-mean-µs")
	b.ReportMetric(100*steal.Seconds()/w.wall.Seconds(), "steal-%")
	b.ReportMetric(100*w.serverCPU.Seconds()/w.wall.Seconds(), "server-util-%")
	b.ReportMetric(100*r.cpu.Seconds()/w.wall.Seconds(), "client-util-%")
	b.ReportMetric(r.cpu.Seconds()*1e6/float64(r.done), "client-µs/req")
	b.ReportMetric(float64(io1.syscw-io0.syscw)/float64(r.done), "writes/req")
	b.ReportMetric(float64(io1.syscr-io0.syscr)/float64(r.done), "reads/req")
	b.ReportMetric(float64(io1.wchar-io0.wchar)/float64(r.done), "wbytes/req")
}

// procIO is the I/O accounting of a process (/proc/<pid>/io): its read
// and write system calls (sockets included) and the bytes they moved.
type procIO struct {
	syscr, syscw, rchar, wchar int64
}

// readProcIO reads /proc/<pid>/io.
func readProcIO(pid int) (procIO, error) {
	var io procIO
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return io, err
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return io, fmt.Errorf("/proc/%d/io: %q", pid, line)
		}
		switch k {
		case "syscr":
			io.syscr = n
		case "syscw":
			io.syscw = n
		case "rchar":
			io.rchar = n
		case "wchar":
			io.wchar = n
		}
	}
	return io, nil
}

// httpdH2 says whether httpd serves HTTP/2: its h2c server answers
// the preface in HTTP/2. Asked once per test binary.
var httpdH2 struct {
	once sync.Once
	ok   bool
	err  error
}

// skipUnlessHTTPDSpeaksH2 skips tb, saying so, while httpd does not
// serve HTTP/2 (httpd-h2c answers the preface in HTTP/1.1; ALPN is no
// sign: httpd offered "h2" before it spoke it): the tests of the HTTP/2
// harness run on the peers meanwhile, and on httpd as soon as it serves
// HTTP/2, with no change here.
func skipUnlessHTTPDSpeaksH2(tb testing.TB) {
	tb.Helper()
	httpdH2.once.Do(func() {
		srv := startServer(tb, "httpd-h2c", -1)
		defer srv.stop()
		c, err := h2Dial(srv.addr, nil)
		if err != nil {
			httpdH2.err = err
			return
		}
		defer c.Close()
		_, _, err = h2Get(c, "http", srv.addr, RoutePlaintext)
		httpdH2.ok = !errors.Is(err, errH2AnsweredH1)
	})
	if httpdH2.err != nil {
		tb.Fatal(httpdH2.err)
	}
	if !httpdH2.ok {
		tb.Skip("httpd answers the HTTP/2 preface in HTTP/1.1: it does not serve HTTP/2 yet; skipped")
	}
}

// TestH2Servers checks every peer of the HTTP/2 benchmarks in its own
// process, h2c and over TLS: each route's answer byte for byte over the
// protocol the benchmarks use, then, with h2load installed, a short
// h2load run of each row's shape whose summary must pass the benchmark's
// checks.
func TestH2Servers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	_, h2loadErr := exec.LookPath("h2load")
	for _, p := range h2Peers {
		for _, useTLS := range []bool{false, true} {
			tr := "h2c"
			if useTLS {
				tr = "tls"
			}
			t.Run(tr+"/"+p.name, func(t *testing.T) {
				if p.name == "httpd" {
					skipUnlessHTTPDSpeaksH2(t)
				}
				srv := p.start(t, useTLS, -1)
				defer func() {
					if err := srv.stop(); err != nil {
						t.Error(err)
					}
				}()
				for _, route := range []HTTPRoute{RoutePlaintext, RouteJSON} {
					if err := p.probe(t, srv.address(), useTLS, route); err != nil {
						t.Fatal(err)
					}
				}
				if h2loadErr != nil {
					t.Log("h2load is not installed (Debian: nghttp2-client): its runs skipped")
					return
				}
				for _, row := range h2Rows {
					r, err := runH2load(h2loadArgs(p, srv, useTLS, row, "-n", "2000")...)
					if err == nil {
						err = r.check(p.proto(useTLS), len(row.route.Body))
					}
					if err != nil {
						t.Fatalf("%s: %v", row, err)
					}
					if r.done != 2000 {
						t.Errorf("%s: h2load did %d requests, want 2000", row, r.done)
					}
				}
			})
		}
	}
}

// TestParseH2load checks parseH2load and h2loadResult.check on h2load
// 1.52's summary.
func TestParseH2load(t *testing.T) {
	const out = `starting benchmark...
spawning thread #0: 50 total client(s). Timing-based test with 0s of warm-up time and 3s of main duration for measurements.
Application protocol: h2c

finished in 3.00s, 322983.33 req/s, 12.63MB/s
requests: 968950 total, 969450 started, 968950 done, 968950 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 968950 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 37.89MB (39735250) total, 9.25MB (9696600) headers (space savings 93.50%), 12.01MB (12596350) data
                     min         max         mean         sd        +/- sd
time for request:      115us     36.03ms      1.45ms      1.12ms    95.08%
`
	r, err := parseH2load(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.proto != "h2c" || r.duration != 3*time.Second || r.rps != 322983.33 || r.done != 968950 ||
		r.started != 969450 || r.status2xx != 968950 || r.data != 12596350 || r.reqMean != 1450*time.Microsecond {
		t.Errorf("parsed %+v", r)
	}
	if err := r.check("h2c", 13); err != nil {
		t.Error(err)
	}
	for _, bad := range []func(*h2loadResult){
		func(r *h2loadResult) { r.proto = "http/1.1" },
		func(r *h2loadResult) { r.errored = 1 },
		func(r *h2loadResult) { r.succeeded-- },
		func(r *h2loadResult) { r.status2xx-- },
		func(r *h2loadResult) { r.status2xx = r.started + 1 },
		func(r *h2loadResult) { r.data-- },
		func(r *h2loadResult) { r.data = r.started*13 + 1 },
		func(r *h2loadResult) { r.done = 0 },
	} {
		c := r
		bad(&c)
		if err := c.check("h2c", 13); err == nil {
			t.Errorf("%+v passed", c)
		}
	}
	if _, err := parseH2load("starting benchmark...\n"); err == nil {
		t.Error("no summary parsed")
	}
}
