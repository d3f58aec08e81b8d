//go:build linux

package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

// blockingWriter answers its first input by writing size bytes of
// pattern in 64 KiB writes from OnData, calling Flush whenever Writable
// reports false, as a handler copying a file into the connection would.
type blockingWriter struct {
	conn.BaseHandler
	size     int
	ctx      func() (context.Context, context.CancelFunc)
	deadline time.Duration // a write deadline set before writing, if > 0

	maxQueued atomic.Int64
	result    chan error
	closed    chan closed
}

func newBlockingWriter(size int) *blockingWriter {
	return &blockingWriter{
		size:   size,
		ctx:    func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
		result: make(chan error, 1),
		closed: make(chan closed, 1),
	}
}

func (w *blockingWriter) OnData(c *conn.Conn) {
	c.Discard(c.Buffered())
	if w.deadline > 0 {
		c.SetWriteDeadline(time.Now().Add(w.deadline))
	}
	ctx, cancel := w.ctx()
	defer cancel()
	data := pattern(w.size)
	for len(data) > 0 {
		if !c.Writable() {
			if err := c.Flush(ctx); err != nil {
				w.result <- err
				return
			}
		}
		n := min(len(data), 64<<10)
		if _, err := c.Write(data[:n]); err != nil {
			w.result <- err
			return
		}
		data = data[n:]
		if q := int64(c.Queued()); q > w.maxQueued.Load() {
			w.maxQueued.Store(q)
		}
	}
	w.result <- c.Flush(ctx)
}

func (w *blockingWriter) OnClose(c *conn.Conn, r conn.Reason, err error) {
	w.closed <- closed{c: c, reason: r, err: err, stats: c.Stats()}
}

// TestFlushFromHandler: a handler method writing 24 MiB with blocking
// writes, through a small send buffer to a client with a small receive
// buffer, gets every byte out in order with at most HighWater plus one
// write queued, although the connection's own events wait for it.
func TestFlushFromHandler(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const size = 24 << 20
		w := newBlockingWriter(size)
		opts := conn.Options{HighWater: 256 << 10, SendBuffer: 16 << 10}
		s, addr := newServer(t, w, opts, network)
		nc := dialSmallReceive(t, addr)
		nc.Write([]byte("go"))
		got := readFull(t, nc, size)
		if err := wait(t, w.result, "the handler's writes"); err != nil {
			t.Fatalf("handler: %v", err)
		}
		if !bytes.Equal(got, pattern(size)) {
			d := firstDiff(got, pattern(size))
			t.Fatalf("client received %s", d)
		}
		if max, bound := w.maxQueued.Load(), int64(s.Options().HighWater+64<<10); max > bound {
			t.Errorf("queued up to %d bytes, more than HighWater plus one write (%d)", max, bound)
		}
	})
}

