//go:build linux

package conn_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// prompt is how soon a cancelled or aborted operation must return.
const prompt = 100 * time.Millisecond

// TestDialPeers: Dial over TCP and Unix, to a plain net listener and to
// another conn server, runs OnOpen (with the Conn Dial returns) and
// carries data both ways; the dialled connection ends like an accepted
// one.
func TestDialPeers(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		t.Run("net", func(t *testing.T) {
			r := newRecorder(t)
			var k collector
			r.open = func(c *conn.Conn) { c.Write([]byte("hello from the dialler")) }
			r.data = k.take
			s, _ := newServer(t, r, conn.Options{}, network)
			l, err := net.Listen(network, listenAddr(t, network))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				nc, err := l.Accept()
				if err != nil {
					t.Errorf("Accept: %v", err)
					nc = nil
				}
				accepted <- nc
			}()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			c, err := s.Dial(ctx, network, l.Addr().String(), nil)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			if o := wait(t, r.opened, "OnOpen"); o != c {
				t.Errorf("OnOpen got another Conn than Dial returned")
			}
			peer := wait(t, accepted, "Accept")
			if peer == nil {
				t.FailNow()
			}
			defer peer.Close()
			if got := string(readFull(t, peer, 22)); got != "hello from the dialler" {
				t.Errorf("peer read %q", got)
			}
			peer.Write([]byte("hello back"))
			eventually(t, "reply at the dialler", func() bool { return k.len() >= 10 })
			if got := string(k.bytes()); got != "hello back" {
				t.Errorf("dialler read %q", got)
			}
			if la, ra := c.LocalAddr(), c.RemoteAddr(); la == nil || ra == nil || network == "tcp" && ra.String() != l.Addr().String() {
				t.Errorf("addresses %v -> %v, want the peer %v", la, ra, l.Addr())
			}
			peer.Close()
			if cl := wait(t, r.closed, "OnClose"); cl.c != c || cl.reason != conn.ReasonPeerClosed {
				t.Errorf("OnClose %v (%v), want peer-closed for the dialled connection", cl.reason, cl.err)
			}
			if st := s.Stats(); st.Accepted != 0 {
				t.Errorf("Stats().Accepted = %d, want 0: a dialled connection was not accepted", st.Accepted)
			}
		})
		t.Run("conn", func(t *testing.T) {
			echo := newRecorder(t)
			_, addr := newServer(t, echo, conn.Options{}, network)
			r := newRecorder(t)
			var k collector
			r.data = k.take
			s, _ := newServer(t, r, conn.Options{}, network)
			own := newRecorder(t) // Dial's handler, not the server's
			own.open = func(c *conn.Conn) { c.Write([]byte("ping")) }
			own.data = k.take
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			c, err := s.Dial(ctx, network, addr.String(), own)
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			if o := wait(t, own.opened, "OnOpen"); o != c {
				t.Errorf("OnOpen got another Conn than Dial returned")
			}
			wait(t, echo.opened, "the echo server's OnOpen")
			eventually(t, "echo at the dialler", func() bool { return k.len() >= 4 })
			if got := string(k.bytes()); got != "ping" {
				t.Errorf("dialler read %q, want the echo", got)
			}
			c.Close()
			if cl := wait(t, own.closed, "OnClose"); cl.reason != conn.ReasonLocalClose {
				t.Errorf("OnClose %v (%v), want local-close", cl.reason, cl.err)
			}
			if cl := wait(t, echo.closed, "the echo server's OnClose"); cl.reason != conn.ReasonPeerClosed {
				t.Errorf("echo server's OnClose %v (%v), want peer-closed", cl.reason, cl.err)
			}
			select {
			case <-r.opened:
				t.Errorf("the server's handler ran for a connection dialled with its own")
			default:
			}
		})
	})
}

