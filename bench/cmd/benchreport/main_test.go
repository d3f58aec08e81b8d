package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
pkg: github.com/gracepoll/gracepoll/bench
BenchmarkDispatchVariants/W=2/K=64/raw-2         	  100000	      1000 ns/op	   1000000 events/s	      1000 ns/event
BenchmarkDispatchVariants/W=2/K=64/naive-mutex-2 	  100000	      2000 ns/op	    500000 events/s	      2000 ns/event
BenchmarkDispatchVariants/W=2/K=64/shared-lt/passbuck-2 	  100000	      1250 ns/op	    800000 events/s	      1250 ns/event
BenchmarkDispatchVariants/W=2/K=64/shared-lt/passbuck-2 	  100000	      1000 ns/op	    800000 events/s	      1000 ns/event
BenchmarkDispatchVariants/W=2/K=64/shared-lt/passbuck-2 	  100000	      1100 ns/op	    800000 events/s	      1100 ns/event
BenchmarkDispatchVariants/W=2/K=64/per-waiter-lt/passbuck-2 	  100000	      1000 ns/op	   1000000 events/s	      1000 ns/event
BenchmarkDispatchVariants/W=2/K=64/stealing-lt/passbuck-2 	  100000	      1250 ns/op	    800000 events/s	      1250 ns/event
BenchmarkReleaseLatency/idle/passbuck-2         	    2000	     30319 ns/op	         8.716 p50-µs	        86.97 p99-µs
BenchmarkReleaseLatency/idle/passbuck-classic/timeout=10ms-2        	    2000	   1116993 ns/op	     10190 p50-µs	     19704 p99-µs
BenchmarkReleasePath/passbuck-2         	   20000	      2999 ns/op	      31 B/op	       0 allocs/op
BenchmarkEcho/conns=500/gnet-2                     	   43195	     32826 ns/op	     30000 msgs/s	 20.0 server-cpu-µs/msg	 60.0 server-util-%	 100 client-util-%
BenchmarkEcho/conns=500/net-2                      	   43195	     32826 ns/op	     20000 msgs/s	 25.0 server-cpu-µs/msg	 50.0 server-util-%	 100 client-util-%
BenchmarkEcho/conns=500/gracepoll-shared-2         	   43195	     32826 ns/op	     33000 msgs/s	 22.0 server-cpu-µs/msg	 72.6 server-util-%	 100 client-util-%
BenchmarkEcho/conns=500/gracepoll-per-waiter-2     	   43195	     32826 ns/op	     31000 msgs/s	 16.0 server-cpu-µs/msg	 49.6 server-util-%	 100 client-util-%
BenchmarkEcho/conns=500/gracepoll-stealing-2       	   43195	     32826 ns/op	     36000 msgs/s	 15.0 server-cpu-µs/msg	 50.0 server-util-%	 100 client-util-%
BenchmarkEcho/conns=50/gracepoll-stealing-2        	   43195	     32826 ns/op	     38000 msgs/s	 8.5 server-cpu-µs/msg	 99.0 server-util-%	 80 client-util-%
BenchmarkEcho/conns=500/gracepoll-conn-2           	   43195	     32826 ns/op	     30000 msgs/s	 16.0 server-cpu-µs/msg	 48.0 server-util-%	 100 client-util-%
BenchmarkEcho/conns=50/gracepoll-conn-2            	   43195	     32826 ns/op	     30000 msgs/s	 10.0 server-cpu-µs/msg	 95.0 server-util-%	 80 client-util-%
BenchmarkEcho/conns=50/gnet-2                      	   43195	     32826 ns/op	     40000 msgs/s	 8.0 server-cpu-µs/msg	 99.0 server-util-%	 80 client-util-%
BenchmarkKV/c=50/P=1/GET/kv-conn-2                 	       1	 136873630 ns/op	     40000 req/s	        16.0 server-cpu-µs/req	        61.07 server-util-%
BenchmarkKV/c=50/P=1/GET/kv-gnet-2                 	       1	 126404317 ns/op	     50000 req/s	        20.0 server-cpu-µs/req	        50.89 server-util-%
BenchmarkKV/c=50/P=1/SET/kv-conn-2                 	       1	 136873630 ns/op	     40000 req/s	        16.0 server-cpu-µs/req	        61.07 server-util-%
BenchmarkKV/c=50/P=1/SET/kv-gnet-2                 	       1	 126404317 ns/op	     40000 req/s	        20.0 server-cpu-µs/req	        50.89 server-util-%
BenchmarkIdleMemory/conns=10000/gracepoll-conn-2        	       1	1393862314 ns/op	       661.1 heap-B/conn	       718.8 rss-B/conn
BenchmarkIdleMemory/conns=10000/gracepoll-per-waiter-2  	       1	1236648093 ns/op	       343.2 heap-B/conn	       423.1 rss-B/conn
BenchmarkIdleMemory/conns=10000/gnet-2                  	       1	1339292816 ns/op	       395.7 heap-B/conn	       516.5 rss-B/conn
--- SKIP: BenchmarkIdleMemory/conns=1000/gracepoll-conn
    memory_test.go:50: 1000 connections need about 1256 open files on each side; skipped
