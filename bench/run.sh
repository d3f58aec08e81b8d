#!/usr/bin/env bash
# bench/run.sh: run gracepoll's benchmark suite and write docs/benchmarks.md.
#
# Runs the root module's benchmarks (./bench/...) and the nested module's
# server comparisons (bench/peers), tees the raw `go test -bench` output
# (benchstat-compatible) to bench/results/raw.txt, then generates
# docs/benchmarks.md from that file alone with bench/cmd/benchreport.
#
# In bench/peers every server runs in a process of its own (cmd/serve)
# pinned to the first CPU with GOMAXPROCS=1, the client pinned to the
# second; every reply is checked:
#   - BenchmarkEcho: examples/echo's load generator, 64-byte messages at 50
#     and 500 connections with 10 % churn, against examples/echo's server on
#     conn and its raw-poller server on the shared set, on stealing and on
#     per-waiter sets (gracepoll-conn, -shared, -stealing, -per-waiter),
#     net, gnet and netpoll; msgs/s and server CPU per message.
#   - BenchmarkConnCycle: dial, one message, close; server CPU per cycle and
#     release latency (Delete to OnClose) for the servers on the poller.
#   - BenchmarkKV: redis-benchmark -t ping,set,get, -c 50/500, -P 1/16
#     against examples/kv's command code on conn, net and gnet; skipped,
#     saying so, without redis-benchmark (Debian: redis-tools).
#   - BenchmarkIdleMemory: RSS and Go heap per idle connection at 1,000 and
#     10,000 connections (10,000 skipped, saying so, if RLIMIT_NOFILE is
#     too small).
#   - TLS (tls_test.go; conn with Options.TLS, net + crypto/tls, nbio with
#     its fork of crypto/tls): BenchmarkTLSEcho (64-byte messages at 50 and
#     500 connections, no churn), BenchmarkTLSHandshake (TLS 1.3 full with
#     X25519, full with the default X25519MLKEM768, resumed: server CPU per
#     handshake), BenchmarkTLSKV (redis-benchmark --tls, -c 50 -P 1) and
#     BenchmarkTLSIdleMemory (10,000 idle TLS connections).
#   - BenchmarkSkew (skew_test.go): open-loop 16-byte frames at 10,000/s
#     over 200 connections, a fraction p in {0.5 %, 2 %} of them asking
#     the handler to sleep D in {1 ms, 5 ms}, and the load without skew;
#     light requests' p50/p99/p99.9/max and the rate achieved, on conn and
#     the raw poller (4 waiters: shared set, per-waiter sets, stealing;
#     skew-conn-* and skew-poller-*), gnet (4 loops), netpoll and net, nine
#     servers. The busy-loop variant (spin) gives the server both CPUs
#     (GOMAXPROCS=2, one shared with the client), at D 1 ms only
#     (SKEW_SPIN_D): at 2 % and 5 ms the busy loops alone would fill one
#     of the two CPUs. While it runs, idle CPUs are kept polling
#     (/dev/cpu_dma_latency), see pollIdle in bench/peers. The sleep cells
#     run in SKEW_ROUNDS rounds (more than ROUNDS: a regime that comes
#     now and then must show in the spread, not hide in a median), each
#     after BenchmarkHiccup (hiccup_test.go), which measures how late a
#     sleeping thread wakes on each CPU: the machine's own stalls, which
#     every server's tail includes.
#   - HTTP/1.1 (http_test.go and its neighbours): gracepoll's httpd and a
#     raw HTTP/1.1 server on package conn (conn-http, connhttp.go: httpd's
#     floor) against fasthttp, nbio's nbhttp, net/http and hertz, the same
#     routes on each.
#     BenchmarkHTTP: wrk -t1 (plaintext -c50 and -c500, 16 pipelined per
#     write at -c256 through a Lua script, json -c50), server CPU per
#     request and req/s, HTTP_ROUNDS interleaved rounds inside one run;
#     BenchmarkHTTPOpenLoop: an open-loop client at 10,000 req/s over 200
#     keep-alive connections, light-request latency and server CPU per
#     request with and without 2 % of handlers sleeping 5 ms (the report
#     sets each server's CPU per request with them over without);
#     BenchmarkHTTPIdleMemory: RSS, heap and
#     goroutines per idle keep-alive connection at 1,000 and 10,000;
#     BenchmarkHTTPTLS: httpd with TLSConfig vs net/http + crypto/tls,
#     connections (handshake and one request) and keep-alive requests.
#     About 13 minutes at HTTP_TIME=5s.
#   - Releases while a handler blocks (blocked_test.go):
#     BenchmarkBlockedRelease, httpd (shared set) and conn-http on a shared
#     set and on stealing, each in BLOCKED_ROUNDS interleaved rounds of two
#     cells: BLOCKED_RATE connections a second for BLOCKED_TIME, each one
#     GET /plaintext then closed, with one handler sleeping inline for the
#     whole load and without: release latency (Delete to release, the
#     poller's statistics read from the server process), releases pending
#     and the server's open descriptors over their count before the load
#     (max and at the end). About 2 minutes at BLOCKED_TIME=4s.
#     `bench/run.sh blocked` runs this section alone, with
#     BenchmarkHTTPOpenLoop on httpd, conn-http, net/http, fasthttp and
#     nbio (CPU per request with and without blocking handlers; about 4
#     minutes more), and writes its report to
#     bench/results/benchmarks-blocked.md (raw output: raw-blocked.txt).
#   - WebSocket (wsbench_test.go): gracepoll's ws on httpd against
#     gorilla/websocket and coder/websocket on net/http, nbio's websocket
#     and lxzan/gws, the same routes on each, no compression, under the
#     package's own raw-frame client (one epoll loop, every message
#     checked). BenchmarkWSEcho: 64-byte and 4 KiB binary messages over 50
#     and 1,000 connections, closed loop, one message in flight per
#     connection: server CPU per message, msgs/s, p50/p99 round trip, in
#     WS_ROUNDS interleaved rounds; BenchmarkWSBroadcast: a 64-byte
#     message to 10,000 connections, WS_BROADCASTS per round, time until
#     the last connection has it and server CPU per broadcast;
#     BenchmarkWSIdleMemory: RSS, heap, goroutines and the kernel's
#     memory per idle connection at 1,000 and 10,000. About 6 minutes.
#     `bench/run.sh ws` runs this section alone and writes its report to
#     bench/results/benchmarks-ws.md (raw output: raw-ws.txt), leaving
#     docs/benchmarks.md as it is.
#   - HTTP/2 (h2bench_test.go and its neighbours), run by `bench/run.sh h2`
#     alone (not by the full run): httpd (h2c with prior knowledge, and h2
#     by ALPN over TLS) against net/http's HTTP/2 and nghttpd (nghttp2's C
#     server, one worker, the routes as static files), fasthttp over
#     HTTP/1.1 as the reference without HTTP/2. BenchmarkH2: h2load -t1
#     -c50 -m10 and -c10 -m100 on /plaintext and /json, h2c and TLS,
#     server CPU per request, req/s (the harness's and h2load's own) and
#     h2load's CPU, H2_ROUNDS interleaved rounds of H2_TIME cells;
#     BenchmarkH2OpenLoop: 10,000 req/s open loop over 20 h2c
#     connections, light-request latency with and without 2 % of
#     handlers sleeping 5 ms; BenchmarkH2Transfer: 1 GiB down and up one
#     stream, the server's peak RSS growth; BenchmarkH2IdleMemory: RSS,
#     heap and goroutines per idle HTTP/2 connection at 1,000 and 10,000,
#     httpd against net/http. It installs h2load and nghttpd (Debian's
#     nghttp2-client and nghttp2-server) if they are missing, and writes
#     its report with bench/peers/cmd/h2report to
#     bench/results/benchmarks-h2.md (raw output: raw-h2.txt). About 30
#     minutes at H2_TIME=5s and H2_ROUNDS=5.
#
# The dispatch variants, echo, connection-cycle, kv, TLS and skew
# benchmarks, whose figures are ratios between variants, run in ROUNDS
# interleaved rounds and the report takes medians and shows the spread: on
# a shared, noisy machine a burst of outside load then hits one round of
# every variant rather than every round of one. About 33 minutes on 2
# cores (1968 s measured before conn-http and BenchmarkBlockedRelease
# were added, which add about 4), most of them the skew benchmark (about 4.8 s
# per cell and server at SKEW_TIME=4s: 45 sleep cells and servers in each
# of 6 rounds, 18 spin ones in each of 3).
#
# Knobs (environment): ROUNDS (3), DISPATCH_TIME (200ms), ECHO_TIME (1s per
# echo, connection-cycle, TLS echo and TLS handshake case and round), KV_N
# (100000 requests per redis-benchmark run at -P 1, the TLS rows included,
# ten times as many at -P 16; fewer make a row noise), SKEW_TIME (2s per
# skew cell, server and round: 40,000 requests, a p99.9 from 40 of them),
# SKEW_SPIN_D (1ms, the spin cells' D, comma-separated), SKEW_ROUNDS (6,
# the sleep cells' rounds; at least ROUNDS), OTHER_TIME
# (300ms), LATENCY_N (2000 deletes per latency case), HTTP_TIME (5s per
# HTTP cell, server and round; wrk counts whole seconds), HTTP_ROUNDS
# (ROUNDS), HTTP_HANDSHAKES (3000 TLS connections per handshake cell),
# BLOCKED_TIME (4s of load per blocked-release cell, server and round; the
# blocked handler sleeps 1 s more, at most 10 s in all), BLOCKED_RATE (1000
# connections a second), BLOCKED_ROUNDS (ROUNDS), H2_TIME (5s per HTTP/2
# cell, server and round), H2_ROUNDS (5).
set -euo pipefail
cd "$(dirname "$0")/.."

