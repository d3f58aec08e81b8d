//go:build linux

package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// pipeliner is a pipelining server written as the package doc says:
// 8-byte requests, each answered with its request repeated to size bytes,
// run in a loop that asks Writable before each one. It records what flow
// control did.
type pipeliner struct {
	conn.BaseHandler
	size int

	served    atomic.Int64 // requests answered
	held      atomic.Int64 // OnData returns with complete requests left
	maxQueued atomic.Int64 // the longest queue seen after a reply
	writeErrs atomic.Int64
	draining  atomic.Int64 // requests answered while Draining
	// seen is the most requests the handler has had in its input,
	// answered or buffered: the requests the server has read. (Stats'
	// BytesIn also counts what a closing connection drains and drops.)
	seen   atomic.Int64
	closed chan closed
}

func newPipeliner(size int) *pipeliner {
	return &pipeliner{size: size, closed: make(chan closed, 1)}
}

func (p *pipeliner) OnData(c *conn.Conn) {
	for c.Writable() {
		req, err := c.Next(8)
		if err != nil {
			return // incomplete
		}
		if c.Draining() {
			p.draining.Add(1)
		}
		if _, err := c.Write(bytes.Repeat(req, p.size/8)); err != nil {
			p.writeErrs.Add(1)
			return
		}
		p.served.Add(1)
		if q := int64(c.Queued()); q > p.maxQueued.Load() {
			p.maxQueued.Store(q)
		}
	}
	if c.Buffered() >= 8 {
		p.held.Add(1)
	}
	if seen := p.served.Load() + int64(c.Buffered()/8); seen > p.seen.Load() {
		p.seen.Store(seen)
	}
}

func (p *pipeliner) OnClose(c *conn.Conn, r conn.Reason, err error) {
	p.closed <- closed{c: c, reason: r, err: err, stats: c.Stats()}
}

// requests returns n pipelined requests.
func requests(n int) []byte {
	b := make([]byte, 0, 8*n)
	for i := range n {
		b = fmt.Appendf(b, "R%07d", i)
	}
	return b
}

// checkReplies checks that got is the replies to the first n of
// requests(...), each its request repeated to size bytes.
func checkReplies(t *testing.T, got []byte, n, size int) {
	t.Helper()
	if len(got) != n*size {
		t.Fatalf("client got %d bytes, want %d replies of %d (%d bytes)", len(got), n, size, n*size)
	}
	for i := range n {
		want := bytes.Repeat(fmt.Appendf(nil, "R%07d", i), size/8)
		if r := got[i*size : (i+1)*size]; !bytes.Equal(r, want) {
			t.Fatalf("reply %d: %s", i, firstDiff(r, want))
		}
	}
}

// pipelined starts a pipeliner answering size-byte replies, with options
// that make the output bound bite early (a small send buffer, a 256 KB
// HighWater; a read buffer that takes 10,000 requests in one read), and a
// client with a small receive buffer that has sent it n requests.
func pipelined(t *testing.T, network string, n, size int) (*pipeliner, *conn.Server, net.Conn) {
	t.Helper()
	p := newPipeliner(size)
	s, addr := newServer(t, p, conn.Options{HighWater: 256 << 10, SendBuffer: 64 << 10, ReadBuffer: 128 << 10}, network)
	nc := dialSmallReceive(t, addr)
	if _, err := nc.Write(requests(n)); err != nil {
		t.Fatal(err)
	}
	return p, s, nc
}

// TestPipelineFlowControl: 10,000 pipelined requests from a client that
// reads nothing for 2 s, then everything. The handler's loop stops when
// Writable says so, the queue never exceeds HighWater plus one reply, no
// Write fails, and conn offers the held requests again as the queue
// drains, with no more input arriving: every reply arrives, in order,
// byte-exact.
func TestPipelineFlowControl(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const n, size = 10000, 1024
		p, s, nc := pipelined(t, network, n, size)
		high := s.Options().HighWater
		time.Sleep(2 * time.Second)
		if p.held.Load() == 0 {
			t.Errorf("the handler was never held back (served %d of %d while the client read nothing)", p.served.Load(), n)
		}
		served := p.served.Load()
		got := readFull(t, nc, n*size)
		checkReplies(t, got, n, size)
		if q := p.maxQueued.Load(); q > int64(high+size) {
			t.Errorf("queue reached %d bytes, want at most HighWater+one reply = %d", q, high+size)
		}
		if e := p.writeErrs.Load(); e != 0 {
			t.Errorf("%d Writes failed", e)
		}
		t.Logf("%s: %d of %d served before the client read; %d times held; longest queue %d (HighWater %d)",
			network, served, n, p.held.Load(), p.maxQueued.Load(), high)
	})
}

