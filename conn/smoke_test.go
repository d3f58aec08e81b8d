//go:build linux

package conn_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

type echo struct{ closed chan conn.Reason }

func (echo) OnOpen(*conn.Conn) {}
func (echo) OnData(c *conn.Conn) {
	b, _ := c.Next(c.Buffered())
	c.Write(b)
}
func (e echo) OnClose(c *conn.Conn, r conn.Reason, err error) { e.closed <- r }

func TestSmokeEcho(t *testing.T) {
	h := echo{make(chan conn.Reason, 16)}
	s, err := conn.NewServer(h, conn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go nc.Write(msg)
	got := make([]byte, len(msg))
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs")
	}
	nc.(*net.TCPConn).CloseWrite()
	if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after half-close: %v, want EOF", err)
	}
	nc.Close()
	select {
	case r := <-h.closed:
		if r != conn.ReasonPeerClosed {
			t.Errorf("reason %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no OnClose")
	}
}