# The one argument, if any, names the only section to run.
only=${1:-}
case "$only" in
"" | ws | blocked | h2) ;;
*)
	echo "usage: bench/run.sh [ws|blocked|h2]" >&2
	exit 2
	;;
esac

ROUNDS=${ROUNDS:-3}
DISPATCH_TIME=${DISPATCH_TIME:-200ms}
ECHO_TIME=${ECHO_TIME:-1s}
KV_N=${KV_N:-100000}
OTHER_TIME=${OTHER_TIME:-300ms}
LATENCY_N=${LATENCY_N:-2000}
SKEW_TIME=${SKEW_TIME:-4s}
SKEW_SPIN_D=${SKEW_SPIN_D:-1ms}
SKEW_ROUNDS=${SKEW_ROUNDS:-6}
if [ "$SKEW_ROUNDS" -lt "$ROUNDS" ]; then
	SKEW_ROUNDS=$ROUNDS
fi
HTTP_TIME=${HTTP_TIME:-5s}
HTTP_ROUNDS=${HTTP_ROUNDS:-$ROUNDS}
HTTP_HANDSHAKES=${HTTP_HANDSHAKES:-3000}
WS_TIME=${WS_TIME:-2s}
WS_ROUNDS=${WS_ROUNDS:-$ROUNDS}
WS_BROADCASTS=${WS_BROADCASTS:-10}
BLOCKED_TIME=${BLOCKED_TIME:-4s}
BLOCKED_RATE=${BLOCKED_RATE:-1000}
BLOCKED_ROUNDS=${BLOCKED_ROUNDS:-$ROUNDS}
H2_TIME=${H2_TIME:-5s}
H2_ROUNDS=${H2_ROUNDS:-5}