// TestPipelineShutdown: Shutdown while a client that has not read yet has
// thousands of requests buffered. Every request the server read is
// answered (Draining reports true for those answered after Shutdown), then
// the client gets EOF, not a reset; Shutdown returns (1, 0, nil).
func TestPipelineShutdown(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const n, size = 10000, 1024
		p, s, nc := pipelined(t, network, n, size)
		eventually(t, "the handler held back", func() bool { return p.held.Load() > 0 })
		done := shutdownAsync(s)
		time.Sleep(500 * time.Millisecond) // the client still reads nothing
		got, err := readToEOF(nc)
		if err != nil {
			t.Fatalf("client read %d bytes, then %v; want every reply, then EOF", len(got), err)
		}
		nc.Close() // our FIN answered: the server's close completes
		cl := wait(t, p.closed, "OnClose")
		// Requests still in the kernel when Shutdown began (reading was
		// paused above HighWater) are not read, and are drained and
		// dropped with the close: only those read must be answered.
		read := int(p.seen.Load())
		if read == 0 || int(p.served.Load()) != read {
			t.Fatalf("server read %d requests, answered %d", read, p.served.Load())
		}
		checkReplies(t, got, read, size)
		if cl.reason != conn.ReasonShutdown {
			t.Errorf("OnClose reason %v, want shutdown", cl.reason)
		}
		if p.draining.Load() == 0 {
			t.Errorf("no request answered while Draining, want those held back at Shutdown")
		}
		r := wait(t, done, "Shutdown")
		if r.drained != 1 || r.forced != 0 || r.err != nil {
			t.Errorf("Shutdown = %d, %d, %v; want 1, 0, nil", r.drained, r.forced, r.err)
		}
		t.Logf("%s: %d requests read, all answered; %d after Shutdown began", network, read, p.draining.Load())
	})
}

// TestPipelinePeerFIN: a client pipelines 10,000 requests, shuts its
// write side and reads slowly. Requests held back by flow control when
// the FIN arrives are still answered, then EOF.
func TestPipelinePeerFIN(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const n, size = 10000, 1024
		p, _, nc := pipelined(t, network, n, size)
		closeWrite(t, nc)
		time.Sleep(300 * time.Millisecond)
		got, err := readToEOF(nc)
		if err != nil {
			t.Fatalf("client read %d bytes, then %v; want every reply, then EOF", len(got), err)
		}
		checkReplies(t, got, n, size)
		if cl := wait(t, p.closed, "OnClose"); cl.reason != conn.ReasonPeerClosed {
			t.Errorf("OnClose reason %v, want peer-closed", cl.reason)
		}
	})
}

// bigReply answers the first byte of input with 8 MB, then closes if
// closeAfter is set.
type bigReply struct {
	conn.BaseHandler
	closeAfter bool
	sent       atomic.Bool
	writeErr   chan error
	closed     chan closed
}

func (h *bigReply) OnData(c *conn.Conn) {
	c.Discard(c.Buffered())
	if h.sent.Swap(true) {
		return
	}
	_, err := c.Write(pattern(8 << 20)) // larger than MaxQueued: taken, the queue was empty
	h.writeErr <- err
	if h.closeAfter {
		c.Close()
	}
}

func (h *bigReply) OnClose(c *conn.Conn, r conn.Reason, err error) {
	h.closed <- closed{c: c, reason: r, err: err, stats: c.Stats()}
}

// slowRead reads n bytes from nc in 64 KB pieces, pausing pause between
// them, then expects EOF.
func slowRead(t *testing.T, nc net.Conn, n int, pause time.Duration) []byte {
	t.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	nc.SetReadDeadline(time.Now().Add(4 * timeout))
	for len(got) < n+1 {
		k, err := nc.Read(buf)
		got = append(got, buf[:k]...)
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("client read %d of %d bytes, then %v; want all, then EOF", len(got), n, err)
		}
		time.Sleep(pause)
	}
	t.Fatalf("client read %d bytes, more than the %d sent", len(got), n)
	return nil
}

