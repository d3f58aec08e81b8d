// Command h2report turns the raw `go test -bench` output of the HTTP/2
// benchmarks of bench/peers (BenchmarkH2, BenchmarkH2IdleMemory,
// BenchmarkH2Transfer, BenchmarkH2OpenLoop; `bench/run.sh h2`) into a
// Markdown report: for every cell the median over the rounds and the
// spread (min-max), each server next to the others measured in the same
// run. Every number comes from the raw output; the program takes
// medians, extremes and ratios and nothing else.
//
//	go run ./cmd/h2report -raw ../results/raw-h2.txt -meta ../results/meta-h2.txt -out ../results/benchmarks-h2.md
//
// The meta file holds "key: value" lines written by bench/run.sh (date,
// machine, Go version, commands, run time). A round whose steal-% is
// over 2 (the hypervisor took the CPUs, whatever the server did) is left
// out of the medians, and the tables say how many rounds were kept.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	raw := flag.String("raw", "bench/results/raw-h2.txt", "raw `go test -bench` output")
	meta := flag.String("meta", "bench/results/meta-h2.txt", "key: value lines about the run, from bench/run.sh")
	out := flag.String("out", "bench/results/benchmarks-h2.md", "the Markdown file to write")
	flag.Parse()
	f, err := os.Open(*raw)
	if err != nil {
		fatal(err)
	}
	runs, err := parse(f)
	f.Close()
	if err != nil {
		fatal(err)
	}
	m, err := readMeta(*meta)
	if err != nil {
		fatal(err)
	}
	var b strings.Builder
	render(&b, runs, m, *raw)
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "h2report:", err)
	os.Exit(1)
}

// runs maps a benchmark's name (without the -GOMAXPROCS suffix and the
// "#NN" of a later round) to its results, one per round, in order.
type runs map[string][]map[string]float64

// parse reads standard benchmark lines
//
//	BenchmarkH2/h2c/plaintext/c=50/m=10/httpd-2   1   123 ns/op   4.5 cpu-µs/req ...
//
// and ignores everything else.
func parse(r io.Reader) (runs, error) {
	out := runs{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkH2") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		if i := strings.LastIndexByte(name, '#'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		vals := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				vals[f[i+1]] = v
			}
		}
		out[name] = append(out[name], vals)
	}
	return out, sc.Err()
}

// maxSteal is the steal-% above which a round is left out.
const maxSteal = 2

// kept returns name's rounds with steal-% at most maxSteal (rounds
// without the metric are kept) and the number of rounds in all.
func (rs runs) kept(name string) (kept []map[string]float64, all int) {
	for _, r := range rs[name] {
		if s, ok := r["steal-%"]; ok && s > maxSteal {
			continue
		}
		kept = append(kept, r)
	}
	return kept, len(rs[name])
}

