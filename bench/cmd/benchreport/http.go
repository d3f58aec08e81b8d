package main

import (
	"fmt"
	"io"
	"strings"
)

// The HTTP/1.1 comparison of bench/peers (http_test.go and its
// neighbours): the servers in column order, the subject and the peers it
// is set against, the wrk rows and the open-loop cells as the benchmarks
// name them.
var (
	httpServers = []string{"httpd", "conn-http", "fasthttp", "nbio", "net/http", "hertz"}
	httpNames   = map[string]string{
		"httpd": "gracepoll httpd", "conn-http": "gracepoll conn, raw HTTP/1.1", "conn-http-stealing": "gracepoll conn, raw HTTP/1.1, stealing",
		"fasthttp": "fasthttp v1.78.0", "nbio": "nbio nbhttp v1.6.8",
		"net/http": "net/http", "hertz": "hertz v0.10.4",
		"httpd-tls": "gracepoll httpd + crypto/tls", "net/http-tls": "net/http + crypto/tls",
	}
	httpSubject = "httpd"
	httpBases   = []string{"fasthttp", "nbio"}
	// httpRows are BenchmarkHTTP's rows; pipelined ones have a target of
	// their own.
	httpRows = []struct {
		name, label string
		pipelined   bool
	}{
		{"plaintext/c=50", "plaintext, 50 connections", false},
		{"plaintext/c=500", "plaintext, 500 connections", false},
		{"plaintext/c=256/pipeline=16", "plaintext, 256 connections, 16 pipelined", true},
		{"json/c=50", "json, 50 connections", false},
	}
	httpOpenCells = []struct{ name, label string }{
		{"none", "every request light"},
		{"p=2%/D=5ms", "2 % of handlers sleep 5 ms"},
	}
	httpTLSServers = []string{"httpd-tls", "net/http-tls"}
)

// The targets of the HTTP comparison, as multiples of a peer's figure.
const (
	httpCPUvsFast      = 1.5 // CPU per request in a wrk row, over fasthttp's
	httpCPUvsFastMoon  = 1.0 // the moonshot
	httpPipelineVsFast = 3.0 // CPU per request pipelined, over fasthttp's
	httpOpenP99vsFast  = 1.5 // open-loop light p99, over fasthttp's
	// noGoroutine is the most goroutines per idle connection that still
	// counts as none: fewer than one per hundred connections is the
	// server's own few, not one per connection.
	noGoroutine = 0.01
)

func httpName(row, server string) string      { return "BenchmarkHTTP/" + row + "/" + server }
func httpOpenName(cell, server string) string { return "BenchmarkHTTPOpenLoop/" + cell + "/" + server }

// httpDisturbed reports, round by round, whether round i of HTTP
// benchmark name was disturbed: the hypervisor took more than maxSteal %
// of the two CPUs (steal-%), or an open-loop client's own sends were more
// than maxSendLag µs late at p99 (send-lag-p99-µs): the machine, not the
// server, decided those rounds. count is a unit every round reports.
func httpDisturbed(r results, name, count string) []bool {
	steal, lag := r[name]["steal-%"], r[name]["send-lag-p99-µs"]
	out := make([]bool, len(r[name][count]))
	for i := range out {
		out[i] = (i < len(steal) && steal[i] > maxSteal) || (i < len(lag) && lag[i] > maxSendLag)
	}
	return out
}

// httpCountUnit is a unit every round of an HTTP benchmark reports.
func httpCountUnit(name string) string {
	switch {
	case strings.HasPrefix(name, "BenchmarkHTTPOpenLoop/"):
		return "light-p99-µs"
	case strings.HasPrefix(name, "BenchmarkHTTPTLS/handshake/"):
		return "cpu-µs/handshake"
	}
	return "cpu-µs/req"
}

