//go:build linux

package peers

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/examples/kv/resp"
)

// The redis-benchmark rows: -t ping,set,get (PING_INLINE, PING_MBULK, SET,
// GET), each run on its own so that the server's CPU time is per test, at
// -c 50 and 500 and -P 1 and 16.
var (
	kvClients   = []int{50, 500}
	kvPipelines = []int{1, 16}
	kvTests     = []string{"PING_INLINE", "PING_MBULK", "SET", "GET"}
	kvRequests  = flag.Int("kv.n", 10000, "BenchmarkKV: requests per redis-benchmark run at -P 1 (ten times as many at -P 16)")
)

// BenchmarkKV runs redis-benchmark against examples/kv's command code
// (examples/kv/resp and examples/kv/store) served three ways: by
// examples/kv's own conn.Handler (kv-conn), by net with a goroutine per
// connection (kv-net) and by gnet v2 (kv-gnet). Each server runs in a
// process of its own pinned to one CPU with GOMAXPROCS=1; redis-benchmark
// runs pinned to the other CPU. Every b.N iteration is one run of
// redis-benchmark -q -t TEST -c C -P P -n N (-kv.n at -P 1, ten times as
// many at -P 16); run it with -benchtime=1x. It reports:
//
//   - req/s: redis-benchmark's requests per second.
//   - server-cpu-µs/req: the server process's CPU time over the run, its
//     tail until it is quiet included, per request.
//   - server-util-%: that CPU time over the run's wall time.
//
// redis-benchmark does not check replies beyond errors: its output must
// hold no error, and after each run a Go client checks PING, the value
// redis-benchmark SETs (3 bytes under key:__rand_int__) and a SET/GET of its
// own. Without redis-benchmark (Debian: apt-get install redis-tools) the
// benchmark is skipped, saying so.
func BenchmarkKV(b *testing.B) {
	rb, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark is not installed (Debian: apt-get install redis-tools): the kv comparison is skipped")
	}
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	servers := OfKind("kv")
	procs := make([]*child, len(servers))
	for i, s := range servers {
		procs[i] = startServer(b, s.Name, serverCPU)
	}
	defer func() {
		for _, c := range procs {
			if err := c.stop(); err != nil {
				b.Error(err)
			}
		}
	}()
	for _, c := range kvClients {
		for _, p := range kvPipelines {
			for _, test := range kvTests {
				for i, s := range servers {
					srv := procs[i]
					b.Run(fmt.Sprintf("c=%d/P=%d/%s/%s", c, p, test, s.Name), func(b *testing.B) {
						n := *kvRequests
						if p > 1 {
							n *= 10
						}
						kvRow(b, srv, func() (float64, error) {
							return redisBenchmark(rb, srv.addr, test, c, p, n)
						}, n, func() error { return kvCheck(srv.addr, test == "SET") })
					})
				}
			}
		}
	}
}

