package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The TLS comparison of bench/peers (tls_test.go): the servers with TLS,
// the peers without, the handshake cases and the kv rows.
var (
	tlsEchoServers = []string{"conn-tls", "net-tls", "nbio-tls"}
	tlsNames       = map[string]string{
		"conn-tls": "gracepoll conn + crypto/tls", "net-tls": "net + crypto/tls", "nbio-tls": "nbio v1.6.8 + llib tls",
		"kv-conn-tls": "kv on conn + crypto/tls", "kv-net-tls": "kv on net + crypto/tls",
	}
	// noTLS are the echo servers of section 5 whose frameworks have no
	// TLS of their own.
	noTLS             = []string{"gnet v2.9.7", "cloudwego/netpoll v0.7.2"}
	tlsEchoConns      = []int{50, 500}
	tlsHandshakeCases = []string{"full-x25519", "full-default", "resumed"}
	tlsIdleCount      = 10000
	tlsKVServers      = []string{"kv-conn-tls", "kv-net-tls"}
)

// spread returns name's median in unit with the range of its values over
// the rounds, "median (min–max)", or the median alone for one value.
func (r results) spread(name, unit string) string {
	vs := r[name][unit]
	m, ok := r.get(name, unit)
	if !ok {
		return dash
	}
	if len(vs) < 2 {
		return fmtNum(m)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(m), fmtNum(slices.Min(vs)), fmtNum(slices.Max(vs)))
}

// paired returns the ratios num/den of unit round by round: the i-th value
// of each, which bench/run.sh's interleaved rounds measured next to each
// other in time. It returns nil unless both have the same number of
// values.
func (r results) paired(num, den, unit string) []float64 {
	a, b := r[num][unit], r[den][unit]
	if len(a) == 0 || len(a) != len(b) {
		return nil
	}
	out := make([]float64, len(a))
	for i := range a {
		if b[i] == 0 {
			return nil
		}
		out[i] = a[i] / b[i]
	}
	return out
}

// medianRatio is the ratio of num's median to den's in unit, and whether
// both were measured.
func (r results) medianRatio(num, den, unit string) (float64, bool) {
	a, ok1 := r.get(num, unit)
	b, ok2 := r.get(den, unit)
	if !ok1 || !ok2 || b == 0 {
		return 0, false
	}
	return a / b, true
}

// ratioCell formats the ratio of medians num/den with the range of the
// per-round ratios, "1.02x (0.97–1.08x)", "(base)" in the baseline's own
// row, or a dash.
func (r results) ratioCell(num, den, unit string) string {
	if num == den {
		return "(base)"
	}
	v, ok := r.medianRatio(num, den, unit)
	if !ok {
		return dash
	}
	per := r.paired(num, den, unit)
	if len(per) < 2 {
		return ratio(v)
	}
	return fmt.Sprintf("%s (%s–%s)", ratio(v), strings.TrimSuffix(ratio(slices.Min(per)), "x"), ratio(slices.Max(per)))
}

func renderTLS(w io.Writer, r results) []target {
	fmt.Fprintf(w, "## 9. TLS\n\n")
	fmt.Fprintf(w, "%s The TLS servers serve a self-signed ECDSA P-256 certificate made in-process (crypto/x509) "+
		"with their TLS package's defaults: **conn-tls** is the examples/echo server (connecho.Handler) on package conn "+
		"with `Options.TLS` (Go's crypto/tls itself, the handshake on conn's handshake workers, records through conn's "+
		"non-blocking transport), **net-tls** Go's net with `tls.NewListener`, a goroutine per connection (handshake "+
		"bounded at 10 s, then a 16 KB read buffer: a tls.Conn's Read returns at most one record), **nbio-tls** nbio "+
		"v1.6.8 with its TLS (`extension/tls` on llib v1.2.5's fork of crypto/tls, non-blocking), reading as nbio's own "+
		"HTTPS server does (AppendAndRead, ResetOrFreeBuffer after each event). gnet and cloudwego/netpoll have no TLS. "+
		"A ratio's range, in parentheses, is over the rounds, each round's servers measured next to each other in time.\n\n",
		pinnedSetup)
	ts := renderTLSEcho(w, r)
	ts = append(ts, renderTLSHandshake(w, r)...)
	ts = append(ts, renderTLSMemory(w, r)...)
	renderTLSKV(w, r)
	return ts
}

