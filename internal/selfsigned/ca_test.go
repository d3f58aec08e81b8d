package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestCA checks what a browser checks of NewCA's pair: the leaf verifies
// under the CA for each host and for server authentication only, the CA
// is a CA that cannot sign another, and another CA's leaf is refused.
func TestCA(t *testing.T) {
	ca, err := NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || !ca.Cert.MaxPathLenZero || ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: IsCA %v MaxPathLenZero %v KeyUsage %v", ca.Cert.IsCA, ca.Cert.MaxPathLenZero, ca.Cert.KeyUsage)
	}
	if ca.Leaf.Leaf.IsCA || ca.Leaf.Leaf.Issuer.CommonName != "test CA" {
		t.Errorf("leaf: IsCA %v issuer %q", ca.Leaf.Leaf.IsCA, ca.Leaf.Leaf.Issuer.CommonName)
	}
	for _, host := range DefaultHosts {
		opts := x509.VerifyOptions{DNSName: host, Roots: ca.Pool()}
		if _, err := ca.Leaf.Leaf.Verify(opts); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		if _, err := other.Leaf.Leaf.Verify(opts); err == nil {
			t.Errorf("%s: another CA's leaf verified", host)
		}
	}
	if _, err := ca.Leaf.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the server leaf verified as a client certificate")
	}
	if h := ca.LeafSPKIHash(); len(h) != 44 || h == other.LeafSPKIHash() {
		t.Errorf("SPKI hash %q (other's %q)", h, other.LeafSPKIHash())
	}
	if _, err := NewCA("x", "localhost", ""); err == nil {
		t.Error("an empty host accepted")
	}

	// The PEM written out is what a client loads; a TLS handshake with
	// ServerConfig verifies through it.
	path, err := ca.WriteCertPEM("", "ca-test-*.pem")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	pool, err := LoadPool(path)
	if err != nil {
		t.Fatal(err)
	}
	if p2, err := ca.WriteCertPEM(filepath.Join(t.TempDir(), "ca.pem"), ""); err != nil || filepath.Base(p2) != "ca.pem" {
		t.Errorf("WriteCertPEM to a path: %q %v", p2, err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", ca.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	c, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("handshake trusting the written CA: %v", err)
	}
	c.Close()
}