// kvRow is one row of BenchmarkKV: b.N runs of run, one run of
// redis-benchmark of n requests against srv that returns its requests
// per second, each measured (the server's CPU time until it is quiet)
// and followed by check. It reports req/s (the last run's),
// server-cpu-µs/req and server-util-%.
func kvRow(b *testing.B, srv *child, run func() (float64, error), n int, check func() error) {
	var rps float64
	var total window
	b.ResetTimer()
	for range b.N {
		w, err := measure(srv.Pid(), b, func() (err error) {
			rps, err = run()
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := check(); err != nil {
			b.Fatal(err)
		}
		total.serverCPU += w.serverCPU
		total.clientCPU += w.clientCPU
		total.wall += w.wall
	}
	b.ReportMetric(rps, "req/s")
	b.ReportMetric(total.serverCPU.Seconds()*1e6/float64(b.N*n), "server-cpu-µs/req")
	b.ReportMetric(100*total.serverCPU.Seconds()/total.wall.Seconds(), "server-util-%")
}

// redisBenchmark runs redis-benchmark (path rb) -q for one test against
// addr, with extra arguments (such as --tls) after the others, and returns
// its requests per second.
func redisBenchmark(rb, addr, test string, clients, pipeline, n int, extra ...string) (float64, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	args := []string{"-h", host, "-p", port, "-q", "-t", strings.ToLower(test),
		"-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline), "-n", strconv.Itoa(n)}
	args = append(args, extra...)
	out, err := exec.Command(rb, args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return parseRedisBenchmark(string(out), test)
}

// parseRedisBenchmark finds "TEST: N requests per second" in the output of
// redis-benchmark -q, whose progress lines end in carriage returns, and
// fails on any error it printed.
func parseRedisBenchmark(out, test string) (float64, error) {
	rps := -1.0
	for line := range strings.SplitSeq(strings.ReplaceAll(out, "\r", "\n"), "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "ERR") || strings.HasPrefix(line, "Error") || strings.Contains(line, "error") {
			return 0, fmt.Errorf("redis-benchmark reported an error: %q", line)
		}
		rest, ok := strings.CutPrefix(line, test+": ")
		if !ok || !strings.Contains(rest, "requests per second") {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("redis-benchmark: %q: %v", line, err)
		}
		rps = v
	}
	if rps < 0 {
		return 0, fmt.Errorf("redis-benchmark printed no %q result:\n%s", test, out)
	}
	return rps, nil
}

// kvCheck checks a kv server's replies with a Go client: PING, a SET and
// GET of a value of its own, and, if setDone, the value redis-benchmark's
// SET test stores (3 bytes under key:__rand_int__).
func kvCheck(addr string, setDone bool) error {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return err
	}
	return kvCheckOn(c, setDone)
}

// kvCheckOn is kvCheck on a connection of the caller's, which it closes.
func kvCheckOn(c net.Conn, setDone bool) error {
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	r := bufio.NewReader(c)
	val := fmt.Sprintf("v-%d", time.Now().UnixNano())
	var req []byte
	req = resp.AppendCommand(req, "PING")
	req = resp.AppendCommand(req, "SET", "peers:check", val)
	req = resp.AppendCommand(req, "GET", "peers:check")
	want := []string{"PONG", "OK", val}
	if setDone {
		req = resp.AppendCommand(req, "GET", "key:__rand_int__")
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	for i, w := range want {
		v, err := resp.ReadValue(r)
		if err != nil {
			return fmt.Errorf("kv check, reply %d: %w", i+1, err)
		}
		if v.Kind == '-' || v.Null || v.Str != w {
			return fmt.Errorf("kv check, reply %d: %v, want %q", i+1, v, w)
		}
	}
	if setDone {
		// redis-benchmark's SET stores -d bytes (3 by default) of its own
		// choosing ("xxx" in older versions, "VXK" in 7.x).
		v, err := resp.ReadValue(r)
		if err != nil {
			return fmt.Errorf("kv check, GET key:__rand_int__: %w", err)
		}
		if v.Kind != '$' || v.Null || len(v.Str) != 3 {
			return fmt.Errorf("kv check, GET key:__rand_int__ after redis-benchmark's SET: %v, want 3 bytes", v)
		}
	}
	return nil
}

// TestKVServers checks every kv server with the Go client, and
// redis-benchmark's output parser.
func TestKVServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, s := range OfKind("kv") {
		t.Run(s.Name, func(t *testing.T) {
			srv := startServer(t, s.Name, -1)
			defer srv.stop()
			if err := kvCheck(srv.addr, false); err != nil {
				t.Error(err)
			}
			// Many pipelined commands in one write, replies checked in
			// order: the server's loop over its buffer.
			c, err := net.Dial("tcp", srv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(ioTimeout))
			var req []byte
			for i := range 2000 {
				req = resp.AppendCommand(req, "SET", fmt.Sprintf("k%d", i), strings.Repeat("v", i))
				req = resp.AppendCommand(req, "GET", fmt.Sprintf("k%d", i))
			}
			go c.Write(req)
			r := bufio.NewReader(c)
			for i := range 2000 {
				ok, err1 := resp.ReadValue(r)
				v, err2 := resp.ReadValue(r)
				if err1 != nil || err2 != nil || ok.Str != "OK" || v.Str != strings.Repeat("v", i) || (i == 0) != (v.Str == "") {
					t.Fatalf("command %d: %v %v, %v %v", i, ok, err1, len(v.Str), err2)
				}
			}
		})
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Log("redis-benchmark is not installed: BenchmarkKV will skip")
	}
	out := " PING_INLINE: rps=0.0 (overall: -nan) avg_msec=-nan (overall: -nan)\r   \rPING_INLINE: 98039.22 requests per second, p50=0.263 msec\n\n"
	if v, err := parseRedisBenchmark(out, "PING_INLINE"); err != nil || v != 98039.22 {
		t.Errorf("parse: %v, %v", v, err)
	}
	if _, err := parseRedisBenchmark("SET: 1.0 requests per second\n", "GET"); err == nil {
		t.Error("parse: a missing test accepted")
	}
	if _, err := parseRedisBenchmark("Error from server: ERR unknown command\nGET: 10.0 requests per second\n", "GET"); err == nil {
		t.Error("parse: an error accepted")
	}
}
