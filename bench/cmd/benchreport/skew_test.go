package main

import (
	"fmt"
	"strings"
	"testing"
)

const skewSample = `BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 100 light-p99-µs	 300 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 30 send-lag-p99-µs	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-gnet-2        	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 40 light-p50-µs	 200 light-p99-µs	 400 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 120 light-p99-µs	 300 light-p99.9-µs	 9990 req/s	 0 slow-reqs	 0 steal-%	 70 send-lag-p99-µs	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-gnet-2        	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 40 light-p50-µs	 150 light-p99-µs	 400 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 110 light-p99-µs	 300 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 send-lag-p99-µs	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-gnet-2        	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 40 light-p50-µs	 100 light-p99-µs	 400 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-stealing-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 90 light-p99-µs	 200 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-stealing-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 100 light-p99-µs	 200 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-stealing-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 95 light-p99-µs	 200 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/none/skew-conn-per-waiter-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 105 light-p99-µs	 300 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/p=0.5%/D=1ms/skew-conn-stealing-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 300 light-p99-µs	 900 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/p=0.5%/D=1ms/skew-gnet-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 2000 light-p99-µs	 5000 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/p=0.5%/D=1ms/skew-netpoll-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 250 light-p99-µs	 750 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/sleep/p=0.5%/D=1ms/skew-net-2 	 1	 2000 ns/op	 99 client-util-%	 1 idle-poll	 900 light-max-µs	 30 light-p50-µs	 200 light-p99-µs	 700 light-p99.9-µs	 10000 req/s	 0 slow-reqs	 0 steal-%	 20 server-cpu-µs/req	 20 server-util-%
BenchmarkSkew/spin/p=2%/D=1ms/skew-net-2    	 1	 2000 ns/op	 50 client-util-%	 1 idle-poll	 9000 light-max-µs	 80 light-p50-µs	 700 light-p99-µs	 3000 light-p99.9-µs	 9800 req/s	 200 slow-reqs	 1.5 steal-%	 40 server-cpu-µs/req	 60 server-util-%
`

