//go:build linux

package conn_test

import (
	"bytes"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// TestHalfCloseDefault: the client writes a request and half-closes; a
// handler that is no HalfCloser still gets all of it, its reply written in
// OnData arrives, then EOF; the connection ends as peer-closed.
func TestHalfCloseDefault(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t) // echoes
		_, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		nc := dial(t, addr)
		req := pattern(300 << 10)
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		closeWrite(t, nc)
		got, err := readToEOF(nc)
		if err != nil {
			t.Fatalf("client read: %v after %d bytes, want EOF", err, len(got))
		}
		if !bytes.Equal(got, req) {
			t.Fatalf("reply: %s", firstDiff(got, req))
		}
		cl := wait(t, r.closed, "OnClose")
		if cl.reason != conn.ReasonPeerClosed || cl.err != nil {
			t.Errorf("OnClose(%v, %v), want peer-closed, nil", cl.reason, cl.err)
		}
		if cl.stats.BytesIn != uint64(len(req)) || cl.stats.BytesOut != uint64(len(req)) {
			t.Errorf("stats in OnClose %+v, want %d bytes in and out", cl.stats, len(req))
		}
	})
}

// TestHalfCloseHalfCloser: with a HalfCloser, OnReadEOF runs after every
// byte was delivered; the handler replies later, from another goroutine,
// and closes; the client gets the reply, then EOF.
func TestHalfCloseHalfCloser(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		var k collector
		r.data = k.take
		req := pattern(200 << 10)
		reply := pattern(500 << 10)
		eofAt := make(chan int, 1)
		r.readEOF = func(c *conn.Conn) {
			eofAt <- k.len()
			go func() {
				time.Sleep(50 * time.Millisecond)
				if _, err := c.Write(reply); err != nil {
					t.Errorf("Write after the peer's FIN: %v", err)
				}
				if err := c.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
		}
		_, addr := newServer(t, withReadEOF{r}, conn.Options{SendBuffer: 4096}, network)
		nc := dial(t, addr)
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		closeWrite(t, nc)
		if n := wait(t, eofAt, "OnReadEOF"); n != len(req) {
			t.Errorf("OnReadEOF after %d bytes delivered, want %d", n, len(req))
		}
		got, err := readToEOF(nc)
		if err != nil {
			t.Fatalf("client read: %v after %d bytes, want EOF", err, len(got))
		}
		if !bytes.Equal(got, reply) {
			t.Fatalf("reply: %s", firstDiff(got, reply))
		}
		if !bytes.Equal(k.bytes(), req) {
			t.Errorf("request: %s", firstDiff(k.bytes(), req))
		}
		cl := wait(t, r.closed, "OnClose")
		if cl.reason != conn.ReasonLocalClose {
			t.Errorf("OnClose reason %v (%v), want local-close", cl.reason, cl.err)
		}
	})
}

// TestServerCloseWrite: CloseWrite sends FIN once the queue has drained,
// and reading goes on.
func TestServerCloseWrite(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		var k collector
		r.data = k.take
		_, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		nc := dial(t, addr)
		c := wait(t, r.opened, "OnOpen")
		msg := pattern(300 << 10)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if err := c.CloseWrite(); err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
		if _, err := c.Write([]byte("x")); !isClosed(err) {
			t.Errorf("Write after CloseWrite: %v, want net.ErrClosed", err)
		}
		if err := c.CloseWrite(); !isClosed(err) {
			t.Errorf("second CloseWrite: %v, want net.ErrClosed", err)
		}
		got, err := readToEOF(nc)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("client read: %v; %s", err, firstDiff(got, msg))
		}
		nc.Write([]byte("still reading"))
		eventually(t, "input after CloseWrite", func() bool { return k.len() == len("still reading") })
		nc.Close()
		cl := wait(t, r.closed, "OnClose")
		if cl.reason != conn.ReasonPeerClosed {
			t.Errorf("OnClose reason %v (%v), want peer-closed", cl.reason, cl.err)
		}
	})
}

