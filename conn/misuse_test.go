//go:build linux

package conn_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"golang.org/x/sys/unix"
)

func TestNewServerInvalid(t *testing.T) {
	checkFDLeak(t)
	if s, err := conn.NewServer(nil, conn.Options{}); !errors.Is(err, conn.ErrInvalid) || s != nil {
		t.Errorf("NewServer(nil) = %v, %v; want nil, ErrInvalid", s, err)
	}
	for name, o := range map[string]conn.Options{
		"MaxQueued<0":                {MaxQueued: -1},
		"HighWater<0":                {HighWater: -1},
		"LowWater<0":                 {LowWater: -1},
		"MaxBuffered<0":              {MaxBuffered: -1},
		"AcceptBatch<0":              {AcceptBatch: -1},
		"ReadBuffer<0":               {ReadBuffer: -1},
		"FlushTimeout<0":             {FlushTimeout: -time.Second},
		"SendBuffer<0":               {SendBuffer: -1},
		"LowWater>HighWater":         {HighWater: 1000, LowWater: 2000},
		"HighWater>MaxQueued":        {MaxQueued: 1000, HighWater: 2000},
		"LowWater>default HighWater": {MaxQueued: 1000, LowWater: 600},
	} {
		if s, err := conn.NewServer(newRecorder(t), o); !errors.Is(err, conn.ErrInvalid) {
			t.Errorf("%s: NewServer = %v; want ErrInvalid", name, err)
			if s != nil {
				s.Close()
			}
		}
	}
}

// fakeListener is a net.Listener with no socket behind it.
type fakeListener struct{}

func (fakeListener) Accept() (net.Conn, error) { return nil, errors.New("fake") }
func (fakeListener) Close() error              { return nil }
func (fakeListener) Addr() net.Addr            { return &net.TCPAddr{} }

func TestListenInvalid(t *testing.T) {
	r := newRecorder(t)
	s, _ := newServer(t, r, conn.Options{}, "tcp")
	for _, c := range []struct{ network, address string }{
		{"udp", "127.0.0.1:0"},
		{"ip", "127.0.0.1"},
		{"", ""},
		{"tcp", "127.0.0.1:99999"},
		{"tcp", "127.0.0.1"},
	} {
		if a, err := s.Listen(c.network, c.address); !errors.Is(err, conn.ErrInvalid) {
			t.Errorf("Listen(%q, %q) = %v, %v; want ErrInvalid", c.network, c.address, a, err)
		}
	}
	// What the system refuses is not an invalid argument: the error wraps
	// the cause.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		network, address string
		want             error
	}{
		{"tcp", taken.Addr().String(), unix.EADDRINUSE},
		{"unix", "/nonexistent-dir/for/conn/test.sock", unix.ENOENT},
	} {
		a, err := s.Listen(c.network, c.address)
		if !errors.Is(err, c.want) || errors.Is(err, conn.ErrInvalid) {
			t.Errorf("Listen(%q, %q) = %v, %v; want an error matching %v, not ErrInvalid", c.network, c.address, a, err, c.want)
		}
	}
	if err := s.Serve(fakeListener{}); !errors.Is(err, conn.ErrInvalid) {
		t.Errorf("Serve of a listener without a socket: %v, want ErrInvalid", err)
	}
	// A closed listener has no socket to duplicate.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := s.Serve(l); err == nil {
		t.Errorf("Serve of a closed listener: nil error")
	}
}

// TestServe serves a listener the caller made; closing it does not stop
// the server.
func TestServe(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		checkFDLeak(t)
		r := newRecorder(t)
		s, err := conn.NewServer(r, conn.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeServer(t, s) })
		l, err := net.Listen(network, listenAddr(t, network))
		if err != nil {
			t.Fatal(err)
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		if err := s.Serve(l); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		addr := l.Addr()
		l.Close()
		nc := dial(t, addr)
		nc.Write([]byte("ping"))
		if got := readFull(t, nc, 4); string(got) != "ping" {
			t.Errorf("echo %q", got)
		}
	})
}

// TestIPv6 serves tcp6 on ::1 when the host has it.
func TestIPv6(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	l.Close()
	r := newRecorder(t)
	_, addr := newServer(t, r, conn.Options{}, "tcp6")
	nc := dial(t, addr)
	c := wait(t, r.opened, "OnOpen")
	nc.Write([]byte("six"))
	if got := readFull(t, nc, 3); string(got) != "six" {
		t.Errorf("echo %q", got)
	}
	if ra, ok := c.RemoteAddr().(*net.TCPAddr); !ok || !ra.IP.Equal(net.IPv6loopback) {
		t.Errorf("RemoteAddr %v, want [::1]:port", c.RemoteAddr())
	}
	if la, ok := c.LocalAddr().(*net.TCPAddr); !ok || la.Port != addr.(*net.TCPAddr).Port {
		t.Errorf("LocalAddr %v, want %v", c.LocalAddr(), addr)
	}
}

// TestWriteEdges: an empty Write is a no-op; the user value round-trips;
// every Reason has a name.
func TestWriteEdges(t *testing.T) {
	r := newRecorder(t)
	_, addr := newServer(t, r, conn.Options{}, "tcp")
	dial(t, addr)
	c := wait(t, r.opened, "OnOpen")
	if n, err := c.Write(nil); n != 0 || err != nil {
		t.Errorf("Write(nil) = %d, %v", n, err)
	}
	if n, err := c.Writev([][]byte{nil, {}}); n != 0 || err != nil {
		t.Errorf("Writev of empty buffers = %d, %v", n, err)
	}
	if v := c.Value(); v != nil {
		t.Errorf("Value before SetValue = %v", v)
	}
	c.SetValue("session")
	if v := c.Value(); v != "session" {
		t.Errorf("Value = %v", v)
	}
	for r := range conn.ReasonShutdown + 2 {
		if r.String() == "" {
			t.Errorf("Reason(%d) has no name", int(r))
		}
	}
}
