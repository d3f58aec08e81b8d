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
BenchmarkReleaseLatency/idle/passbuck-2         	    2000	     30319 ns/op	         8.716 p50-µs	        86.97 p99-µs
BenchmarkReleaseLatency/idle/passbuck-classic/timeout=10ms-2        	    2000	   1116993 ns/op	     10190 p50-µs	     19704 p99-µs
BenchmarkEcho/gnet/pingpong-2                     	   43195	     32826 ns/op	     30000 msgs/s
BenchmarkEcho/net/pingpong-2                      	   43195	     32826 ns/op	     20000 msgs/s
BenchmarkEcho/gracepoll-shared/pingpong-2         	   43195	     32826 ns/op	     33000 msgs/s
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
		"| idle/passbuck | 2000 | 8.72 | 87.0 |",
		"idle release p99 (passbuck, no timeout) <= 100 µs | 87.0 µs | **met** |",
		"1/227", // 19704 / 86.97
		"| gracepoll-shared | 33000 | 1.10x | 1.65x | – |",
		"go test -bench .\ncd bench/peers",
		"- noisy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