func renderTLSEcho(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### TLS echo\n\n")
	fmt.Fprintf(w, "examples/echo's load generator over TLS 1.3 (crypto/tls client defaults, GOMAXPROCS=1): N connections, "+
		"opened (and handshaken) before the window, ping-pong 64-byte messages, every reply checked byte for byte, "+
		"without churn, whose handshakes the next table measures (`BenchmarkTLSEcho`). **CPU eff.** is the other "+
		"server's CPU per message over this one's (above 1: this one needs less).\n\n")
	if skipNote(w, "BenchmarkTLSEcho") {
		return nil
	}
	fmt.Fprintf(w, "| conns | server | msgs/s | server CPU µs/msg | CPU eff. vs net+crypto/tls | CPU eff. vs nbio | server util %% | client util %% | rounds |\n|---|---|---|---|---|---|---|---|---|\n")
	name := func(n int, s string) string { return fmt.Sprintf("BenchmarkTLSEcho/conns=%d/%s", n, s) }
	const cpu = "server-cpu-µs/msg"
	for _, n := range tlsEchoConns {
		for _, s := range tlsEchoServers {
			b := name(n, s)
			if _, ok := r.get(b, "msgs/s"); !ok {
				fmt.Fprintf(w, "| %d | %s | not run | | | | | | |\n", n, tlsNames[s])
				continue
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %d |\n", n, tlsNames[s], r.num(b, "msgs/s"), r.spread(b, cpu),
				r.ratioCell(name(n, "net-tls"), b, cpu), r.ratioCell(name(n, "nbio-tls"), b, cpu),
				r.num(b, "server-util-%"), r.num(b, "client-util-%"), r.runs(b, cpu))
		}
	}
	for _, s := range noTLS {
		fmt.Fprintf(w, "| all | %s | no TLS support | | | | | | |\n", s)
	}
	fmt.Fprintln(w)
	var ts []target
	for _, n := range tlsEchoConns {
		for _, base := range []struct{ server, label string }{{"net-tls", "net+crypto/tls"}, {"nbio-tls", "nbio"}} {
			if eff, ok := r.medianRatio(name(n, base.server), name(n, "conn-tls"), cpu); ok {
				ts = append(ts, target{fmt.Sprintf("TLS echo CPU per message at %d connections: conn-tls >= 1.0x %s (CPU efficiency)", n, base.label),
					fmt.Sprintf("%s CPU efficiency of %s (%s µs/msg vs %s)", r.ratioCell(name(n, base.server), name(n, "conn-tls"), cpu), base.label,
						r.num(name(n, "conn-tls"), cpu), r.num(name(n, base.server), cpu)),
					eff >= 1.0, tlsEchoWhy})
			}
		}
	}
	return ts
}

const tlsEchoWhy = "per message conn-tls runs crypto/tls's record layer over conn's transport: OnData's bytes handed to the " +
	"tls.Conn's Read, its ciphertext through conn's Write; the other servers read and write the socket directly " +
	"(net) or decrypt into the poller's buffer (nbio). Profile it with `cd bench/peers && go test -run '^$' " +
	"-bench 'TLSEcho/conns=500/conn-tls$' -serverprofile DIR` and `go tool pprof -top DIR/conn-tls.pprof`, and compare " +
	"the rounds in the raw output."