// TestResetMidWrite: the client resets the connection while the server
// has megabytes queued: OnClose reports the reset, the queued output is
// counted as lost, nothing leaks.
func TestResetMidWrite(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		queued := make(chan int, 1)
		r.data = func(c *conn.Conn) {
			c.Discard(c.Buffered())
			chunk := pattern(64 << 10)
			for range 48 { // 3 MB
				if _, err := c.Write(chunk); err != nil {
					t.Errorf("Write: %v", err)
					break
				}
			}
			queued <- c.Queued()
		}
		s, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		nc := dialSmallReceive(t, addr)
		nc.Write([]byte("go"))
		q := wait(t, queued, "server writes")
		if q < 1<<20 {
			t.Fatalf("only %d bytes queued, want megabytes", q)
		}
		readFull(t, nc, 1000) // the client has unread input: closing resets
		closeReset(t, nc)
		cl := wait(t, r.closed, "OnClose")
		switch {
		case cl.reason == conn.ReasonReset:
		case cl.reason == conn.ReasonError && (errors.Is(cl.err, syscall.ECONNRESET) || errors.Is(cl.err, syscall.EPIPE)):
		default:
			t.Errorf("OnClose(%v, %v), want reset", cl.reason, cl.err)
		}
		if cl.stats.Queued != 0 {
			t.Errorf("Queued %d in OnClose, want 0", cl.stats.Queued)
		}
		st := s.Stats()
		if st.LostOutput == 0 || st.LostOutput > uint64(q) {
			t.Errorf("ServerStats.LostOutput %d, want the output still queued (%d at most, > 0)", st.LostOutput, q)
		}
		if st.Closed["reset"]+st.Closed["error"] != 1 || st.Open != 0 {
			t.Errorf("ServerStats %+v, want one reset connection, none open", st)
		}
	})
}

// TestAfterClose: once Close was called every method fails with an error
// matching net.ErrClosed, and once OnClose ran the addresses are gone.
func TestAfterClose(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		_, addr := newServer(t, r, conn.Options{}, network)
		nc := dial(t, addr)
		c := wait(t, r.opened, "OnOpen")
		if c.LocalAddr() == nil || c.RemoteAddr() == nil {
			t.Errorf("open connection: LocalAddr %v RemoteAddr %v", c.LocalAddr(), c.RemoteAddr())
		}
		if la := c.LocalAddr(); la != nil && la.Network() != addr.Network() {
			t.Errorf("LocalAddr network %q, want %q", la.Network(), addr.Network())
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		// Closing: the peer has not sent its FIN yet.
		check := func(when string) {
			t.Helper()
			if _, err := c.Write([]byte("x")); !isClosed(err) {
				t.Errorf("%s: Write: %v, want net.ErrClosed", when, err)
			}
			if _, err := c.Writev([][]byte{[]byte("x")}); !isClosed(err) {
				t.Errorf("%s: Writev: %v, want net.ErrClosed", when, err)
			}
			if err := c.CloseWrite(); !isClosed(err) {
				t.Errorf("%s: CloseWrite: %v, want net.ErrClosed", when, err)
			}
			if err := c.PauseRead(); !isClosed(err) {
				t.Errorf("%s: PauseRead: %v, want net.ErrClosed", when, err)
			}
			if err := c.ResumeRead(); !isClosed(err) {
				t.Errorf("%s: ResumeRead: %v, want net.ErrClosed", when, err)
			}
			if err := c.Close(); !isClosed(err) {
				t.Errorf("%s: Close again: %v, want net.ErrClosed", when, err)
			}
		}
		check("closing")
		expectEOF(t, nc)
		nc.Close()
		cl := wait(t, r.closed, "OnClose")
		if cl.reason != conn.ReasonLocalClose {
			t.Errorf("OnClose reason %v (%v), want local-close", cl.reason, cl.err)
		}
		check("after OnClose")
		if err := c.Abort(); !isClosed(err) {
			t.Errorf("Abort after OnClose: %v, want net.ErrClosed", err)
		}
		if a := c.LocalAddr(); a != nil {
			t.Errorf("LocalAddr after OnClose: %v, want nil", a)
		}
		if a := c.RemoteAddr(); a != nil {
			t.Errorf("RemoteAddr after OnClose: %v, want nil", a)
		}
		_ = c.Stats() // readable
	})
}

