// Package selfsigned makes the self-signed TLS certificates that the
// examples serve with and their tests trust: an ECDSA P-256 key and a leaf
// certificate signed by that same key, so there is no CA to keep. A client
// verifies such a certificate by trusting the certificate itself (Go's
// tls.Config.RootCAs holding it, or `redis-cli --cacert FILE` and
// `openssl s_client -CAfile FILE` with its PEM), the way a pinned
// certificate is trusted.
//
// NewCA makes the other kind: a certificate authority and a server
// certificate it signed. Browsers need that one: Chromium (through NSS)
// takes a trust anchor that is a CA and checks the leaf it signed for a
// server name, key usage and validity as it would a public site's.
//
// It is for examples and tests on one machine, not for anything a stranger
// connects to: the key lives as long as the process or the temporary
// directory it was written to.
package selfsigned

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
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// DefaultHosts are the names New certifies when given none: the loopback
// host by name and by address, IPv4 and IPv6.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1"}

// Validity is how long a certificate New makes is valid. It starts an hour
// before New ran, so that a peer whose clock is a little behind accepts it.
const Validity = 365 * 24 * time.Hour

// Cert is a self-signed certificate and its private key.
type Cert struct {
	// TLS is the pair for tls.Config.Certificates, its Leaf parsed.
	TLS tls.Certificate
	// CertPEM is the certificate in PEM: what a client trusts.
	CertPEM []byte
	// KeyPEM is the private key in PEM (PKCS #8).
	KeyPEM []byte
	// Hosts are the DNS names and IP addresses the certificate is for.
	Hosts []string
}

// New generates a key and a self-signed certificate for hosts, each a DNS
// name or an IP address; with none it certifies DefaultHosts. The
// certificate may authenticate a server and a client both (its extended key
// usages are serverAuth and clientAuth), so one function makes the
// server's certificate and the client certificates of a mutual-TLS test.
func New(hosts ...string) (*Cert, error) {
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := leafTemplate(hosts, "gracepoll example (self-signed)")
	if err != nil {
		return nil, err
	}
	// It is no CA (no keyCertSign, CA false): it is trusted as itself,
	// and can vouch for nothing else.
	tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Cert{
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		Hosts:   append([]string(nil), hosts...),
	}, nil
}

// serial returns a random serial number. RFC 5280 allows up to 20
// octets; 128 random bits keep two certificates made for one name (or
// by one issuer: browsers cache by issuer and serial) from ever sharing
// one.
func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// leafTemplate is a server certificate's template for hosts, valid for
// Validity from an hour ago.
func leafTemplate(hosts []string, org string) (*x509.Certificate, error) {
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{org}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(Validity),
		// An ECDSA key signs and never encrypts: digitalSignature is the
		// one key usage a TLS leaf needs.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		} else {
			return nil, errors.New("selfsigned: empty host name")
		}
	}
	return tmpl, nil
}

// CA is a certificate authority made in the process and a server
// certificate it signed, both on ECDSA P-256 keys. The CA's key is not
// kept: it signs the one leaf and can sign nothing after.
type CA struct {
	// Cert is the CA's certificate, and CertPEM the same in PEM: what a
	// client trusts (curl --cacert, an NSS database, tls.Config.RootCAs
	// through Pool).
	Cert    *x509.Certificate
	CertPEM []byte
	// Leaf is the server's certificate for Hosts, signed by the CA, and
	// its key, its Leaf parsed. Its chain holds the leaf only: a client
	// that trusts the CA has the rest.
	Leaf tls.Certificate
	// Hosts are the DNS names and IP addresses the leaf is for.
	Hosts []string
}

// NewCA makes a CA named name (its certificate's common name) and a
// server certificate it signed for hosts; with none it certifies
// DefaultHosts. Both are valid for Validity from an hour ago: under the
// 398 days Chromium allows a leaf. The CA can sign a leaf, not another
// CA.
func NewCA(name string, hosts ...string) (*CA, error) {
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gracepoll example"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
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
	tmpl, err := leafTemplate(hosts, "gracepoll example")
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{
		Cert:    caCert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Leaf:    tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		Hosts:   append([]string(nil), hosts...),
	}, nil
}

// ServerConfig is a server's TLS configuration serving ca's leaf, TLS 1.2
// at least.
func (ca *CA) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.Leaf}, MinVersion: tls.VersionTLS12}
}

// Pool returns a certificate pool holding the CA alone: the RootCAs of a
// client that must verify the server.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// LeafSPKIHash is the base64 SHA-256 of the leaf's public key
// (SubjectPublicKeyInfo), the form Chromium's
// --ignore-certificate-errors-spki-list takes: a way to trust this one
// server without touching a certificate store.
func (ca *CA) LeafSPKIHash() string {
	sum := sha256.Sum256(ca.Leaf.Leaf.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// WriteCertPEM writes the CA's certificate (PEM) to path or, when path is
// empty, to a new file in the temporary directory named after pattern
// (os.CreateTemp's), and returns the path. The file holds no secret.
func (ca *CA) WriteCertPEM(path, pattern string) (string, error) {
	if path != "" {
		return path, os.WriteFile(path, ca.CertPEM, 0o644)
	}
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, err = f.Write(ca.CertPEM)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// Pool returns a certificate pool holding c alone: tls.Config.RootCAs of a
// client that must verify c's holder, or ClientCAs of a server that
// requires c as a client certificate.
func (c *Cert) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.TLS.Leaf)
	return p
}

// WriteFiles writes c to dir as name.pem (the certificate, what a peer
// trusts) and name.key (the private key, readable by its owner only) and
// returns their paths: the pair for a server's -tls-cert and -tls-key, or
// for `openssl s_client -cert -key`.
func (c *Cert) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, c.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, c.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// LoadPool reads PEM certificates from file into a new pool, for a server
// to verify client certificates with (tls.Config.ClientCAs).
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return p, nil
}
