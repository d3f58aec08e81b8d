package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// The skew comparison of bench/peers (skew_test.go): its servers in
// column order, and the cells bench/run.sh runs in the order
// BenchmarkSkew runs them, after the kind of work ("sleep/" or "spin/").
var (
	skewServers = []string{
		"skew-conn-shared", "skew-conn-per-waiter", "skew-conn-stealing",
		"skew-poller-shared", "skew-poller-per-waiter", "skew-poller-stealing",
		"skew-gnet", "skew-netpoll", "skew-net",
	}
	// skewSubjects are the servers set against the peers, each in a
	// ratio table and with targets of its own: conn on the shared set
	// and on stealing.
	skewSubjects = []string{"skew-conn-shared", "skew-conn-stealing"}
	skewCells    = []string{"none", "p=0.5%/D=1ms", "p=2%/D=1ms", "p=0.5%/D=5ms", "p=2%/D=5ms"}
	// skewBases are the peers skewSubjects are set against.
	skewBases = []string{"skew-gnet", "skew-netpoll", "skew-net"}
)

func skewName(work, cell, server string) string {
	return "BenchmarkSkew/" + work + "/" + cell + "/" + server
}

func renderSkew(w io.Writer, r results) []target {
	fmt.Fprintf(w, "## 10. The servers under skewed load\n\n")
	fmt.Fprintf(w, "Open-loop load (`BenchmarkSkew`): 10,000 requests/s in all over 200 connections, each 16-byte frame "+
		"sent on a fixed schedule to a connection chosen at random without waiting for replies, every reply checked byte "+
		"for byte; a fraction p of the frames, chosen at random (the same sequence for every server), asks the handler to "+
		"**sleep** D (a blocking call) or to **spin** D (a busy loop) before echoing it. The client is one thread on its own "+
		"epoll set, pinned to the second CPU; a light request's latency runs from its scheduled send to the reply's last "+
		"byte, so a client that falls behind counts against the server, never hides it. **skew-conn-*** is a conn.Handler on "+
		"package conn, **skew-poller-*** a server written on the poller itself, both with 4 waiters on the shared set, on a "+
		"set per waiter, or on stealing (a set per waiter whose registrations any waiter may run, a blocked waiter's "+
		"batch handed off and a stand-in started on its set), the poller's other defaults; **skew-gnet** gnet v2 with 4 "+
		"event loops; **skew-netpoll** "+
		"cloudwego/netpoll's defaults (handlers on its goroutine pool); **skew-net** a goroutine per connection. "+
		"The client waits in epoll_pwait2 between sends (a client that polled instead kept both virtual CPUs busy and had "+
		"them taken away by the hypervisor for milliseconds at a time). "+
		"Sleep cells: the server pinned to the first CPU with GOMAXPROCS=1, the client on the second. "+
		"Spin cells: a busy loop on one CPU stalls every design alike, so the server gets GOMAXPROCS=2 on **both CPUs, one "+
		"of them shared with the client**; \"none\" there is the "+
		"no-skew load on that set-up. Figures are medians over the rounds with the range (min–max) in parentheses; each "+
		"round runs every cell with every server, and the ratios' ranges are round by round. server CPU µs/req is the "+
		"server's CPU time per request at this load (median); server stalls per s how many times a second the light "+
		"requests of one millisecond, sent on time, were answered late together (five or more over 400 µs while no send "+
		"of that millisecond was 100 µs late): the server's side held them, its design or its CPU (see the machine's "+
		"stalls above). A round of a cell and server is **disturbed** when the "+
		"machine decided its tail whatever the server did: the hypervisor took more than 2 %% of the two CPUs' time "+
		"(steal %%), or the client's own sends were more than 250 µs late at p99 (send lag; 20-40 µs otherwise); "+
		"neither depends on the server. Medians and ranges are over the undisturbed rounds (rounds: undisturbed of all), "+
		"the ratio tables' over the rounds neither server was disturbed, and steal %% and send lag p99 µs are the largest "+
		"among the rounds kept; bench/results/raw.txt has every round.\n\n")
	if skipNote(w, "BenchmarkSkew") {
		return nil
	}
	renderHiccup(w, r)
	if v, ok := r.get(skewName("sleep", "none", skewServers[0]), "idle-poll"); ok && v == 0 {
		fmt.Fprintf(w, "**Idle CPUs may have halted in this run** (idle-poll 0: /dev/cpu_dma_latency was not writable): on a "+
			"virtual machine every cross-CPU wake-up then waits for the hypervisor, and the latencies are mostly that.\n\n")
	}
	calm := undisturbed(r)
	for _, work := range []string{"sleep", "spin"} {
		fmt.Fprintf(w, "### Handlers that %s\n\n", work)
		if work == "spin" {
			fmt.Fprintf(w, "Server on both CPUs (GOMAXPROCS=2), sharing the second with the client.\n\n")
		}
		fmt.Fprintf(w, "| cell | server | light p50 µs | light p99 µs | light p99.9 µs | light max µs | req/s | server CPU µs/req | server stalls per s | steal %% | send lag p99 µs | rounds |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		rows := false
		for _, cell := range skewCells {
			for _, s := range skewServers {
				b := skewName(work, cell, s)
				if _, ok := r.get(b, "light-p99-µs"); !ok {
					continue
				}
				rows = true
				c := calm
				if c.runs(b, "light-p99-µs") == 0 {
					c = r // every round disturbed: show them all rather than nothing
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |\n", cell, s, c.num(b, "light-p50-µs"),
					c.spread(b, "light-p99-µs"), c.spread(b, "light-p99.9-µs"), c.max(b, "light-max-µs"),
					c.spread(b, "req/s"), c.num(b, "server-cpu-µs/req"), c.num(b, "server-stalls/s"),
					c.max(b, "steal-%"), c.max(b, "send-lag-p99-µs"), calm.runs(b, "light-p99-µs"), r.runs(b, "light-p99-µs"))
			}
		}
		if !rows {
			fmt.Fprintf(w, "| not run | | | | | | | | | | | |\n\n")
			continue
		}
		fmt.Fprintln(w)
		for _, subject := range skewSubjects {
			renderSkewRatios(w, r, work, subject)
		}
	}
	var ts []target
	for _, subject := range skewSubjects {
		ts = append(ts, skewTargets(r, subject)...)
	}
	return ts
}

// renderSkewRatios writes subject's light-request latency over each
// peer's (skewBases), per cell of one kind of work, if subject ran.
func renderSkewRatios(w io.Writer, r results, work, subject string) {
	var cells []string
	for _, cell := range skewCells {
		if _, ok := r.get(skewName(work, cell, subject), "light-p99-µs"); ok {
			cells = append(cells, cell)
		}
	}
	if len(cells) == 0 {
		return
	}
	fmt.Fprintf(w, "%s's light-request latency over each peer's, per cell (below 1: lower than the peer's):\n\n", subject)
	fmt.Fprintf(w, "| cell |")
	for _, base := range skewBases {
		fmt.Fprintf(w, " p99 vs %s | p99.9 vs %s |", strings.TrimPrefix(base, "skew-"), strings.TrimPrefix(base, "skew-"))
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|---|", len(skewBases)))
	for _, cell := range cells {
		conn := skewName(work, cell, subject)
		fmt.Fprintf(w, "| %s |", cell)
		for _, base := range skewBases {
			b := skewName(work, cell, base)
			pr := undisturbedPair(r, conn, b)
			fmt.Fprintf(w, " %s | %s |", pr.ratioCell(conn, b, "light-p99-µs"), pr.ratioCell(conn, b, "light-p99.9-µs"))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// skewTargets are subject's targets (conn on the shared set or on
// stealing) under blocking skew (the sleep cells): against each peer in
// every skewed cell, its p99.9 against its own without skew, and without
// skew against gnet and per-waiter sets.
func skewTargets(r results, subject string) []target {
	conn := func(cell string) string { return skewName("sleep", cell, subject) }
	label := strings.TrimPrefix(subject, "skew-")
	const why = "light requests wait behind a blocked handler until the monitor finds it: at best Overrun (250 µs), " +
		"and 1-2 ms when every P is idle, since the Go timer that drives the monitor then fires on the runtime's " +
		"whole-millisecond epoll_wait; a goroutine per connection (net) or a pool (netpoll) never queues a request " +
		"behind another."
	calm := undisturbed(r)
	var ts []target
	for _, cell := range skewCells[1:] {
		for _, c := range []struct {
			base  string
			limit float64
		}{{"skew-gnet", 0.1}, {"skew-netpoll", 1}, {"skew-net", 2}} {
			base := skewName("sleep", cell, c.base)
			pr := undisturbedPair(r, conn(cell), base)
			x, ok := pr.medianRatio(conn(cell), base, "light-p99-µs")
			if !ok {
				continue
			}
			ts = append(ts, target{fmt.Sprintf("skew %s (sleep): %s light p99 <= %gx %s's", cell, label, c.limit, strings.TrimPrefix(c.base, "skew-")),
				pr.ratioCell(conn(cell), base, "light-p99-µs"), x <= c.limit, why})
		}
		if x, ok := calm.medianRatio(conn(cell), conn("none"), "light-p99.9-µs"); ok {
			ts = append(ts, target{fmt.Sprintf("skew %s (sleep): %s light p99.9 <= 5x its own without skew", cell, label),
				ratio(x), x <= 5, why})
		}
	}
	noSkewWhy := "without skew the shared set pays for one set among four waiters: every readiness edge reaches each " +
		"parked waiter's parker (several goroutines wake for one event: the server CPU per request above) and the " +
		"EPOLLONESHOT re-arm per event (see dispatch). The machine's own stalls (BenchmarkHiccup) reach every server's " +
		"tail now and then: compare the rounds."
	if subject == "skew-conn-stealing" {
		noSkewWhy = "without skew stealing runs per-waiter sets with no re-arm; what it adds is the running bit per event and " +
			"a mutex per batch for the monitor's hand-off (see dispatch). The machine's own stalls (BenchmarkHiccup) reach " +
			"every server's tail now and then: compare the rounds."
	}
	if vs := r[conn("none")]["light-p99-µs"]; len(vs) > 0 {
		worst := slices.Max(vs)
		ts = append(ts, target{fmt.Sprintf("no skew: %s light p99 < 150 µs in every round", label),
			fmt.Sprintf("%s µs at most, over %d rounds", fmtNum(worst), len(vs)), worst < 150, noSkewWhy})
	}
	for _, base := range []string{"skew-gnet", "skew-conn-per-waiter"} {
		b := skewName("sleep", "none", base)
		pr := undisturbedPair(r, conn("none"), b)
		if x, ok := pr.medianRatio(conn("none"), b, "light-p99-µs"); ok {
			ts = append(ts, target{fmt.Sprintf("no skew: %s light p99 within 10 %% of %s's", label, strings.TrimPrefix(base, "skew-")),
				pr.ratioCell(conn("none"), b, "light-p99-µs"), x <= 1.1, noSkewWhy})
		}
	}
	return ts
}

// renderHiccup writes what BenchmarkHiccup measured of the machine itself:
// how late a sleeping thread wakes on each CPU, the floor under every
// server's tail latency.
func renderHiccup(w io.Writer, r results) {
	var names []string
	for name := range r {
		if strings.HasPrefix(name, "BenchmarkHiccup/") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	fmt.Fprintf(w, "The machine itself (`BenchmarkHiccup`, run just before the sleep cells in each round): a thread on each CPU "+
		"sleeps 100 µs at a time, idle CPUs polling as in the sleep cells, and counts how late it wakes. A wake-up "+
		"500 µs late or more is time the CPU was not the machine's to give (the hypervisor's, or the host's interrupt "+
		"delivery), and every server on that CPU loses it alike.\n\n")
	fmt.Fprintf(w, "| CPU | late p50 µs | late p99 µs | late max µs | stalls ≥ 500 µs per s | stalled ms per s | rounds |\n|---|---|---|---|---|---|---|\n")
	for _, b := range names {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d |\n", strings.TrimPrefix(strings.TrimPrefix(b, "BenchmarkHiccup/"), "cpu="),
			r.spread(b, "late-p50-µs"), r.spread(b, "late-p99-µs"), r.spread(b, "late-max-µs"),
			r.spread(b, "stalls-500µs/s"), r.spread(b, "stalled-ms/s"), r.runs(b, "late-p99-µs"))
	}
	fmt.Fprintln(w)
}

// A round of one cell and server is disturbed when the machine, not the
// server, decided its tail: the hypervisor took more than maxSteal % of
// the two CPUs' time (steal-%), or the client's own sends were more than
// maxSendLag µs late at p99 (send-lag-p99-µs; about 20-40 µs otherwise).
// Neither depends on the server under test. The tables take medians, and
// the ratio tables round-by-round ratios, over the undisturbed rounds
// only; raw.txt keeps them all.
const (
	maxSteal   = 2.0
	maxSendLag = 250.0
)

// disturbedRounds reports, round by round, whether name's round was
// disturbed.
func disturbedRounds(r results, name string) []bool {
	steal, lag := r[name]["steal-%"], r[name]["send-lag-p99-µs"]
	out := make([]bool, len(r[name]["light-p99-µs"]))
	for i := range out {
		out[i] = (i < len(steal) && steal[i] > maxSteal) || (i < len(lag) && lag[i] > maxSendLag)
	}
	return out
}

// keepRounds returns units with only the rounds i for which keep[i].
func keepRounds(units map[string][]float64, keep []bool) map[string][]float64 {
	out := map[string][]float64{}
	for u, vs := range units {
		if len(vs) != len(keep) {
			out[u] = vs // not one value per round
			continue
		}
		for i, v := range vs {
			if keep[i] {
				out[u] = append(out[u], v)
			}
		}
	}
	return out
}

// undisturbed returns r with every skew benchmark's disturbed rounds left
// out.
func undisturbed(r results) results {
	out := results{}
	for name, units := range r {
		if !strings.HasPrefix(name, "BenchmarkSkew/") {
			out[name] = units
			continue
		}
		d := disturbedRounds(r, name)
		keep := make([]bool, len(d))
		for i := range d {
			keep[i] = !d[i]
		}
		out[name] = keepRounds(units, keep)
	}
	return out
}

// undisturbedPair returns a and b in the rounds neither was disturbed,
// which keeps their values paired round by round.
func undisturbedPair(r results, a, b string) results {
	da, db := disturbedRounds(r, a), disturbedRounds(r, b)
	if len(da) != len(db) {
		return results{a: r[a], b: r[b]}
	}
	keep := make([]bool, len(da))
	for i := range da {
		keep[i] = !da[i] && !db[i]
	}
	return results{a: keepRounds(r[a], keep), b: keepRounds(r[b], keep)}
}
