//go:build linux

package httpd_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// TestTLS: requests over TLS (ServeTLS with PEM files) see r.TLS, and
// negotiate by ALPN h2, then http/1.1, as Server.Protocols allow; a
// client offering only a protocol that is not served is refused in the
// handshake.
func TestTLS(t *testing.T) {
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := cert.WriteFiles(t.TempDir(), "server")
	if err != nil {
		t.Fatal(err)
	}
	http1Only := new(http.Protocols)
	http1Only.SetHTTP1(true)
	for _, tc := range []struct {
		name      string
		protocols *http.Protocols
		offer     []string
		want      string // the answer, or "" for a refused handshake
	}{
		{"default/h2", nil, []string{"h2", "http/1.1"}, "h2 HTTP/2.0"},
		{"default/http1.1", nil, []string{"http/1.1"}, "http/1.1 HTTP/1.1"},
		{"http1only/h2,http1.1", http1Only, []string{"h2", "http/1.1"}, "http/1.1 HTTP/1.1"},
		{"http1only/h2", http1Only, []string{"h2"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &httpd.Server{
				TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"}},
				Protocols: tc.protocols,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.TLS == nil {
						http.Error(w, "no TLS state", 500)
						return
					}
					io.WriteString(w, r.TLS.NegotiatedProtocol+" "+r.Proto)
				}),
			}
			addr := serveWith(t, srv, func(srv *httpd.Server, l netListener) error { return srv.ServeTLS(l, certFile, keyFile) })
			if tc.want == "" {
				_, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: cert.Pool(), NextProtos: tc.offer})
				if err == nil || !strings.Contains(err.Error(), "protocol") {
					t.Errorf("a client offering only %v: %v, want the handshake refused", tc.offer, err)
				}
				return
			}
			client := &http.Client{Transport: &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: cert.Pool(), NextProtos: tc.offer},
				ForceAttemptHTTP2: slices.Contains(tc.offer, "h2"),
			}}
			defer client.CloseIdleConnections()
			for range 3 {
				resp, err := client.Get("https://" + addr + "/")
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != tc.want {
					t.Fatalf("answered %q over %s, want %q", b, resp.Proto, tc.want)
				}
			}
		})
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
