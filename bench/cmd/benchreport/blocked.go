package main

import (
	"fmt"
	"io"
	"strings"
)

// Handlers that block: what they cost the HTTP servers in CPU per request
// (BenchmarkHTTPOpenLoop's two cells, per server), and how fast a server
// releases the connections its clients close while one handler is blocked
// (BenchmarkBlockedRelease of bench/peers).
var (
	// blockedServers are BenchmarkBlockedRelease's servers, in row order;
	// those not run are left out.
	blockedServers = []string{"httpd", "conn-http", "conn-http-stealing", "net/http", "fasthttp", "nbio", "hertz"}
	blockedCells   = []struct{ name, label string }{
		{"none", "no handler blocked"},
		{"blocked", "one handler blocked for the whole load"},
	}
)

// blockedReleaseTarget is the release latency (µs, p99) the servers on a
// shared set or stealing must keep while one handler is blocked.
const blockedReleaseTarget = 1000

func blockedName(cell, server string) string { return "BenchmarkBlockedRelease/" + cell + "/" + server }

// renderHTTPOpenCPU renders, per HTTP server, the CPU per request of
// BenchmarkHTTPOpenLoop's cell with blocking handlers over that of its
// cell without.
func renderHTTPOpenCPU(w io.Writer, r results) {
	none, slow := httpOpenCells[0], httpOpenCells[1]
	fmt.Fprintf(w, "Server CPU per request, %s over %s (all requests counted, the slow ones included), per server: "+
		"above 1, the blocking handlers cost CPU beyond their share of the requests (a waiter started or woken, a "+
		"batch handed over, a goroutine parked and resumed). The ratio's range is round by round over the rounds "+
		"neither cell was disturbed.\n\n", slow.label, strings.ToLower(none.label))
	fmt.Fprintf(w, "| server | CPU µs/req, %s | CPU µs/req, %s | %s / %s |\n|---|---|---|---|\n", none.name, slow.name, slow.name, none.name)
	for _, s := range httpServers {
		a, b := httpOpenName(slow.name, s), httpOpenName(none.name, s)
		if r.runs(a, "cpu-µs/req") == 0 && r.runs(b, "cpu-µs/req") == 0 {
			continue
		}
		calm := httpCalm(r, a, b)
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", httpNames[s], calm.spread(b, "cpu-µs/req"), calm.spread(a, "cpu-µs/req"),
			httpPair(r, a, b).ratioCell(a, b, "cpu-µs/req"))
	}
	fmt.Fprintln(w)
}

