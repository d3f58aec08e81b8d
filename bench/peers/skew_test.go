//go:build linux

package peers

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkSkew's flags: the load of each cell and which cells to run.
var (
	skewTime  = flag.Duration("skew.time", 3*time.Second, "BenchmarkSkew: the measured load of each cell and server")
	skewRate  = flag.Float64("skew.rate", 10_000, "BenchmarkSkew: requests per second, all connections together")
	skewConns = flag.Int("skew.conns", 200, "BenchmarkSkew: connections")
	skewP     = flag.String("skew.p", "0.005,0.02", "BenchmarkSkew: fractions of slow requests, comma-separated")
	skewD     = flag.String("skew.d", "1ms,5ms", "BenchmarkSkew: what a slow request sleeps in the handler, comma-separated")
	skewBase  = flag.Bool("skew.base", true, "BenchmarkSkew: run the cell without skew too")
)

// skewWarmup is an unmeasured load without skew before each measurement:
// every connection accepted and served once, the server's buffers grown.
const skewWarmup = 300 * time.Millisecond

// skewCell is one load of BenchmarkSkew: a fraction p of the requests is
// slow and sleeps d in the server's handler. p 0 is the load without skew.
type skewCell struct {
	p float64
	d time.Duration
}

// String names the cell in the benchmark's name: "none" or "p=0.5%/D=1ms".
func (c skewCell) String() string {
	if c.p == 0 {
		return "none"
	}
	return fmt.Sprintf("p=%g%%/D=%v", 100*c.p, c.d)
}

// skewCells returns the cells the flags choose: the one without skew
// (-skew.base), then every p of -skew.p with every D of -skew.d.
func skewCells() ([]skewCell, error) {
	var cells []skewCell
	if *skewBase {
		cells = append(cells, skewCell{})
	}
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
	for _, d := range ds {
		for _, p := range ps {
			cells = append(cells, skewCell{p, d})
		}
	}
	return cells, nil
}

// BenchmarkSkew measures the light requests' latency when a few requests
// block in the server's handler: every skew server (Kind "skew", see
// SkewFrameSize) in a process of its own pinned to one CPU with
// GOMAXPROCS=1 (cmd/serve), and an open-loop client in this process pinned
// to the other CPU. The client sends SkewFrameSize-byte frames at a fixed
// total rate (-skew.rate) over -skew.conns connections, each frame to a
// connection chosen at random, without waiting for replies; a fraction p
// of them, chosen at random, asks the handler to sleep D before echoing
// it. The random sequence is the same for every server. Every reply is
// checked byte for byte against its frame, in order per connection.
//
// The cells are the load without skew and every p of -skew.p with every D
// of -skew.d (-skew.base=false leaves the first out), each -skew.time long
// after an unmeasured warm-up; each server starts afresh for each cell.
// The measurement ignores b.N: run it with -benchtime=1x. It reports:
//
//   - light-p50-µs, light-p99-µs, light-p99.9-µs, light-max-µs: the
//     latency of the light requests, from just before the client's write
//     to the reply's last byte read, so that the client's lateness in
//     sending does not count;
//   - req/s: the rate achieved, replies over the time from the first
//     write to the last reply;
//   - slow-reqs: how many requests were slow;
//   - server-cpu-µs/req, server-util-% and client-util-%: the server's
//     CPU time (its tail until quiet included) per request, and each
//     side's CPU time over the wall time (see BenchmarkEcho): a server
//     near 100 % is saturated and queues whatever it is given.
//
// The client paces its writes on a thread of its own with nanosleep(2),
// whose wake-ups are late by about 50 µs, where the Go runtime's timers
// would wake it only every millisecond and send in bursts; it runs with
// GOMAXPROCS=2 so that the readers run while that thread sleeps.
func BenchmarkSkew(b *testing.B) {
	cells, err := skewCells()
	if err != nil {
		b.Fatal(err)
	}
	if *skewConns < 1 || *skewRate <= 0 || *skewTime <= 0 {
		b.Fatal("-skew.conns, -skew.rate and -skew.time must be positive")
	}
	serverCPU, ok := pinClient(b, 2)
	if !ok {
		return
	}
	for _, cell := range cells {
		for _, s := range OfKind("skew") {
			b.Run(cell.String()+"/"+s.Name, func(b *testing.B) {
				srv := startServer(b, s.Name, serverCPU)
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
				w, err := measure(srv.Pid(), b, func() error {
					var err error
					r, err = cl.run(*skewTime, *skewRate, cell)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				r.report(b)
				b.ReportMetric(w.serverCPU.Seconds()*1e6/float64(len(r.light)+r.slow), "server-cpu-µs/req")
				w.report(b)
			})
		}
	}
}

// skewClient is the open-loop client of BenchmarkSkew: its connections to
// one server.
type skewClient struct {
	conns []net.Conn
}

// dialSkew opens n connections to addr.
func dialSkew(addr string, n int) (*skewClient, error) {
	cl := &skewClient{}
	d := net.Dialer{Timeout: ioTimeout}
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			cl.close()
			return nil, err
		}
		cl.conns = append(cl.conns, c)
	}
	return cl, nil
}

// close closes every connection.
func (cl *skewClient) close() {
	for _, c := range cl.conns {
		c.Close()
	}
}

// skewSent is a frame sent, as its connection's reader expects its reply.
type skewSent struct {
	seq   uint64
	delay time.Duration
	at    time.Time // just before the write
}

