//go:build linux

package peers

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The WebSocket benchmarks' flags.
var (
	wsbTime       = flag.Duration("ws.time", 2*time.Second, "BenchmarkWSEcho: the measured load of each cell, server and round")
	wsbRounds     = flag.Int("ws.rounds", 3, "BenchmarkWSEcho and BenchmarkWSBroadcast: rounds, each running every cell with every server in turn")
	wsbOnly       = flag.String("ws.servers", "", "WebSocket benchmarks: only these servers, comma-separated (default: every server of kind ws)")
	wsbBroadcasts = flag.Int("ws.broadcasts", 10, "BenchmarkWSBroadcast: broadcasts per server and round")
	wsbFanout     = flag.Int("ws.fanout", 10000, "BenchmarkWSBroadcast: connections each broadcast goes to")
)

// wsbWarmup is an unmeasured closed loop before each echo cell: the
// server's buffers and pools grown, its connections' first messages past.
const wsbWarmup = 500 * time.Millisecond

// wsbEchoRow is one row of BenchmarkWSEcho: conns connections each with
// one size-byte message in flight.
type wsbEchoRow struct{ size, conns int }

var wsbEchoRows = []wsbEchoRow{{64, 50}, {64, 1000}, {4096, 50}, {4096, 1000}}

func (r wsbEchoRow) name() string { return fmt.Sprintf("size=%d/conns=%d", r.size, r.conns) }

// wsbStart starts server name for a cell of a WebSocket benchmark, with
// -serverprofile DIR writing its CPU profile to DIR/NAME-CELL.pprof, or
// if allocs its allocation profile to DIR/NAME-CELL.allocs.pprof (every
// allocation sampled, which slows it: the memory benchmark's, not the
// CPU benchmarks'). Each round starts a fresh server: the files are the
// last round's.
func wsbStart(b *testing.B, name, cell string, cpu int, allocs bool) *child {
	var args []string
	if *serverProfileDir != "" {
		file := filepath.Join(*serverProfileDir, strings.NewReplacer("/", "-", "=", "").Replace(name+"-"+cell))
		if allocs {
			args = append(args, "-memprofile", file+".allocs.pprof")
		} else {
			args = append(args, "-cpuprofile", file+".pprof")
		}
	}
	return startServer(b, name, cpu, args...)
}

// wsbServers returns the servers of kind ws, less those -ws.servers
// leaves out.
func wsbServers() []Named { return serversNamed("ws", *wsbOnly) }

// BenchmarkWSEcho measures each WebSocket server (Kind "ws") echoing
// binary messages, the server in a process of its own pinned to the first
// CPU with GOMAXPROCS=1 (cmd/serve), this package's raw-frame client in
// this process pinned to the second CPU with GOMAXPROCS=1, one epoll loop
// (wsbLoop). For each of -ws.rounds rounds, each row of wsbEchoRows, each
// server in turn (a burst of outside load hits one round of every server,
// not every round of one): a fresh server, conns connections opened (each
// handshake and a first echo checked), an unmeasured closed loop of
// wsbWarmup, then the measured closed loop for -ws.time: each connection
// keeps one message in flight and sends the next when the echo has come,
// every echo checked byte for byte. Later rounds of a cell are
// sub-benchmarks "#01", "#02". It reports:
//
//   - server-µs/msg: the server's CPU time (all its threads, its tail
//     until quiet included) per echoed message: the figure that ranks
//     servers when one client thread is the limit. It includes the
//     kernel's work for the server's system calls, the loopback's delivery
//     of what it writes among it (see wsbBusyTime);
//   - msgs/s: echoes per second of wall time;
//   - p50-µs, p99-µs: round-trip latency, write of the message to the
//     end of its echo;
//   - steal-%: the time the hypervisor took from the two CPUs over the
//     cell, and others-%: the CPU time of everything else on them (other
//     processes, the kernel's threads), both in percent of one CPU; the
//     report leaves out a round above 2 % of steal or 10 % of others;
//   - server-util-% and client-util-%: each side's CPU time over the wall
//     time; a client near 100 % is the limit of msgs/s.
//
// -serverprofile DIR writes each server's CPU profile (see wsbStart). The
// measurement ignores b.N: run it with -benchtime=1x.
func BenchmarkWSEcho(b *testing.B) {
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	for range *wsbRounds {
		for _, row := range wsbEchoRows {
			for _, s := range wsbServers() {
				b.Run(row.name()+"/"+s.Name, func(b *testing.B) {
					srv := wsbStart(b, s.Name, row.name(), serverCPU, false)
					defer func() {
						if err := srv.stop(); err != nil {
							b.Error(err)
						}
					}()
					wsbEchoCell(b, srv, row, serverCPU, clientCPU)
				})
			}
		}
	}
}

