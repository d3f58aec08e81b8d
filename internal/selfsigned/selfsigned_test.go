package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestVerify(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	other, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range DefaultHosts {
		opts := x509.VerifyOptions{DNSName: host, Roots: c.Pool()}
		if _, err := c.TLS.Leaf.Verify(opts); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		// Another certificate for the same names is not trusted: the
		// pool pins c, it is no CA.
		if _, err := other.TLS.Leaf.Verify(opts); err == nil {
			t.Errorf("%s: a certificate outside the pool verified", host)
		}
	}
	if _, err := c.TLS.Leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: c.Pool()}); err == nil {
		t.Error("verified for a host it was not made for")
	}
	client, err := New("client")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.TLS.Leaf.Verify(x509.VerifyOptions{Roots: client.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("as a client certificate: %v", err)
	}
	if _, err := New("localhost", ""); err == nil {
		t.Error("an empty host accepted")
	}
}

// TestHandshake runs mutual TLS between two certificates of New, over
// files written by WriteFiles and read back as a server would.
func TestHandshake(t *testing.T) {
	srv, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New("client")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := srv.WriteFiles(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v", fi.Mode(), err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cliCert, _, err := cli.WriteFiles(dir, "client")
	if err != nil {
		t.Fatal(err)
	}
	clientCAs, err := LoadPool(cliCert)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs})
		done <- s.Handshake()
	}()
	c := tls.Client(b, &tls.Config{ServerName: "127.0.0.1", RootCAs: srv.Pool(), Certificates: []tls.Certificate{cli.TLS}})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := c.ConnectionState(); len(st.PeerCertificates) != 1 || !st.PeerCertificates[0].Equal(srv.TLS.Leaf) {
		t.Errorf("peer certificates %v", st.PeerCertificates)
	}
}

func TestLoadPool(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("not a certificate\n"), 0o644)
	if _, err := LoadPool(bad); err == nil {
		t.Error("a file without a certificate loaded")
	}
	if _, err := LoadPool(filepath.Join(t.TempDir(), "none.pem")); err == nil {
		t.Error("a missing file loaded")
	}
}
