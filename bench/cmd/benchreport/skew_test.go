package main

import (
	"strings"
	"testing"
)

const skewSample = `BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 100 light-p99-µs	 300 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-gnet-2        	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 40 light-p50-µs	 200 light-p99-µs	 400 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 120 light-p99-µs	 300 light-p99.9-µs	 9990 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-gnet-2        	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 40 light-p50-µs	 150 light-p99-µs	 400 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 110 light-p99-µs	 300 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-gnet-2        	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 40 light-p50-µs	 100 light-p99-µs	 400 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/spin/p=2%/D=1ms/skew-net-2    	 1	 2000 ns/op	 50 client-util-%	 1 idle-poll	 9000 light-max-µs	 80 light-p50-µs	 700 light-p99-µs	 3000 light-p99.9-µs	 9800 req/s	 200 slow-reqs	 1.5 steal-%	 40 server-cpu-µs/req	 60 server-util-%
`

// TestRenderSkew checks the skew tables: medians with their ranges over
// the rounds, and conn-shared's ratios to a peer with the range of the
// round-by-round ratios (120/150, 110/100, 100/200).
func TestRenderSkew(t *testing.T) {
	r, err := parse(strings.NewReader(skewSample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	renderSkew(&b, r)
	out := b.String()
	for _, want := range []string{
		"| none | skew-conn-shared | 30.0 | 110 (100–120) | 300 (300–300) | 900 | 10000 (9990–10000) | 20.0 | 0.00 | 3 |",
		"| none | 0.73x (0.50–1.10x) | 0.75x (0.75–0.75x) | – | – | – | – |",
		"### Handlers that spin",
		"| p=2%/D=1ms | skew-net | 80.0 | 700 | 3000 | 9000 | 9800 | 60.0 | 1.50 | 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "may have halted") {
		t.Errorf("idle-poll 1 reported as halting:\n%s", out)
	}
}