func renderTLSHandshake(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### TLS handshakes\n\n")
	fmt.Fprintf(w, "8 client goroutines each dial, handshake TLS 1.3, write 64 bytes, read the echo back (checked) and close "+
		"(sending close_notify); every connection is checked for its version, key exchange and resumption, and conn's own "+
		"counters for failed, timed-out or refused handshakes (`BenchmarkTLSHandshake`). **full-x25519**: a full handshake, "+
		"the client offering X25519 alone; **full-default**: crypto/tls's default key exchange, X25519MLKEM768 (every "+
		"server here negotiates it); **resumed**: from the client's session cache, PSK with the default key exchange (no "+
		"certificate, no signature). The client pins the certificate rather than verifying a chain, so that its core "+
		"drives more handshakes; one client core still cannot saturate a server, so server CPU per handshake (the accept, "+
		"echo and close around it included) ranks them. **CPU vs** is this server's CPU per handshake over the other's "+
		"(below 1: less).\n\n")
	if skipNote(w, "BenchmarkTLSHandshake") {
		return nil
	}
	fmt.Fprintf(w, "| handshake | server | handshakes/s | server CPU µs/handshake | CPU vs net+crypto/tls | CPU vs nbio | server util %% | client util %% | resumed %% | rounds |\n|---|---|---|---|---|---|---|---|---|---|\n")
	name := func(c, s string) string { return "BenchmarkTLSHandshake/" + c + "/" + s }
	const cpu = "server-cpu-µs/handshake"
	for _, c := range tlsHandshakeCases {
		for _, s := range tlsEchoServers {
			b := name(c, s)
			if _, ok := r.get(b, cpu); !ok {
				fmt.Fprintf(w, "| %s | %s | not run | | | | | | | |\n", c, tlsNames[s])
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", c, tlsNames[s], r.num(b, "handshakes/s"), r.spread(b, cpu),
				r.ratioCell(b, name(c, "net-tls"), cpu), r.ratioCell(b, name(c, "nbio-tls"), cpu),
				r.num(b, "server-util-%"), r.num(b, "client-util-%"), r.num(b, "resumed-%"), r.runs(b, cpu))
		}
	}
	for _, s := range noTLS {
		fmt.Fprintf(w, "| all | %s | no TLS support | | | | | | | |\n", s)
	}
	fmt.Fprintln(w)
	var ts []target
	for _, c := range tlsHandshakeCases {
		if v, ok := r.medianRatio(name(c, "conn-tls"), name(c, "net-tls"), cpu); ok {
			ts = append(ts, target{fmt.Sprintf("TLS handshake CPU (%s): conn-tls within 5 %% of net+crypto/tls (<= 1.05x)", c),
				fmt.Sprintf("%s of net+crypto/tls's CPU per handshake (%s µs vs %s)", r.ratioCell(name(c, "conn-tls"), name(c, "net-tls"), cpu),
					r.num(name(c, "conn-tls"), cpu), r.num(name(c, "net-tls"), cpu)),
				v <= 1.05, tlsHandshakeWhy})
		}
	}
	return ts
}

const tlsHandshakeWhy = "both run crypto/tls's server handshake, so the gap is the transport around it: conn starts a " +
	"goroutine per handshake when the first bytes arrive, which reads the socket and, when it is empty, waits for the " +
	"waiter to report it readable, and queues its writes on the connection; net blocks a goroutine on the runtime's " +
	"netpoller. Profile with `cd bench/peers && go test -run '^$' -bench 'TLSHandshake/full-default/conn-tls$' " +
	"-benchtime=5000x -serverprofile DIR` and `go tool pprof -top DIR/conn-tls.pprof`; count its system calls per " +
	"handshake with `strace -f -c` on the server against net-tls's."

