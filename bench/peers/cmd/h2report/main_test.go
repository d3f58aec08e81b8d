package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReport renders a report from a few rounds of raw output and checks
// the medians, the spreads, the steal filter and the ratio to httpd.
func TestReport(t *testing.T) {
	const raw = `goos: linux
BenchmarkH2/h2c/plaintext/c=50/m=10/httpd-2   	1	3000 ns/op	10.0 cpu-µs/req	90000 req/s	91000 h2load-req/s	0 steal-%	3 writes/req
BenchmarkH2/h2c/plaintext/c=50/m=10/net/http-2	1	3000 ns/op	40.0 cpu-µs/req	20000 req/s	0.5 steal-%
BenchmarkH2/h2c/plaintext/c=50/m=10/httpd#01-2	1	3000 ns/op	12.0 cpu-µs/req	80000 req/s	0 steal-%
BenchmarkH2/h2c/plaintext/c=50/m=10/net/http#01-2	1	3000 ns/op	44.0 cpu-µs/req	21000 req/s	0 steal-%
BenchmarkH2/h2c/plaintext/c=50/m=10/httpd#02-2	1	3000 ns/op	11.0 cpu-µs/req	85000 req/s	0 steal-%
BenchmarkH2/h2c/plaintext/c=50/m=10/net/http#02-2	1	3000 ns/op	99.0 cpu-µs/req	1000 req/s	9 steal-%
BenchmarkH2IdleMemory/tls/conns=1000/net/http-2	1	3000 ns/op	2.000 goroutines/conn	15319 heap-B/conn	43057 rss-B/conn
BenchmarkH2OpenLoop/p=2%/D=5ms/httpd-2	1	3000 ns/op	75.5 light-p50-µs
PASS
`
	dir := t.TempDir()
	rawPath := filepath.Join(dir, "raw-h2.txt")
	if err := os.WriteFile(rawPath, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := parse(strings.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rs["BenchmarkH2/h2c/plaintext/c=50/m=10/net/http"]); n != 3 {
		t.Fatalf("net/http: %d rounds, want 3", n)
	}
	var b strings.Builder
	render(&b, rs, meta{values: map[string][]string{"date": {"today"}, "command": {"go test"}}, keys: []string{"date", "command"}}, rawPath)
	out := b.String()
	for _, want := range []string{
		"| plaintext/c=50/m=10 | httpd | 11.0 (10.0–12.0) | 1.00× | 85,000 (80,000–90,000) | 91,000 |",
		// The round with 9 % steal is left out: median of 40 and 44.
		"| plaintext/c=50/m=10 | net/http | 42.0 (40.0–44.0) | 3.82× | 20,500 (20,000–21,000) |",
		"| 2 of 3 |",
		"| tls | 1000 | net/http | 43,057 | 15,319 | 2.00 |",
		"| h2c | plaintext/c=50/m=10 | httpd | 3.00 | – |",
		"| p=2%/D=5ms | httpd | 75.5 |",
		"go test\n",
		"bench/results/raw-h2.txt",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