# BenchmarkKV and BenchmarkTLSKV drive redis-benchmark (Debian's
# redis-tools) and skip without it.
if [ -z "$only" ] && ! command -v redis-benchmark >/dev/null; then
	{ apt-get update -qq && apt-get install -y -qq redis-tools; } >/dev/null 2>&1 || true
fi
[ -n "$only" ] || command -v redis-benchmark >/dev/null || echo "redis-benchmark is not installed and could not be: BenchmarkKV and BenchmarkTLSKV will skip" >&2

# The HTTP benchmarks drive wrk (Debian's wrk) and skip without it.
if [ -z "$only" ] && ! command -v wrk >/dev/null; then
	{ apt-get update -qq && apt-get install -y -qq wrk; } >/dev/null 2>&1 || true
fi
[ -n "$only" ] || command -v wrk >/dev/null || echo "wrk is not installed and could not be: BenchmarkHTTP and BenchmarkHTTPTLS's keep-alive rows will skip" >&2

# The HTTP/2 section drives h2load and nghttpd (Debian's nghttp2-client
# and nghttp2-server); BenchmarkH2 skips without h2load, and nghttpd's
# cells without nghttpd.
if [ "$only" = h2 ] && ! { command -v h2load && [ -x /usr/sbin/nghttpd ]; } >/dev/null; then
	{ apt-get update -qq && apt-get install -y -qq nghttp2-client nghttp2-server; } >/dev/null 2>&1 || true