// values returns unit's values over rounds.
func values(rounds []map[string]float64, unit string) []float64 {
	var vs []float64
	for _, r := range rounds {
		if v, ok := r[unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// median returns the median of vs and whether there is one.
func median(vs []float64) (float64, bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

const dash = "–"

// num formats a figure with about three significant digits, thousands
// grouped for large ones.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1000:
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		if neg {
			s = "-" + s
		}
		return s
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// cell formats unit's median over rounds and, with more than one round,
// the spread: "12.3 (11.9–13.0)".
func cell(rounds []map[string]float64, unit string) string {
	vs := values(rounds, unit)
	m, ok := median(vs)
	if !ok {
		return dash
	}
	if len(vs) == 1 {
		return num(m)
	}
	return fmt.Sprintf("%s (%s–%s)", num(m), num(slices.Min(vs)), num(slices.Max(vs)))
}

// med formats unit's median alone.
func med(rounds []map[string]float64, unit string) string {
	if m, ok := median(values(rounds, unit)); ok {
		return num(m)
	}
	return dash
}

// ratio formats the ratio of unit's medians, a over b.
func ratio(a, b []map[string]float64, unit string) string {
	x, ok1 := median(values(a, unit))
	y, ok2 := median(values(b, unit))
	if !ok1 || !ok2 || y == 0 {
		return dash
	}
	return fmt.Sprintf("%.2f×", x/y)
}

type meta struct {
	keys   []string
	values map[string][]string
}

func readMeta(path string) (meta, error) {
	m := meta{values: map[string][]string{}}
	data, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, seen := m.values[k]; !seen {
			m.keys = append(m.keys, k)
		}
		m.values[k] = append(m.values[k], v)
	}
	return m, nil
}

// The servers in the order the tables give them, and the other names
// the benchmarks' cells use, in order.
var (
	h2Servers   = []string{"httpd", "net/http", "nghttpd", "fasthttp-h1"}
	transports  = []string{"h2c", "tls"}
	h2Loads     = []string{"plaintext/c=50/m=10", "plaintext/c=10/m=100", "json/c=50/m=10", "json/c=10/m=100"}
	openCells   = []string{"none", "p=2%/D=5ms"}
	idleConns   = []string{"1000", "10000"}
	transferDir = []string{"download", "upload"}
)

// roundsNote formats how many rounds a cell kept: "5", or "4 of 5".
func roundsNote(kept, all int) string {
	if kept == all {
		return strconv.Itoa(all)
	}
	return fmt.Sprintf("%d of %d", kept, all)
}

func render(b *strings.Builder, rs runs, m meta, rawPath string) {
	fmt.Fprintf(b, "# HTTP/2 benchmarks\n\nGenerated by `bench/run.sh h2` (bench/peers/cmd/h2report) from the run of %s. "+
		"Every figure is the median over the rounds, the spread (min–max over the rounds) in parentheses; "+
		"a round whose steal-%% was over %d is left out, and the rounds column says how many were kept. "+
		"The servers of one table ran in the same rounds, interleaved (each round runs every cell with every server in turn).\n\n",
		m.one("date"), maxSteal)
	b.WriteString("## Machine and run\n\n| | |\n|---|---|\n")
	for _, k := range m.keys {
		if k == "command" {
			continue
		}
		for _, v := range m.values[k] {
			fmt.Fprintf(b, "| %s | %s |\n", k, strings.ReplaceAll(v, "|", "\\|"))
		}
	}
	b.WriteString("\nCommands, in order:\n\n```sh\n")
	for _, c := range m.values["command"] {
		b.WriteString(c + "\n")
	}
	b.WriteString("```\n\n")
	b.WriteString("Each server runs in a process of its own pinned to the first CPU (the Go servers with GOMAXPROCS=1, nghttpd with one worker), " +
		"the client pinned to the second. httpd and net/http serve the same handler (bench/peers H2Handler); nghttpd serves the routes as static files; " +
		"fasthttp-h1 is HTTP/1.1 only (h2load --h1, -m requests pipelined per connection), a server without HTTP/2 for scale.\n\n")

	renderH2(b, rs)
	renderIdle(b, rs)
	renderTransfer(b, rs)
	renderOpen(b, rs)
	fmt.Fprintf(b, "## Raw output\n\nThe `go test -bench` output this report was made from is bench/results/%s (benchstat-compatible).\n", filepath.Base(rawPath))
}

func (m meta) one(k string) string {
	if v := m.values[k]; len(v) > 0 {
		return v[0]
	}
	return "?"
}

func renderH2(b *strings.Builder, rs runs) {
	if !hasPrefix(rs, "BenchmarkH2/") {
		return
	}
	b.WriteString("## 1. Throughput and server CPU per request under h2load (BenchmarkH2)\n\n" +
		"h2load -t1 with -c connections and -m streams in flight on each, for -h2.time after a 1 s warm-up run, against a fresh server process per cell; " +
		"h2c is HTTP/2 with prior knowledge, tls is h2 by ALPN over TLS 1.3 (TLS_AES_128_GCM_SHA256 for every server). " +
		"**cpu-µs/req** is the server process's CPU time (utime+stime from the kernel, connection set-up and TLS handshakes included) per request: " +
		"it ranks the servers whatever the client can drive. **req/s** is the requests over the harness's own wall time around h2load; " +
		"h2load's own figure is next to it (the two must agree: the harness adds only h2load's start and connects). " +
		"client % is h2load's CPU over the wall time: near 100 the client, not the server, set req/s. " +
		"client-µs/req is h2load's CPU per request: what the server's way of writing costs its client. × httpd is the server's median cpu-µs/req over httpd's.\n\n")
	for _, tr := range transports {
		fmt.Fprintf(b, "### %s\n\n", tr)
		b.WriteString("| load | server | cpu-µs/req | × httpd | req/s | h2load req/s | server % | client % | client-µs/req | h2load mean ms | rounds |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, load := range h2Loads {
			base, _ := rs.kept("BenchmarkH2/" + tr + "/" + load + "/httpd")
			for _, srv := range h2Servers {
				name := "BenchmarkH2/" + tr + "/" + load + "/" + srv
				if len(rs[name]) == 0 {
					continue
				}
				k, all := rs.kept(name)
				mean := dash
				if v, ok := median(values(k, "h2load-mean-µs")); ok {
					mean = num(v / 1000)
				}
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", load, srv,
					cell(k, "cpu-µs/req"), ratio(k, base, "cpu-µs/req"), cell(k, "req/s"), med(k, "h2load-req/s"),
					med(k, "server-util-%"), med(k, "client-util-%"), med(k, "client-µs/req"), mean, roundsNote(len(k), all))
			}
		}
		b.WriteString("\n")
	}
	if !hasUnit(rs, "BenchmarkH2/", "writes/req") {
		return
	}
	b.WriteString("### The server's system calls per request\n\n" +
		"From /proc/<pid>/io over h2load's run (syscw, syscr, wchar: sockets' calls included): how many answers one write carries, " +
		"which decides much of the client's CPU per request.\n\n")
	b.WriteString("| transport | load | server | writes/req | reads/req | bytes written/req |\n|---|---|---|---|---|---|\n")
	for _, tr := range transports {
		for _, load := range h2Loads {
			for _, srv := range h2Servers {
				name := "BenchmarkH2/" + tr + "/" + load + "/" + srv
				if len(rs[name]) == 0 {
					continue
				}
				k, _ := rs.kept(name)
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", tr, load, srv, med(k, "writes/req"), med(k, "reads/req"), med(k, "wbytes/req"))
			}
		}
	}
	b.WriteString("\n")
}

// hasUnit says whether a benchmark whose name starts with p reported
// unit.
func hasUnit(rs runs, p, unit string) bool {
	for name, rounds := range rs {
		if strings.HasPrefix(name, p) && len(values(rounds, unit)) > 0 {
			return true
		}
	}
	return false
}

func renderIdle(b *strings.Builder, rs runs) {
	if !hasPrefix(rs, "BenchmarkH2IdleMemory/") {
		return
	}
	b.WriteString("## 2. Idle HTTP/2 connections (BenchmarkH2IdleMemory)\n\n" +
		"n connections, each after the preface, one GET /plaintext answered and the server's SETTINGS acknowledged, left open and silent; " +
		"the growth of the server's RSS (VmRSS), of its Go heap in use after a GC, and of its goroutines, per connection.\n\n")
	b.WriteString("| transport | connections | server | RSS B/conn | heap B/conn | goroutines/conn |\n|---|---|---|---|---|---|\n")
	for _, tr := range transports {
		for _, n := range idleConns {
			for _, srv := range h2Servers {
				name := "BenchmarkH2IdleMemory/" + tr + "/conns=" + n + "/" + srv
				if len(rs[name]) == 0 {
					continue
				}
				k, _ := rs.kept(name)
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", tr, n, srv, cell(k, "rss-B/conn"), cell(k, "heap-B/conn"), cell(k, "goroutines/conn"))
			}
		}
	}
	b.WriteString("\n")
}

func renderTransfer(b *strings.Builder, rs runs) {
	if !hasPrefix(rs, "BenchmarkH2Transfer/") {
		return
	}
	b.WriteString("## 3. One stream, a large body each way (BenchmarkH2Transfer)\n\n" +
		"-h2.transfer bytes (1 GiB) downloaded (GET /download) or uploaded (POST /upload) on one stream with net/http's client, every downloaded byte checked; " +
		"a fresh server and connection per cell after a 16 MiB warm-up. **peak RSS** is the growth of the server's VmHWM (reset before the transfer) over its RSS after a GC: " +
		"a server that buffers the stream rather than pass it on under flow control shows it here. RSS after is the growth at the end, before any GC.\n\n")
	b.WriteString("| transport | direction | server | peak RSS MiB | RSS after MiB | MiB/s | cpu-µs/MiB | server % | client % | rounds |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, tr := range transports {
		for _, dir := range transferDir {
			for _, srv := range h2Servers {
				name := "BenchmarkH2Transfer/" + tr + "/" + dir + "/" + srv
				if len(rs[name]) == 0 {
					continue
				}
				k, all := rs.kept(name)
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", tr, dir, srv,
					cell(k, "peak-rss-MiB"), cell(k, "rss-after-MiB"), cell(k, "MiB/s"), cell(k, "cpu-µs/MiB"),
					med(k, "server-util-%"), med(k, "client-util-%"), roundsNote(len(k), all))
			}
		}
	}
	b.WriteString("\n")
}

func renderOpen(b *strings.Builder, rs runs) {
	if !hasPrefix(rs, "BenchmarkH2OpenLoop/") {
		return
	}
	b.WriteString("## 4. Open-loop latency over h2c (BenchmarkH2OpenLoop)\n\n" +
		"-h2.rate requests a second on a fixed schedule over -h2.conns connections (each request a new stream on a random connection), " +
		"every request GET /plaintext (none) or 2 % of them GET /sleep?ms=5 (a handler blocking 5 ms); light-request latency from the scheduled send " +
		"to the answer's end, in µs. send lag is how late the client's own writes were (its share of the latencies). nghttpd serves files: it has no /sleep.\n\n")
	b.WriteString("| load | server | light p50 | light p99 | light p99.9 | light max | slow p50 | slow p99 | send lag p99 | cpu-µs/req | req/s | rounds |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range openCells {
		for _, srv := range h2Servers {
			name := "BenchmarkH2OpenLoop/" + c + "/" + srv
			if len(rs[name]) == 0 {
				continue
			}
			k, all := rs.kept(name)
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c, srv,
				cell(k, "light-p50-µs"), cell(k, "light-p99-µs"), cell(k, "light-p99.9-µs"), cell(k, "light-max-µs"),
				cell(k, "slow-p50-µs"), cell(k, "slow-p99-µs"), med(k, "send-lag-p99-µs"), cell(k, "cpu-µs/req"), med(k, "req/s"), roundsNote(len(k), all))
		}
	}
	b.WriteString("\n")
}

// hasPrefix says whether any benchmark's name starts with p.
func hasPrefix(rs runs, p string) bool {
	for name := range rs {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