// TestSlowReaderAfterClose: 8 MB to a client reading at about 4 MB/s, with
// FlushTimeout 500 ms, far shorter than the transfer (about 2-3 s). After
// the peer's FIN (the client half-closed after its request) and after the
// handler's Close alike, FlushTimeout bounds a stall, not the reply: the
// client gets every byte, then EOF, not a reset.
func TestSlowReaderAfterClose(t *testing.T) {
	for _, tc := range []struct {
		name            string
		halfClose, shut bool
	}{
		{"after-peer-FIN", true, false},
		{"after-Close", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachNetwork(t, func(t *testing.T, network string) {
				h := &bigReply{closeAfter: tc.shut, writeErr: make(chan error, 1), closed: make(chan closed, 1)}
				// HighWater above the reply: reading does not pause, so
				// the FIN is read, and the close begins, with nearly all
				// of it queued.
				opts := conn.Options{FlushTimeout: 500 * time.Millisecond, SendBuffer: 64 << 10, HighWater: 16 << 20}
				_, addr := newServer(t, h, opts, network)
				nc := dialReceive(t, addr, 128<<10)
				nc.Write([]byte("?"))
				if tc.halfClose {
					closeWrite(t, nc)
				}
				if err := wait(t, h.writeErr, "the reply's Write"); err != nil {
					t.Fatalf("Write of 8 MB onto an empty queue: %v", err)
				}
				start := time.Now()
				got := slowRead(t, nc, 8<<20, 15*time.Millisecond)
				cl := wait(t, h.closed, "OnClose")
				if !bytes.Equal(got, pattern(8<<20)) {
					t.Fatalf("client read: %s; OnClose %v, %v, %+v", firstDiff(got, pattern(8<<20)), cl.reason, cl.err, cl.stats)
				}
				want := conn.ReasonLocalClose
				if tc.halfClose {
					want = conn.ReasonPeerClosed
				}
				if cl.reason != want {
					t.Errorf("OnClose reason %v (%v), want %v", cl.reason, cl.err, want)
				}
				t.Logf("%s: 8 MB in %v with FlushTimeout %v", network, time.Since(start).Round(time.Millisecond), opts.FlushTimeout)
			})
		})
	}
}

// TestFlushStallResets: FlushTimeout still bounds a stall: a closing
// connection whose client reads nothing is reset after it (ReasonTimeout),
// and the queued output is counted lost.
func TestFlushStallResets(t *testing.T) {
	h := &bigReply{closeAfter: true, writeErr: make(chan error, 1), closed: make(chan closed, 1)}
	s, addr := newServer(t, h, conn.Options{FlushTimeout: 200 * time.Millisecond, SendBuffer: 64 << 10}, "tcp")
	nc := dialSmallReceive(t, addr)
	nc.Write([]byte("?"))
	start := time.Now()
	cl := wait(t, h.closed, "OnClose")
	if cl.reason != conn.ReasonTimeout {
		t.Errorf("OnClose reason %v, want timeout", cl.reason)
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("reset after %v, before FlushTimeout", el)
	}
	if s.Stats().LostOutput == 0 {
		t.Errorf("LostOutput 0, want the queue that never drained")
	}
}

// TestShutdownIdleClient: a client that has read its reply but never
// answers the server's FIN does not hold Shutdown up or make it fail:
// with no deadline and a FlushTimeout of a minute, Shutdown returns
// (1, 0, nil) as soon as the client has acknowledged everything, and the
// client then reads EOF, not a reset. With a context that ends while the
// connection waits for the client's FIN, the same.
func TestShutdownIdleClient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool // the context ends once the client has the server's FIN
	}{
		{"no-deadline", false},
		{"ctx-ends", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeliner(64)
			s, addr := newServer(t, p, conn.Options{FlushTimeout: time.Minute}, "tcp")
			nc := dial(t, addr)
			nc.Write(requests(1))
			got := readFull(t, nc, 64)
			checkReplies(t, got, 1, 64)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start := time.Now()
			done := make(chan shutdownResult, 1)
			go func() {
				d, f, err := s.Shutdown(ctx)
				done <- shutdownResult{d, f, err}
			}()
			if tc.cancel {
				// The server's FIN has arrived: the connection waits only
				// for ours when the context ends.
				expectEOF(t, nc)
				cancel()
			}
			r := wait(t, done, "Shutdown")
			if r.drained != 1 || r.forced != 0 || r.err != nil {
				t.Errorf("Shutdown = %d, %d, %v; want 1, 0, nil", r.drained, r.forced, r.err)
			}
			if el := time.Since(start); el > 30*time.Second {
				t.Errorf("Shutdown took %v: it waited for the idle client's FIN", el)
			}
			if !tc.cancel {
				expectEOF(t, nc)
			}
			if cl := wait(t, p.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
				t.Errorf("OnClose reason %v, want shutdown", cl.reason)
			}
		})
	}
}

