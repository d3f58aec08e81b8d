package testkit

import (
	"crypto/tls"
	"sync"
	"testing"

	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// testCert is a self-signed certificate for localhost and the loopback
// addresses, made once per test binary.
var testCert = sync.OnceValues(func() (*selfsigned.Cert, error) { return selfsigned.New() })

// TLSConfigs returns a server config with a self-signed certificate for
// localhost, and a client config that trusts it, each new.
func TLSConfigs(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	cert, err := testCert()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert.TLS}},
		&tls.Config{RootCAs: cert.Pool(), ServerName: "localhost"}
}