// expectNoHandler fails the test if any handler method ran on r.
func expectNoHandler(t *testing.T, r *recorder, what string) {
	t.Helper()
	select {
	case <-r.opened:
		t.Errorf("%s: OnOpen ran", what)
	case cl := <-r.closed:
		t.Errorf("%s: OnClose ran (%v, %v)", what, cl.reason, cl.err)
	default:
	}
	r.mu.Lock()
	n := len(r.conns)
	r.mu.Unlock()
	if n != 0 {
		t.Errorf("%s: handler methods ran for %d connections", what, n)
	}
}

// TestDialRefused: Dial to a port or socket nobody listens on fails with
// ECONNREFUSED, runs no handler method and leaves nothing open.
func TestDialRefused(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		s, _ := newServer(t, r, conn.Options{}, network)
		l, err := net.Listen(network, listenAddr(t, network))
		if err != nil {
			t.Fatal(err)
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false) // the path stays, with no listener
		}
		addr := l.Addr().String()
		l.Close()
		fds := testkit.FDs(t)
		for range 3 {
			c, err := s.Dial(context.Background(), network, addr, nil)
			if c != nil || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("Dial to a closed %s address: %v, %v; want ECONNREFUSED", network, c, err)
			}
		}
		testkit.ExpectFDs(t, fds, time.Second)
		time.Sleep(quiet)
		expectNoHandler(t, r, "refused dial")
		if st := s.Stats(); st.Open != 0 {
			t.Errorf("%d connections open after refused dials", st.Open)
		}
	})
}

// blackhole returns a TCP address whose connects stay pending: a listener
// with a full accept queue that never accepts (the kernel drops SYNs), as
// the machine's routing may complete or refuse a connect to a
// non-routable address at once.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		nc, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
		if err != nil {
			return addr // this one stayed pending: the queue is full
		}
		t.Cleanup(func() { nc.Close() })
	}
	t.Skipf("connects to %s never stayed pending: cannot test a pending Dial here", addr)
	return ""
}

// TestDialCancel: a Dial pending on a connect that never completes returns
// its context's error within 100 ms of the cancellation or the deadline,
// runs no handler method, and leaves no fd (the fd check) and no goroutine
// behind.
func TestDialCancel(t *testing.T) {
	addr := blackhole(t)
	r := newRecorder(t)
	s, _ := newServer(t, r, conn.Options{}, "tcp")
	ignore := goleak.IgnoreCurrent()
	fds := testkit.FDs(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		c, err := s.Dial(ctx, "tcp", addr, nil)
		if c != nil {
			err = fmt.Errorf("connected: %v", err)
		}
		done <- err
	}()
	eventually(t, "connect pending", func() bool { return s.Stats().Open == 1 })
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Dial returned before its cancellation: %v", err)
	default:
	}
	cancel()
	start := time.Now()
	err := wait(t, done, "cancelled Dial")
	if took := time.Since(start); took > prompt {
		t.Errorf("Dial returned %v after its cancellation, want within %v", took, prompt)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Dial: %v, want context.Canceled", err)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer dcancel()
	dl, _ := dctx.Deadline()
	c, err := s.Dial(dctx, "tcp", addr, nil)
	if late := time.Since(dl); late > prompt {
		t.Errorf("Dial returned %v after its context's deadline, want within %v", late, prompt)
	}
	if c != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial past its deadline: %v, %v; want context.DeadlineExceeded", c, err)
	}

	eventually(t, "cancelled dials released", func() bool { return s.Stats().Open == 0 })
	testkit.ExpectFDs(t, fds, time.Second) // the server still runs: no socket is left to its Close
	time.Sleep(quiet)
	expectNoHandler(t, r, "cancelled dial")
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left by cancelled dials: %v", err)
	}
}

