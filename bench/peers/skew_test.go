//go:build linux

package peers

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkSkew's flags: the load of each cell and which cells to run.
var (
	skewTime  = flag.Duration("skew.time", 3*time.Second, "BenchmarkSkew: the measured load of each cell and server")
	skewRate  = flag.Float64("skew.rate", 10_000, "BenchmarkSkew: requests per second, all connections together")
	skewConns = flag.Int("skew.conns", 200, "BenchmarkSkew: connections")
	skewP     = flag.String("skew.p", "0.005,0.02", "BenchmarkSkew: fractions of slow requests, comma-separated")
	skewD     = flag.String("skew.d", "1ms,5ms", "BenchmarkSkew: what a slow request sleeps or spins in the handler, comma-separated")
	skewBase  = flag.Bool("skew.base", true, "BenchmarkSkew: run the cell without skew too")
	skewPoll  = flag.Bool("skew.pollidle", true, "BenchmarkSkew: keep idle CPUs polling (/dev/cpu_dma_latency 0, needs root) during the benchmark")
	skewWorks = flag.String("skew.work", "sleep,spin", "BenchmarkSkew: what slow requests do, comma-separated: sleep (server on one CPU), spin (busy loop; server on both CPUs)")
)

// skewWarmup is an unmeasured load without skew before each measurement:
// every connection accepted and served once, the server's buffers grown.
const skewWarmup = 300 * time.Millisecond

// skewCell is one load of BenchmarkSkew: a fraction p of the requests is
// slow and sleeps d in the server's handler, or spins for d if spin. p 0
// is the load without skew.
type skewCell struct {
	p    float64
	d    time.Duration
	spin bool
}

// String names the cell in the benchmark's name: "sleep/none",
// "sleep/p=0.5%/D=1ms", "spin/p=2%/D=5ms". A spin cell's "none" is the
// load without skew on the spin cells' set-up (the server on both CPUs).
func (c skewCell) String() string {
	work := "sleep"
	if c.spin {
		work = "spin"
	}
	if c.p == 0 {
		return work + "/none"
	}
	return fmt.Sprintf("%s/p=%g%%/D=%v", work, 100*c.p, c.d)
}

// skewCells returns the cells the flags choose: for each kind of work in
// -skew.work, the one without skew (-skew.base), then every p of -skew.p
// with every D of -skew.d.
func skewCells() ([]skewCell, error) {
	var ps []float64
	var ds []time.Duration
	for f := range strings.SplitSeq(*skewP, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || p <= 0 || p > 1 {
			return nil, fmt.Errorf("-skew.p: %q is not a fraction in (0, 1]", f)
		}
		ps = append(ps, p)
	}
	for f := range strings.SplitSeq(*skewD, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < time.Microsecond || d > time.Hour {
			return nil, fmt.Errorf("-skew.d: %q is not a duration from 1µs to 1h", f)
		}
		ds = append(ds, d)
	}
	var cells []skewCell
	for f := range strings.SplitSeq(*skewWorks, ",") {
		var spin bool
		switch strings.TrimSpace(f) {
		case "sleep":
		case "spin":
			spin = true
		case "":
			continue
		default:
			return nil, fmt.Errorf("-skew.work: %q is neither sleep nor spin", f)
		}
		if *skewBase {
			cells = append(cells, skewCell{spin: spin})
		}
		for _, d := range ds {
			for _, p := range ps {
				cells = append(cells, skewCell{p, d, spin})
			}
		}
	}
	return cells, nil
}

