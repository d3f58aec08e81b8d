//go:build linux

package peers

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	ltls "github.com/lesismal/llib/std/crypto/tls"
	"github.com/lesismal/nbio"
	ntls "github.com/lesismal/nbio/extension/tls"
	"github.com/lesismal/nbio/logging"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/echo/connecho"
)

// handshakeTimeout bounds the handshake on the net servers, as
// conn.DefaultHandshakeTimeout does on conn's: a server that lets a
// client hold a goroutine in a handshake forever is not one anybody runs.
const handshakeTimeout = 10 * time.Second

// NewConnTLSEcho starts examples/echo's server (connecho.Handler) on
// package conn with TLS: its default options and the certificate, so that
// crypto/tls runs every connection.
func NewConnTLSEcho(c Cert) (Server, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	return connecho.New(conn.Options{TLS: cfg})
}

// NewNetTLSEcho starts the net echo server behind crypto/tls's listener:
// a goroutine per connection, which handshakes (bounded by
// handshakeTimeout) and then echoes through a 16 KB buffer. A tls.Conn's
// Read returns at most one record's plaintext, 16 KB, so a larger buffer
// would only add untouched memory per connection.
func NewNetTLSEcho(c Cert) (Server, error) {
	ln, err := tlsListen(c)
	if err != nil {
		return nil, err
	}
	s := &NetEcho{ln: ln, conns: map[net.Conn]struct{}{}, serveConn: serveTLSEcho}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// tlsListen listens on 127.0.0.1, on a free port, behind crypto/tls's
// listener serving c.
func tlsListen(c Cert) (net.Listener, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, cfg), nil
}

// tlsHandshake runs c's handshake within handshakeTimeout; c is a
// *tls.Conn from tls.NewListener.
func tlsHandshake(c net.Conn) error {
	tc := c.(*tls.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	return tc.HandshakeContext(ctx)
}

func serveTLSEcho(c net.Conn) {
	if tlsHandshake(c) == nil {
		echo(c, make([]byte, 16<<10))
	}
}

// NbioTLSEcho is an echo server on nbio with its TLS: nbio's TLS example's
// set-up (extension/tls's WrapOpen, which gives every connection a
// non-blocking llib tls.Conn, llib's fork of crypto/tls, on nbio's default
// memory pool), with the data handler nbio's own HTTPS server uses
// (nbhttp's TLSDataHandler): it hands what arrived to the tls.Conn and
// reads the plaintext back into the poller's read buffer
// (AppendAndRead), then returns the tls.Conn's buffers to the pool if
// nothing is left in them (ResetOrFreeBuffer), and closes the tls.Conn
// when its connection closes, which returns the rest. The example's
// WrapData instead allocates a 2 KB buffer per event and keeps every idle
// connection's input buffer: nbhttp's way is nbio at its best.
type NbioTLSEcho struct {
	eng  *nbio.Engine
	addr string
}

// NewNbioTLSEcho starts the nbio TLS echo server on 127.0.0.1, on a free
// port, with nbio's default engine configuration (one poller per four
// CPUs, at least one).
func NewNbioTLSEcho(c Cert) (Server, error) {
	kp, err := ltls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		return nil, err
	}
	cfg := &ltls.Config{Certificates: []ltls.Certificate{kp}}
	// nbio logs its start and stop at Info: keep the launcher's stdout
	// and stderr to what the benchmarks read.
	logging.SetLevel(logging.LevelError)
	s := &NbioTLSEcho{}
	var mu sync.Mutex
	s.eng = nbio.NewEngine(nbio.Config{
		Network: "tcp",
		Addrs:   []string{"127.0.0.1:0"},
		// The port is chosen by the kernel: read it off the listener.
		Listen: func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err == nil {
				mu.Lock()
				s.addr = ln.Addr().String()
				mu.Unlock()
			}
			return ln, err
		},
	})
	s.eng.OnOpen(ntls.WrapOpen(cfg, false, nil))
	s.eng.OnData(nbioTLSEcho)
	s.eng.OnClose(ntls.WrapClose(func(_ *nbio.Conn, tc *ltls.Conn, _ error) { tc.Close() }))
	if err := s.eng.Start(); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if s.addr == "" {
		s.eng.Stop()
		return nil, errors.New("nbio: started without a listener")
	}
	return s, nil
}

// nbioTLSEcho is the engine's data handler: data is the poller's read
// buffer, reused for the plaintext as nbhttp does.
func nbioTLSEcho(c *nbio.Conn, data []byte) {
	tc, ok := c.Session().(*ltls.Conn)
	if !ok {
		c.Close()
		return
	}
	defer tc.ResetOrFreeBuffer()
	in := data
	for {
		_, n, err := tc.AppendAndRead(in, data)
		in = nil
		if err != nil {
			c.CloseWithError(err)
			return
		}
		if n == 0 {
			return
		}
		if _, err := tc.Write(data[:n]); err != nil {
			c.CloseWithError(err)
			return
		}
	}
}

// Addr returns the server's address.
func (s *NbioTLSEcho) Addr() string { return s.addr }

// Close stops the engine, closing every connection.
func (s *NbioTLSEcho) Close() error {
	s.eng.Stop()
	return nil
}

// NewKVConnTLS starts examples/kv's server (kvserver.Handler on conn) with
// the options the example uses plus TLS.
func NewKVConnTLS(c Cert) (Server, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	return newKVConn(cfg)
}

// NewKVNetTLS starts the net kv server (KVNet: the same command code, a
// goroutine per connection) behind crypto/tls's listener, the handshake
// bounded by handshakeTimeout.
func NewKVNetTLS(c Cert) (Server, error) {
	ln, err := tlsListen(c)
	if err != nil {
		return nil, err
	}
	s := newKVNet(ln)
	serve := s.serveConn
	s.serveConn = func(c net.Conn) {
		if tlsHandshake(c) == nil {
			serve(c)
		}
	}
	return s, nil
}
