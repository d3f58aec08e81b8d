// Command benchreport turns the raw `go test -bench` output of bench/run.sh
// into docs/benchmarks.md: the machine, the commands, and tables of the
// figures that decide whether gracepoll is worth it, each a ratio measured
// in the same run. Every number in the file comes from the raw output; the
// program computes ratios and medians and nothing else.
//
//	go run ./bench/cmd/benchreport -raw bench/results/raw.txt -meta bench/results/meta.txt -out docs/benchmarks.md
//
// The meta file holds "key: value" lines written by run.sh (date, machine,
// Go version, commands, run time).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	raw := flag.String("raw", "bench/results/raw.txt", "raw `go test -bench` output")
	meta := flag.String("meta", "bench/results/meta.txt", "key: value lines about the run, from run.sh")
	out := flag.String("out", "docs/benchmarks.md", "the Markdown file to write")
	flag.Parse()
	data, err := os.ReadFile(*raw)
	if err != nil {
		fatal(err)
	}
	results, err := parse(strings.NewReader(string(data)))
	if err != nil {
		fatal(err)
	}
	m, err := readMeta(*meta)
	if err != nil {
		fatal(err)
	}
	var b strings.Builder
	targets := render(&b, results, m)
	appendRaw(&b, data)
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fatal(err)
	}
	for _, t := range targets {
		fmt.Printf("%-8s %s: %s\n", strings.Trim(verdict(t.ok), "*"), t.what, t.measured)
	}
}

// appendRaw appends the raw output the report was made from, folded: it is
// benchstat-compatible as it stands (copy it into a file).
func appendRaw(b *strings.Builder, data []byte) {
	fmt.Fprintf(b, "## Raw output\n\nThe `go test -bench` output of the run, as bench/run.sh wrote it to bench/results/raw.txt "+
		"(benchstat-compatible; not kept in the repository).\n\n<details><summary>%d lines</summary>\n\n```text\n%s",
		strings.Count(string(data), "\n"), data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("```\n\n</details>\n")
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchreport:", err)
	os.Exit(1)
}

// results maps a benchmark name (without the -GOMAXPROCS suffix) and a unit
// to every value reported for it, one per run. A benchmark that skipped
// has its message under the pseudo-unit "skip" in skips.
type results map[string]map[string][]float64

// skips maps a skipped benchmark's name to the message it skipped with.
var skips = map[string]string{}

// parse reads standard benchmark lines:
//
//	BenchmarkName/sub-2   1000   1234 ns/op   5.6 unit ...
//
// and ignores everything else (headers, PASS, ok lines, logs).
func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	skipped := "" // the benchmark of a "--- SKIP:" line, until its message
	for sc.Scan() {
		if name, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "--- SKIP: "); ok {
			skipped = strings.Fields(name + " ?")[0]
			skips[skipped] = "skipped"
			continue
		}
		if skipped != "" {
			// The message: "    file.go:NN: text".
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(sc.Text(), " ") && line != "" {
				if _, msg, ok := strings.Cut(line, ": "); ok {
					skips[skipped] = msg
				}
			}
			skipped = ""
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		iters, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		// A benchmark that runs a sub-benchmark of the same name once per
		// round (BenchmarkHTTP's -http.rounds) has its later rounds named
		// "name#01", "name#02": the same cell, another round.
		if i := strings.LastIndexByte(name, '#'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		if res[name] == nil {
			res[name] = map[string][]float64{}
		}
		// The iteration count, under a pseudo-unit: for the latency
		// benchmarks it is the number of samples.
		res[name]["N"] = append(res[name]["N"], float64(iters))
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// get returns the median of name's values in unit, and whether there were
// any.
func (r results) get(name, unit string) (float64, bool) {
	vs := r[name][unit]
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

// max returns the largest of name's values in unit over the rounds, or a
// dash if there are none.
func (r results) max(name, unit string) string {
	if vs := r[name][unit]; len(vs) > 0 {
		return fmtNum(slices.Max(vs))
	}
	return dash
}

// runs returns how many values name has in unit.
func (r results) runs(name, unit string) int { return len(r[name][unit]) }

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

func (m meta) one(k string) string {
	if v := m.values[k]; len(v) > 0 {
		return v[0]
	}
	return "?"
}

// fmtNum prints a figure with about three significant digits.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100_000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func ratio(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "x" }

// geomean of positive values.
func geomean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := 0.0
	for _, v := range vs {
		s += math.Log(v)
	}
	return math.Exp(s / float64(len(vs)))
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}