fi
[ "$only" != h2 ] || command -v h2load >/dev/null || echo "h2load is not installed and could not be: BenchmarkH2 will skip" >&2

results=$PWD/bench/results
mkdir -p "$results"
raw=$results/raw.txt
meta=$results/meta.txt
report=docs/benchmarks.md
if [ -n "$only" ]; then
	raw=$results/raw-$only.txt
	meta=$results/meta-$only.txt
	report=$results/benchmarks-$only.md
fi
: >"$raw"
: >"$meta"

# topcpu names the three busiest processes right now, to say what else was
# competing for the CPU.
topcpu() {
	top -bn1 -o %CPU 2>/dev/null | awk 'NR>7 && NF>=12 {printf "%s%s %s%%", sep, $12, $9; sep=", "; if (++n==3) exit}'
}

began=$(date +%s)
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "nproc: $(nproc)"
	echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "kernel: $(uname -sr)"
	echo "go: $(go version)"
	echo "commit: $(git describe --always --dirty 2>/dev/null || echo "${GRACEPOLL_COMMIT:-unknown}")"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) (busiest processes: $(topcpu))"
} >>"$meta"
load_before=$(cut -d' ' -f1 /proc/loadavg)

# run records a command in the meta file and tees its output to raw.txt.
run() {
	echo "command: $*" >>"$meta"
	echo "+ $*" >&2
	"$@" 2>&1 | tee -a "$raw"
}

# run_peers runs a command in the nested module bench/peers.
run_peers() {
	echo "command: (cd bench/peers && $*)" >>"$meta"
	echo "+ (cd bench/peers && $*)" >&2
	(cd bench/peers && "$@") 2>&1 | tee -a "$raw"
}

# ws_section runs the WebSocket benchmarks; the echo and broadcast rounds
# interleave inside each run (-ws.rounds).
ws_section() {
	run_peers go test -run '^$' -bench '^BenchmarkWSEcho$' -benchtime=1x -timeout=60m -ws.time="$WS_TIME" -ws.rounds="$WS_ROUNDS" .
	run_peers go test -run '^$' -bench '^BenchmarkWSBroadcast$' -benchtime=1x -timeout=60m -ws.rounds="$WS_ROUNDS" -ws.broadcasts="$WS_BROADCASTS" .
	run_peers go test -run '^$' -bench '^BenchmarkWSIdleMemory$' -benchtime=1x .
}

# blocked_release runs BenchmarkBlockedRelease; its rounds interleave
# inside the run (-blocked.rounds).
blocked_release() {
	run_peers go test -run '^$' -bench '^BenchmarkBlockedRelease$' -benchtime=1x -timeout=60m -blocked.time="$BLOCKED_TIME" -blocked.rate="$BLOCKED_RATE" -blocked.rounds="$BLOCKED_ROUNDS" .
}

# h2_section runs the HTTP/2 benchmarks; the rounds interleave inside
# each run (-h2.rounds).
h2_section() {
	run_peers go test -run '^$' -bench '^BenchmarkH2$' -benchtime=1x -timeout=120m -h2.time="$H2_TIME" -h2.rounds="$H2_ROUNDS" .
	run_peers go test -run '^$' -bench '^BenchmarkH2OpenLoop$' -benchtime=1x -timeout=60m -h2.time="$H2_TIME" -h2.rounds="$H2_ROUNDS" .
	run_peers go test -run '^$' -bench '^BenchmarkH2Transfer$' -benchtime=1x -timeout=60m -h2.rounds="$H2_ROUNDS" .
	run_peers go test -run '^$' -bench '^BenchmarkH2IdleMemory$' -benchtime=1x -timeout=60m .
}

# A section run alone runs none of the rounds below.
all_rounds=$SKEW_ROUNDS
case "$only" in
ws)
	ws_section
	all_rounds=0
	;;
h2)
	h2_section
	all_rounds=0
	;;
