//go:build linux

package conn_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/conn"
)

// The peer's FIN and close_notify against output still queued: whether
// they come with the client's last handshake flight, or after the server
// began closing, they end reading only, and the client gets every byte of
// the reply, then close_notify and EOF.

// corkConn is a client's socket that holds back what is written after its
// first read until release, then sends it in one write and half-closes:
// a TLS 1.3 client's Finished, its request and its close_notify then reach
// the server together, with the FIN right behind them.
type corkConn struct {
	net.Conn
	mu    sync.Mutex
	read  bool
	held  []byte
	freed bool
}

func (c *corkConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.read = true
	c.mu.Unlock()
	return c.Conn.Read(p)
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.read && !c.freed {
		c.held = append(c.held, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// release writes what was held back in one write, then sends FIN. On TCP
// the write waits under TCP_CORK, so that the FIN rides in its segment
// (the kernel adds it to a segment not yet sent), and so arrives with it.
// tls.Conn.CloseWrite leaves a write deadline in the past: it is lifted.
func (c *corkConn) release() error {
	c.mu.Lock()
	held := c.held
	c.held, c.freed = nil, true
	c.mu.Unlock()
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		rc, err := tc.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1)
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
	}
	c.Conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Conn.Write(held); err != nil {
		return err
	}
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

// halfCloseReply is a handler that answers a request (any bytes) with
// reply, written as mode says, and records the opens and closes.
func halfCloseReply(t *testing.T, mode string, reply []byte) conn.Handler {
	rec := newRecorder(t)
	write := func(c *conn.Conn) {
		if _, err := c.Write(reply); err != nil {
			t.Errorf("Write of the reply: %v", err)
		}
	}
	closeIt := func(c *conn.Conn) {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	rec.data = func(c *conn.Conn) {
		if c.Buffered() == 0 {
			return
		}
		c.Discard(c.Buffered())
		switch mode {
		case "OnData":
			write(c)
		case "OnData+Close":
			write(c)
			closeIt(c)
		}
	}
	switch mode {
	case "OnReadEOF":
		rec.readEOF = func(c *conn.Conn) { write(c); closeIt(c) }
		return withReadEOF{rec}
	case "goroutine":
		rec.readEOF = func(c *conn.Conn) {
			go func() { write(c); closeIt(c) }()
		}
		return withReadEOF{rec}
	}
	return rec
}

// coalescedClient starts a TLS server for h and connects a client whose
// Finished, one request and close_notify reach the server in one read,
// with the client's FIN right behind. The server's handshake waits in
// VerifyConnection (which crypto/tls calls just before it reads the
// client's Finished) until all of it has arrived. The client's receive
// buffer is small, so that a large reply is queued.
func coalescedClient(t *testing.T, h conn.Handler, opts conn.Options, network string) (*conn.Server, *tls.Conn) {
	t.Helper()
	sc, cc := tlsConfigs(t)
	arrived := make(chan struct{})
	sc.VerifyConnection = func(tls.ConnectionState) error {
		select {
		case <-arrived:
		case <-time.After(timeout):
		}
		return nil
	}
	cc.MinVersion = tls.VersionTLS13 // a 1.2 client reads after its Finished
	opts.TLS = sc
	s, addr := newServer(t, h, opts, network)
	raw := &corkConn{Conn: dialReceive(t, addr, 64<<10)}
	tc := tls.Client(raw, cc)
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if _, err := tc.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	err := raw.release()
	close(arrived)
	if err != nil {
		t.Fatal(err)
	}
	return s, tc
}

// TestTLSCoalescedHalfClose: the client's Finished, one request and its
// close_notify arrive in one read, its FIN right behind: the 1 MiB reply,
// written from OnData, from OnReadEOF or from another goroutine, all
// reaches the client, then close_notify; nothing is counted lost.
func TestTLSCoalescedHalfClose(t *testing.T) {
	reply := pattern(1 << 20)
	forEachNetwork(t, func(t *testing.T, network string) {
		for _, mode := range []string{"OnData", "OnReadEOF", "goroutine"} {
			t.Run(mode, func(t *testing.T) {
				h := halfCloseReply(t, mode, reply)
				s, tc := coalescedClient(t, h, conn.Options{SendBuffer: 64 << 10}, network)
				checkReplyThenEOF(t, s, tc, reply)
			})
		}
	})
}

// TestTLSCoalescedHalfCloseStall: as TestTLSCoalescedHalfClose, but the
// client reads nothing: the queued reply stalls, and the connection is
// reset one FlushTimeout later (ReasonTimeout), neither ended by the
// peer's FIN nor kept open.
func TestTLSCoalescedHalfCloseStall(t *testing.T) {
	const flushTimeout = 300 * time.Millisecond
	forEachNetwork(t, func(t *testing.T, network string) {
		h := halfCloseReply(t, "OnData", pattern(1<<20))
		rec := h.(*recorder)
		start := time.Now()
		s, _ := coalescedClient(t, h, conn.Options{SendBuffer: 64 << 10, FlushTimeout: flushTimeout}, network)
		cl := wait(t, rec.closed, "OnClose")
		if took := time.Since(start); cl.reason != conn.ReasonTimeout || took < flushTimeout {
			t.Errorf("OnClose(%v, %v) after %v; want timeout, after FlushTimeout %v", cl.reason, cl.err, took, flushTimeout)
		}
		if st := s.Stats(); st.LostOutput == 0 {
			t.Errorf("stats %+v: want the stalled reply counted lost", st)
		}
	})
}

// TestCloseThenPeerFIN: the handler replies and closes at once, and the
// peer's FIN (over TLS, close_notify and FIN) arrives while the reply is
// still queued: the client reads all of it, then EOF.
func TestCloseThenPeerFIN(t *testing.T) {
	reply := pattern(1 << 20)
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			forEachNetwork(t, func(t *testing.T, network string) {
				h := halfCloseReply(t, "OnData+Close", reply)
				opts := conn.Options{SendBuffer: 64 << 10}
				var s *conn.Server
				var cli io.ReadWriter
				var nc net.Conn
				if secure {
					var addr net.Addr
					var cc *tls.Config
					s, addr, cc = newTLSServer(t, h, opts, network)
					nc = dialReceive(t, addr, 64<<10)
					tc := tls.Client(nc, cc)
					tc.SetDeadline(time.Now().Add(timeout))
					if err := tc.Handshake(); err != nil {
						t.Fatalf("handshake: %v", err)
					}
					cli = tc
				} else {
					var addr net.Addr
					s, addr = newServer(t, h, opts, network)
					nc = dialReceive(t, addr, 64<<10)
					cli = nc
				}
				nc.SetDeadline(time.Now().Add(timeout))
				if _, err := cli.Write([]byte("request")); err != nil {
					t.Fatal(err)
				}
				// The reply has begun, so the handler has closed:
				// our close comes while the rest is queued.
				first := make([]byte, 1000)
				if _, err := io.ReadFull(cli, first); err != nil {
					t.Fatalf("first bytes of the reply: %v", err)
				}
				if tc, ok := cli.(*tls.Conn); ok {
					if err := tc.CloseWrite(); err != nil {
						t.Fatal(err)
					}
				}
				closeWrite(t, nc)
				checkReplyThenEOF(t, s, cli, reply[len(first):])
			})
		})
	}
}

// checkReplyThenEOF reads cli to its end and checks it is want, then EOF
// (close_notify, over TLS), and that s lost no output.
func checkReplyThenEOF(t *testing.T, s *conn.Server, cli io.Reader, want []byte) {
	t.Helper()
	got, err := io.ReadAll(cli)
	if err != nil {
		t.Fatalf("client read %d of %d bytes, then %v; want all, then EOF", len(got), len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("reply: %s", firstDiff(got, want))
	}
	eventually(t, "the connection closed", func() bool { return s.Stats().Open == 0 })
	if st := s.Stats(); st.LostOutput != 0 || st.Closed["peer-closed"]+st.Closed["local-close"] != 1 {
		t.Errorf("stats %+v: want no output lost, one connection closed by its peer or handler", st)
	}
}