// skewResult is what one run of the client measured.
type skewResult struct {
	light []time.Duration // the light requests' latencies, sorted
	slow  int             // slow requests
	wall  time.Duration   // first write to last reply
}

// skewReader is one connection's reader's results.
type skewReader struct {
	light []time.Duration
	slow  int
	last  time.Time // the last reply
	err   error
}

// run sends frames at rate over every connection for d, a fraction cell.p
// of them slow by cell.d, waits for every reply and checks it. A
// connection's reader takes the record of a frame before it reads its
// reply; the record is queued before the frame is written, so a reply
// always finds its record, and closing the queue at the end stops the
// reader once every reply has come.
func (cl *skewClient) run(d time.Duration, rate float64, cell skewCell) (skewResult, error) {
	n := len(cl.conns)
	// The reader's deadline: the load, then every frame's delay if one
	// connection got all of its slow frames in a row, and a margin.
	deadline := time.Now().Add(d + time.Duration(cell.p*rate*d.Seconds())*cell.d + ioTimeout)
	queues := make([]chan skewSent, n)
	readers := make([]skewReader, n)
	var wg sync.WaitGroup
	for i, c := range cl.conns {
		if err := c.SetDeadline(deadline); err != nil {
			return skewResult{}, err
		}
		queues[i] = make(chan skewSent, 4096)
		wg.Add(1)
		go func() {
			defer wg.Done()
			readers[i] = readSkew(c, uint32(i), queues[i])
		}()
	}
	start, sendErr := sendSkew(cl.conns, queues, d, rate, cell)
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	var r skewResult
	var last time.Time
	for i, rd := range readers {
		if rd.err != nil {
			return r, fmt.Errorf("connection %d: %w", i, rd.err)
		}
		r.light = append(r.light, rd.light...)
		r.slow += rd.slow
		if rd.last.After(last) {
			last = rd.last
		}
	}
	if sendErr != nil {
		return r, sendErr
	}
	slices.Sort(r.light)
	r.wall = last.Sub(start)
	return r, nil
}

// sendSkew writes frames at rate for d, each to a connection chosen at
// random and slow with probability cell.p, from a goroutine locked to its
// own thread, pacing with nanosleep(2). It queues each frame's record on
// its connection's queue before writing it, and returns the time of the
// first write.
func sendSkew(conns []net.Conn, queues []chan skewSent, d time.Duration, rate float64, cell skewCell) (time.Time, error) {
	type outcome struct {
		start time.Time
		err   error
	}
	done := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		rng := rand.New(rand.NewPCG(16, uint64(len(conns))))
		seqs := make([]uint64, len(conns))
		frame := make([]byte, SkewFrameSize)
		interval := float64(time.Second) / rate
		start := time.Now()
		for i := 0; ; i++ {
			due := time.Duration(float64(i) * interval)
			if due >= d {
				break
			}
			if wait := due - time.Since(start); wait > 0 {
				ts := unix.NsecToTimespec(wait.Nanoseconds())
				for unix.Nanosleep(&ts, &ts) == unix.EINTR {
				}
			}
			ci := rng.IntN(len(conns))
			var delay time.Duration
			if rng.Float64() < cell.p {
				delay = cell.d
			}
			seq := seqs[ci]
			seqs[ci]++
			PutSkewFrame(frame, seq, delay, uint32(ci))
			at := time.Now()
			queues[ci] <- skewSent{seq: seq, delay: delay, at: at}
			if _, err := conns[ci].Write(frame); err != nil {
				done <- outcome{start, fmt.Errorf("connection %d: write: %w", ci, err)}
				return
			}
		}
		done <- outcome{start, nil}
	}()
	o := <-done
	return o.start, o.err
}

// readSkew reads c's replies, one per record on q, until q is closed, and
// checks each against the frame the record describes.
func readSkew(c net.Conn, ci uint32, q <-chan skewSent) skewReader {
	var r skewReader
	got := make([]byte, SkewFrameSize)
	want := make([]byte, SkewFrameSize)
	for s := range q {
		if _, err := io.ReadFull(c, got); err != nil {
			r.err = fmt.Errorf("read the reply to frame %d: %w", s.seq, err)
			break
		}
		r.last = time.Now()
		PutSkewFrame(want, s.seq, s.delay, ci)
		if !bytes.Equal(got, want) {
			r.err = fmt.Errorf("reply % x to frame % x", got, want)
			break
		}
		if s.delay > 0 {
			r.slow++
		} else {
			r.light = append(r.light, r.last.Sub(s.at))
		}
	}
	for range q { // let the sender finish if this reader failed
	}
	return r
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
	b.ReportMetric(float64(len(r.light)+r.slow)/r.wall.Seconds(), "req/s")
	b.ReportMetric(float64(r.slow), "slow-reqs")
}

// TestSkewServers checks that every skew server, in its own process,
// answers a slow frame and then a light one on the same connection, each
// byte for byte, the slow one after its delay.
func TestSkewServers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/serve")
	}
	const delay = 2 * time.Millisecond
	for _, s := range OfKind("skew") {
		t.Run(s.Name, func(t *testing.T) {
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
			frames := make([]byte, 2*SkewFrameSize)
			PutSkewFrame(frames[:SkewFrameSize], 7, delay, 3)
			PutSkewFrame(frames[SkewFrameSize:], 8, 0, 3)
			t0 := time.Now()
			if _, err := c.Write(frames); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(frames))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(t0); el < delay {
				t.Errorf("replies after %v, before the slow frame's delay %v", el, delay)
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

// isTimeout reports whether err is a net.Error timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
