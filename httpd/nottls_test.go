//go:build linux

package httpd_test

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
)

// TestPlainHTTPToTLS: plaintext sent to a TLS port gets, byte for byte,
// what net/http's TLS server answers: its 400 to what looks like HTTP,
// then EOF (not a reset, even with a body left unread), and nothing to
// the rest. TLS clients are served as ever.
func TestPlainHTTPToTLS(t *testing.T) {
	cert, err := selfsigned.New()
	if err != nil {
		t.Fatal(err)
	}
	ours := serve(t, &httpd.Server{Handler: http.HandlerFunc(hello), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(hello))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // its report of each refused client
	ts.StartTLS()
	t.Cleanup(ts.Close)
	theirs := strings.TrimPrefix(ts.URL, "https://")

	const reply = "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
	for _, tc := range []struct{ name, send, want string }{
		{"GET", "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", reply},
		{"HEAD", "HEAD / HTTP/1.0\r\n\r\n", reply},
		{"POST", "POST /form HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000), reply},
		{"PUT", "PUT /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n", reply},
		{"OPTIONS", "OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n", reply},
		{"DELETE", "DELETE /x HTTP/1.1\r\nHost: localhost\r\n\r\n", ""},
		{"GET absolute", "GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n", ""},
		{"RESP", "*1\r\n$4\r\nPING\r\n", ""},
		{"noise", "\x00\x01\x02\x03\x04\x05\x06\x07", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exchange := func(addr string) (string, error) {
				c := rawConn(t, addr)
				go io.WriteString(c, tc.send) // the server may stop reading before the end
				b, err := io.ReadAll(c)
				return string(b), err
			}
			got, err := exchange(ours)
			want, _ := exchange(theirs)
			if want != tc.want {
				t.Fatalf("net/http answered %q, want %q", want, tc.want)
			}
			if got != want {
				t.Errorf("httpd answered %q, net/http %q", got, want)
			}
			if tc.want != "" && err != nil {
				t.Errorf("httpd's reply ended with %v, want EOF", err)
			}
		})
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool()}}}
	resp, err := client.Get("https://" + ours + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "Hello, World!" {
		t.Errorf("over TLS: %q", b)
	}
}