// BenchmarkSkew measures the light requests' latency when a few requests
// are slow in the server's handler, with every skew server (Kind "skew",
// see SkewFrameSize) in a process of its own (cmd/serve) and an open-loop
// client in this process pinned to the second CPU (skewClient). The client
// sends SkewFrameSize-byte frames on a fixed schedule at -skew.rate in all
// over -skew.conns connections, each frame to a connection chosen at
// random, without waiting for replies; a fraction p of them, chosen at
// random, is slow: the handler sleeps or spins for D before echoing it.
// The random sequence is the same for every server. Every reply is checked
// byte for byte against its frame, in order per connection.
//
// A sleeping handler stands for one that blocks on a database or a remote
// call: the server runs pinned to the first CPU with GOMAXPROCS=1. A
// spinning one stands for one that computes, which on one CPU stalls every
// server alike (the CPU is busy whatever the design); so the spin cells
// give the server GOMAXPROCS=2 on both CPUs, one of which it shares with
// the client (a single thread, mostly asleep).
//
// The cells are, for each kind of work in -skew.work, the load without
// skew and every p of -skew.p with every D of -skew.d (-skew.base=false
// leaves the first out), each -skew.time long after an unmeasured warm-up;
// each server starts afresh for each cell. The cells run in order, each
// with every server, which makes one round of bench/run.sh's interleaved
// rounds. The measurement ignores b.N: run it with -benchtime=1x. It
// reports:
//
//   - light-p50-µs, light-p99-µs, light-p99.9-µs, light-max-µs: the
//     latency of the light requests, from the time the schedule gave the
//     frame to the reply's last byte read: a client that falls behind
//     counts its lateness against the server, never hides it (no
//     coordinated omission);
//   - send-lag-p99-µs: how late the client's writes were behind the
//     schedule, p99: the client's own share of the latencies above;
//   - req/s: the rate achieved, replies over the time from the first
//     scheduled send to the last reply;
//   - slow-reqs: how many requests were slow;
//   - server-stalls/s: how many times a second the requests of one
//     millisecond, sent on time, were answered late together (see
//     stallLatency): the server's side held them, whether its design, its
//     runtime or its CPU, which the hypervisor takes now and then (see
//     BenchmarkHiccup);
//   - idle-poll: 1 if idle CPUs were kept polling (-skew.pollidle, see
//     pollIdle), 0 if they may halt, which on a virtual machine puts the
//     hypervisor's wake-up latency into every figure above;
//   - steal-%: the time the hypervisor took from the two CPUs (the steal
//     column of /proc/stat, 10 ms ticks, both CPUs summed) over the wall
//     time: a round with a few % of it has lost milliseconds at a time
//     to other machines on the host, whatever the server did;
//   - server-cpu-µs/req, server-util-% and client-util-%: the server's
//     CPU time (its tail until quiet included) per request, and each
//     side's CPU time over the wall time (see BenchmarkEcho), in % of one
//     CPU: a server on one CPU near 100 % is saturated and queues
//     whatever it is given.
func BenchmarkSkew(b *testing.B) {
	cells, err := skewCells()
	if err != nil {
		b.Fatal(err)
	}
	if *skewConns < 1 || *skewRate <= 0 || *skewTime <= 0 {
		b.Fatal("-skew.conns, -skew.rate and -skew.time must be positive")
	}
	// Before pinClient narrows this process's mask to the client's CPU.
	_, clientCPU, err := twoCPUs()
	if err != nil {
		b.Skip(err)
	}
	serverCPU, ok := pinClient(b, 1)
	if !ok {
		return
	}
	polling := 0.0
	if *skewPoll {
		release, err := pollIdle()
		if err != nil {
			b.Logf("idle CPUs not kept polling (%v): on a virtual machine the cross-CPU wake-ups may dominate the latencies", err)
		} else {
			polling = 1
			defer release()
		}
	}
	for _, cell := range cells {
		for _, s := range OfKind("skew") {
			b.Run(cell.String()+"/"+s.Name, func(b *testing.B) {
				var srv *child
				if cell.spin {
					srv = startServerOnCPUs(b, s.Name, serverCPU, clientCPU)
				} else {
					srv = startServer(b, s.Name, serverCPU)
				}
				defer func() {
					if err := srv.stop(); err != nil {
						b.Error(err)
					}
				}()
				cl, err := dialSkew(srv.addr, *skewConns)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.close()
				if _, err := cl.run(skewWarmup, *skewRate, skewCell{}); err != nil {
					b.Fatalf("warm-up: %v", err)
				}
				var r skewResult
				var steal time.Duration
				w, err := measure(srv.Pid(), b, func() error {
					s0, err := stealTime(serverCPU, clientCPU)
					if err != nil {
						return err
					}
					if r, err = cl.run(*skewTime, *skewRate, cell); err != nil {
						return err
					}
					s1, err := stealTime(serverCPU, clientCPU)
					steal = s1 - s0
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(100*steal.Seconds()/r.wall.Seconds(), "steal-%")
				r.report(b)
				b.ReportMetric(polling, "idle-poll")
				b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(len(r.light)+r.slow), "server-cpu-µs/req")
				w.report(b)
			})
		}
	}
}

// quantile returns the q-quantile of sorted ds (the smallest value with
// at least a fraction q at or below it), 0 if there is none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// report adds r's figures to b's metrics.
func (r skewResult) report(b *testing.B) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(quantile(r.light, 0.50)), "light-p50-µs")
	b.ReportMetric(us(quantile(r.light, 0.99)), "light-p99-µs")
	b.ReportMetric(us(quantile(r.light, 0.999)), "light-p99.9-µs")
	b.ReportMetric(us(quantile(r.light, 1)), "light-max-µs")
	b.ReportMetric(us(quantile(r.lag, 0.99)), "send-lag-p99-µs")
	b.ReportMetric(float64(len(r.light)+r.slow)/r.wall.Seconds(), "req/s")
	b.ReportMetric(float64(r.slow), "slow-reqs")
	b.ReportMetric(float64(r.stalls)/r.wall.Seconds(), "server-stalls/s")
}

