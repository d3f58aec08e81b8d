package main

import (
	"fmt"
	"strings"
	"testing"
)

const wsSample = `pkg: github.com/gracepoll/gracepoll/bench/peers
BenchmarkWSEcho/size=64/conns=50/ws-gracepoll-2    	1	3000000000 ns/op	 30 client-util-%	 60000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 4 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-gorilla-2      	1	3000000000 ns/op	 30 client-util-%	 50000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 8 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-nbio-2         	1	3000000000 ns/op	 30 client-util-%	 40000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 5 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-gracepoll#01-2 	1	3000000000 ns/op	 30 client-util-%	 60000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 20 server-µs/msg	 9 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-gorilla#01-2   	1	3000000000 ns/op	 30 client-util-%	 50000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 10 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-nbio#01-2      	1	3000000000 ns/op	 30 client-util-%	 40000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 5 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-gracepoll#02-2 	1	3000000000 ns/op	 30 client-util-%	 60000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 30 server-µs/msg	 0 steal-%	 25 others-%
BenchmarkWSEcho/size=64/conns=50/ws-gorilla#02-2   	1	3000000000 ns/op	 30 client-util-%	 50000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 10 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSEcho/size=64/conns=50/ws-nbio#02-2      	1	3000000000 ns/op	 30 client-util-%	 40000 msgs/s	 300 p50-µs	 900 p99-µs	 40 server-util-%	 5 server-µs/msg	 0 steal-%	 0 others-%
BenchmarkWSBroadcast/conns=10000/ws-gracepoll-2    	1	6000000000 ns/op	 60 client-cpu-ms	 50 half-ms	 100 last-ms	 99 server-cpu-ms	 0 steal-%
BenchmarkWSBroadcast/conns=10000/ws-gorilla-2      	1	6000000000 ns/op	 40 client-cpu-ms	 70 half-ms	 120 last-ms	 99 server-cpu-ms	 0 steal-%
BenchmarkWSIdleMemory/conns=10000/ws-gracepoll-2   	1	1000000000 ns/op	 0.0001 goroutines/conn	 1100 heap-B/conn	 4300 kernel-B/conn	 2200 rss-B/conn
BenchmarkWSIdleMemory/conns=10000/ws-nbio-2        	1	1000000000 ns/op	 0 goroutines/conn	 1000 heap-B/conn	 4100 kernel-B/conn	 1200 rss-B/conn
`

// TestRenderWS checks the WebSocket section: a disturbed round left out
// of a median and of the paired ratios, the extrapolation to a million
// connections, and the targets' verdicts.
func TestRenderWS(t *testing.T) {
	r, err := parse(strings.NewReader(wsSample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	ts := renderWS(&b, r)
	for _, tg := range ts {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", tg.what, tg.measured, verdict(tg.ok))
	}
	out := b.String()
	for _, want := range []string{
		// gracepoll's second round lost 9 % to steal, its third 25 % to
		// other processes: only 4 is kept.
		"| size=64/conns=50 | gracepoll ws on httpd | 4.00 | 60000 | 300 | 900 | 40.0 | 30.0 | 9.00 | 25.0 | 1 of 3 |",
		"| size=64/conns=50 | 0.50x |",
		"| gracepoll ws on httpd | 100 | 0.83x | 50.0 | 99.0 | 60.0 | 0.00 | – | 1 of 1 |",
		"| 10000 | gracepoll ws on httpd | 2200 | 1.83x | 1100 | 0.00 | 4300 | 2.20 GB | 4.30 GB |",
		"| WebSocket echo size=64/conns=50: gracepoll CPU per message <= 0.7x gorilla's | 0.50x of gorilla's | **met** |",
		"| WebSocket echo size=64/conns=50: gracepoll CPU per message <= nbio's | 0.80x of nbio's | **met** |",
		"gracepoll's time to the last one <= 0.5x gorilla's | 0.83x of gorilla's | **missed** |",
		"gracepoll RSS <= nbio's, with no goroutine per connection | 2200 B vs nbio 1200 B (1.83x), 0.00 goroutines/conn | **missed** |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
