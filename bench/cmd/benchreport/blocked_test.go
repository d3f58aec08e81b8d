package main

import (
	"fmt"
	"strings"
	"testing"
)

const blockedSample = `pkg: github.com/gracepoll/gracepoll/bench/peers
BenchmarkBlockedRelease/none/httpd-2 	 1	2577592851 ns/op	 1000 conns/s	 616.8 cycle-p50-µs	 1215 cycle-p99-µs	 0 fds-end-over-baseline	 2 fds-max-over-baseline	 1 idle-poll	 0 oldest-pending-µs	 0 pending-at-end	 83.28 release-max-µs	 27.81 release-p50-µs	 60 release-p99-µs	 1000 release-samples	 24.45 server-util-%	 0 steal-%
BenchmarkBlockedRelease/blocked/httpd-2 	 1	2242770339 ns/op	 2000 blocked-ms	 1000 conns/s	 680.2 cycle-p50-µs	 7070 cycle-p99-µs	 1003 fds-end-over-baseline	 1003 fds-max-over-baseline	 1 idle-poll	 1203119 oldest-pending-µs	 1000 pending-at-end	 1978811 release-max-µs	 1481111 release-p50-µs	 1970000 release-p99-µs	 1000 release-samples	 19.19 server-util-%	 0 steal-%
BenchmarkBlockedRelease/blocked/conn-http-stealing-2 	 1	2245838517 ns/op	 2000 blocked-ms	 1000 conns/s	 668.6 cycle-p50-µs	 1500 cycle-p99-µs	 1 fds-end-over-baseline	 4 fds-max-over-baseline	 1 idle-poll	 0 oldest-pending-µs	 0 pending-at-end	 900 release-max-µs	 30 release-p50-µs	 500 release-p99-µs	 1000 release-samples	 17.47 server-util-%	 0 steal-%
BenchmarkBlockedRelease/none/httpd#01-2 	 1	2577592851 ns/op	 1000 conns/s	 616.8 cycle-p50-µs	 1215 cycle-p99-µs	 0 fds-end-over-baseline	 2 fds-max-over-baseline	 1 idle-poll	 0 oldest-pending-µs	 0 pending-at-end	 83.28 release-max-µs	 27.81 release-p50-µs	 40 release-p99-µs	 1000 release-samples	 24.45 server-util-%	 0 steal-%
BenchmarkBlockedRelease/blocked/httpd#01-2 	 1	2242770339 ns/op	 2000 blocked-ms	 1000 conns/s	 680.2 cycle-p50-µs	 7070 cycle-p99-µs	 1003 fds-end-over-baseline	 1003 fds-max-over-baseline	 1 idle-poll	 1203119 oldest-pending-µs	 1000 pending-at-end	 1978811 release-max-µs	 1481111 release-p50-µs	 1980000 release-p99-µs	 1000 release-samples	 19.19 server-util-%	 0 steal-%
BenchmarkBlockedRelease/blocked/conn-http-stealing#01-2 	 1	2245838517 ns/op	 2000 blocked-ms	 1000 conns/s	 668.6 cycle-p50-µs	 1500 cycle-p99-µs	 900 fds-end-over-baseline	 900 fds-max-over-baseline	 1 idle-poll	 0 oldest-pending-µs	 0 pending-at-end	 9000000 release-max-µs	 30 release-p50-µs	 9000000 release-p99-µs	 1000 release-samples	 17.47 server-util-%	 5 steal-%
BenchmarkHTTPOpenLoop/none/httpd-2           	1	2000000000 ns/op	 20 client-util-%	 20 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 100 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/none/conn-http-2       	1	2000000000 ns/op	 20 client-util-%	 10 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 100 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/p=2%/D=5ms/httpd-2     	1	2000000000 ns/op	 20 client-util-%	 30 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 300 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 200 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/p=2%/D=5ms/conn-http-2 	1	2000000000 ns/op	 20 client-util-%	 12 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 300 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 200 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/none/httpd#01-2        	1	2000000000 ns/op	 20 client-util-%	 22 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 100 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 0 slow-reqs	 0 steal-%
BenchmarkHTTPOpenLoop/p=2%/D=5ms/httpd#01-2  	1	2000000000 ns/op	 20 client-util-%	 44 cpu-µs/req	 1 idle-poll	 3000 light-max-µs	 40 light-p50-µs	 300 light-p99-µs	 2000 light-p99.9-µs	 10000 req/s	 20 send-lag-p99-µs	 29 server-util-%	 200 slow-reqs	 0 steal-%
`

// TestRenderBlocked checks the section on handlers that block: the
// release table with a round lost to steal left out, the ratio of the
// blocked cell over the baseline, the targets, and the open-loop CPU
// ratio per server.
func TestRenderBlocked(t *testing.T) {
	r, err := parse(strings.NewReader(blockedSample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	ts := renderBlocked(&b, r)
	renderHTTPOpenCPU(&b, r)
	for _, tg := range ts {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", tg.what, tg.measured, verdict(tg.ok))
	}
	out := b.String()
	for _, want := range []string{
		"| none | gracepoll httpd | 27.8 | 50.0 (40.0–60.0) | 83.3 | 0.00 (0.00–0.00) | 0.00 | 2.00 (2.00–2.00) | 0.00 (0.00–0.00) | 1000 | 1215 (1215–1215) | 24.4 | 0.00 | 2 of 2 |",
		"| blocked | gracepoll httpd | 1481111 | 1975000 (1970000–1980000) |",
		// the second round lost 5 % to steal: left out.
		"| blocked | gracepoll conn, raw HTTP/1.1, stealing | 30.0 | 500 | 900 | 0.00 | 0.00 | 4.00 | 1.00 | 1000 | 1500 | 17.5 | 0.00 | 1 of 2 |",
		"| gracepoll httpd | 39500.00x (32833.33–49500.00x) |",
		"| Releases while a handler blocks, gracepoll httpd: release p99 <= 1000 µs | 1975000 (1970000–1980000) µs; 1003 descriptors over the baseline at the load's end | **missed** |",
		"| Releases while a handler blocks, gracepoll conn, raw HTTP/1.1, stealing: release p99 <= 1000 µs | 500 µs; 1.00 descriptors over the baseline at the load's end | **met** |",
		"| gracepoll httpd | 21.0 (20.0–22.0) | 37.0 (30.0–44.0) | 1.76x (1.50–2.00x) |",
		"| gracepoll conn, raw HTTP/1.1 | 10.0 | 12.0 | 1.20x |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", out)
	}
	if len(ts) != 2 {
		t.Errorf("%d targets, want 2 (the blocked cell of httpd and of conn-http-stealing)", len(ts))
	}
}