// TestLargeWrite: a Write onto a queue at or below HighWater is taken
// whatever its size (here 4x MaxQueued); above HighWater, one that would
// pass MaxQueued fails with ErrQueueFull and queues nothing, and Writable
// reports false until the queue drains.
func TestLargeWrite(t *testing.T) {
	r := newRecorder(t)
	opts := conn.Options{MaxQueued: 1 << 20, HighWater: 256 << 10, SendBuffer: 4096}
	_, addr := newServer(t, r, opts, "tcp")
	nc := dialSmallReceive(t, addr)
	c := wait(t, r.opened, "OnOpen")
	if !c.Writable() {
		t.Fatal("Writable false on a new connection")
	}
	big := pattern(4 << 20)
	if n, err := c.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write of 4 MB onto an empty queue = %d, %v; want all of it", n, err)
	}
	if c.Writable() {
		t.Errorf("Writable true with %d queued, above HighWater", c.Queued())
	}
	q := c.Queued()
	if _, err := c.Write(make([]byte, 1)); !errors.Is(err, conn.ErrQueueFull) {
		t.Errorf("Write above HighWater past MaxQueued: %v, want ErrQueueFull", err)
	}
	if c.Queued() != q {
		t.Errorf("a refused Write changed the queue from %d to %d", q, c.Queued())
	}
	got := readFull(t, nc, len(big))
	if !bytes.Equal(got, big) {
		t.Fatalf("client read: %s", firstDiff(got, big))
	}
	eventually(t, "Writable again", c.Writable)
	c.Close()
	if c.Writable() {
		t.Errorf("Writable true after Close")
	}
}

// TestOptionsEffective: Server.Options reports the limits in force, with
// the defaults filled in.
func TestOptionsEffective(t *testing.T) {
	for _, tc := range []struct {
		in                      conn.Options
		high, low, maxQ, buffer int
	}{
		{conn.Options{}, conn.DefaultHighWater, conn.DefaultHighWater / 4, conn.DefaultMaxQueued, conn.DefaultMaxBuffered},
		{conn.Options{HighWater: 8 << 20}, 8 << 20, 2 << 20, 8 << 20, conn.DefaultMaxBuffered},
		{conn.Options{MaxQueued: 1000}, 500, 125, 1000, conn.DefaultMaxBuffered},
	} {
		s, err := conn.NewServer(conn.BaseHandler{}, tc.in)
		if err != nil {
			t.Fatal(err)
		}
		o := s.Options()
		if o.HighWater != tc.high || o.LowWater != tc.low || o.MaxQueued != tc.maxQ || o.MaxBuffered != tc.buffer || o.FlushTimeout != conn.DefaultFlushTimeout {
			t.Errorf("Options(%+v): HighWater %d, LowWater %d, MaxQueued %d, MaxBuffered %d, FlushTimeout %v; want %d, %d, %d, %d, %v",
				tc.in, o.HighWater, o.LowWater, o.MaxQueued, o.MaxBuffered, o.FlushTimeout, tc.high, tc.low, tc.maxQ, tc.buffer, conn.DefaultFlushTimeout)
		}
		s.Close()
	}
}

// dialCounter counts OnOpen and OnClose per connection.
type dialCounter struct {
	mu     sync.Mutex
	opened map[*conn.Conn]int
	closed map[*conn.Conn]int
}

func (d *dialCounter) OnOpen(c *conn.Conn) {
	d.mu.Lock()
	d.opened[c]++
	d.mu.Unlock()
}

func (d *dialCounter) OnData(c *conn.Conn) { c.Discard(c.Buffered()) }

func (d *dialCounter) OnClose(c *conn.Conn, _ conn.Reason, _ error) {
	d.mu.Lock()
	d.closed[c]++
	d.mu.Unlock()
}

// TestDialCancelRace hammers the window where a dial's context ends as its
// connect completes: for a second, dials to a loopback listener whose
// contexts end after 0-300 µs. A dial that returned an error ran no
// handler method; every connection Dial returned ran OnOpen once and, by
// the server's Close, OnClose once; no fd is left.
func TestDialCancelRace(t *testing.T) {
	checkFDLeak(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	d := &dialCounter{opened: map[*conn.Conn]int{}, closed: map[*conn.Conn]int{}}
	s, err := conn.NewServer(d, conn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ok := map[*conn.Conn]bool{}
	var failed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration((i*37+g*101)%300)*time.Microsecond)
				c, err := s.Dial(ctx, "tcp", l.Addr().String(), nil)
				cancel()
				if err != nil {
					failed.Add(1)
					continue
				}
				mu.Lock()
				ok[c] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	closeServer(t, s)
	d.mu.Lock()
	defer d.mu.Unlock()
	bad := 0
	for c, n := range d.opened {
		if !ok[c] {
			bad++
		}
		if n != 1 || d.closed[c] != 1 {
			t.Errorf("a connection ran OnOpen %d times and OnClose %d times, want 1 and 1", n, d.closed[c])
		}
	}
	if bad > 0 {
		t.Errorf("%d dials returned an error yet ran OnOpen", bad)
	}
	for c := range ok {
		if d.opened[c] != 1 {
			t.Errorf("a dial returned a connection that ran OnOpen %d times", d.opened[c])
		}
	}
	for c := range d.closed {
		if d.opened[c] == 0 {
			t.Errorf("OnClose without OnOpen")
		}
	}
	t.Logf("%d dials connected, %d failed or were cancelled", len(ok), failed.Load())
}
