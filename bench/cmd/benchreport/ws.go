package main

import (
	"fmt"
	"io"
	"strings"
)

// The WebSocket comparison of bench/peers (wsbench_test.go): the servers
// in column order, the subject and the peers its targets name, the echo
// rows and the idle counts as the benchmarks name them.
var (
	wsServers = []string{"ws-gracepoll", "ws-gorilla", "ws-coder", "ws-nbio", "ws-gws"}
	wsNames   = map[string]string{
		"ws-gracepoll": "gracepoll ws on httpd", "ws-gorilla": "gorilla/websocket v1.5.3 on net/http",
		"ws-coder": "coder/websocket v1.8.15 on net/http", "ws-nbio": "nbio websocket v1.6.8 on nbhttp",
		"ws-gws": "lxzan/gws v1.8.9 on net/http",
	}
	wsSubject  = "ws-gracepoll"
	wsEchoRows = []string{"size=64/conns=50", "size=64/conns=1000", "size=4096/conns=50", "size=4096/conns=1000"}
	wsFanout   = 10000
)

// The targets of the WebSocket comparison.
const (
	wsCPUvsGorilla       = 0.7 // CPU per echoed message, over gorilla's
	wsCPUvsNbio          = 1.0 // and over nbio's
	wsBroadcastVsGorilla = 0.5 // time until the last connection has a broadcast, over gorilla's
)

func wsEchoName(row, server string) string { return "BenchmarkWSEcho/" + row + "/" + server }
func wsBroadcastName(server string) string {
	return fmt.Sprintf("BenchmarkWSBroadcast/conns=%d/%s", wsFanout, server)
}
func wsMemName(n int, server string) string {
	return fmt.Sprintf("BenchmarkWSIdleMemory/conns=%d/%s", n, server)
}

// maxOthers is the most CPU time, in percent of one CPU, that other
// processes and the kernel's threads may take on the two CPUs in a
// WebSocket round that counts as undisturbed (others-%).
const maxOthers = 10.0

// wsDisturbed reports, round by round, whether round i of benchmark name
// was disturbed: steal over maxSteal %, or others over maxOthers %.
// count is a unit every round reports.
func wsDisturbed(r results, name, count string) []bool {
	steal, others := r[name]["steal-%"], r[name]["others-%"]
	out := make([]bool, len(r[name][count]))
	for i := range out {
		out[i] = (i < len(steal) && steal[i] > maxSteal) || (i < len(others) && others[i] > maxOthers)
	}
	return out
}

// wsCalm returns r's benchmarks names with their disturbed rounds (see
// wsDisturbed) left out, count being a unit every round reports; a
// benchmark whose every round was disturbed keeps them all.
func wsCalm(r results, count string, names ...string) results {
	out := results{}
	for _, name := range names {
		d := wsDisturbed(r, name, count)
		keep := make([]bool, len(d))
		kept := false
		for i := range d {
			keep[i] = !d[i]
			kept = kept || keep[i]
		}
		if !kept {
			out[name] = r[name]
			continue
		}
		out[name] = keepRounds(r[name], keep)
	}
	return out
}

// wsPair returns a and b in the rounds neither was disturbed, paired round
// by round for ratioCell; all rounds if that leaves none.
func wsPair(r results, count, a, b string) results {
	da, db := wsDisturbed(r, a, count), wsDisturbed(r, b, count)
	if len(da) != len(db) {
		return results{a: r[a], b: r[b]}
	}
	keep := make([]bool, len(da))
	kept := false
	for i := range da {
		keep[i] = !da[i] && !db[i]
		kept = kept || keep[i]
	}
	if !kept {
		return results{a: r[a], b: r[b]}
	}
	return results{a: keepRounds(r[a], keep), b: keepRounds(r[b], keep)}
}