BenchmarkConnCycle/gracepoll-per-waiter-2     	   23845	    109774 ns/op	      9110 cycles/s	       392.2 p50-µs	      1125 p99-µs	       103.3 server-cpu-µs/cycle	        94.07 server-util-%	        91.3 client-util-%
BenchmarkConnCycle/gracepoll-per-waiter-2     	   23845	    109774 ns/op	      9110 cycles/s	       392.2 p50-µs	      1125 p99-µs	        90.0 server-cpu-µs/cycle	        94.07 server-util-%
BenchmarkConnCycle/gracepoll-per-waiter-2     	   23845	    109774 ns/op	      9110 cycles/s	       392.2 p50-µs	      1125 p99-µs	        99.0 server-cpu-µs/cycle	        94.07 server-util-%
BenchmarkConnCycle/net-2                      	   19696	    104391 ns/op	      9579 cycles/s	       367.7 p50-µs	      1156 p99-µs	        80.0 server-cpu-µs/cycle	        91.82 server-util-%
BenchmarkConnCycle/gnet-2                     	   22801	     97952 ns/op	     10209 cycles/s	       339.0 p50-µs	      1076 p99-µs	        66.0 server-cpu-µs/cycle	        70.73 server-util-%
BenchmarkConnCycle/gracepoll-conn-2     	   23845	    109774 ns/op	      9110 cycles/s	       392.2 p50-µs	      1125 p99-µs	       70.0 server-cpu-µs/cycle	        94.07 server-util-%	        91.3 client-util-%	 12.5 release-p50-µs	 80.25 release-p99-µs
BenchmarkTLSEcho/conns=50/conn-tls-2      	  100000	     10000 ns/op	     30000 msgs/s	 20.0 server-cpu-µs/msg	 60.0 server-util-%	 100 client-util-%
BenchmarkTLSEcho/conns=50/net-tls-2       	  100000	     10000 ns/op	     25000 msgs/s	 25.0 server-cpu-µs/msg	 62.0 server-util-%	 100 client-util-%
BenchmarkTLSEcho/conns=50/nbio-tls-2      	  100000	     10000 ns/op	     28000 msgs/s	 16.0 server-cpu-µs/msg	 50.0 server-util-%	 100 client-util-%
BenchmarkTLSHandshake/full-default/conn-tls-2 	    1000	    900000 ns/op	 1100 handshakes/s	 600 server-cpu-µs/handshake	 70 server-util-%	 99 client-util-%	 0 resumed-%
BenchmarkTLSHandshake/full-default/net-tls-2  	    1000	    900000 ns/op	 1100 handshakes/s	 500 server-cpu-µs/handshake	 70 server-util-%	 99 client-util-%	 0 resumed-%
BenchmarkTLSHandshake/full-default/conn-tls-2 	    1000	    900000 ns/op	 1100 handshakes/s	 520 server-cpu-µs/handshake	 70 server-util-%	 99 client-util-%	 0 resumed-%
BenchmarkTLSHandshake/full-default/net-tls-2  	    1000	    900000 ns/op	 1100 handshakes/s	 520 server-cpu-µs/handshake	 70 server-util-%	 99 client-util-%	 0 resumed-%
BenchmarkTLSHandshake/full-default/conn-tls-2 	    1000	    900000 ns/op	 1100 handshakes/s	 510 server-cpu-µs/handshake	 70 server-util-%	 99 client-util-%	 0 resumed-%
BenchmarkTLSHandshake/full-default/net-tls-2  	    1000	    900000 ns/op	 1100 handshakes/s	 500 server-cpu-µs/handshake	 70 server-util-%	 99 client-util-%	 0 resumed-%
BenchmarkTLSIdleMemory/conns=10000/conn-tls-2 	       1	 10000000000 ns/op	 8000 heap-B/conn	 10000 rss-B/conn
BenchmarkTLSIdleMemory/conns=10000/net-tls-2  	       1	 10000000000 ns/op	 25000 heap-B/conn	 40000 rss-B/conn
--- SKIP: BenchmarkTLSKV
    tls_test.go:10: redis-benchmark is not installed