// TestDialCancelledByServer: Server.Close and Shutdown end pending dials
// within 100 ms, with an error matching net.ErrClosed, and no handler
// method runs for them; Dial on a closed server fails the same way.
func TestDialCancelledByServer(t *testing.T) {
	addr := blackhole(t)
	for _, how := range []string{"Close", "Shutdown"} {
		t.Run(how, func(t *testing.T) {
			r := newRecorder(t)
			s, _ := newServer(t, r, conn.Options{}, "tcp")
			const n = 3
			done := make(chan error, n)
			for range n {
				go func() {
					c, err := s.Dial(context.Background(), "tcp", addr, nil)
					if c != nil {
						err = fmt.Errorf("connected: %v", err)
					}
					done <- err
				}()
			}
			eventually(t, "connects pending", func() bool { return s.Stats().Open == n })
			start := time.Now()
			switch how {
			case "Close":
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			case "Shutdown":
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				drained, forced, err := s.Shutdown(ctx)
				if err != nil || forced != 0 || drained != 0 {
					t.Errorf("Shutdown = %d drained, %d forced, %v; want 0, 0, nil: a cancelled dial is no connection", drained, forced, err)
				}
			}
			for range n {
				err := wait(t, done, "Dial ended by "+how)
				if !isClosed(err) {
					t.Errorf("Dial ended by %s: %v, want net.ErrClosed", how, err)
				}
			}
			if took := time.Since(start); took > prompt {
				t.Errorf("pending dials ended %v after %s began, want within %v", took, how, prompt)
			}
			if _, err := s.Dial(context.Background(), "tcp", addr, nil); !isClosed(err) {
				t.Errorf("Dial after %s: %v, want net.ErrClosed", how, err)
			}
			expectNoHandler(t, r, "dial ended by "+how)
		})
	}
}

// TestDialInCallback: Dial from a handler returns ErrInCallback at once
// and dials nothing.
func TestDialInCallback(t *testing.T) {
	r := newRecorder(t)
	type target struct {
		s    *conn.Server
		addr net.Addr
	}
	var to atomic.Pointer[target] // set after NewServer; read on the waiters
	got := make(chan error, 1)
	r.data = func(c *conn.Conn) {
		c.Discard(c.Buffered())
		tg := to.Load()
		dc, err := tg.s.Dial(context.Background(), "tcp", tg.addr.String(), nil)
		if dc != nil {
			err = fmt.Errorf("dialled: %v", err)
		}
		got <- err
	}
	srv, addr := newServer(t, r, conn.Options{}, "tcp")
	to.Store(&target{srv, addr})
	nc := dial(t, addr)
	wait(t, r.opened, "OnOpen")
	nc.Write([]byte("x"))
	if err := wait(t, got, "Dial in OnData"); !errors.Is(err, conn.ErrInCallback) {
		t.Errorf("Dial in OnData: %v, want ErrInCallback", err)
	}
	time.Sleep(quiet)
	select {
	case <-r.opened:
		t.Errorf("a connection was made by the refused Dial")
	default:
	}
	if st := srv.Stats(); st.Open != 1 {
		t.Errorf("%d connections open, want only the client's", st.Open)
	}
}

// TestDialInvalid: a bad network or address fails with ErrInvalid.
func TestDialInvalid(t *testing.T) {
	r := newRecorder(t)
	s, _ := newServer(t, r, conn.Options{}, "tcp")
	for _, tc := range []struct{ network, address string }{
		{"udp", "127.0.0.1:9"},
		{"", "127.0.0.1:9"},
		{"ip", "127.0.0.1"},
		{"tcp", "127.0.0.1"},         // no port
		{"tcp", "127.0.0.1:99999"},   // port out of range
		{"tcp", "127.0.0.1:nosuchp"}, // unknown service
		{"tcp", "[::1:9"},
	} {
		c, err := s.Dial(context.Background(), tc.network, tc.address, nil)
		if c != nil || !errors.Is(err, conn.ErrInvalid) {
			t.Errorf("Dial(%q, %q) = %v, %v; want ErrInvalid", tc.network, tc.address, c, err)
		}
	}
	expectNoHandler(t, r, "invalid dial")
}
