//go:build linux

package httpd_test

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// h2SuiteServers starts the suite's server pairs for HTTP/2: net/http's
// server and httpd's, over h2c (prior knowledge) and over TLS (h2 by
// ALPN), with their default HTTP/2 settings.
func h2SuiteServers(t testing.TB, h http.Handler) (h2c, h2tls serverPair) {
	t.Helper()
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	start := func(useTLS bool) serverPair {
		ts := httptest.NewUnstartedServer(h)
		ts.Config.ErrorLog = log.New(io.Discard, "", 0)
		ts.Config.MaxHeaderBytes = httpd.DefaultMaxHeaderBytes
		srv := &httpd.Server{Handler: h}
		p := serverPair{h2: true}
		if useTLS {
			ts.EnableHTTP2 = true
			ts.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
			ts.StartTLS()
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
			p.client = &tls.Config{RootCAs: cert.Pool()}
		} else {
			protos := new(http.Protocols)
			protos.SetHTTP1(true)
			protos.SetUnencryptedHTTP2(true)
			ts.Config.Protocols, srv.Protocols = protos, protos
			ts.Start()
		}
		t.Cleanup(ts.Close)
		p.std, p.ours = ts.Listener.Addr().String(), serve(t, srv)
		return p
	}
	return start(false), start(true)
}

// TestParityH2 sends the suite's requests (those net/http's client can
// send) through net/http's client over HTTP/2 to net/http's server and
// to httpd's, over h2c and TLS, and compares what the client makes of
// each response: status, header, body, trailers, Content-Length, 1xx.
func TestParityH2(t *testing.T) {
	t.Parallel()
	cases := selectCases(t, suiteCases())
	h2c, h2tls := h2SuiteServers(t, suiteHandler(t))
	var runs []*clientRun
	for _, c := range cases {
		if c.noClient || clientRequests(c.raw) == nil {
			continue
		}
		runs = append(runs, &clientRun{name: "h2c/" + c.name, c: c, pair: h2c},
			&clientRun{name: "h2/" + c.name, c: c, pair: h2tls})
	}
	runClient(runs)
	failed := 0
	for _, r := range runs {
		if r.diff != "" {
			failed++
			t.Errorf("%s: %s", r.name, r.diff)
		}
	}
	t.Logf("%d cases through net/http's client over HTTP/2 (h2c and TLS): %d differ", len(runs), failed)
}