// TestOnCloseOnce ends connections in every way and checks that OnClose
// runs once for each with the right reason, that the connection's and its
// waiter's statistics are readable in it, and the server's counters.
func TestOnCloseOnce(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		var srv atomic.Pointer[conn.Server] // set after NewServer; read on the waiters
		r.close = func(c *conn.Conn, _ conn.Reason, _ error) {
			w := c.Stats().Waiter
			if _, err := srv.Load().Poller().WaiterStats(w); err != nil {
				t.Errorf("Poller().WaiterStats(Stats().Waiter = %d) in OnClose: %v", w, err)
			}
		}
		r.data = func(c *conn.Conn) {
			b, _ := c.Peek(c.Buffered())
			switch {
			case bytes.HasPrefix(b, []byte("hoard")): // leave it: more than MaxBuffered follows
				return
			}
			switch string(b) {
			case "close":
				c.Discard(len(b))
				c.Close()
			case "abort":
				c.Discard(len(b))
				c.Abort()
			default:
				c.Discard(len(b))
			}
		}
		s, addr := newServer(t, r, conn.Options{MaxBuffered: 1024}, network)
		srv.Store(s)

		want := map[conn.Reason]int{}
		end := func(reason conn.Reason, do func(nc net.Conn)) {
			t.Helper()
			nc := dial(t, addr)
			wait(t, r.opened, "OnOpen")
			nc.Write([]byte("hello"))
			do(nc)
			cl := wait(t, r.closed, "OnClose")
			if cl.reason != reason {
				t.Errorf("OnClose reason %v (%v), want %v", cl.reason, cl.err, reason)
			}
			if cl.stats.BytesIn < 5 {
				t.Errorf("%v: Stats in OnClose %+v, want the 5 bytes read", reason, cl.stats)
			}
			want[reason]++
		}
		end(conn.ReasonPeerClosed, func(nc net.Conn) { closeWrite(t, nc); expectEOF(t, nc) })
		end(conn.ReasonLocalClose, func(nc net.Conn) {
			time.Sleep(10 * time.Millisecond)
			nc.Write([]byte("close"))
			expectEOF(t, nc)
			nc.Close()
		})
		end(conn.ReasonAbort, func(nc net.Conn) {
			time.Sleep(10 * time.Millisecond)
			nc.Write([]byte("abort"))
			readToEOF(nc)
		})
		if network == "tcp" { // a Unix peer's close without unread input is a FIN
			end(conn.ReasonReset, func(nc net.Conn) { closeReset(t, nc) })
		}
		end(conn.ReasonError, func(nc net.Conn) {
			time.Sleep(10 * time.Millisecond)
			nc.Write([]byte("hoard"))
			time.Sleep(10 * time.Millisecond)
			nc.Write(make([]byte, 4096))
			readToEOF(nc)
		})

		st := s.Stats()
		n := 0
		for reason, k := range want {
			n += k
			if got := st.Closed[reason.String()]; got != uint64(k) {
				t.Errorf("ServerStats.Closed[%s] = %d, want %d (%v)", reason, got, k, st.Closed)
			}
		}
		if st.Accepted != int64(n) || st.Open != 0 {
			t.Errorf("ServerStats accepted %d open %d, want %d and 0", st.Accepted, st.Open, n)
		}

		// Shutdown: live connections.
		for range 3 {
			dial(t, addr)
			wait(t, r.opened, "OnOpen")
		}
		if st := s.Stats(); st.Open != 3 || st.Accepted != int64(n+3) {
			t.Errorf("ServerStats open %d accepted %d, want 3 and %d", st.Open, st.Accepted, n+3)
		}
		closeServer(t, s)
		for range 3 {
			if cl := wait(t, r.closed, "OnClose at shutdown"); cl.reason != conn.ReasonShutdown {
				t.Errorf("OnClose reason %v (%v) at shutdown, want shutdown", cl.reason, cl.err)
			}
		}
		if got := s.Stats().Closed["shutdown"]; got != 3 {
			t.Errorf("ServerStats.Closed[shutdown] = %d, want 3", got)
		}
	})
}

