//go:build linux

package conn_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

type nopHandler struct{}

func (nopHandler) OnOpen(*conn.Conn)                      {}
func (nopHandler) OnData(c *conn.Conn)                    { c.Discard(c.Buffered()) }
func (nopHandler) OnClose(*conn.Conn, conn.Reason, error) {}

// TestServeRacingShutdown: Serve and Shutdown started at once on two
// goroutines. Serve either registers the listener, which Shutdown then
// finds with its handle and closes, or finds the server closed and fails
// with net.ErrClosed; never "poller: closed", and -race sees no unlocked
// access to the listener's handle (Shutdown read it after unlocking while
// Serve wrote it).
func TestServeRacingShutdown(t *testing.T) {
	checkFDLeak(t)
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for i := range rounds {
		s, err := conn.NewServer(nopHandler{}, conn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(l) }()
		if i%2 == 1 {
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if _, _, err := s.Shutdown(ctx); err != nil {
			t.Fatalf("round %d: Shutdown: %v", i, err)
		}
		cancel()
		if err := wait(t, served, "Serve"); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("round %d: Serve returned %v, want nil or net.ErrClosed", i, err)
		}
		l.Close()
	}
}

// TestShutdownClosesListenerAtOnce: while Shutdown waits for a handler
// blocked on its waiter (PerWaiter: the poller's grace period waits for
// it too), a new connection is refused at once: the listening socket is
// closed as Shutdown begins, not when the poller releases it.
func TestShutdownClosesListenerAtOnce(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		entered, release := make(chan struct{}), make(chan struct{})
		h := &blockOnData{entered: entered, release: release}
		s, addr := newServer(t, h, conn.Options{}, network)
		c := dial(t, addr)
		c.Write([]byte("x"))
		wait(t, entered, "the handler")
		done := shutdownAsync(s)
		time.Sleep(20 * time.Millisecond)
		start := time.Now()
		nc, err := net.DialTimeout(addr.Network(), addr.String(), 2*time.Second)
		took := time.Since(start)
		if err == nil {
			nc.Close()
			t.Errorf("a dial during Shutdown succeeded")
		} else if network == "tcp" && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a dial during Shutdown: %v, want ECONNREFUSED", err)
		}
		if took > 100*time.Millisecond {
			t.Errorf("a dial during Shutdown took %v", took)
		}
		close(release)
		if r := wait(t, done, "Shutdown"); r.err != nil {
			t.Errorf("Shutdown: %v", r.err)
		}
	})
}

// blockOnData blocks its first OnData until release is closed.
type blockOnData struct {
	nopHandler
	entered, release chan struct{}
	once             bool
}

func (b *blockOnData) OnData(c *conn.Conn) {
	c.Discard(c.Buffered())
	if !b.once {
		b.once = true
		close(b.entered)
		<-b.release
	}
}
