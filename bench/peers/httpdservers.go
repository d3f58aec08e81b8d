//go:build linux

package peers

import (
	"crypto/tls"
	"net/http"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/poller"
)

// HTTPD is gracepoll's HTTP/1.1 server, package httpd, with its default
// options, serving HTTPHandler, over TLS if it has a TLS configuration.
type HTTPD struct {
	srv  *httpd.Server
	addr string
}

// NewHTTPD starts httpd on 127.0.0.1, on a free port.
func NewHTTPD() (Server, error) { return startHTTPD(nil) }

// NewHTTPDTLS starts httpd serving c over TLS (Server.TLSConfig, which
// runs crypto/tls inside package conn).
func NewHTTPDTLS(c Cert) (Server, error) {
	cfg, err := c.ServerConfig()
	if err != nil {
		return nil, err
	}
	return startHTTPD(cfg)
}

func startHTTPD(cfg *tls.Config) (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &HTTPD{srv: &httpd.Server{Handler: HTTPHandler{}, TLSConfig: cfg}, addr: ln.Addr().String()}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr returns the listening address.
func (s *HTTPD) Addr() string { return s.addr }

// Close closes the listener and every connection.
func (s *HTTPD) Close() error { return s.srv.Close() }

// Poller returns the poller under httpd, for the launcher's statistics
// ("latency", "reset", "stats"); nil before httpd has started serving.
func (s *HTTPD) Poller() *poller.Poller {
	if t := s.srv.Transport(); t != nil {
		return t.Poller()
	}
	return nil
}

// Stats returns the counters of the conn.Server under httpd, for the
// launcher's "tls" and "stats" commands; zero before it has started
// serving.
func (s *HTTPD) Stats() conn.ServerStats {
	if t := s.srv.Transport(); t != nil {
		return t.Stats()
	}
	return conn.ServerStats{}
}

// NewNetHTTPTLS starts net/http on 127.0.0.1, on a free port, behind
// crypto/tls's listener serving c: HTTP/1.1 only, as the certificate's
// configuration offers no ALPN protocol (Serve, unlike ServeTLS, adds no
// "h2").
func NewNetHTTPTLS(c Cert) (Server, error) {
	ln, err := tlsListen(c)
	if err != nil {
		return nil, err
	}
	s := &NetHTTP{srv: &http.Server{Handler: HTTPHandler{}}, addr: ln.Addr().String()}
	go s.srv.Serve(ln)
	return s, nil
}