func renderWS(w io.Writer, r results) []target {
	fmt.Fprintf(w, "## 12. WebSocket servers\n\n")
	fmt.Fprintf(w, "%s Every server serves the same two routes: GET /echo upgrades to WebSocket and echoes each message "+
		"whole with its opcode; GET /broadcast?seq=N sends one 64-byte binary message to every open WebSocket connection "+
		"and answers \"sent=K\". No server agrees compression (permessage-deflate is off or not offered: the client offers "+
		"none), every one refuses messages over 1 MiB, and each keeps its connections in the same map for the broadcast. "+
		"**gracepoll** is package ws on httpd (event-driven: no goroutine per connection; broadcast with "+
		"`ws.NewPreparedMessage` and `Conn.WritePrepared`); **gorilla** v1.5.3 and **coder** v1.8.15 run on net/http, a "+
		"goroutine per connection with the usual read loop (ReadMessage/WriteMessage, Read/Write), broadcast from the "+
		"handler's goroutine (gorilla: `PreparedMessage` and `WritePreparedMessage` under a per-connection write mutex; "+
		"coder: `Write`, safe concurrently, no prepared message); **nbio** is nbio's websocket on its nbhttp engine "+
		"(event-driven, handlers on its executor, `ReleaseWebsocketPayload`; broadcast with `WriteMessage` per "+
		"connection); **gws** v1.8.9 is lxzan/gws's event-driven Upgrader on net/http, each connection's ReadLoop on a "+
		"goroutine as its README starts it (broadcast with `gws.Broadcaster`). The client is bench/peers' own raw-frame "+
		"client, one epoll loop on one thread (GOMAXPROCS=1), the same for every server; it masks every frame and checks "+
		"every message it receives byte for byte. A round is **disturbed** when the hypervisor took more than 2 %% of one "+
		"CPU's time from the two CPUs (steal) or other processes and the kernel's threads ran on them more than 10 %% "+
		"of one CPU's time (others: the machine is shared, and they are not pinned away from the benchmark's CPUs); medians and ranges (min–max) are over the undisturbed rounds (rounds: kept of all, all "+
		"kept when every round was disturbed), ratios' ranges round by round.\n\n", pinnedSetup)
	var ts []target
	ts = append(ts, renderWSEcho(w, r)...)
	ts = append(ts, renderWSBroadcast(w, r)...)
	ts = append(ts, renderWSMemory(w, r)...)
	return ts
}

