package main

import (
	"fmt"
	"strings"
	"testing"
)

const httpSample = `pkg: github.com/gracepoll/gracepoll/bench/peers
BenchmarkHTTP/plaintext/c=50/httpd-2         	1	5000000000 ns/op	 50 client-util-%	 8 cpu-µs/req	 60000 req/s	 48 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/fasthttp-2      	1	5000000000 ns/op	 90 client-util-%	 5 cpu-µs/req	 150000 req/s	 75 server-util-%	 0.5 steal-%	 300 wrk-p50-µs	 700 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/nbio-2          	1	5000000000 ns/op	 40 client-util-%	 10 cpu-µs/req	 90000 req/s	 90 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=256/pipeline=16/httpd-2    	1	5000000000 ns/op	 50 client-util-%	 3 cpu-µs/req	 300000 req/s	 90 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=256/pipeline=16/fasthttp-2 	1	5000000000 ns/op	 50 client-util-%	 1.2 cpu-µs/req	 800000 req/s	 96 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/httpd#01-2      	1	5000000000 ns/op	 50 client-util-%	 9 cpu-µs/req	 60000 req/s	 48 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/fasthttp#01-2   	1	5000000000 ns/op	 90 client-util-%	 6 cpu-µs/req	 150000 req/s	 75 server-util-%	 1 steal-%	 300 wrk-p50-µs	 700 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/nbio#01-2       	1	5000000000 ns/op	 40 client-util-%	 9 cpu-µs/req	 90000 req/s	 90 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/httpd#02-2      	1	5000000000 ns/op	 50 client-util-%	 30 cpu-µs/req	 20000 req/s	 48 server-util-%	 5 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/fasthttp#02-2   	1	5000000000 ns/op	 90 client-util-%	 5 cpu-µs/req	 150000 req/s	 75 server-util-%	 0 steal-%	 300 wrk-p50-µs	 700 wrk-p99-µs
BenchmarkHTTP/plaintext/c=50/nbio#02-2       	1	5000000000 ns/op	 40 client-util-%	 10 cpu-µs/req	 90000 req/s	 90 server-util-%	 0 steal-%	 500 wrk-p50-µs	 900 wrk-p99-µs
BenchmarkHTTPIdleMemory/conns=10000/httpd-2  	1	400000000 ns/op	 0.0001 goroutines/conn	 1200 heap-B/conn	 1400 rss-B/conn
BenchmarkHTTPIdleMemory/conns=10000/nbio-2   	1	600000000 ns/op	 0 goroutines/conn	 1000 heap-B/conn	 1500 rss-B/conn
BenchmarkHTTPIdleMemory/conns=10000/net/http-2	1	600000000 ns/op	 1 goroutines/conn	 10000 heap-B/conn	 19600 rss-B/conn
--- SKIP: BenchmarkHTTPIdleMemory/conns=1000/hertz
    memory_test.go:70: 1000 connections need about 1256 open files on each side; RLIMIT_NOFILE is 1024 (hard 1024): skipped
BenchmarkHTTPOpenLoop/none/httpd-2           	1	2000000000 ns/op	 20 client-util-%	 29 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 100 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/none/fasthttp-2        	1	2000000000 ns/op	 20 client-util-%	 22 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 30 light-p50-µs	 80 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 22 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/none/httpd#01-2        	1	2000000000 ns/op	 20 client-util-%	 29 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 900 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 400 send-lag-p99-µs	 29 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/none/fasthttp#01-2     	1	2000000000 ns/op	 20 client-util-%	 22 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 30 light-p50-µs	 70 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 22 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/p=2%/D=5ms/httpd-2     	1	2000000000 ns/op	 20 client-util-%	 29 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 300 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 200 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/p=2%/D=5ms/fasthttp-2  	1	2000000000 ns/op	 20 client-util-%	 22 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 30 light-p50-µs	 100 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 22 server-util-%	 200 slow-reqs	 0 steal-%
BenchmarkHTTPTLS/handshake/httpd-tls-2       	1	2000000000 ns/op	 50 client-util-%	 500 cpu-µs/handshake	 700 handshakes/s	 40 server-util-%	 0 steal-%
BenchmarkHTTPTLS/handshake/net/http-tls-2    	1	2000000000 ns/op	 50 client-util-%	 600 cpu-µs/handshake	 600 handshakes/s	 40 server-util-%	 0 steal-%
BenchmarkHTTPTLS/keepalive/c=50/httpd-tls-2  	1	5000000000 ns/op	 50 client-util-%	 17 cpu-µs/req	 21000 req/s	 40 server-util-%	 0 steal-%	 1000 wrk-p50-µs	 4000 wrk-p99-µs
`

