//go:build linux

package conn_test

import (
	"bytes"
	"crypto/tls"
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

// TestTLSNotTLSReply: Options.NotTLS is given the first five bytes of a
// client whose first record is not TLS, and what it returns reaches the
// client whole, followed by EOF (no reset, even with the client's input
// unread, a reply larger than the socket takes at once, or the client's
// FIN first); nil closes at once. The connection is never the handler's
// (OnClose with ReasonHandshake only), counts as a not-tls failure, and
// the bystander is served throughout.
func TestTLSNotTLSReply(t *testing.T) {
	large := pattern(4 << 20)
	for _, tc := range []struct {
		name   string
		send   string
		more   int  // bytes the client sends after send, from another goroutine
		fin    bool // the client half-closes after sending
		small  bool // the client's receive buffer is 4 KB
		header string
		want   []byte
	}{
		{name: "HTTP", send: "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", header: "GET /", want: []byte("plaintext GET /\n")},
		{name: "noise", send: "\xfe\x01\x02\x03\x04\x05", header: "\xfe\x01\x02\x03\x04", want: []byte("plaintext fe01020304\n")},
		{name: "nil", send: "*1\r\n$4\r\nPING\r\n", header: "*1\r\n$"},
		{name: "unread", send: "POST / HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n", more: 1 << 20, header: "POST ", want: large},
		{name: "large", send: "GET / HTTP/1.1\r\n\r\n", small: true, header: "GET /", want: large},
		{name: "FIN", send: "GET / HTTP/1.1\r\n\r\n", fin: true, small: true, header: "GET /", want: large},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t)
			headers := make(chan string, 1)
			notTLS := func(h [5]byte) []byte {
				headers <- string(h[:])
				switch {
				case tc.want == nil:
					return nil
				case len(tc.want) > 100:
					return tc.want
				}
				return fmt.Appendf(nil, "plaintext %s\n", printable(h[:]))
			}
			// A FlushTimeout longer than the test: the close must
			// follow the client's FIN, which the server drains for.
			s, addr, cc := newTLSServer(t, rec, conn.Options{NotTLS: notTLS, FlushTimeout: time.Minute}, "tcp")
			by := newBystander(t, addr, cc)
			by.check()
			var nc net.Conn
			if tc.small {
				nc = dialSmallReceive(t, addr)
			} else {
				nc = dial(t, addr)
			}
			if _, err := io.WriteString(nc, tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.fin {
				closeWrite(t, nc)
			}
			var wg sync.WaitGroup
			if tc.more > 0 {
				wg.Go(func() {
					nc.SetWriteDeadline(time.Now().Add(timeout))
					if _, err := nc.Write(make([]byte, tc.more)); err != nil {
						t.Errorf("client write after its request: %v", err)
					}
				})
			}
			if tc.small {
				// Read slowly at first, so that the reply waits in
				// the server's queue.
				time.Sleep(100 * time.Millisecond)
			}
			got, err := readToEOF(nc)
			wg.Wait()
			nc.Close() // the FIN the server drains for
			if tc.want == nil {
				if len(got) > 0 {
					t.Errorf("client read %q, want nothing", got)
				}
			} else if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("client read %d bytes, %v; want %d bytes then EOF%s", len(got), err, len(tc.want), firstDiff(got, tc.want))
			}
			if h := wait(t, headers, "NotTLS"); h != tc.header {
				t.Errorf("NotTLS got %q, want %q", h, tc.header)
			}
			err = handshakeClosed(t, rec)
			var rh tls.RecordHeaderError
			if !errors.As(err, &rh) || rh.Conn == nil {
				t.Errorf("OnClose's error %v, want a tls.RecordHeaderError with its Conn", err)
			}
			by.check()
			if st := s.Stats().TLS; st.Failed["not-tls"] != 1 || st.Handshakes != 1 {
				t.Errorf("TLS stats %+v, want one not-tls failure and the bystander's handshake", st)
			}
			if st := s.Stats(); st.LostOutput != 0 {
				t.Errorf("LostOutput %d, want the whole reply sent", st.LostOutput)
			}
		})
	}
}

// printable is b in hex, or as it is if it is printable ASCII.
func printable(b []byte) string {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return fmt.Sprintf("%x", b)
		}
	}
	return string(b)
}

// TestTLSNotTLSDial: a client's handshake never calls NotTLS: a server
// that answers in plaintext fails DialTLS, and nothing is sent to it.
func TestTLSNotTLSDial(t *testing.T) {
	rec := newRecorder(t)
	var called atomic.Bool
	reply := []byte("the reply of NotTLS")
	s, _, cc := newTLSServer(t, rec, conn.Options{NotTLS: func([5]byte) []byte { called.Store(true); return reply }}, "tcp")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // before the fd check of newTLSServer's cleanup
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\n")
		b, _ := io.ReadAll(c)
		got <- b
	}()
	if c, err := s.DialTLS(t.Context(), "tcp", ln.Addr().String(), cc, rec); err == nil {
		c.Close()
		t.Fatal("DialTLS to a plaintext server succeeded")
	}
	b := wait(t, got, "the plaintext server's end")
	if called.Load() || bytes.Contains(b, reply) {
		t.Errorf("NotTLS called for a dial; the server received %q", b)
	}
}

// TestTLSNotTLSNeedsTLS: NotTLS without TLS is a mistake NewServer
// reports.
func TestTLSNotTLSNeedsTLS(t *testing.T) {
	_, err := conn.NewServer(conn.BaseHandler{}, conn.Options{NotTLS: func([5]byte) []byte { return nil }})
	if !errors.Is(err, conn.ErrInvalid) {
		t.Errorf("NewServer: %v, want ErrInvalid", err)
	}
}
