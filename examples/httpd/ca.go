package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"time"
)

// localCA is a certificate authority made in the process, and a server
// certificate it signed. A CA rather than one self-signed leaf, because
// browsers are stricter than curl: Chromium (through NSS) takes a trust
// anchor that is a CA and checks the leaf it signed for a server name,
// key usage and validity as it would a public site's.
type localCA struct {
	cert *x509.Certificate
	pem  []byte
	leaf tls.Certificate
}

// caHosts are the names the server certificate is for: the loopback
// host by name and by address.
var caHosts = []string{"localhost", "127.0.0.1", "::1"}

// newCA makes a CA and a server certificate for caHosts, both on ECDSA
// P-256 keys and valid from an hour ago (a client whose clock is a
// little behind still accepts them) for 30 days: long enough for any
// session, short enough that Chromium does not refuse it as too long-lived
// for a leaf (it allows 398 days).
func newCA() (*localCA, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "gracepoll examples/httpd CA", Organization: []string{"gracepoll example"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// It can sign a leaf, not another CA.
		MaxPathLenZero: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: caHosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(30 * 24 * time.Hour),
		// An ECDSA key only signs: digitalSignature is the key usage a
		// TLS server's leaf needs.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range caHosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &localCA{
		cert: caCert,
		pem:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		// The chain sent holds the leaf only: a client that trusts the
		// CA has it already.
		leaf: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
	}, nil
}

// serial returns a random 128-bit serial number, so that certificates
// made by different runs never share one (browsers cache by issuer and
// serial).
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// serverConfig is the server's TLS configuration: the leaf, TLS 1.2 at
// least.
func (ca *localCA) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.leaf}, MinVersion: tls.VersionTLS12}
}

// writeCA writes the CA's certificate (PEM) to path, or to a new file in
// the temporary directory when path is empty, and returns the path. The
// file is left behind on exit: a client may still be pointed at it, and
// it holds no secret.
func (ca *localCA) writeCA(path string) (string, error) {
	if path != "" {
		return path, os.WriteFile(path, ca.pem, 0o644)
	}
	f, err := os.CreateTemp("", "httpd-ca-*.pem")
	if err != nil {
		return "", err
	}
	_, err = f.Write(ca.pem)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// leafSPKIHash is the base64 SHA-256 of the server certificate's public
// key (SubjectPublicKeyInfo), the form Chromium's
// --ignore-certificate-errors-spki-list takes: a way to trust this one
// server without touching a certificate store.
func (ca *localCA) leafSPKIHash() string {
	sum := sha256.Sum256(ca.leaf.Leaf.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}