// TestRenderHTTP checks the HTTP section: later rounds ("#01") folded into
// their cell, a disturbed round (steal, or an open-loop client's send lag)
// left out of medians and paired ratios, the ratio tables and every
// target's verdict.
func TestRenderHTTP(t *testing.T) {
	r, err := parse(strings.NewReader(httpSample))
	if err != nil {
		t.Fatal(err)
	}
	if n := r.runs("BenchmarkHTTP/plaintext/c=50/httpd", "cpu-µs/req"); n != 3 {
		t.Fatalf("httpd at c=50: %d rounds, want 3 (#01 and #02 folded in)", n)
	}
	var b strings.Builder
	ts := renderHTTP(&b, r)
	// The targets as the report's Targets table shows them.
	for _, tg := range ts {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", tg.what, tg.measured, verdict(tg.ok))
	}
	out := b.String()
	for _, want := range []string{
		// httpd's third round lost 5 % to steal: 8 and 9 are kept.
		"| plaintext/c=50 | gracepoll httpd | 8.50 (8.00–9.00) | 60000 (60000–60000) | 48.0 | 50.0 | 0.00 | 2 of 3 |",
		"| plaintext/c=50 | fasthttp v1.78.0 | 5.00 (5.00–6.00) | 150000 (150000–150000) | 75.0 | 90.0 | 1.00 | 3 of 3 |",
		// paired over rounds 1 and 2: 8/5, 9/6 and 8/10, 9/9.
		"| plaintext/c=50 | 1.55x (1.50–1.60x) | 0.40x (0.40–0.40x) | 0.89x (0.80–1.00x) | 0.67x (0.67–0.67x) |",
		"| plaintext/c=256/pipeline=16 | 2.50x | 0.38x | – | – |",
		"HTTP plaintext, 50 connections: httpd CPU per request <= nbio's | 0.89x (0.80–1.00x) of nbio's | **met**",
		"HTTP plaintext, 50 connections: httpd CPU per request <= 1.5x fasthttp's | 1.55x (1.50–1.60x) of fasthttp's | **missed**",
		"HTTP plaintext, 50 connections (moonshot): httpd CPU per request <= fasthttp's | 1.55x (1.50–1.60x) of fasthttp's | **missed**",
		"HTTP plaintext, 256 connections, 16 pipelined: httpd CPU per request <= 3x fasthttp's | 2.50x of fasthttp's | **met**",
		"| 10000 | gracepoll httpd | 1400 | (base) | 1200 | 0.00 |",
		"| 10000 | nbio nbhttp v1.6.8 | 1500 | 1.07x | 1000 | 0.00 |",
		"| 10000 | net/http | 19600 | 14.00x | 10000 | 1.00 |",
		"| 1000 | hertz v0.10.4 | skipped: 1000 connections need about 1256 open files",
		"HTTP idle keep-alive connection at 10,000: httpd RSS <= nbio's, with no goroutine per connection | 1400 B vs nbio 1500 B (0.93x), 0.00 goroutines/conn | **met**",
		// httpd's second open-loop round sent 400 µs late: left out.
		"| none | gracepoll httpd | 40.0 | 100 | 2000 | 3000 | 10000 | 29.0 | 0.00 | 20.0 | 1 of 2 |",
		"| none | 1.33x | 1.25x | – | – |",
		"HTTP open loop, every request light: httpd light p99 <= 1.5x fasthttp's | 1.25x of fasthttp's | **met**",
		"HTTP open loop, 2 % of handlers sleep 5 ms: httpd light p99 <= 1.5x fasthttp's | 3.00x of fasthttp's | **missed**",
		"| handshake | gracepoll httpd + crypto/tls | 700 | 500 | 0.83x | 0.00 | 1 of 1 |",
		"| handshake | net/http + crypto/tls | 600 | 600 | (base) | 0.00 | 1 of 1 |",
		"| keepalive/c=50 | gracepoll httpd + crypto/tls | 21000 | 17.0 | – | 0.00 | 1 of 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", out)
	}
	var rendered []string
	for _, tg := range ts {
		rendered = append(rendered, tg.what)
	}
	if len(ts) != 7 {
		t.Errorf("%d targets, want 7 (c=50: nbio, 1.5x, moonshot; pipelined: 3x, nbio not run; memory; open loop twice; json and c=500 not run): %q", len(ts), rendered)
	}
}