// renderWSEcho renders BenchmarkWSEcho and its targets.
func renderWSEcho(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Echo, closed loop\n\n")
	fmt.Fprintf(w, "`BenchmarkWSEcho`: N connections each keep one binary message in flight and send the next when its "+
		"echo has come; a fresh server per cell, a 0.5 s unmeasured warm-up, then the measured run. CPU µs/msg is the "+
		"server's CPU time per echoed message; latency is the round trip, write to the echo's last byte.\n\n")
	if skipNote(w, "BenchmarkWSEcho") {
		return nil
	}
	const unit = "server-µs/msg"
	var names []string
	for _, row := range wsEchoRows {
		for _, s := range wsServers {
			names = append(names, wsEchoName(row, s))
		}
	}
	calm := wsCalm(r, unit, names...)
	fmt.Fprintf(w, "| row | server | CPU µs/msg | msgs/s | p50 µs | p99 µs | server util %% | client util %% | steal %% (max) | others %% (max) | rounds |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	rows := false
	for _, row := range wsEchoRows {
		for _, s := range wsServers {
			b := wsEchoName(row, s)
			if r.runs(b, unit) == 0 {
				continue
			}
			rows = true
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |\n", row, wsNames[s], calm.spread(b, unit),
				calm.spread(b, "msgs/s"), calm.num(b, "p50-µs"), calm.spread(b, "p99-µs"), calm.num(b, "server-util-%"),
				calm.num(b, "client-util-%"), r.max(b, "steal-%"), r.max(b, "others-%"), calm.runs(b, unit), r.runs(b, unit))
		}
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | | | | | |\n\n")
		return nil
	}
	bases := []string{"ws-gorilla", "ws-nbio", "ws-gws", "ws-coder"}
	fmt.Fprintf(w, "\ngracepoll's CPU per message over each peer's, per row (below 1: less CPU than the peer):\n\n| row |")
	for _, base := range bases {
		fmt.Fprintf(w, " vs %s |", strings.TrimPrefix(base, "ws-"))
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|", len(bases)))
	var ts []target
	const why = "compare the rounds in the raw output and the CPU profile of the gracepoll server under the same row " +
		"(cmd/serve -cpuprofile): where the time goes decides what to change."
	for _, row := range wsEchoRows {
		subj := wsEchoName(row, wsSubject)
		fmt.Fprintf(w, "| %s |", row)
		for _, base := range bases {
			b := wsEchoName(row, base)
			fmt.Fprintf(w, " %s |", wsPair(r, unit, subj, b).ratioCell(subj, b, unit))
		}
		fmt.Fprintln(w)
		g := wsEchoName(row, "ws-gorilla")
		pg := wsPair(r, unit, subj, g)
		if x, ok := pg.medianRatio(subj, g, unit); ok {
			ts = append(ts, target{fmt.Sprintf("WebSocket echo %s: gracepoll CPU per message <= %gx gorilla's", row, wsCPUvsGorilla),
				pg.ratioCell(subj, g, unit) + " of gorilla's", x <= wsCPUvsGorilla, why})
		}
		n := wsEchoName(row, "ws-nbio")
		pr := wsPair(r, unit, subj, n)
		if x, ok := pr.medianRatio(subj, n, unit); ok {
			ts = append(ts, target{fmt.Sprintf("WebSocket echo %s: gracepoll CPU per message <= nbio's", row),
				pr.ratioCell(subj, n, unit) + " of nbio's", x <= wsCPUvsNbio, why})
		}
	}
	fmt.Fprintln(w)
	return ts
}

// renderWSBroadcast renders BenchmarkWSBroadcast and its target.
func renderWSBroadcast(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Broadcast to %s connections\n\n", thousands(wsFanout))
	fmt.Fprintf(w, "`BenchmarkWSBroadcast`: %s connections open (each after a checked echo), the client writes GET "+
		"/broadcast?seq=N on a keep-alive HTTP connection and waits until every connection has the 64-byte message "+
		"(checked) and the server's answer counts them all; 10 broadcasts per round, one at a time, each a window of its "+
		"own with the server quiet before and after. **last** is from the request's write until the last connection had "+
		"the message, **half** until half had it; server CPU is per broadcast (the request included); client CPU near "+
		"last would mean the client, not the server, was the limit. Medians over the round's broadcasts, then over "+
		"rounds.\n\n", thousands(wsFanout))
	const unit = "last-ms"
	var names []string
	for _, s := range wsServers {
		names = append(names, wsBroadcastName(s))
	}
	if skipNote(w, names...) {
		return nil
	}
	calm := wsCalm(r, unit, names...)
	fmt.Fprintf(w, "| server | last ms | vs gorilla | half ms | server CPU ms | client CPU ms | steal %% (max) | others %% (max) | rounds |\n|---|---|---|---|---|---|---|---|---|\n")
	rows := false
	g := wsBroadcastName("ws-gorilla")
	for _, s := range wsServers {
		b := wsBroadcastName(s)
		if r.runs(b, unit) == 0 {
			continue
		}
		rows = true
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |\n", wsNames[s], calm.spread(b, unit),
			wsPair(r, unit, b, g).ratioCell(b, g, unit), calm.num(b, "half-ms"), calm.spread(b, "server-cpu-ms"),
			calm.num(b, "client-cpu-ms"), r.max(b, "steal-%"), r.max(b, "others-%"), calm.runs(b, unit), r.runs(b, unit))
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | | | |\n\n")
		return nil
	}
	fmt.Fprintln(w)
	subj := wsBroadcastName(wsSubject)
	pr := wsPair(r, unit, subj, g)
	x, ok := pr.medianRatio(subj, g, unit)
	if !ok {
		return nil
	}
	return []target{{fmt.Sprintf("WebSocket broadcast to %s connections: gracepoll's time to the last one <= %gx gorilla's", thousands(wsFanout), wsBroadcastVsGorilla),
		pr.ratioCell(subj, g, unit) + " of gorilla's", x <= wsBroadcastVsGorilla,
		"a broadcast is one write system call per connection on every server, and on loopback each write also runs the " +
			"receiving socket's TCP processing on the server's CPU: compare server CPU per broadcast with last, and the " +
			"server's CPU profile under this benchmark."}}
}

