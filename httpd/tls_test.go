//go:build linux

package httpd_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// TestTLS: requests over TLS (ServeTLS with PEM files) negotiate
// http/1.1 by ALPN and see r.TLS; a client offering only h2 is refused
// in the handshake.
func TestTLS(t *testing.T) {
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := cert.WriteFiles(t.TempDir(), "server")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httpd.Server{
		TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil {
				http.Error(w, "no TLS state", 500)
				return
			}
			io.WriteString(w, r.TLS.NegotiatedProtocol+" "+r.Proto)
		}),
	}
	addr := serveWith(t, srv, func(srv *httpd.Server, l netListener) error { return srv.ServeTLS(l, certFile, keyFile) })
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: cert.Pool(), NextProtos: []string{"h2", "http/1.1"}},
		ForceAttemptHTTP2: true,
	}}
	for range 3 {
		resp, err := client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "http/1.1 HTTP/1.1" || resp.ProtoMajor != 1 {
			t.Fatalf("answered %q over %s", b, resp.Proto)
		}
	}
	_, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: cert.Pool(), NextProtos: []string{"h2"}})
	if err == nil || !strings.Contains(err.Error(), "protocol") {
		t.Errorf("a client offering only h2: %v, want the handshake refused", err)
	}
}

// TestConnState: ConnState sees a connection new, active, idle and
// closed, in that order.
func TestConnState(t *testing.T) {
	var mu sync.Mutex
	var states []http.ConnState
	done := make(chan struct{})
	srv := &httpd.Server{Handler: http.HandlerFunc(hello), ConnState: func(_ netConn, s http.ConnState) {
		mu.Lock()
		states = append(states, s)
		mu.Unlock()
		if s == http.StateClosed {
			close(done)
		}
	}}
	addr := serve(t, srv)
	c := rawConn(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	readAll(c)
	c.Close() // the server's close waits for our FIN
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []http.ConnState{http.StateNew, http.StateActive, http.StateIdle, http.StateClosed}
	if len(states) != len(want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("states %v, want %v", states, want)
		}
	}
}
