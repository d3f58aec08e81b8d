//go:build linux

package conn_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// tlsConfigs returns a server config with a self-signed certificate and a
// client config that trusts it.
func tlsConfigs(t testing.TB) (server, client *tls.Config) { return testkit.TLSConfigs(t) }

// newTLSServer is newServer with TLS on every accepted connection; it
// returns the client config too.
func newTLSServer(t testing.TB, h conn.Handler, opts conn.Options, network string) (*conn.Server, net.Addr, *tls.Config) {
	t.Helper()
	sc, cc := tlsConfigs(t)
	if opts.TLS == nil {
		opts.TLS = sc
	}
	s, addr := newServer(t, h, opts, network)
	return s, addr, cc
}

// dialTLS connects a crypto/tls client over package net to addr and
// completes its handshake; it is closed at cleanup.
func dialTLS(t testing.TB, addr net.Addr, cc *tls.Config) *tls.Conn {
	t.Helper()
	d := &net.Dialer{Timeout: timeout}
	tc, err := tls.DialWithDialer(d, addr.Network(), addr.String(), cc)
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(timeout))
	return tc
}

// TestTLSEcho: a TLS client over package net round-trips 1 MB, in writes
// of every size, through an echo handler that never sees ciphertext; the
// negotiated state is readable from OnOpen; Close sends close_notify,
// which the client reads as EOF.
func TestTLSEcho(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		rec := newRecorder(t)
		states := make(chan tls.ConnectionState, 1)
		rec.open = func(c *conn.Conn) {
			st, ok := c.ConnectionState()
			if !ok {
				t.Error("ConnectionState: not TLS")
			}
			states <- st
		}
		sc, cc := tlsConfigs(t)
		sc.NextProtos, cc.NextProtos = []string{"echo/1"}, []string{"echo/1"}
		s, addr, _ := newTLSServer(t, rec, conn.Options{TLS: sc}, network)
		tc := dialTLS(t, addr, cc)
		st := wait(t, states, "OnOpen")
		if !st.HandshakeComplete || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "echo/1" || st.ServerName != "localhost" {
			t.Errorf("server's state: complete %v, version %x, ALPN %q, SNI %q", st.HandshakeComplete, st.Version, st.NegotiatedProtocol, st.ServerName)
		}
		want := pattern(1 << 20)
		go func() {
			for off, n := 0, 1; off < len(want); n = n*3 + 1 {
				n = min(n, len(want)-off, 100_000)
				if _, err := tc.Write(want[off : off+n]); err != nil {
					return
				}
				off += n
			}
		}()
		got := make([]byte, len(want))
		if _, err := io.ReadFull(tc, got); err != nil {
			t.Fatalf("reading the echo: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("echo: %s", firstDiff(got, want))
		}
		c := wait(t, rec.opened, "OnOpen")
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if n, err := tc.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("after Close the client read %d, %v; want close_notify's EOF", n, err)
		}
		tc.Close()
		cl := wait(t, rec.closed, "OnClose")
		if cl.reason != conn.ReasonLocalClose || cl.err != nil {
			t.Errorf("OnClose(%v, %v), want local-close", cl.reason, cl.err)
		}
		if ts := s.Stats().TLS; ts.Handshakes != 1 || len(ts.Failed) != 0 || ts.InProgress != 0 || ts.P50 <= 0 {
			t.Errorf("TLS stats %+v", ts)
		}
	})
}

// TestTLSDial: DialTLS connects conn's TLS client to conn's TLS server;
// both ends echo-check a message, and the client's state names the server.
func TestTLSDial(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		srv, cli := newRecorder(t), newRecorder(t)
		s, addr, cc := newTLSServer(t, srv, conn.Options{}, network)
		var k collector
		cli.data = k.take
		c, err := s.DialTLS(context.Background(), addr.Network(), addr.String(), cc, cli)
		if err != nil {
			t.Fatalf("DialTLS: %v", err)
		}
		wait(t, cli.opened, "client OnOpen")
		st, ok := c.ConnectionState()
		if !ok || !st.HandshakeComplete || len(st.PeerCertificates) != 1 {
			t.Fatalf("client state: ok %v, complete %v, %d peer certificates", ok, st.HandshakeComplete, len(st.PeerCertificates))
		}
		want := pattern(300_000)
		if _, err := c.Write(want); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the echo", func() bool { return k.len() >= len(want) })
		if got := k.bytes(); !bytes.Equal(got, want) {
			t.Fatalf("echo: %s", firstDiff(got, want))
		}
	})
}

// TestTLSDialFails: a handshake that fails (an untrusted certificate)
// makes DialTLS return crypto/tls's error, runs no client handler method
// and leaves no fd; the server counts its side's failure and reports it
// in OnClose alone.
func TestTLSDialFails(t *testing.T) {
	srv, cli := newRecorder(t), newRecorder(t)
	s, addr, _ := newTLSServer(t, srv, conn.Options{}, "tcp")
	_, err := s.DialTLS(context.Background(), "tcp", addr.String(), &tls.Config{ServerName: "localhost"}, cli)
	var uae x509.UnknownAuthorityError
	var cve *tls.CertificateVerificationError
	if !errors.As(err, &cve) && !errors.As(err, &uae) {
		t.Fatalf("DialTLS with an untrusted certificate: %v", err)
	}
	cl := wait(t, srv.closed, "server OnClose")
	if cl.reason != conn.ReasonHandshake || cl.err == nil {
		t.Fatalf("server OnClose(%v, %v), want handshake and an error", cl.reason, cl.err)
	}
	eventually(t, "the client's failure counted", func() bool { return s.Stats().TLS.Failed["certificate"] == 1 })
	select {
	case <-cli.opened:
		t.Fatal("client OnOpen ran for a failed handshake")
	case <-time.After(quiet):
	}
}