// blockedCalm returns r's BenchmarkBlockedRelease rows with the rounds
// the hypervisor took more than maxSteal % of the two CPUs left out, and
// a row whose every round was disturbed with all of them.
func blockedCalm(r results, names ...string) results {
	out := results{}
	for _, name := range names {
		steal := r[name]["steal-%"]
		keep := make([]bool, len(r[name]["fds-end-over-baseline"]))
		rows := false
		for i := range keep {
			keep[i] = i >= len(steal) || steal[i] <= maxSteal
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

// blockedPair returns a and b in the rounds neither lost more than
// maxSteal % to the hypervisor, paired round by round for ratioCell; all
// rounds if that leaves none.
func blockedPair(r results, a, b string) results {
	sa, sb := r[a]["steal-%"], r[b]["steal-%"]
	n := len(r[a]["fds-end-over-baseline"])
	if n != len(r[b]["fds-end-over-baseline"]) || len(sa) != n || len(sb) != n {
		return results{a: r[a], b: r[b]}
	}
	keep := make([]bool, n)
	rows := false
	for i := range keep {
		keep[i] = sa[i] <= maxSteal && sb[i] <= maxSteal
		rows = rows || keep[i]
	}
	if !rows {
		return results{a: r[a], b: r[b]}
	}
	return results{a: keepRounds(r[a], keep), b: keepRounds(r[b], keep)}
}

// renderBlocked renders BenchmarkBlockedRelease and its targets.
func renderBlocked(w io.Writer, r results) []target {
	fmt.Fprintf(w, "## 13. Releases while a handler blocks\n\n")
	fmt.Fprintf(w, "Each server runs in a process of its own (`bench/peers/cmd/serve`) pinned to the first CPU with "+
		"GOMAXPROCS=1, the client in another pinned to the second CPU, a fresh server per cell and round, the cells and "+
		"servers interleaved round by round. `BenchmarkBlockedRelease`: the client opens connections on a fixed schedule, 1,000 a second for 4 s by "+
		"default (bench/run.sh: BLOCKED_RATE, BLOCKED_TIME), each dialling, sending GET /plaintext, reading the checked "+
		"answer and closing (FIN). In the **blocked** cell one connection first sends GET /sleep?ms=N, N the load's length "+
		"plus 1 s, whose handler sleeps inline on a waiter past the load's end (a slow "+
		"database call or a slow inline download); **none** is the same load without it. A waiter stuck in one handler "+
		"passes no quiescent point: a reclaimer that waits for it holds every release, and the closed connections keep "+
		"their descriptors (CLOSE-WAIT sockets) until the handler returns. **release** is Delete to the start of the "+
		"release (the poller's `Stats().ReleaseLatency` over the load's connections, read from the server process once "+
		"the blocked handler has returned, so a held release counts with its whole wait); **pending at end** the "+
		"registrations deleted and not yet released once the load is over and its last releases have had 200 ms, the "+
		"handler still blocked, and the oldest one's age; **fds** the server's open descriptors (/proc/PID/fd, counted "+
		"every 10 ms) over the count before the load, at most during it and at its end (the blocked connection counts 1). "+
		"httpd runs its defaults (one shared epoll set); **conn-http** is the raw HTTP/1.1 server on package conn "+
		"(`peers.ConnHTTP`) with httpd's poller configuration, **conn-http-stealing** the same on stealing. Medians and "+
		"ranges over the rounds (rounds with more than 2 %% steal left out); server util is the server's CPU time from "+
		"the load's start to the end figures over that time.\n\n")
	if skipNote(w, "BenchmarkBlockedRelease") {
		return nil
	}
	var names []string
	for _, c := range blockedCells {
		for _, s := range blockedServers {
			names = append(names, blockedName(c.name, s))
		}
	}
	calm := blockedCalm(r, names...)
	fmt.Fprintf(w, "| cell | server | release p50 µs | release p99 µs | release max µs (max) | pending at end | oldest pending µs "+
		"| fds max over baseline | fds at end over baseline | conns/s | connection p99 µs | server util %% | steal %% (max) | rounds |\n"+
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	rows := false
	for _, c := range blockedCells {
		for _, s := range blockedServers {
			b := blockedName(c.name, s)
			if r.runs(b, "fds-end-over-baseline") == 0 {
				continue
			}
			rows = true
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |\n", c.name, httpNames[s],
				calm.num(b, "release-p50-µs"), calm.spread(b, "release-p99-µs"), calm.max(b, "release-max-µs"),
				calm.spread(b, "pending-at-end"), calm.num(b, "oldest-pending-µs"), calm.spread(b, "fds-max-over-baseline"),
				calm.spread(b, "fds-end-over-baseline"), calm.num(b, "conns/s"), calm.spread(b, "cycle-p99-µs"),
				calm.num(b, "server-util-%"), calm.max(b, "steal-%"), calm.runs(b, "fds-end-over-baseline"), r.runs(b, "fds-end-over-baseline"))
		}
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | | | | | | | | |\n\n")
		return nil
	}
	fmt.Fprintf(w, "\nRelease p99 with a handler blocked over the same server's without (range: round by round, over the rounds neither lost more than 2 %% to steal):\n\n| server | blocked / none |\n|---|---|\n")
	for _, s := range blockedServers {
		a, b := blockedName("blocked", s), blockedName("none", s)
		if r.runs(a, "release-p99-µs") == 0 || r.runs(b, "release-p99-µs") == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s |\n", httpNames[s], blockedPair(r, a, b).ratioCell(a, b, "release-p99-µs"))
	}
	fmt.Fprintln(w)

	var ts []target
	for _, s := range blockedServers {
		b := blockedName("blocked", s)
		p99, ok := calm.get(b, "release-p99-µs")
		if !ok {
			continue
		}
		fds, _ := calm.get(b, "fds-end-over-baseline")
		ts = append(ts, target{fmt.Sprintf("Releases while a handler blocks, %s: release p99 <= %d µs", httpNames[s], blockedReleaseTarget),
			fmt.Sprintf("%s µs; %s descriptors over the baseline at the load's end", calm.spread(b, "release-p99-µs"), fmtNum(fds)),
			p99 <= blockedReleaseTarget,
			"a waiter running one handler passes no quiescent point: until the poller takes a waiter stuck for an Overrun " +
				"offline in the reclaimer, every release waits for the handler to return (see pending at end)."})
	}
	return ts
}