--- SKIP: BenchmarkScale/K=16000/raw
PASS
ok  	github.com/gracepoll/gracepoll/bench	1.0s
`

// TestRender checks parsing, medians, ratios and verdicts on a sample.
func TestRender(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.get("BenchmarkDispatchVariants/W=2/K=64/shared-lt/passbuck", "ns/event"); v != 1100 {
		t.Errorf("median = %v, want 1100", v)
	}
	dir := t.TempDir()
	metaPath := filepath.Join(dir, "meta.txt")
	os.WriteFile(metaPath, []byte("date: today\ncommand: go test -bench .\ncommand: cd bench/peers\nnote: noisy\n"), 0o644)
	m, err := readMeta(metaPath)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	render(&b, r, m)
	out := b.String()
	for _, want := range []string{
		"| 2 | 64 | 1000000 | 0.50x | 0.91x |", // naive 1000/2000, passbuck 1000/1100
		// every variant's column: per-waiter 1000/1000, stealing 1000/1250.
		"| 2 | 64 | 1000000 | 0.50x | 0.91x | – | – | 1.00x | – | – | 0.80x | – | – | – |",
		// the topologies' events/s; shared has three rounds, the others
		// one, so the ratios have no round-by-round range.
		"| 2 | 64 | 1000000 | 800000 | 1000000 | 800000 | 0.80x | 0.80x |",
		"dispatch on the shared set >= 0.9x per-waiter sets (passbuck, geomean) | 0.91x (shared 0.91x of raw, per-waiter 1.00x) | **met**",
		"dispatch on stealing >= 0.9x per-waiter sets (passbuck, geomean) | 0.80x (stealing 0.80x of raw, per-waiter 1.00x) | **missed**",
		// 36000/30000, 36000/31000, gnet's 20 µs over 15; 38000/40000, 8/8.5.
		"| 500 | gracepoll-stealing | 36000 | 1.20x | 1.16x | 15.0 | 1.33x | 50.0 | 100 | 1 |",
		"| 50 | gracepoll-stealing | 38000 | 0.95x | – | 8.50 | 0.94x | 99.0 | 80.0 | 1 |",
		"echo at 500 connections, raw poller on stealing: msgs/s >= 1.0x gnet | 1.20x of gnet | **met**",
		"echo at 500 connections, raw poller on stealing: CPU efficiency >= 1.0x gnet | 1.33x of gnet (gnet's CPU per message over the server's) | **met**",
		"echo at 50 connections, raw poller on stealing: msgs/s >= 1.0x gnet | 0.95x of gnet | **missed**",
		"echo at 50 connections, raw poller on stealing: CPU efficiency >= 1.0x gnet | 0.94x of gnet (gnet's CPU per message over the server's) | **missed**",
		"| gracepoll-stealing | not run |",
		"| idle/passbuck | 2000 | 8.72 | 87.0 |",
		"idle release p99 (passbuck, no timeout) <= 50 µs | 87.0 µs | **missed** |",
		"| passbuck | 2999 | 0.00 | 31.0 |",
		"release path allocations (passbuck), steady state = 0 per Delete-to-OnRelease | 0.00 allocs/op | **met** |",
		"1/227", // 19704 / 86.97
		"| 500 | gracepoll-shared | 33000 | 1.10x | 1.06x | 22.0 | 0.91x | 72.6 | 100 | 1 |",
		// CPU decides at 500 (utils below 90): 20/16; throughput at 50: 30000/40000.
		"conn echo >= 1.0x gnet at 500 connections | 1.00x throughput, 1.25x CPU efficiency (CPU per unit decides",
		"conn echo >= 1.0x gnet at 50 connections | 0.75x throughput, 0.80x CPU efficiency (throughput: the server was saturated) of gnet | **missed**",
		"conn echo >= 0.95x the raw-poller echo at 500 connections (the layer costs at most 5 %) | 0.97x throughput, 1.00x CPU efficiency",
		"echo msgs/s at 500 connections (shared set) >= gnet | 1.10x of gnet | **met**",
		"| gracepoll-conn | 70.0 | 1.06x | 0.88x | 94.1 | 91.3 | 9110 | 12.5 | 80.2 | 1 |",
		"server CPU per connection cycle (conn server) <= net's and <= gnet's | 70.0 µs vs net 80.0 µs (0.88x), gnet 66.0 µs (1.06x) | **missed**",
		"| 50 | 1 | GET | 40000 | 16.0 | 61.1 | – | – | – | 50000 | 20.0 | 50.9 | 0.80x | 1.25x |",
		"kv >= 1.0x the same command code on gnet (geomean over the redis-benchmark rows) | 0.89x throughput, 1.25x CPU efficiency (CPU per unit decides",
		"| gracepoll-conn | skipped | | | 719 | 1.39x | 661 |",
		"process RSS per idle connection at 10,000 connections (conn server) <= gnet's | 719 B vs gnet 516 B (1.39x); raw-poller server 423 B | **missed**",
		"**Skipped** (`BenchmarkIdleMemory/conns=1000/gracepoll-conn`)",
		"go test -bench .\ncd bench/peers",
		"- noisy",
		// median of 103.3, 90, 99; 99/66 and 99/80
		"| gracepoll-per-waiter | 99.0 | 1.50x | 1.24x | 94.1 | 91.3 | 9110 | – | – | 3 |",
		"| gnet | 66.0 | 1.00x | 0.82x | 70.7 | – | 10209 | – | – | 1 |",
		"| netpoll | not run |",
		"<= gnet | 99.0 µs vs 66.0 µs: 1.50x of gnet | **missed** |",
		// TLS: CPU efficiency 25/20 and 16/20; handshake medians 520/500
		// with the per-round ratios 1.20, 1.00, 1.02; RSS 10000/40000.
		"| 50 | gracepoll conn + crypto/tls | 30000 | 20.0 | 1.25x | 0.80x | 60.0 | 100 | 1 |",
		"| 50 | net + crypto/tls | 25000 | 25.0 | (base) | 0.64x |",
		"| all | gnet v2.9.7 | no TLS support |",
		"TLS echo CPU per message at 50 connections: conn-tls >= 1.0x net+crypto/tls (CPU efficiency) | 1.25x CPU efficiency",
		"conn-tls >= 1.0x nbio (CPU efficiency) | 0.80x CPU efficiency of nbio (20.0 µs/msg vs 16.0) | **missed**",
		"| full-default | gracepoll conn + crypto/tls | 1100 | 520 (510–600) | 1.04x (1.00–1.20x) | – |",
		"TLS handshake CPU (full-default): conn-tls within 5 % of net+crypto/tls (<= 1.05x) | 1.04x (1.00–1.20x) of net+crypto/tls's CPU per handshake (520 µs vs 500) | **met**",
		"| gracepoll conn + crypto/tls | 10000 | 0.25x | – | 8000 |",
		"RSS per idle TLS connection at 10,000 connections: conn-tls <= 0.25x net+crypto/tls | 10000 B vs 40000 B: 0.25x (nbio – B) | **met**",
		"| nbio v1.6.8 + llib tls | not run |",
		"**Skipped** (`BenchmarkTLSKV`): redis-benchmark is not installed",
		"| 500 | net + crypto/tls | not run |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