// TestServerCloseLive closes a server with many live connections, some
// with output queued: every OnClose runs (shutdown), every client sees the
// end, and nothing leaks (the fd check and goleak).
func TestServerCloseLive(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		r.open = func(c *conn.Conn) { c.Write(pattern(1 << 20)) }
		s, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		const n = 20
		clients := make([]net.Conn, n)
		for i := range clients {
			clients[i] = dial(t, addr)
			wait(t, r.opened, "OnOpen")
		}
		done := make(chan struct{})
		go func() { closeServer(t, s); close(done) }()
		wait(t, done, "Server.Close")
		for range n {
			if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
				t.Errorf("OnClose reason %v (%v), want shutdown", cl.reason, cl.err)
			}
		}
		for i, nc := range clients {
			if _, err := readToEOF(nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("client %d: %v, want EOF or a reset", i, err)
			}
		}
		if _, err := s.Listen(network, listenAddr(t, network)); !isClosed(err) {
			t.Errorf("Listen after Close: %v, want net.ErrClosed", err)
		}
	})
}

// TestServerCloseFromHandler: Server.Close called in OnData returns
// without waiting for itself; the shutdown completes.
func TestServerCloseFromHandler(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		var srv atomic.Pointer[conn.Server] // set after NewServer; read on the waiters
		returned := make(chan error, 1)
		r.data = func(c *conn.Conn) {
			c.Discard(c.Buffered())
			returned <- srv.Load().Close()
		}
		s, addr := newServer(t, r, conn.Options{}, network)
		srv.Store(s)
		other := dial(t, addr)
		wait(t, r.opened, "OnOpen")
		nc := dial(t, addr)
		wait(t, r.opened, "OnOpen")
		nc.Write([]byte("quit"))
		if err := wait(t, returned, "Close in OnData returns"); err != nil {
			t.Errorf("Close in OnData: %v", err)
		}
		wait(t, s.Done(), "shutdown")
		for range 2 {
			wait(t, r.closed, "OnClose")
		}
		readToEOF(other)
	})
}

// TestFlushTimeout: Close with output queued to a peer that never reads
// ends after Options.FlushTimeout with ReasonTimeout, the output counted
// as lost; Abort with output queued drops it at once, counted too.
func TestFlushTimeout(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		s, addr := newServer(t, r, conn.Options{SendBuffer: 4096, FlushTimeout: 200 * time.Millisecond}, network)
		for _, abort := range []bool{false, true} {
			dialSmallReceive(t, addr)
			c := wait(t, r.opened, "OnOpen")
			if _, err := c.Write(pattern(2 << 20)); err != nil {
				t.Fatal(err)
			}
			q := c.Queued()
			lost0 := s.Stats().LostOutput
			start := time.Now()
			want := conn.ReasonTimeout
			if abort {
				want = conn.ReasonAbort
				c.Abort()
			} else {
				c.Close()
			}
			cl := wait(t, r.closed, "OnClose")
			took := time.Since(start)
			if cl.reason != want {
				t.Errorf("OnClose reason %v (%v), want %v", cl.reason, cl.err, want)
			}
			if !abort && took < 200*time.Millisecond {
				t.Errorf("timed out after %v, before FlushTimeout", took)
			}
			if lost := s.Stats().LostOutput - lost0; lost == 0 || lost > uint64(q) {
				t.Errorf("LostOutput grew by %d, want the output still queued (> 0, at most %d)", lost, q)
			}
		}
	})
}