// renderWSMemory renders BenchmarkWSIdleMemory, the extrapolation to a
// million connections and the memory target.
func renderWSMemory(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Idle connections\n\n")
	fmt.Fprintf(w, "`BenchmarkWSIdleMemory` (one round): N connections each complete the handshake and one 64-byte echo "+
		"(checked) and stay open and silent; the growth of the server process's RSS (VmRSS), of its Go heap in use after a "+
		"GC and of its goroutines (runtime.NumGoroutine, read in the server process), per connection. **Kernel** is the "+
		"kernel's memory per connection, which no process's RSS counts: the growth of its slab memory (Slab in "+
		"/proc/meminfo: socket, inode, file, epoll and TCP structures) and TCP buffer memory (/proc/net/sockstat's TCP mem "+
		"pages) while the connections open, over twice their number (a loopback connection is two sockets in the one "+
		"kernel, the client's and the server's, much alike): an estimate, machine-wide, the same for every server in "+
		"principle. **At 1,000,000** multiplies the per-connection figures at 10,000 by a million (decimal GB): the "+
		"process's part and the kernel's, apart.\n\n")
	fmt.Fprintf(w, "| connections | server | RSS B/conn | vs nbio | heap B/conn | goroutines/conn | kernel B/conn | RSS at 1,000,000 | kernel at 1,000,000 |\n|---|---|---|---|---|---|---|---|---|\n")
	gb := func(name, unit string) string {
		if v, ok := r.get(name, unit); ok {
			return fmt.Sprintf("%.2f GB", v*1e6/1e9)
		}
		return dash
	}
	rows := false
	for _, n := range idleCounts {
		for _, s := range wsServers {
			b := wsMemName(n, s)
			if msg, ok := skips[b]; ok {
				fmt.Fprintf(w, "| %d | %s | skipped: %s | | | | | | |\n", n, wsNames[s], msg)
				continue
			}
			if r.runs(b, "rss-B/conn") == 0 {
				continue
			}
			rows = true
			mil1, mil2 := "", ""
			if n == wsFanout {
				mil1, mil2 = gb(b, "rss-B/conn"), gb(b, "kernel-B/conn")
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, wsNames[s], r.num(b, "rss-B/conn"),
				relTo(r, b, wsMemName(n, "ws-nbio"), "rss-B/conn"), r.num(b, "heap-B/conn"), r.num(b, "goroutines/conn"),
				r.num(b, "kernel-B/conn"), mil1, mil2)
		}
	}
	if !rows {
		fmt.Fprintf(w, "| not run | | | | | | | | |\n\n")
		return nil
	}
	fmt.Fprintln(w)
	subj, nbio := wsMemName(wsFanout, wsSubject), wsMemName(wsFanout, "ws-nbio")
	rs, ok1 := r.get(subj, "rss-B/conn")
	rn, ok2 := r.get(nbio, "rss-B/conn")
	g, ok3 := r.get(subj, "goroutines/conn")
	if !ok1 || !ok2 || !ok3 {
		return nil
	}
	hs, _ := r.get(subj, "heap-B/conn")
	hn, _ := r.get(nbio, "heap-B/conn")
	return []target{{fmt.Sprintf("WebSocket idle connection at %s: gracepoll RSS <= nbio's, with no goroutine per connection", thousands(wsFanout)),
		fmt.Sprintf("%s B vs nbio %s B (%s), %s goroutines/conn", fmtNum(rs), fmtNum(rn), ratio(rs/rn), fmtNum(g)),
		rs <= rn && g < noGoroutine,
		fmt.Sprintf("Go heap after a GC is %s B per connection against nbio's %s B: RSS above the heap is memory the "+
			"process touched while the connections opened (handshake garbage, buffers freed but not yet returned) or "+
			"keeps outside the heap; a heap profile of the server decides which.", fmtNum(hs), fmtNum(hn))}}
}
