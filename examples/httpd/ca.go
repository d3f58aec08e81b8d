package main

import (
	"crypto/tls"
	"crypto/x509"

	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// localCA is a certificate authority made in the process and a server
// certificate it signed (internal/selfsigned's CA mode). A CA rather
// than one self-signed leaf, because browsers are stricter than curl:
// Chromium (through NSS) takes a trust anchor that is a CA.
type localCA struct {
	*selfsigned.CA
	// The CA's certificate, what a client trusts, parsed and in PEM.
	cert *x509.Certificate
	pem  []byte
}

// newCA makes the CA and a server certificate for localhost, 127.0.0.1
// and ::1.
func newCA() (*localCA, error) {
	ca, err := selfsigned.NewCA("gracepoll examples/httpd CA")
	if err != nil {
		return nil, err
	}
	return &localCA{CA: ca, cert: ca.Cert, pem: ca.CertPEM}, nil
}

// serverConfig is the server's TLS configuration: the leaf, TLS 1.2 at
// least.
func (ca *localCA) serverConfig() *tls.Config { return ca.ServerConfig() }

// writeCA writes the CA's certificate (PEM) to path, or to a new file in
// the temporary directory when path is empty, and returns the path. The
// file is left behind on exit: a client may still be pointed at it.
func (ca *localCA) writeCA(path string) (string, error) {
	return ca.WriteCertPEM(path, "httpd-ca-*.pem")
}

// leafSPKIHash is the hash --ignore-certificate-errors-spki-list takes.
func (ca *localCA) leafSPKIHash() string { return ca.LeafSPKIHash() }