// TestRenderSkew checks the skew tables: medians with their ranges over
// the rounds, conn-shared's ratios to a peer with the range of the
// round-by-round ratios (120/150, 110/100, 100/200), and conn-stealing's
// rows, ratio table and targets beside conn-shared's.
func TestRenderSkew(t *testing.T) {
	r, err := parse(strings.NewReader(skewSample))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	targets := renderSkew(&b, r)
	out := b.String()
	for _, want := range []string{
		"| none | skew-conn-shared | 30.0 | 110 (100–120) | 300 (300–300) | 900 | 10000 (9990–10000) | 20.0 | – | 0.00 | 70.0 | 3 of 3 |",
		"| none | 0.73x (0.50–1.10x) | 0.75x (0.75–0.75x) | – | – | – | – |",
		"### Handlers that spin",
		"| p=2%/D=1ms | skew-net | 80.0 | 700 | 3000 | 9000 | 9800 | 40.0 | – | 1.50 | – | 1 of 1 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// conn-stealing: its rows, its own ratio table (95/150 with the
	// rounds' 90/200, 100/150, 95/100; 200/400) and its targets.
	for _, want := range []string{
		"| none | skew-conn-stealing | 30.0 | 95.0 (90.0–100) | 200 (200–200) | 900 | 10000 (10000–10000) | 20.0 | – | 0.00 | – | 3 of 3 |",
		"skew-conn-stealing's light-request latency over each peer's, per cell",
		"| none | 0.63x (0.45–0.95x) | 0.50x (0.50–0.50x) | – | – | – | – |",
		"| p=0.5%/D=1ms | 0.15x | 0.18x | 1.20x | 1.20x | 1.50x | 1.29x |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "skew-conn-shared's light-request"), strings.Index(out, "skew-conn-stealing's light-request"); i < 0 || j < i {
		t.Errorf("conn-shared's ratio table (at %d) not before conn-stealing's (at %d)", i, j)
	}
	verdicts := map[string]string{}
	for _, tg := range targets {
		verdicts[tg.what] = fmt.Sprintf("%s %v", tg.measured, tg.ok)
	}
	for what, want := range map[string]string{
		"skew p=0.5%/D=1ms (sleep): conn-stealing light p99 <= 0.1x gnet's":               "0.15x false",
		"skew p=0.5%/D=1ms (sleep): conn-stealing light p99 <= 1x netpoll's":              "1.20x false",
		"skew p=0.5%/D=1ms (sleep): conn-stealing light p99 <= 2x net's":                  "1.50x true",
		"skew p=0.5%/D=1ms (sleep): conn-stealing light p99.9 <= 5x its own without skew": "4.50x true",
		"no skew: conn-stealing light p99 within 10 % of gnet's":                          "0.63x (0.45–0.95x) true",
		"no skew: conn-stealing light p99 within 10 % of conn-per-waiter's":               "0.90x true",
		"no skew: conn-shared light p99 within 10 % of gnet's":                            "0.73x (0.50–1.10x) true",
		"no skew: conn-shared light p99 < 150 µs in every round":                          "120 µs at most, over 3 rounds true",
		"no skew: conn-stealing light p99 < 150 µs in every round":                        "100 µs at most, over 3 rounds true",
		"no skew: conn-shared light p99 within 10 % of conn-per-waiter's":                 "1.05x true",
	} {
		if got, ok := verdicts[what]; !ok || got != want {
			t.Errorf("target %q: got %q (listed %v), want %q", what, got, ok, want)
		}
	}
	if strings.Contains(out, "may have halted") {
		t.Errorf("idle-poll 1 reported as halting:\n%s", out)
	}
}

// TestRenderHiccup checks the machine's table: a row per CPU, medians with
// their ranges over the rounds.
func TestRenderHiccup(t *testing.T) {
	const raw = `BenchmarkHiccup/cpu=0-2 	 1	 4000 ns/op	 20 late-max-µs	 5 late-p50-µs	 10 late-p99-µs	 3 stalled-ms/s	 2 stalls-500µs/s
BenchmarkHiccup/cpu=1-2 	 1	 4000 ns/op	 900 late-max-µs	 6 late-p50-µs	 12 late-p99-µs	 0 stalled-ms/s	 0 stalls-500µs/s
BenchmarkHiccup/cpu=0-2 	 1	 4000 ns/op	 40 late-max-µs	 7 late-p50-µs	 30 late-p99-µs	 1 stalled-ms/s	 4 stalls-500µs/s
`
	r, err := parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	renderHiccup(&b, r)
	for _, want := range []string{
		"| 0 | 6.00 (5.00–7.00) | 20.0 (10.0–30.0) | 30.0 (20.0–40.0) | 3.00 (2.00–4.00) | 2.00 (1.00–3.00) | 2 |",
		"| 1 | 6.00 | 12.0 | 900 | 0.00 | 0.00 | 1 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestSkewDisturbedRounds checks that a round with steal above maxSteal,
// or a client late above maxSendLag, is left out of the medians and of the
// round-by-round ratios, for both servers of a ratio, and still counted in
// the rounds column.
func TestSkewDisturbedRounds(t *testing.T) {
	const raw = `BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 1 ns/op	 100 light-p99-µs	 300 light-p99.9-µs	 0 steal-%	 30 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-gnet-2 	 1	 1 ns/op	 200 light-p99-µs	 400 light-p99.9-µs	 0 steal-%	 30 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 1 ns/op	 5000 light-p99-µs	 9000 light-p99.9-µs	 20 steal-%	 30 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-gnet-2 	 1	 1 ns/op	 100 light-p99-µs	 400 light-p99.9-µs	 0 steal-%	 30 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 1 ns/op	 120 light-p99-µs	 300 light-p99.9-µs	 0 steal-%	 30 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-gnet-2 	 1	 1 ns/op	 7000 light-p99-µs	 9400 light-p99.9-µs	 0 steal-%	 900 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-conn-shared-2 	 1	 1 ns/op	 110 light-p99-µs	 300 light-p99.9-µs	 1 steal-%	 30 send-lag-p99-µs
BenchmarkSkew/sleep/none/skew-gnet-2 	 1	 1 ns/op	 220 light-p99-µs	 400 light-p99.9-µs	 1 steal-%	 30 send-lag-p99-µs
`
	r, err := parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	renderSkew(&b, r)
	out := b.String()
	for _, want := range []string{
		// conn-shared: rounds 1, 3, 4 (100, 120, 110); gnet: 1, 2, 4.
		"| none | skew-conn-shared | – | 110 (100–120) | 300 (300–300) | – | – | – | – | 1.00 | 30.0 | 3 of 4 |",
		"| none | skew-gnet | – | 200 (100–220) | 400 (400–400) | – | – | – | – | 1.00 | 30.0 | 3 of 4 |",
		// Paired: rounds 1 and 4 only (100/200, 110/220).
		"| none | 0.50x (0.50–0.50x) | 0.75x (0.75–0.75x) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