// TestFlushContext: Flush to a client that reads nothing returns its
// context's error, and the connection stays open.
func TestFlushContext(t *testing.T) {
	w := newBlockingWriter(32 << 20)
	w.ctx = func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 100*time.Millisecond)
	}
	_, addr := newServer(t, w, conn.Options{HighWater: 256 << 10}, "tcp")
	nc := dialSmallReceive(t, addr)
	nc.Write([]byte("go"))
	start := time.Now()
	err := wait(t, w.result, "Flush")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush returned %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Flush returned after %v, its context ended after 100ms", d)
	}
	select {
	case cl := <-w.closed:
		t.Fatalf("connection ended (%v, %v): a context's end must not end it", cl.reason, cl.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestFlushWriteDeadline: a write deadline that passes while Flush waits
// resets the connection with ReasonTimeout, as it would from the waiter,
// and Flush reports os.ErrDeadlineExceeded.
func TestFlushWriteDeadline(t *testing.T) {
	w := newBlockingWriter(32 << 20)
	w.deadline = 100 * time.Millisecond
	s, addr := newServer(t, w, conn.Options{HighWater: 256 << 10}, "tcp")
	nc := dialSmallReceive(t, addr)
	nc.Write([]byte("go"))
	if err := wait(t, w.result, "Flush"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Flush returned %v, want os.ErrDeadlineExceeded", err)
	}
	cl := wait(t, w.closed, "OnClose")
	if cl.reason != conn.ReasonTimeout {
		t.Errorf("OnClose reason %v, want %v", cl.reason, conn.ReasonTimeout)
	}
	if s.Stats().Timeouts == 0 {
		t.Errorf("ServerStats.Timeouts is 0 after a write deadline passed")
	}
}

// handedOff serves 4-byte requests "Rnnn" one at a time, each on a
// goroutine of its own: while one is served it consumes nothing, and the
// goroutine, having answered, calls Wake for the rest.
type handedOff struct {
	conn.BaseHandler
	busy  atomic.Bool
	wakes chan error
}

func (h *handedOff) OnData(c *conn.Conn) {
	if h.busy.Load() {
		return
	}
	req, err := c.Next(4)
	if err != nil {
		return
	}
	req = bytes.Clone(req)
	h.busy.Store(true)
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.Write(append([]byte("A"), req[1:]...))
		h.busy.Store(false)
		h.wakes <- c.Wake()
	}()
}

// TestWake: requests that arrived in one read while the first was served
// elsewhere are offered again by Wake, with no more input arriving; after
// the connection's end Wake reports net.ErrClosed.
func TestWake(t *testing.T) {
	for _, topo := range []poller.Topology{poller.PerWaiter, poller.Shared, poller.Stealing} {
		t.Run(topo.String(), func(t *testing.T) { testWake(t, topo) })
	}
}

// testWake is TestWake on one topology, with three waiters: on a shared
// set the offer may run on a waiter other than the connection's last
// one, and must read its own waiter's input (the race detector checks).
func testWake(t *testing.T, topo poller.Topology) {
	forEachNetwork(t, func(t *testing.T, network string) {
		h := &handedOff{wakes: make(chan error, 8)}
		_, addr := newServer(t, h, conn.Options{Poller: poller.Options{Topology: topo, Waiters: 3}}, network)
		nc := dial(t, addr)
		nc.Write([]byte("R001R002R003"))
		if got := readFull(t, nc, 12); string(got) != "A001A002A003" {
			t.Fatalf("client received %q, want %q", got, "A001A002A003")
		}
		for range 3 {
			if err := wait(t, h.wakes, "Wake"); err != nil {
				t.Fatalf("Wake: %v", err)
			}
		}
		nc.Write([]byte("R004"))
		closeReset(t, nc)
		if err := wait(t, h.wakes, "Wake"); !isClosed(err) {
			t.Fatalf("Wake after the connection's end returned %v, want net.ErrClosed", err)
		}
	})
}

// heldOff answers each 4-byte request on a goroutine of its own after
// delay, holding the connection (Hold) meanwhile, and Wakes for the rest.
type heldOff struct {
	conn.BaseHandler
	delay time.Duration
	hold  bool
	busy  atomic.Bool
	taken chan struct{}
}

func (h *heldOff) OnData(c *conn.Conn) {
	if h.busy.Load() {
		return
	}
	req, err := c.Next(4)
	if err != nil {
		return
	}
	req = bytes.Clone(req)
	h.busy.Store(true)
	done := func() {}
	if h.hold {
		done = c.Hold()
	}
	h.taken <- struct{}{}
	go func() {
		defer done()
		time.Sleep(h.delay)
		c.Write(bytes.Repeat(append([]byte("A"), req[1:]...), 64<<10))
		h.busy.Store(false)
		c.Wake()
	}()
}

// TestHoldShutdown: Shutdown, and the peer's FIN, while a request is
// served on another goroutine under Hold let its reply, and the replies
// to the requests read before, go out whole; without Hold the connection
// closes under the goroutine.
func TestHoldShutdown(t *testing.T) {
	for _, hold := range []bool{true, false} {
		for _, how := range []string{"shutdown", "peer-fin"} {
			t.Run(fmt.Sprintf("%s/hold=%v", how, hold), func(t *testing.T) {
				h := &heldOff{delay: 100 * time.Millisecond, hold: hold, taken: make(chan struct{}, 8)}
				s, addr := newServer(t, h, conn.Options{}, "tcp")
				nc := dial(t, addr)
				nc.Write([]byte("R001R002"))
				wait(t, h.taken, "the first request")
				var res <-chan shutdownResult
				if how == "shutdown" {
					res = shutdownAsync(s)
				} else {
					closeWrite(t, nc)
				}
				got, err := readToEOF(nc)
				want := append(bytes.Repeat([]byte("A001"), 64<<10), bytes.Repeat([]byte("A002"), 64<<10)...)
				if !hold {
					if bytes.Equal(got, want) {
						t.Fatalf("without Hold the replies arrived whole: the test cannot tell Hold's effect")
					}
					return
				}
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("client read %d of %d bytes (%v): %s", len(got), len(want), err, firstDiff(got, want))
				}
				if res != nil {
					if r := wait(t, res, "Shutdown"); r.drained != 1 || r.forced != 0 || r.err != nil {
						t.Errorf("Shutdown returned (%d drained, %d forced, %v), want (1, 0, nil)", r.drained, r.forced, r.err)
					}
				}
			})
		}
	}
}

// TestCloseDuringFlush: Server.Close while a handler method waits in
// Flush for a client that reads nothing refuses its writes, so the
// method returns and Close with it.
func TestCloseDuringFlush(t *testing.T) {
	w := newBlockingWriter(32 << 20)
	s, addr := newServer(t, w, conn.Options{HighWater: 256 << 10}, "tcp")
	nc := dialSmallReceive(t, addr)
	nc.Write([]byte("go"))
	time.Sleep(100 * time.Millisecond) // the handler is in Flush
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if err := wait(t, w.result, "the handler's Flush"); !isClosed(err) {
		t.Errorf("Flush returned %v, want net.ErrClosed", err)
	}
	wait(t, closed, "Server.Close")
}