blocked)
	blocked_release
	run_peers go test -run '^$' -bench '^BenchmarkHTTPOpenLoop$' -benchtime=1x -timeout=60m -http.time="$HTTP_TIME" -http.rounds="$HTTP_ROUNDS" -http.servers=httpd,conn-http,net/http,fasthttp,nbio .
	all_rounds=0
	;;
esac
for round in $(seq 1 "$all_rounds"); do
	echo "== round $round of $SKEW_ROUNDS (the skew benchmark's sleep cells only after round $ROUNDS)" >&2
	if [ "$round" -le "$ROUNDS" ]; then
		run go test -run '^$' -bench '^BenchmarkDispatchVariants$' -benchtime="$DISPATCH_TIME" ./bench/...
		run_peers go test -run '^$' -bench '^Benchmark(Echo|ConnCycle|TLSEcho|TLSHandshake)$' -benchtime="$ECHO_TIME" .
		run_peers go test -run '^$' -bench '^Benchmark(KV|TLSKV)$' -benchtime=1x -kv.n="$KV_N" .
	fi
	run_peers go test -run '^$' -bench '^BenchmarkHiccup$' -benchtime=1x .
	run_peers go test -run '^$' -bench '^BenchmarkSkew$' -benchtime=1x -skew.time="$SKEW_TIME" -skew.work=sleep .
	if [ "$round" -le "$ROUNDS" ]; then
		run_peers go test -run '^$' -bench '^BenchmarkSkew$' -benchtime=1x -skew.time="$SKEW_TIME" -skew.work=spin -skew.d="$SKEW_SPIN_D" .
	fi
done
if [ -z "$only" ]; then
	run_peers go test -run '^$' -bench '^Benchmark(IdleMemory|TLSIdleMemory)$' -benchtime=1x .
	run go test -run '^$' -bench '^BenchmarkReleaseLatency$' -benchtime="${LATENCY_N}x" ./bench/...
	run go test -run '^$' -bench '^BenchmarkReleasePath$' -benchmem -benchtime=20000x ./bench/...
	run go test -run '^$' -bench '^Benchmark(Dispatch|Churn|Scale|Reclaim)$' -benchtime="$OTHER_TIME" ./bench/...
	# HTTP/1.1: the rounds interleave inside each run (-http.rounds).
	run_peers go test -run '^$' -bench '^BenchmarkHTTP$' -benchtime=1x -timeout=60m -http.time="$HTTP_TIME" -http.rounds="$HTTP_ROUNDS" .
	run_peers go test -run '^$' -bench '^BenchmarkHTTPOpenLoop$' -benchtime=1x -timeout=60m -http.time="$HTTP_TIME" -http.rounds="$HTTP_ROUNDS" .
	run_peers go test -run '^$' -bench '^BenchmarkHTTPIdleMemory$' -benchtime=1x .
	run_peers go test -run '^$' -bench '^BenchmarkHTTPTLS$' -benchtime=1x -http.time="$HTTP_TIME" -http.rounds="$HTTP_ROUNDS" -http.tls.handshakes="$HTTP_HANDSHAKES" .
	blocked_release
	ws_section
fi

ended=$(date +%s)
load_after=$(cut -d' ' -f1 /proc/loadavg)
{
	echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) (busiest processes: $(topcpu))"
	echo "runtime: $((ended - began)) s for the benchmarks above"
	# Other work on the machine during the run is worth saying in the
	# report itself: a 1-minute load of half the cores or more, before or
	# after (the run itself keeps about one core busy).
	if awk -v a="$load_before" -v b="$load_after" -v n="$(nproc)" 'BEGIN {exit !(a >= n/2 || b - 1 >= n/2)}'; then
		echo "note: other processes competed for the CPU (1-minute load $load_before before the run, $load_after after it, on $(nproc) cores; busiest at the end: $(topcpu)). Absolute figures are noisy; compare the ratios, which set neighbours in time against each other, and the rounds in the raw output."
	fi
} >>"$meta"

if [ "$only" = h2 ]; then
	# The HTTP/2 report has a generator of its own, in bench/peers.
	(cd bench/peers && go run ./cmd/h2report -raw "$raw" -meta "$meta" -out "$report")
else
	go run ./bench/cmd/benchreport -raw "$raw" -meta "$meta" -out "$report"
fi
echo "wrote $report; raw output in $raw" >&2