// wsbEchoCell is one cell of BenchmarkWSEcho against srv.
func wsbEchoCell(b *testing.B, srv *child, row wsbEchoRow, serverCPU, clientCPU int) {
	l, err := openWSBLoop(srv.addr, row.conns)
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	if _, err := l.echo(wsbWarmup, row.size); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	var r wsbEchoResult
	var d wsbDisturbance
	w, err := measure(srv.Pid(), b, func() error {
		d0, err := wsbDisturbanceNow(srv.Pid(), serverCPU, clientCPU)
		if err != nil {
			return err
		}
		if r, err = l.echo(*wsbTime, row.size); err != nil {
			return err
		}
		d1, err := wsbDisturbanceNow(srv.Pid(), serverCPU, clientCPU)
		d = d1.since(d0)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(r.msgs), "server-µs/msg")
	b.ReportMetric(float64(r.msgs)/r.wall.Seconds(), "msgs/s")
	b.ReportMetric(float64(wsbPercentile(r.lat, 0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(wsbPercentile(r.lat, 0.99).Nanoseconds())/1e3, "p99-µs")
	d.report(b)
	w.report(b)
}

// wsbDisturbance is what else ran on the two CPUs: the hypervisor's steal
// and the CPU time of everything but the server and this process (other
// processes, the kernel's own threads), as totals or over a window.
type wsbDisturbance struct {
	at           time.Time
	wall         time.Duration // of a window
	steal, busy  time.Duration // of the two CPUs, from /proc/stat
	server, self time.Duration // the server's and this process's CPU time
}

// wsbDisturbanceNow reads the counters now.
func wsbDisturbanceNow(pid int, cpus ...int) (wsbDisturbance, error) {
	d := wsbDisturbance{at: time.Now()}
	var err error
	if d.steal, err = stealTime(cpus...); err != nil {
		return d, err
	}
	if d.busy, err = wsbBusyTime(cpus...); err != nil {
		return d, err
	}
	if d.server, err = ProcessCPUTime(pid); err != nil {
		return d, err
	}
	d.self, err = ProcessCPUTime(os.Getpid())
	return d, err
}

// since returns the window from d0 to d.
func (d wsbDisturbance) since(d0 wsbDisturbance) wsbDisturbance {
	return wsbDisturbance{at: d0.at, wall: d.at.Sub(d0.at), steal: d.steal - d0.steal, busy: d.busy - d0.busy,
		server: d.server - d0.server, self: d.self - d0.self}
}

// report adds steal-% and others-% over a window (see since), both in
// percent of one CPU over the window's wall time (the two CPUs make 200):
// above a few percent, the machine, not only the server and the client,
// decided the window.
func (d wsbDisturbance) report(b *testing.B) {
	if d.wall <= 0 {
		return
	}
	others := max(d.busy-d.server-d.self, 0)
	b.ReportMetric(100*d.steal.Seconds()/d.wall.Seconds(), "steal-%")
	b.ReportMetric(100*others.Seconds()/d.wall.Seconds(), "others-%")
}

// wsbBusyTime returns the time cpus spent running anything (user, nice,
// system, irq and softirq of /proc/stat), summed over cpus, at the
// kernel's tick resolution. Without IRQ_TIME_ACCOUNTING (this machine's
// kernel) a softirq is charged to the task it interrupted too, as the
// loopback's delivery is to the process that writes: the servers' and
// this process's CPU clocks include it.
func wsbBusyTime(cpus ...int) (time.Duration, error) {
	return cpuStatTime([]int{1, 2, 3, 6, 7}, cpus...) // user nice system irq softirq
}

// BenchmarkWSBroadcast measures a broadcast to -ws.fanout (10,000)
// connections: each server in its own pinned process as in
// BenchmarkWSEcho, the connections opened (each handshake and a first
// 64-byte echo checked) and registered in the client's epoll loop, then
// -ws.broadcasts broadcasts, one at a time: the client writes GET
// /broadcast?seq=N on a keep-alive control connection (plain HTTP, not a
// WebSocket) and waits until every connection has received
// WSBroadcastPayload(N), checked, and then the server's answer "sent=K"
// with K the number of connections. One unmeasured broadcast first. Each
// broadcast is a window of its own (the server quiet before and after).
// It reports, as the median over the round's broadcasts:
//
//   - last-ms: from the request's write until the last connection had
//     the message (what a broadcast costs in time);
//   - half-ms: until half of them had it;
//   - server-cpu-ms: the server's CPU time per broadcast, the request
//     included, its tail until quiet included;
//   - client-cpu-ms: this process's CPU time while it waited: near
//     last-ms, the client was the limit;
//   - steal-% and others-% over the whole round, as in BenchmarkWSEcho.
//
// Each side holds -ws.fanout connections: it is skipped, saying so, if
// RLIMIT_NOFILE does not allow them. Run it with -benchtime=1x.
func BenchmarkWSBroadcast(b *testing.B) {
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	n := *wsbFanout
	for range *wsbRounds {
		for _, s := range wsbServers() {
			b.Run(fmt.Sprintf("conns=%d/%s", n, s.Name), func(b *testing.B) {
				skipUnlessFiles(b, n)
				srv := wsbStart(b, s.Name, "broadcast", serverCPU, false)
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				wsbBroadcastCell(b, srv, n, serverCPU, clientCPU)
			})
		}
	}
}

// wsbBroadcastCell is one round of BenchmarkWSBroadcast against srv.
func wsbBroadcastCell(b *testing.B, srv *child, n, serverCPU, clientCPU int) {
	l, err := openWSBLoop(srv.addr, n)
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	ctl, err := net.DialTimeout("tcp", srv.addr, ioTimeout)
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.Close()
	if _, err := l.broadcast(ctl, srv.addr, 0); err != nil {
		b.Fatalf("warm-up: %v", err)
	}
	d0, err := wsbDisturbanceNow(srv.Pid(), serverCPU, clientCPU)
	if err != nil {
		b.Fatal(err)
	}
	var last, half, scpu, ccpu []float64
	for i := range *wsbBroadcasts {
		var r wsbBroadcastResult
		w, err := measure(srv.Pid(), b, func() error {
			var err error
			r, err = l.broadcast(ctl, srv.addr, uint64(i+1))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		last = append(last, float64(r.last.Nanoseconds())/1e6)
		half = append(half, float64(r.half.Nanoseconds())/1e6)
		scpu = append(scpu, w.serverCPU.Seconds()*1e3)
		ccpu = append(ccpu, w.clientCPU.Seconds()*1e3)
	}
	d1, err := wsbDisturbanceNow(srv.Pid(), serverCPU, clientCPU)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(wsbMedian(last), "last-ms")
	b.ReportMetric(wsbMedian(half), "half-ms")
	b.ReportMetric(wsbMedian(scpu), "server-cpu-ms")
	b.ReportMetric(wsbMedian(ccpu), "client-cpu-ms")
	// Over the whole round, waits for quiet included.
	d1.since(d0).report(b)
}

// wsbMedian returns the median of vs (vs is sorted in place).
func wsbMedian(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// BenchmarkWSIdleMemory is BenchmarkIdleMemory for the WebSocket servers
// (Kind "ws"): at 1,000 and 10,000 connections, each of which has
// completed the opening handshake and one 64-byte echo (checked) and stays
// open and silent. The server runs in a process of its own pinned to one
// CPU with GOMAXPROCS=1 (cmd/serve). It reports rss-B/conn (the growth of
// VmRSS), heap-B/conn (of the Go heap in use after a GC) and
// goroutines/conn (of runtime.NumGoroutine, read in the server process),
// per connection (see idleMemory), and kernel-B/conn: the kernel's memory
// per connection, which the process's RSS does not count, estimated as
// the growth of the kernel's slab memory (Slab in /proc/meminfo: socket,
// inode, file, epoll and TCP structures) plus its TCP buffer memory (the
// mem pages of /proc/net/sockstat) while the client opens the
// connections, over 2n: a loopback connection is two sockets in this one
// kernel, the client's and the server's, much the same (the server's has
// an epoll entry more). It is machine-wide: other processes' allocations
// meanwhile count too, so it is an estimate, the same for every server in
// principle. alloc-B/conn is what the server allocated on its Go heap
// per connection while they opened (runtime.MemStats.TotalAlloc, read in
// the server process): garbage made at that rate grows the heap, and so
// the RSS, past the heap kept. The servers' idle timeouts (nbio 120 s; none for the others)
// are longer than the measurement. 10,000 is skipped, saying so, if
// RLIMIT_NOFILE does not allow it. Run it with -benchtime=1x.
func BenchmarkWSIdleMemory(b *testing.B) {
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	for _, n := range idleCounts {
		for _, s := range wsbServers() {
			b.Run(fmt.Sprintf("conns=%d/%s", n, s.Name), func(b *testing.B) {
				skipUnlessFiles(b, n)
				srv := wsbStart(b, s.Name, fmt.Sprintf("idle%d", n), serverCPU, true)
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				var kernel, alloc []float64
				idleMemory(b, srv, n, func(m int) (func(), error) {
					a0, err := srv.ask("mem", "mem")
					if err != nil {
						return nil, err
					}
					k0, err := wsbKernelMemory()
					if err != nil {
						return nil, err
					}
					conns, err := wsbOpen(srv.addr, m)
					if err != nil {
						return nil, err
					}
					k1, err := wsbKernelMemory()
					if err == nil {
						var a1 map[string]float64
						if a1, err = srv.ask("mem", "mem"); err == nil && m == n {
							kernel = append(kernel, float64(k1-k0)/float64(2*n))
							alloc = append(alloc, (a1["total-alloc"]-a0["total-alloc"])/float64(n))
						}
					}
					if err != nil {
						wsbClose(conns)
						return nil, err
					}
					return func() { wsbClose(conns) }, nil
				})
				b.ReportMetric(wsbMedian(kernel), "kernel-B/conn")
				b.ReportMetric(wsbMedian(alloc), "alloc-B/conn")
			})
		}
	}
}

// wsbKernelMemory returns the kernel's slab memory (Slab of /proc/meminfo)
// plus its TCP buffer memory (the mem field of /proc/net/sockstat's TCP
// line, in pages), in bytes.
func wsbKernelMemory() (int64, error) {
	mi, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var slab int64 = -1
	for line := range strings.Lines(string(mi)) {
		if v, ok := strings.CutPrefix(line, "Slab:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/meminfo: %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			slab = kb << 10
		}
	}
	if slab < 0 {
		return 0, fmt.Errorf("/proc/meminfo has no Slab")
	}
	ss, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(ss)) {
		rest, ok := strings.CutPrefix(line, "TCP: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		for i := 0; i+1 < len(f); i += 2 {
			if f[i] == "mem" {
				pages, err := strconv.ParseInt(f[i+1], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/net/sockstat: %q", line)
				}
				return slab + pages*int64(os.Getpagesize()), nil
			}
		}
	}
	return 0, fmt.Errorf("/proc/net/sockstat has no TCP mem")
}

// TestWSServers checks every WebSocket server in its own process with
// the benchmarks' client: a first echo on each connection (wsbOpen), a
// short closed loop at 64 bytes and at 4 KiB, a 200,000-byte message
// (which a server may fragment), and two broadcasts to the connections.
func TestWSServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	for _, s := range OfKind("ws") {
		t.Run(s.Name, func(t *testing.T) {
			srv := startServer(t, s.Name, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			l, err := openWSBLoop(srv.addr, 20)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			for _, size := range []int{64, 4096, 200_000} {
				r, err := l.echo(30*time.Millisecond, size)
				if err != nil {
					t.Fatalf("%d-byte messages: %v", size, err)
				}
				if r.msgs < len(l.conns) || len(r.lat) != r.msgs {
					t.Fatalf("%d-byte messages: %d echoes, %d latencies over %d connections", size, r.msgs, len(r.lat), len(l.conns))
				}
			}
			ctl, err := net.DialTimeout("tcp", srv.addr, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer ctl.Close()
			for seq := range uint64(2) {
				r, err := l.broadcast(ctl, srv.addr, seq)
				if err != nil {
					t.Fatal(err)
				}
				if r.last < r.half || r.last <= 0 {
					t.Errorf("broadcast %d: half at %v, last at %v", seq, r.half, r.last)
				}
			}
		})
	}
}

// TestWSBFrames checks the client's framing against the RFC's examples
// (RFC 6455 section 5.7) and its reassembly of fragments.
func TestWSBFrames(t *testing.T) {
	// A masked "Hello" with the RFC's key.
	got := wsbAppendFrame(nil, 0x1, []byte("Hello"), [4]byte{0x37, 0xfa, 0x21, 0x3d})
	if want := []byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58}; !bytes.Equal(got, want) {
		t.Errorf("masked Hello: % x, want % x", got, want)
	}
	// An unmasked "Hel" then "lo" as two fragments, then a 256-byte
	// binary message (16-bit length) and a 65536-byte one (64-bit).
	in := []byte{0x02, 0x03, 'H', 'e', 'l', 0x80, 0x02, 'l', 'o'}
	in = append(in, 0x82, 126, 0x01, 0x00)
	in = append(in, bytes.Repeat([]byte{7}, 256)...)
	in = append(in, 0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0)
	in = append(in, bytes.Repeat([]byte{9}, 65536)...)
	c := &wsbConn{}
	var msgs [][]byte
	for i := range in {
		// One byte at a time: every partial header and payload.
		c.in = append(c.in, in[i])
		for {
			p, ok, err := c.next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			msgs = append(msgs, bytes.Clone(p))
		}
	}
	if len(msgs) != 3 || string(msgs[0]) != "Hello" || len(msgs[1]) != 256 || len(msgs[2]) != 65536 {
		t.Fatalf("messages: %d, lengths %v", len(msgs), func() (ls []int) {
			for _, m := range msgs {
				ls = append(ls, len(m))
			}
			return
		}())
	}
	for _, bad := range [][]byte{{0x82 | 0x40, 0}, {0x82, 0x80}, {0x88, 0}, {0x80, 0}, {0x01, 0x80}, {0x02, 0, 0x82, 0}} {
		c := &wsbConn{in: bad}
		_, _, err1 := c.next()
		_, _, err2 := c.next()
		if err1 == nil && err2 == nil {
			t.Errorf("% x accepted", bad)
		}
	}
}
