//go:build linux

package peers

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"

	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// Cert is a self-signed server certificate and its key, PEM-encoded: what
// every TLS server of the comparison serves with and what its clients
// trust. It is kept as PEM because the servers do not share one TLS
// package (nbio serves with its own fork of crypto/tls) and because the
// launcher's children read it from files.
type Cert struct {
	CertPEM, KeyPEM []byte
}

// NewCert makes a self-signed ECDSA P-256 certificate for localhost and
// the loopback addresses (internal/selfsigned, which the examples serve
// with): the key type and size of a typical web server's certificate, so
// that the handshake's signature costs what it costs in production.
func NewCert() (Cert, error) {
	c, err := selfsigned.New()
	if err != nil {
		return Cert{}, err
	}
	return Cert{CertPEM: c.CertPEM, KeyPEM: c.KeyPEM}, nil
}

// WriteFiles writes the certificate and the key to cert.pem and key.pem in
// dir (the key readable by the owner only) and returns their paths.
func (c Cert) WriteFiles(dir string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, c.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, c.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// LoadCert reads a certificate and its key written by WriteFiles.
func LoadCert(certFile, keyFile string) (Cert, error) {
	cp, err := os.ReadFile(certFile)
	if err != nil {
		return Cert{}, err
	}
	kp, err := os.ReadFile(keyFile)
	if err != nil {
		return Cert{}, err
	}
	return Cert{CertPEM: cp, KeyPEM: kp}, nil
}

// ServerConfig returns a crypto/tls server configuration serving the
// certificate, otherwise crypto/tls's defaults (TLS 1.2 and 1.3, session
// tickets on, X25519MLKEM768 preferred): the configuration every server
// on crypto/tls uses, so that they negotiate the same thing.
func (c Cert) ServerConfig() (*tls.Config, error) {
	kp, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{kp}}, nil
}

// ClientConfig returns a crypto/tls client configuration that trusts the
// certificate alone and verifies it for 127.0.0.1, otherwise crypto/tls's
// defaults.
func (c Cert) ClientConfig() (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CertPEM) {
		return nil, errors.New("peers: no certificate in CertPEM")
	}
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, nil
}
