//go:build linux

package peers

import (
	"bufio"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The HTTP benchmarks' flags.
var (
	httpTime   = flag.Duration("http.time", 5*time.Second, "HTTP benchmarks: the measured load of each cell, server and round")
	httpRounds = flag.Int("http.rounds", 3, "BenchmarkHTTP and BenchmarkHTTPOpenLoop: rounds, each running every cell with every server in turn")
	httpOnly   = flag.String("http.servers", "", "HTTP benchmarks: only these servers, comma-separated (default: every server of the kind)")
)

// httpWarmup is an unmeasured load before each cell: every connection
// accepted and served, the server's buffers and pools grown. wrk's -d
// counts whole seconds.
const httpWarmup = time.Second

// httpRow is one row of BenchmarkHTTP: wrk with conns connections, each
// with pipeline requests in flight (1: no pipelining), on one route.
type httpRow struct {
	name     string
	route    HTTPRoute
	conns    int
	pipeline int
}

// httpRows are BenchmarkHTTP's rows. The pipelined row is wrk with a
// script that writes 16 requests at once (wrkPipelineScript), not h2load
// --h1 -m16: the same client as the other rows, whose counts (requests,
// bytes, errors) come from the same script, and whose one thread drove
// more requests per second than h2load's on this machine; wrk reports
// latency per batch of 16 then, so the row compares CPU per request.
var httpRows = []httpRow{
	{"plaintext/c=50", RoutePlaintext, 50, 1},
	{"plaintext/c=500", RoutePlaintext, 500, 1},
	{"plaintext/c=256/pipeline=16", RoutePlaintext, 256, 16},
	{"json/c=50", RouteJSON, 50, 1},
}

// httpServers returns the servers of kind, less those -http.servers
// leaves out.
func httpServers(kind string) []Named { return serversNamed(kind, *httpOnly) }

// serversNamed returns the servers of kind named in only, a
// comma-separated list, or all of them if only is empty.
func serversNamed(kind, only string) []Named {
	all := OfKind(kind)
	if only == "" {
		return all
	}
	var out []Named
	for _, s := range all {
		for f := range strings.SplitSeq(only, ",") {
			if strings.TrimSpace(f) == s.Name {
				out = append(out, s)
			}
		}
	}
	return out
}

// BenchmarkHTTP measures each HTTP server (Kind "http") under wrk, the
// server in a process of its own pinned to the first CPU with
// GOMAXPROCS=1 (cmd/serve), wrk -t1 pinned to the second CPU (it inherits
// this process's mask, see pinClient). For each of -http.rounds rounds,
// each row of httpRows, each server in turn (so a burst of outside load
// hits one round of every server, not every round of one): a fresh
// server process, a probe that checks the route's answer and measures its
// length on the wire, an unmeasured wrk warm-up (httpWarmup), then wrk for
// -http.time. wrk's own summary (wrkReportScript) must show no socket
// error, no non-2xx response and as many bytes read as its requests'
// responses (each the probe's length, one partial response per
// connection allowed at the end). Each round of a cell is a sub-benchmark
// of its own ("#01", "#02" after the first). It reports:
//
//   - cpu-µs/req: the server's CPU time (utime+stime of the process,
//     its tail until quiet included) per request: the figure that ranks
//     servers when the single wrk thread, not the server, is the limit;
//   - req/s: requests over wrk's duration;
//   - wrk-p50-µs, wrk-p99-µs: wrk's latency percentiles (per batch of 16
//     in the pipelined row);
//   - steal-%: the time the hypervisor took from the two CPUs over the
//     cell (see BenchmarkSkew): a cell above 2 % lost CPU whatever the
//     server did, and the report leaves it out;
//   - server-util-% and client-util-% (wrk's CPU time over the wall
//     time): a client near 100 % is the limit of req/s.
//
// The measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkHTTP(b *testing.B) {
	if _, err := exec.LookPath("wrk"); err != nil {
		b.Skip("wrk is not installed (Debian: wrk): skipped")
	}
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	for range *httpRounds {
		for _, row := range httpRows {
			for _, s := range httpServers("http") {
				b.Run(row.name+"/"+s.Name, func(b *testing.B) {
					srv := startServer(b, s.Name, serverCPU)
					defer func() {
						if err := srv.stop(); err != nil {
							b.Error(err)
						}
					}()
					wrkCell(b, srv, "http", row, serverCPU, clientCPU)
				})
			}
		}
	}
}

