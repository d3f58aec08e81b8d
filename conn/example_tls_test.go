//go:build linux

package conn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// TLS is an option: the same upper-case Handler serves TLS, the
// handshake running off the waiters and OnOpen after it; crypto/tls's
// client here is package net's, one goroutine per connection, as any
// client may be.
func ExampleOptions_tls() {
	cert, pool := exampleCertificate()
	s, err := conn.NewServer(upper{}, conn.Options{
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"upper/1"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	addr, _ := s.Listen("tcp", "127.0.0.1:0")

	c, err := tls.Dial("tcp", addr.String(), &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"upper/1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.Write([]byte("hello, tls"))
	reply := make([]byte, 10)
	io.ReadFull(c, reply)
	st := c.ConnectionState()
	fmt.Printf("%s over %s, ALPN %s\n", reply, tls.VersionName(st.Version), st.NegotiatedProtocol)
	// Output: HELLO, TLS over TLS 1.3, ALPN upper/1
}

// DialTLS makes a TLS client connection served by a Handler: the connect
// and the handshake block no waiter, and ctx cancels both.
func ExampleServer_DialTLS() {
	cert, pool := exampleCertificate()
	srv, _ := conn.NewServer(upper{}, conn.Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	defer srv.Close()
	addr, _ := srv.Listen("tcp", "127.0.0.1:0")

	got := make(chan string, 1)
	cli, _ := conn.NewServer(printer{got}, conn.Options{})
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := cli.DialTLS(ctx, "tcp", addr.String(), &tls.Config{RootCAs: pool, ServerName: "localhost"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := c.ConnectionState()
	fmt.Println("verified:", st.PeerCertificates[0].Subject.CommonName)
	c.Write([]byte("ping"))
	fmt.Println(<-got)
	// Output:
	// verified: localhost
	// PING
}

// printer reports the first input it gets.
type printer struct{ got chan<- string }

func (printer) OnOpen(*conn.Conn) {}

func (p printer) OnData(c *conn.Conn) {
	b, _ := c.Next(c.Buffered())
	select {
	case p.got <- string(b):
	default:
	}
}

func (printer) OnClose(*conn.Conn, conn.Reason, error) {}

// exampleCertificate makes a self-signed certificate for localhost and a
// pool that trusts it; a real server loads its own (tls.LoadX509KeyPair).
func exampleCertificate() (tls.Certificate, *x509.CertPool) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tmpl.Subject.CommonName = "localhost"
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