// TestSkewServers checks that every skew server, in its own process,
// answers a sleeping frame, a spinning one and a light one on the same
// connection, each byte for byte, after the slow frames' work.
func TestSkewServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	const work = 2 * time.Millisecond
	for _, s := range OfKind("skew") {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, s.Name, -1)
			defer func() {
				if err := srv.stop(); err != nil {
					t.Error(err)
				}
			}()
			c, err := net.DialTimeout("tcp", srv.addr, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
				t.Fatal(err)
			}
			frames := make([]byte, 3*SkewFrameSize)
			PutSkewFrame(frames[:SkewFrameSize], 7, work, false, 3)
			PutSkewFrame(frames[SkewFrameSize:2*SkewFrameSize], 8, work, true, 3)
			PutSkewFrame(frames[2*SkewFrameSize:], 9, 0, false, 3)
			t0 := time.Now()
			// Split mid-frame: the servers must keep a partial frame.
			if _, err := c.Write(frames[:SkewFrameSize+5]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
			if _, err := c.Write(frames[SkewFrameSize+5:]); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(frames))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(t0); el < 2*work {
				t.Errorf("replies after %v, before the slow frames' work, %v", el, 2*work)
			}
			if !bytes.Equal(got, frames) {
				t.Errorf("replies % x, want % x", got, frames)
			}
			// Nothing more: one more byte would be a spurious reply.
			if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Read(got[:1]); n != 0 || !isTimeout(err) {
				t.Errorf("after the replies: read %d bytes, %v; want a timeout", n, err)
			}
		})
	}
}

// TestSkewClient runs BenchmarkSkew's client briefly against one server,
// with and without skew, both kinds of work: every frame answered and
// checked, the slow ones counted, the light ones timed.
func TestSkewClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	srv := startServer(t, "skew-poller-shared", -1)
	defer func() {
		if err := srv.stop(); err != nil {
			t.Error(err)
		}
	}()
	cl, err := dialSkew(srv.addr, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	for _, cell := range []skewCell{{}, {0.1, time.Millisecond, false}, {0.1, 200 * time.Microsecond, true}} {
		r, err := cl.run(200*time.Millisecond, 2000, cell)
		if err != nil {
			t.Fatalf("%v: %v", cell, err)
		}
		if n := len(r.light) + r.slow; n != 400 {
			t.Errorf("%v: %d replies, want 400", cell, n)
		}
		if (r.slow > 0) != (cell.p > 0) {
			t.Errorf("%v: %d slow requests", cell, r.slow)
		}
		if len(r.light) > 0 && (r.light[0] <= 0 || r.wall < 200*time.Millisecond-time.Millisecond) {
			t.Errorf("%v: fastest light request %v, wall %v", cell, r.light[0], r.wall)
		}
	}
}

// isTimeout reports whether err is a net.Error timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