// httpCalm returns r's HTTP benchmarks with their disturbed rounds left
// out, and a cell whose every round was disturbed with all of them (a
// figure marked by its steal beats none).
func httpCalm(r results, names ...string) results {
	out := results{}
	for _, name := range names {
		d := httpDisturbed(r, name, httpCountUnit(name))
		keep := make([]bool, len(d))
		rows := false
		for i := range d {
			keep[i] = !d[i]
			rows = rows || keep[i]
		}
		if !rows {
			out[name] = r[name]
			continue
		}
		out[name] = keepRounds(r[name], keep)
	}
	return out
}

// httpPair returns a and b in the rounds neither was disturbed, paired
// round by round for ratioCell; all rounds if that leaves none.
func httpPair(r results, a, b string) results {
	da, db := httpDisturbed(r, a, httpCountUnit(a)), httpDisturbed(r, b, httpCountUnit(b))
	if len(da) != len(db) {
		return results{a: r[a], b: r[b]}
	}
	keep := make([]bool, len(da))
	rows := false
	for i := range da {
		keep[i] = !da[i] && !db[i]
		rows = rows || keep[i]
	}
	if !rows {
		return results{a: r[a], b: r[b]}
	}
	return results{a: keepRounds(r[a], keep), b: keepRounds(r[b], keep)}
}

// rounds formats how many rounds of name were kept, of all.
func rounds(calm, r results, name string) string {
	u := httpCountUnit(name)
	return fmt.Sprintf("%d of %d", calm.runs(name, u), r.runs(name, u))
}

func renderHTTP(w io.Writer, r results) []target {
	fmt.Fprintf(w, "## 11. HTTP/1.1 servers\n\n")
	fmt.Fprintf(w, "%s Every server serves the same routes with the same bytes: GET /plaintext \"Hello, World!\" text/plain, "+
		"GET /json `{\"message\":\"Hello, World!\"}` application/json (encoding/json per request), GET /sleep?ms=N \"ok\" after "+
		"sleeping N ms; net/http, nbio and httpd serve one http.Handler (`peers.HTTPHandler`), fasthttp and hertz the same "+
		"routes in their own handler interfaces. **httpd** is gracepoll's `httpd.Server` with its defaults; **conn-http** "+
		"(`peers.ConnHTTP`) the same routes answered by a minimal HTTP/1.1 parser straight on package conn, with httpd's "+
		"poller configuration (one shared epoll set, waiters added while handlers block) and the sleep inline on the "+
		"waiter: the floor under httpd; **fasthttp** "+
		"v1.78.0, **nbio** nbhttp v1.6.8 (its defaults: handlers on its executor), **net/http** Go's, **hertz** v0.10.4 "+
		"(cloudwego/netpoll under it), each with its defaults. A round of a cell is **disturbed** when the hypervisor took "+
		"more than 2 %% of the two CPUs' time (steal) or, open loop, when the client's own sends were more than 250 µs late "+
		"at p99; medians and ranges (min–max) are over the undisturbed rounds (rounds: kept of all), ratios' ranges "+
		"round by round over the rounds neither side was disturbed; bench/results/raw.txt has them all.\n\n", pinnedSetup)
	var ts []target
	ts = append(ts, renderHTTPWrk(w, r)...)
	ts = append(ts, renderHTTPMemory(w, r)...)
	ts = append(ts, renderHTTPOpen(w, r)...)
	renderHTTPTLS(w, r)
	return ts
}