// wrkCell is one cell of BenchmarkHTTP (scheme "http") or of
// BenchmarkHTTPTLS's keep-alive rows ("https") against srv: probe,
// warm-up, measured run, checks and metrics.
func wrkCell(b *testing.B, srv *child, scheme string, row httpRow, serverCPU, clientCPU int) {
	want, err := probeHTTP(srv.addr, scheme == "https", row.route)
	if err != nil {
		b.Fatal(err)
	}
	url := scheme + "://" + srv.addr + row.route.Path
	if _, err := runWrk(url, row.conns, row.pipeline, httpWarmup); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	var r wrkResult
	var steal time.Duration
	w, err := measure(srv.Pid(), b, func() error {
		s0, err := stealTime(serverCPU, clientCPU)
		if err != nil {
			return err
		}
		if r, err = runWrk(url, row.conns, row.pipeline, *httpTime); err != nil {
			return err
		}
		s1, err := stealTime(serverCPU, clientCPU)
		steal = s1 - s0
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.check(want, row.conns); err != nil {
		b.Fatalf("%s: %v", url, err)
	}
	b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(r.requests), "cpu-µs/req")
	b.ReportMetric(float64(r.requests)/r.duration.Seconds(), "req/s")
	b.ReportMetric(r.p50.Seconds()*1e6, "wrk-p50-µs")
	b.ReportMetric(r.p99.Seconds()*1e6, "wrk-p99-µs")
	b.ReportMetric(100*steal.Seconds()/w.wall.Seconds(), "steal-%")
	b.ReportMetric(100*w.serverCPU.Seconds()/w.wall.Seconds(), "server-util-%")
	b.ReportMetric(100*r.cpu.Seconds()/w.wall.Seconds(), "client-util-%")
}

// probeHTTP sends route's request to addr on a connection of its own
// (over TLS if tls, with the benchmarks' client configuration but no
// certificate check: only the bytes are probed), checks the answer
// (HTTPRoute.Check) and returns its length on the wire, which is the same
// for every response of this server to this request (the Date header's
// length does not change).
func probeHTTP(addr string, useTLS bool, route HTTPRoute) (int, error) {
	var c net.Conn
	var err error
	if useTLS {
		c, err = tlsDial(addr, &tls.Config{InsecureSkipVerify: true})
	} else {
		c, err = net.DialTimeout("tcp", addr, ioTimeout)
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	r, err := roundTripHTTP(c, route.Request(addr), make([]byte, 0, 4096))
	if err != nil {
		return 0, fmt.Errorf("probe GET %s: %w", route.Path, err)
	}
	if err := route.Check(r); err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	return r.Len, nil
}

// roundTripHTTP writes req on c and reads one response into buf (grown
// as needed), which must be all that arrives: a byte more is a response
// to nothing.
func roundTripHTTP(c net.Conn, req, buf []byte) (HTTPResponse, error) {
	if _, err := c.Write(req); err != nil {
		return HTTPResponse{}, err
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		r, perr := ParseHTTPResponse(buf)
		switch {
		case perr == nil && r.Len != len(buf):
			return r, fmt.Errorf("%d bytes after the response", len(buf)-r.Len)
		case perr == nil:
			return r, nil
		case perr != errIncomplete:
			return r, perr
		case err == io.EOF:
			return r, fmt.Errorf("connection closed after %d bytes of a response", len(buf))
		case err != nil:
			return r, err
		}
	}
}

// The wrk scripts, written once into the launcher's directory. The
// report script's done() prints wrk's summary as exact counts on one line
// (wrk's own text rounds the bytes to two decimals of a unit); the
// pipeline script adds a request() that writes 16 requests at once, which
// wrk counts as 16 and answers as 16 responses.
const (
	wrkReportScript = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("gracepoll-wrk requests=%d bytes=%d duration-us=%d connect=%d read=%d write=%d status=%d timeout=%d p50-us=%d p99-us=%d\n",
    summary.requests, summary.bytes, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`
	wrkPipelineScript = `local depth = tonumber(os.getenv("GRACEPOLL_WRK_PIPELINE"))
init = function(args)
  local r = {}
  for i = 1, depth do r[i] = wrk.format() end
  req = table.concat(r)
end
request = function() return req end
` + wrkReportScript
)

var wrkScripts struct {
	once             sync.Once
	report, pipeline string
	err              error
}

// wrkScriptFiles writes the wrk scripts, once, and returns their paths.
func wrkScriptFiles() (report, pipeline string, err error) {
	wrkScripts.once.Do(func() {
		if _, wrkScripts.err = buildLauncher(); wrkScripts.err != nil {
			return
		}
		wrkScripts.report = filepath.Join(launcher.dir, "report.lua")
		wrkScripts.pipeline = filepath.Join(launcher.dir, "pipeline.lua")
		if wrkScripts.err = os.WriteFile(wrkScripts.report, []byte(wrkReportScript), 0o644); wrkScripts.err != nil {
			return
		}
		wrkScripts.err = os.WriteFile(wrkScripts.pipeline, []byte(wrkPipelineScript), 0o644)
	})
	return wrkScripts.report, wrkScripts.pipeline, wrkScripts.err
}

// wrkResult is wrk's summary of one run.
type wrkResult struct {
	requests, bytes int64
	errors          map[string]int64 // connect, read, write, status (non-2xx/3xx), timeout
	duration        time.Duration    // wrk's own
	p50, p99        time.Duration
	cpu             time.Duration // wrk's CPU time
}

// runWrk runs wrk -t1 against url with conns connections for d (rounded
// to whole seconds, at least one), each
// connection pipelining pipeline requests (1: none), and returns its
// summary. wrk inherits this process's CPU mask: the client's CPU.
func runWrk(url string, conns, pipeline int, d time.Duration) (wrkResult, error) {
	report, pipe, err := wrkScriptFiles()
	if err != nil {
		return wrkResult{}, err
	}
	script := report
	if pipeline > 1 {
		script = pipe
	}
	secs := max(int((d+time.Second/2)/time.Second), 1) // wrk's -d: whole seconds
	args := []string{"-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(secs) + "s", "--timeout", "10s", "-s", script, url}
	cmd := exec.Command("wrk", args...)
	cmd.Env = append(os.Environ(), "GRACEPOLL_WRK_PIPELINE="+strconv.Itoa(pipeline))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return r, fmt.Errorf("wrk %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// parseWrk reads the report script's line from wrk's output.
func parseWrk(out string) (wrkResult, error) {
	r := wrkResult{errors: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "gracepoll-wrk ")
		if !ok {
			continue
		}
		for kv := range strings.FieldsSeq(rest) {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return r, fmt.Errorf("%q in %q", kv, sc.Text())
			}
			switch k {
			case "requests":
				r.requests = n
			case "bytes":
				r.bytes = n
			case "duration-us":
				r.duration = time.Duration(n) * time.Microsecond
			case "p50-us":
				r.p50 = time.Duration(n) * time.Microsecond
			case "p99-us":
				r.p99 = time.Duration(n) * time.Microsecond
			default:
				r.errors[k] = n
			}
		}
		if r.duration <= 0 {
			return r, errors.New("no duration in wrk's summary")
		}
		return r, nil
	}
	return r, errors.New("no summary line from the report script")
}

// check verifies wrk's counts: no error of any kind, at least one
// request, and the bytes read those of the requests' responses, each
// respLen long, plus at most one partial response per connection (a run
// ends mid-response).
func (r wrkResult) check(respLen, conns int) error {
	for k, n := range r.errors {
		if n != 0 {
			return fmt.Errorf("wrk counted %d %s errors (%v)", n, k, r.errors)
		}
	}
	if r.requests == 0 {
		return errors.New("wrk completed no request")
	}
	lo, hi := r.requests*int64(respLen), (r.requests+int64(conns))*int64(respLen)
	if r.bytes < lo || r.bytes >= hi {
		return fmt.Errorf("wrk read %d bytes for %d responses of %d bytes (want %d to %d)", r.bytes, r.requests, respLen, lo, hi-1)
	}
	return nil
}

// TestHTTPServers checks that every HTTP server, in its own process,
// answers each route with the comparison's bytes (HTTPRoute.Check), two
// requests on one keep-alive connection, the second pipelined behind
// the first, /sleep after its sleep.
func TestHTTPServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, s := range append(OfKind("http"), OfKind("tls-http")...) {
		t.Run(s.Name, func(t *testing.T) {
			useTLS := s.StartTLS != nil
			var srv *child
			if useTLS {
				srv = startTLSServer(t, s.Name, -1)
			} else {
				srv = startServer(t, s.Name, -1)
			}
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			for _, route := range []HTTPRoute{RoutePlaintext, RouteJSON, RouteSleep(20)} {
				if _, err := probeHTTP(srv.addr, useTLS, route); err != nil {
					t.Fatal(err)
				}
			}
			var c net.Conn
			var err error
			if useTLS {
				c, err = tlsDial(srv.addr, &tls.Config{InsecureSkipVerify: true})
			} else {
				c, err = net.DialTimeout("tcp", srv.addr, ioTimeout)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(ioTimeout))
			two := append(RouteSleep(20).Request(srv.addr), RouteJSON.Request(srv.addr)...)
			t0 := time.Now()
			if _, err := c.Write(two); err != nil {
				t.Fatal(err)
			}
			var buf []byte
			tmp := make([]byte, 4096)
			for _, route := range []HTTPRoute{RouteSleep(20), RouteJSON} {
				for {
					r, err := ParseHTTPResponse(buf)
					if err == nil {
						if err := route.Check(r); err != nil {
							t.Fatal(err)
						}
						buf = buf[r.Len:]
						break
					}
					if err != errIncomplete {
						t.Fatal(err)
					}
					n, err := c.Read(tmp)
					if err != nil {
						t.Fatalf("after %q: %v", buf, err)
					}
					buf = append(buf, tmp[:n]...)
				}
			}
			if el := time.Since(t0); el < 20*time.Millisecond {
				t.Errorf("answers after %v, before /sleep's 20 ms", el)
			}
		})
	}
}

// TestWrkCheck checks wrkResult.check's verdicts.
func TestWrkCheck(t *testing.T) {
	ok := wrkResult{requests: 100, bytes: 100*50 + 20, errors: map[string]int64{"read": 0}}
	if err := ok.check(50, 10); err != nil {
		t.Errorf("a run with one partial response: %v", err)
	}
	for _, bad := range []wrkResult{
		{requests: 100, bytes: 100*50 - 1},
		{requests: 100, bytes: 110 * 50},
		{requests: 0, bytes: 0},
		{requests: 100, bytes: 100 * 50, errors: map[string]int64{"status": 1}},
	} {
		if err := bad.check(50, 10); err == nil {
			t.Errorf("%+v passed", bad)
		}
	}
	r, err := parseWrk("Running 1s test\ngracepoll-wrk requests=10 bytes=1000 duration-us=1000000 connect=0 read=1 write=0 status=0 timeout=0 p50-us=40 p99-us=90\n")
	if err != nil || r.requests != 10 || r.bytes != 1000 || r.errors["read"] != 1 || r.p99 != 90*time.Microsecond {
		t.Errorf("parseWrk: %+v, %v", r, err)
	}
}
