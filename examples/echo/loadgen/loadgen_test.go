//go:build linux

package loadgen

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// echoServer is a plain net echo server; corrupt, if set, changes one byte
// of every reply.
func echoServer(t *testing.T, corrupt bool) string {
	t.Helper()
	addr, _ := tlsEchoServer(t, corrupt, nil)
	return addr
}

// eofConn notes whether a read of its connection met the end of the
// stream: a tls.Conn reads the close_notify alert and stops, without
// reading on to the FIN, and it reports a FIN without close_notify at a
// record boundary as io.EOF too.
type eofConn struct {
	net.Conn
	eof atomic.Bool
}

func (c *eofConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		c.eof.Store(true)
	}
	return n, err
}

// tlsEchoServer is echoServer over TLS with config (nil: plaintext). It
// returns the address and, over TLS, a count of the connections that
// ended with the client's close_notify.
func tlsEchoServer(t *testing.T, corrupt bool, config *tls.Config) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var clean atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var raw *eofConn
			if config != nil {
				raw = &eofConn{Conn: c}
				c = tls.Server(raw, config)
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if raw != nil && errors.Is(err, io.EOF) && !raw.eof.Load() {
						clean.Add(1)
					}
					if err != nil {
						return
					}
					if corrupt {
						buf[0]++
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &clean
}

func TestRunN(t *testing.T) {
	addr := echoServer(t, false)
	g, err := New(Config{Addr: addr, Conns: 8, Size: 64, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for range 2 {
		if _, err := g.RunN(500, 0); err != nil {
			t.Fatal(err)
		}
	}
	c := g.Counters()
	if c.Msgs != 1000 || c.Opened != 8 || c.Err() != nil {
		t.Errorf("after two runs of 500: %+v", c)
	}
	// Churn at 100 % per second over a run of about 300 ms.
	g.Churn(4)
	if _, err := g.RunN(2000, 10); err != nil {
		t.Fatal(err)
	}
	if c := g.Counters(); c.Reopened < 4 || c.Opened < 12 || c.Msgs != 3000 {
		t.Errorf("after churn: %+v", c)
	}
	g.Close()
	if c := g.Counters(); c.Opened != c.Closed || g.Open() != 0 {
		t.Errorf("after Close: %+v", c)
	}
}

func TestStartStop(t *testing.T) {
	addr := echoServer(t, false)
	g, err := New(Config{Addr: addr, Conns: 4, Size: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	time.Sleep(50 * time.Millisecond)
	g.ChurnFor(time.Second, 0.5) // 2 connections
	time.Sleep(50 * time.Millisecond)
	g.Stop()
	g.Close()
	c := g.Counters()
	if c.Msgs == 0 || c.Reopened != 2 || c.Err() != nil {
		t.Errorf("%+v", c)
	}
}

func TestMismatch(t *testing.T) {
	addr := echoServer(t, true)
	g, err := New(Config{Addr: addr, Conns: 2, Size: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.RunN(10, 0); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("corrupting server: err = %v", err)
	}
}

func TestCyclesAndIdle(t *testing.T) {
	addr := echoServer(t, false)
	d, err := NewCycler(addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wall, lat, err := d.Run(3, 100, 64)
	if err != nil || len(lat) != 100 || wall <= 0 {
		t.Errorf("cycles: %v, %d latencies, %v", wall, len(lat), err)
	}
	idle, err := OpenIdle(addr, 50, 64, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if idle.Len() != 50 {
		t.Errorf("%d idle connections", idle.Len())
	}
	idle.Close()
	if _, err := NewCycler("localhost:80", 0); err == nil {
		t.Error("a host name accepted")
	}
	if _, err := OpenIdle(echoServer(t, true), 5, 64, 2, time.Second); err == nil {
		t.Error("a corrupting server passed OpenIdle")
	}
}

func TestForeignBytes(t *testing.T) {
	mine, theirs := make([]byte, 64), make([]byte, 64)
	Fill(mine, uint64(TagMagic)<<32|7, 3)
	Fill(theirs, uint64(TagMagic)<<32|9, 3)
	if n := ForeignBytes(mine, 7); n != 0 {
		t.Errorf("own message: %d foreign bytes", n)
	}
	mixed := append(append(append([]byte{}, mine[:21]...), theirs[:32]...), mine[:11]...)
	if n := ForeignBytes(mixed, 7); n != 32 {
		t.Errorf("mixed message: %d foreign bytes, want 32", n)
	}
}

// TestTLS runs the generator, the cycles and the idle connections as TLS
// clients, every reply checked, and fails them against a server they do
// not trust and against one that corrupts the plaintext.
func TestTLS(t *testing.T) {
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	serverConfig := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	addr, _ := tlsEchoServer(t, false, serverConfig)
	// No ServerName: it is taken from the address, 127.0.0.1, which the
	// certificate names.
	client := &tls.Config{RootCAs: cert.Pool()}
	g, err := New(Config{Addr: addr, Conns: 4, Size: 1000, IOTimeout: 5 * time.Second, TLS: client})
	if err != nil {
		t.Fatal(err)
	}
	g.Churn(2)
	if _, err := g.RunN(400, 5); err != nil {
		t.Fatal(err)
	}
	g.Close()
	if c := g.Counters(); c.Msgs != 400 || c.Reopened < 2 || c.Opened != c.Closed || c.Err() != nil {
		t.Errorf("TLS generator: %+v", c)
	}
	if client.ServerName != "" {
		t.Error("New changed the caller's tls.Config")
	}

	// Large messages: written by a helper goroutine while the reply is
	// read, over one tls.Conn.
	g, err = New(Config{Addr: addr, Conns: 2, Size: 200_000, IOTimeout: 5 * time.Second, TLS: client})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.RunN(20, 0); err != nil {
		t.Fatal(err)
	}
	g.Close()

	// The cycles on a server of their own, which counts their ends.
	caddr, clean := tlsEchoServer(t, false, serverConfig)
	d, err := NewTLSCycler(caddr, 5*time.Second, client)
	if err != nil {
		t.Fatal(err)
	}
	if _, lat, err := d.Run(2, 40, 64); err != nil || len(lat) != 40 {
		t.Fatalf("TLS cycles: %d latencies, %v", len(lat), err)
	}
	// Every cycle closed with close_notify; the server may not have read
	// the last of them yet.
	for deadline := time.Now().Add(5 * time.Second); clean.Load() < 40 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := clean.Load(); n != 40 {
		t.Errorf("%d of 40 TLS cycles ended with close_notify", n)
	}
	idle, err := OpenIdleTLS(addr, 10, 64, 3, 5*time.Second, client)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range idle.conns {
		if _, ok := c.(*tls.Conn); !ok {
			t.Fatalf("idle connection %T, want *tls.Conn", c)
		}
	}
	idle.Close()

	stranger, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	wrong := &tls.Config{RootCAs: stranger.Pool()}
	g, err = New(Config{Addr: addr, Conns: 2, Size: 64, TLS: wrong})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.RunN(10, 0); err == nil || !strings.Contains(err.Error(), "TLS handshake") {
		t.Errorf("against an untrusted certificate: %v", err)
	}
	g.Close()
	if d, _ := NewTLSCycler(addr, time.Second, wrong); d.Cycle(make([]byte, 64), make([]byte, 64)) == nil {
		t.Error("a TLS cycle against an untrusted certificate succeeded")
	}
	if _, err := OpenIdleTLS(addr, 2, 64, 1, time.Second, wrong); err == nil {
		t.Error("idle TLS connections against an untrusted certificate opened")
	}
	bad, _ := tlsEchoServer(t, true, serverConfig)
	g, err = New(Config{Addr: bad, Conns: 2, Size: 64, TLS: client})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.RunN(10, 0); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("a corrupting TLS server: %v", err)
	}
}