// renderHTTPWrk renders BenchmarkHTTP and its targets.
func renderHTTPWrk(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Closed loop: wrk\n\n")
	fmt.Fprintf(w, "`wrk -t1` pinned to the second CPU (`BenchmarkHTTP`), a fresh server per cell after a 1 s warm-up; the "+
		"pipelined row is wrk with a Lua script writing 16 requests at once on each connection (wrk's latency is then per "+
		"batch). Every response is counted by wrk's own summary: no socket error, no non-2xx answer, and the bytes read "+
		"those of the responses counted, each as long as a checked probe's. CPU µs/req is the server's CPU time per request: "+
		"one wrk thread cannot saturate the fastest servers (client util near 100 %%), so CPU per request ranks them.\n\n")
	if skipNote(w, "BenchmarkHTTP") {
		return nil
	}
	var names []string
	for _, row := range httpRows {
		for _, s := range httpServers {
			names = append(names, httpName(row.name, s))
		}
	}
	calm := httpCalm(r, names...)
	fmt.Fprintf(w, "| row | server | CPU µs/req | req/s | server util %% | client util %% | steal %% (max) | rounds |\n|---|---|---|---|---|---|---|---|\n")
	rows := false
	for _, row := range httpRows {
		for _, s := range httpServers {
			b := httpName(row.name, s)
			if r.runs(b, "cpu-µs/req") == 0 {
				continue
			}
			rows = true
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, httpNames[s], calm.spread(b, "cpu-µs/req"),
				calm.spread(b, "req/s"), calm.num(b, "server-util-%"), calm.num(b, "client-util-%"), calm.max(b, "steal-%"), rounds(calm, r, b))
		}
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | | |\n\n")
		return nil
	}
	fmt.Fprintf(w, "\nhttpd over each peer, per row (CPU per request: below 1 is less CPU than the peer's; req/s: above 1 is more):\n\n| row |")
	for _, base := range httpBases {
		fmt.Fprintf(w, " CPU/req vs %s | req/s vs %s |", base, base)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|---|", len(httpBases)))
	for _, row := range httpRows {
		subj := httpName(row.name, httpSubject)
		fmt.Fprintf(w, "| %s |", row.name)
		for _, base := range httpBases {
			b := httpName(row.name, base)
			pr := httpPair(r, subj, b)
			fmt.Fprintf(w, " %s | %s |", pr.ratioCell(subj, b, "cpu-µs/req"), pr.ratioCell(subj, b, "req/s"))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)

	const why = "compare the rounds in the raw output, and the CPU profile of httpd under the same row " +
		"(cmd/serve -cpuprofile): where the time goes decides what to change."
	var ts []target
	for _, row := range httpRows {
		subj := httpName(row.name, httpSubject)
		fast, nbio := httpName(row.name, "fasthttp"), httpName(row.name, "nbio")
		pn := httpPair(r, subj, nbio)
		if x, ok := pn.medianRatio(subj, nbio, "cpu-µs/req"); ok {
			ts = append(ts, target{fmt.Sprintf("HTTP %s: httpd CPU per request <= nbio's", row.label),
				pn.ratioCell(subj, nbio, "cpu-µs/req") + " of nbio's", x <= 1, why})
		}
		pf := httpPair(r, subj, fast)
		x, ok := pf.medianRatio(subj, fast, "cpu-µs/req")
		if !ok {
			continue
		}
		cell := pf.ratioCell(subj, fast, "cpu-µs/req") + " of fasthttp's"
		if row.pipelined {
			ts = append(ts, target{fmt.Sprintf("HTTP %s: httpd CPU per request <= %gx fasthttp's", row.label, httpPipelineVsFast),
				cell, x <= httpPipelineVsFast, why})
			continue
		}
		ts = append(ts, target{fmt.Sprintf("HTTP %s: httpd CPU per request <= %gx fasthttp's", row.label, httpCPUvsFast),
			cell, x <= httpCPUvsFast, why})
		ts = append(ts, target{fmt.Sprintf("HTTP %s (moonshot): httpd CPU per request <= fasthttp's", row.label),
			cell, x <= httpCPUvsFastMoon, why})
	}
	return ts
}

// renderHTTPMemory renders BenchmarkHTTPIdleMemory and its target.
func renderHTTPMemory(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Idle keep-alive connections\n\n")
	fmt.Fprintf(w, "N connections each complete one GET /plaintext (checked) and stay open and silent "+
		"(`BenchmarkHTTPIdleMemory`, one round): the growth of the server process's RSS (VmRSS), of its Go heap in use "+
		"after a GC and of its goroutine count (runtime.NumGoroutine, read inside the server process by the launcher; "+
		"/proc's thread count is not goroutines), per connection.\n\n")
	fmt.Fprintf(w, "| connections | server | RSS B/conn | vs httpd | heap B/conn | goroutines/conn |\n|---|---|---|---|---|---|\n")
	for _, n := range idleCounts {
		for _, s := range httpServers {
			b := fmt.Sprintf("BenchmarkHTTPIdleMemory/conns=%d/%s", n, s)
			if msg, ok := skips[b]; ok {
				fmt.Fprintf(w, "| %d | %s | skipped: %s | | | |\n", n, httpNames[s], msg)
				continue
			}
			if r.runs(b, "rss-B/conn") == 0 {
				continue
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s |\n", n, httpNames[s], r.num(b, "rss-B/conn"),
				r.ratioCell(b, fmt.Sprintf("BenchmarkHTTPIdleMemory/conns=%d/%s", n, httpSubject), "rss-B/conn"),
				r.num(b, "heap-B/conn"), r.num(b, "goroutines/conn"))
		}
	}
	fmt.Fprintln(w)
	subj, nbio := "BenchmarkHTTPIdleMemory/conns=10000/"+httpSubject, "BenchmarkHTTPIdleMemory/conns=10000/nbio"
	rs, ok1 := r.get(subj, "rss-B/conn")
	rn, ok2 := r.get(nbio, "rss-B/conn")
	g, ok3 := r.get(subj, "goroutines/conn")
	if !ok1 || !ok2 || !ok3 {
		return nil
	}
	return []target{{"HTTP idle keep-alive connection at 10,000: httpd RSS <= nbio's, with no goroutine per connection",
		fmt.Sprintf("%s B vs nbio %s B (%s), %s goroutines/conn", fmtNum(rs), fmtNum(rn), ratio(rs/rn), fmtNum(g)),
		rs <= rn && g < noGoroutine,
		"RSS per connection is the buffers and state httpd keeps for an idle connection, and a goroutine (about 8 KiB of stack) " +
			"if one waits per connection: see heap B/conn beside it."}}
}

// renderHTTPOpen renders BenchmarkHTTPOpenLoop and its targets.
func renderHTTPOpen(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Open loop: light-request latency\n\n")
	fmt.Fprintf(w, "`BenchmarkHTTPOpenLoop`: 10,000 requests/s in all on a fixed schedule over 200 keep-alive connections, "+
		"each request on a connection chosen at random among those with no request outstanding (no pipelining: a light "+
		"request never waits behind a slow one on its connection), from one client thread on its own epoll set pinned to "+
		"the second CPU, waiting between sends; idle CPUs kept polling as in the skew benchmark. Latency runs from the "+
		"request's scheduled send to the answer's last byte; every answer is checked. In the second cell 2 %% of the "+
		"requests (the same random sequence for every server) are GET /sleep?ms=5, a handler blocking 5 ms; only the light "+
		"requests' latency is shown.\n\n")
	if skipNote(w, "BenchmarkHTTPOpenLoop") {
		return nil
	}
	var names []string
	for _, c := range httpOpenCells {
		for _, s := range httpServers {
			names = append(names, httpOpenName(c.name, s))
		}
	}
	calm := httpCalm(r, names...)
	fmt.Fprintf(w, "| cell | server | light p50 µs | light p99 µs | light p99.9 µs | light max µs | req/s | CPU µs/req | steal %% (max) | send lag p99 µs (max) | rounds |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	rows := false
	for _, c := range httpOpenCells {
		for _, s := range httpServers {
			b := httpOpenName(c.name, s)
			if r.runs(b, "light-p99-µs") == 0 {
				continue
			}
			rows = true
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.name, httpNames[s], calm.num(b, "light-p50-µs"),
				calm.spread(b, "light-p99-µs"), calm.spread(b, "light-p99.9-µs"), calm.max(b, "light-max-µs"), calm.num(b, "req/s"),
				calm.num(b, "cpu-µs/req"), calm.max(b, "steal-%"), calm.max(b, "send-lag-p99-µs"), rounds(calm, r, b))
		}
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | | | | | |\n\n")
		return nil
	}
	fmt.Fprintf(w, "\nhttpd's light-request latency over each peer's (below 1: lower than the peer's):\n\n| cell |")
	for _, base := range httpBases {
		fmt.Fprintf(w, " p50 vs %s | p99 vs %s |", base, base)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|---|", len(httpBases)))
	var ts []target
	for _, c := range httpOpenCells {
		subj := httpOpenName(c.name, httpSubject)
		fmt.Fprintf(w, "| %s |", c.name)
		for _, base := range httpBases {
			b := httpOpenName(c.name, base)
			pr := httpPair(r, subj, b)
			fmt.Fprintf(w, " %s | %s |", pr.ratioCell(subj, b, "light-p50-µs"), pr.ratioCell(subj, b, "light-p99-µs"))
		}
		fmt.Fprintln(w)
		fast := httpOpenName(c.name, "fasthttp")
		pr := httpPair(r, subj, fast)
		if x, ok := pr.medianRatio(subj, fast, "light-p99-µs"); ok {
			ts = append(ts, target{fmt.Sprintf("HTTP open loop, %s: httpd light p99 <= %gx fasthttp's", c.label, httpOpenP99vsFast),
				pr.ratioCell(subj, fast, "light-p99-µs") + " of fasthttp's", x <= httpOpenP99vsFast,
				"fasthttp answers on the goroutine that read the request, one per connection; a light request on httpd " +
					"waits for whatever its waiter runs before it: compare p50 and p99 and the rounds."})
		}
	}
	fmt.Fprintln(w)
	renderHTTPOpenCPU(w, r)
	return ts
}

// renderHTTPTLS renders BenchmarkHTTPTLS (no targets: a comparison).
func renderHTTPTLS(w io.Writer, r results) {
	fmt.Fprintf(w, "### Over TLS\n\n")
	fmt.Fprintf(w, "`BenchmarkHTTPTLS`: httpd with `TLSConfig` (crypto/tls inside package conn) and net/http behind crypto/tls's "+
		"listener, TLS 1.3 with crypto/tls's default key exchange. **handshake**: connections opened by 8 client goroutines, "+
		"each a handshake, one checked GET /plaintext and a close: CPU µs per connection on the server, the handshake "+
		"nearly all of it; **keep-alive**: wrk -t1 -c50 over TLS on /plaintext, as the plaintext rows above.\n\n")
	if skipNote(w, "BenchmarkHTTPTLS") {
		return
	}
	fmt.Fprintf(w, "| case | server | handshakes/s or req/s | CPU µs per handshake or request | vs net/http | steal %% (max) | rounds |\n|---|---|---|---|---|---|---|\n")
	rows := false
	for _, c := range []struct{ prefix, rate, cpu string }{
		{"BenchmarkHTTPTLS/handshake/", "handshakes/s", "cpu-µs/handshake"},
		{"BenchmarkHTTPTLS/keepalive/c=50/", "req/s", "cpu-µs/req"},
	} {
		var names []string
		for _, s := range httpTLSServers {
			names = append(names, c.prefix+s)
		}
		calm := httpCalm(r, names...)
		for _, s := range httpTLSServers {
			b := c.prefix + s
			if r.runs(b, c.cpu) == 0 {
				continue
			}
			rows = true
			base := c.prefix + "net/http-tls"
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", strings.TrimSuffix(strings.TrimPrefix(c.prefix, "BenchmarkHTTPTLS/"), "/"),
				httpNames[s], calm.num(b, c.rate), calm.spread(b, c.cpu), httpPair(r, b, base).ratioCell(b, base, c.cpu),
				calm.max(b, "steal-%"), rounds(calm, r, b))
		}
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | |\n")
	}
	fmt.Fprintln(w)
}