func renderTLSMemory(w io.Writer, r results) []target {
	fmt.Fprintf(w, "### Memory per idle TLS connection\n\n")
	fmt.Fprintf(w, "As section 8, at %s connections that each complete a TLS 1.3 handshake (crypto/tls client defaults), "+
		"echo one 64-byte message (checked) and stay open and silent (`BenchmarkTLSIdleMemory`, one run). **vs** is this "+
		"server's RSS per connection over the other's.\n\n", thousands(tlsIdleCount))
	name := func(s string) string { return fmt.Sprintf("BenchmarkTLSIdleMemory/conns=%d/%s", tlsIdleCount, s) }
	if skipNote(w, "BenchmarkTLSIdleMemory", name("conn-tls")) {
		return []target{{fmt.Sprintf("RSS per idle TLS connection at %s connections: conn-tls <= 0.25x net+crypto/tls", thousands(tlsIdleCount)),
			"skipped: " + skips[name("conn-tls")], false, "the machine's open-file limit did not allow the connections."}}
	}
	fmt.Fprintf(w, "| server | RSS B/conn | vs net+crypto/tls | vs nbio | heap B/conn |\n|---|---|---|---|---|\n")
	for _, s := range tlsEchoServers {
		b := name(s)
		if _, ok := r.get(b, "rss-B/conn"); !ok {
			fmt.Fprintf(w, "| %s | not run | | | |\n", tlsNames[s])
			continue
		}
		vs := func(base string) string {
			if base == s {
				return "(base)"
			}
			return relTo(r, b, name(base), "rss-B/conn")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", tlsNames[s], r.num(b, "rss-B/conn"), vs("net-tls"), vs("nbio-tls"), r.num(b, "heap-B/conn"))
	}
	for _, s := range noTLS {
		fmt.Fprintf(w, "| %s | no TLS support | | | |\n", s)
	}
	fmt.Fprintln(w)
	v, ok := r.medianRatio(name("conn-tls"), name("net-tls"), "rss-B/conn")
	if !ok {
		return nil
	}
	return []target{{fmt.Sprintf("RSS per idle TLS connection at %s connections: conn-tls <= 0.25x net+crypto/tls", thousands(tlsIdleCount)),
		fmt.Sprintf("%s B vs %s B: %s (nbio %s B)", r.num(name("conn-tls"), "rss-B/conn"), r.num(name("net-tls"), "rss-B/conn"), ratio(v),
			r.num(name("nbio-tls"), "rss-B/conn")),
		v <= 0.25,
		fmt.Sprintf("conn-tls keeps %s B of Go heap per idle TLS connection (plaintext conn: see section 8): crypto/tls's Conn "+
			"with its cipher state, and its input buffers (the raw input and the handshake message buffer), which the "+
			"ClientHello with an X25519MLKEM768 key share grew and which crypto/tls keeps for the connection's life, on top "+
			"of conn's Conn; net-tls's goroutine stack, grown by the handshake, is most of the rest of its RSS. A heap "+
			"profile of a server holding the connections shows which buffers stay.", r.num(name("conn-tls"), "heap-B/conn"))}}
}

func renderTLSKV(w io.Writer, r results) {
	fmt.Fprintf(w, "### Key-value server over TLS: redis-benchmark --tls\n\n")
	fmt.Fprintf(w, "As section 7, with `redis-benchmark --tls --cacert` (the servers' certificate) at -c 50 -P 1, 100,000 "+
		"requests per run by default, against examples/kv with `Options.TLS` (**kv-conn-tls**) and the same command code "+
		"on net behind crypto/tls's listener (**kv-net-tls**); a Go client checks the replies over TLS after each run "+
		"(`BenchmarkTLSKV`); gnet has no TLS, and examples/kv's command code is not served on nbio here. **CPU eff.** is "+
		"kv-net-tls's CPU per request over kv-conn-tls's (above 1: conn needs less).\n\n")
	if skipNote(w, "BenchmarkTLSKV") {
		return
	}
	fmt.Fprintf(w, "| test |")
	for _, s := range tlsKVServers {
		fmt.Fprintf(w, " %s req/s | µs/req | util %% |", s)
	}
	fmt.Fprintf(w, " conn/net req/s | conn/net CPU eff. | rounds |\n|---|%s---|---|---|\n", strings.Repeat("---|---|---|", len(tlsKVServers)))
	const cpu = "server-cpu-µs/req"
	var speeds, effs []float64
	for _, t := range kvTests {
		name := func(s string) string { return fmt.Sprintf("BenchmarkTLSKV/c=50/P=1/%s/%s", t, s) }
		fmt.Fprintf(w, "| %s |", t)
		for _, s := range tlsKVServers {
			fmt.Fprintf(w, " %s | %s | %s |", r.num(name(s), "req/s"), r.spread(name(s), cpu), r.num(name(s), "server-util-%"))
		}
		sp, ok1 := r.medianRatio(name("kv-conn-tls"), name("kv-net-tls"), "req/s")
		ef, ok2 := r.medianRatio(name("kv-net-tls"), name("kv-conn-tls"), cpu)
		if ok1 && ok2 {
			speeds, effs = append(speeds, sp), append(effs, ef)
		}
		fmt.Fprintf(w, " %s | %s | %d |\n", r.ratioCell(name("kv-conn-tls"), name("kv-net-tls"), "req/s"),
			r.ratioCell(name("kv-net-tls"), name("kv-conn-tls"), cpu), r.runs(name("kv-conn-tls"), cpu))
	}
	if len(speeds) > 0 {
		fmt.Fprintf(w, "| geomean |%s **%s** | **%s** | |\n", strings.Repeat(" | | |", len(tlsKVServers)), ratio(geomean(speeds)), ratio(geomean(effs)))
	}
	fmt.Fprintln(w)
}

// thousands formats n with a comma every three digits, as the report's
// prose writes counts.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
