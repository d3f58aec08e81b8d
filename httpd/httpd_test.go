//go:build linux

package httpd_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
)

const timeout = 10 * time.Second

// serve starts srv (its Handler set) on a loopback port and shuts it down
// at cleanup; it returns the address.
func serve(t testing.TB, srv *httpd.Server) string {
	t.Helper()
	return serveWith(t, srv, (*httpd.Server).Serve)
}

type (
	netListener = net.Listener
	netConn     = net.Conn
)

// serveWith is serve with the Serve method given (ServeTLS, say).
func serveWith(t testing.TB, srv *httpd.Server, serveFn func(*httpd.Server, net.Listener) error) string {
	t.Helper()
	if srv.ErrorLog == nil {
		srv.ErrorLog = log.New(io.Discard, "", 0)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveFn(srv, l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		srv.Shutdown(ctx)
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
			}
		case <-time.After(timeout):
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return l.Addr().String()
}

// rawConn dials addr and closes the connection at cleanup.
func rawConn(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	t.Cleanup(func() { c.Close() })
	return c
}

// readAll reads c to EOF (or its deadline) and returns what came.
func readAll(c net.Conn) string {
	b, _ := io.ReadAll(c)
	return string(b)
}

func hello(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "Hello, World!") }

func TestKeepAliveClient(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /plaintext", hello)
	mux.HandleFunc("GET /item/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s q=%s", r.PathValue("id"), r.URL.Query().Get("q"))
	})
	mux.HandleFunc("GET /empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	addr := serve(t, &httpd.Server{Handler: mux})
	var conns sync.Map
	tr := &http.Transport{DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, n, a)
		if err == nil {
			conns.Store(c.LocalAddr().String(), true)
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout}
	for i := range 20 {
		resp, err := client.Get(fmt.Sprintf("http://%s/item/%d?q=x%d", addr, i, i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("item %d q=x%d", i, i); string(b) != want || resp.StatusCode != 200 {
			t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, b, want)
		}
		if resp.ContentLength != int64(len(b)) || resp.Header.Get("Date") == "" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("header %v, length %d", resp.Header, resp.ContentLength)
		}
	}
	n := 0
	conns.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("20 sequential requests used %d connections, want 1 (keep-alive)", n)
	}
	resp, err := client.Head("http://" + addr + "/plaintext")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ContentLength != 13 {
		t.Errorf("HEAD: Content-Length %d, want 13", resp.ContentLength)
	}
	resp, err = client.Get("http://" + addr + "/empty")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Content-Length") != "" {
		t.Errorf("204: %d, Content-Length %q", resp.StatusCode, resp.Header.Get("Content-Length"))
	}
	resp, err = client.Get("http://" + addr + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown path: %d, want 404", resp.StatusCode)
	}
}

// TestPipelining: 2,000 requests in one write are answered in order.
func TestPipelining(t *testing.T) {
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	})})
	c := rawConn(t, addr)
	const n = 2000
	var req bytes.Buffer
	for i := range n {
		fmt.Fprintf(&req, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	go c.Write(req.Bytes())
	br := bufio.NewReader(c)
	for i := range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if want := fmt.Sprintf("/%d", i); string(b) != want {
			t.Fatalf("response %d is %q, want %q", i, b, want)
		}
	}
}

// TestSmuggling: every head a front proxy could frame differently is
// refused with 400 and the connection closed, and a request smuggled
// after it is not answered.
func TestSmuggling(t *testing.T) {
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(hello)})
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	cases := map[string]string{
		"cl-and-te":          "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"two-cl":             "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
		"signed-cl":          "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
		"hex-cl":             "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\nhello",
		"te-not-final":       "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
		"te-twice":           "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"bad-chunk-size":     "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n\r\n",
		"chunk-size-space":   "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
		"bad-chunk-ext":      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;\x01\r\nhello\r\n0\r\n\r\n",
		"obs-fold":           "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
		"space-colon":        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n",
		"bare-cr":            "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
		"bare-lf":            "GET / HTTP/1.1\nHost: x\n\n",
		"nul":                "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
		"two-spaces":         "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
		"no-version":         "GET /\r\nHost: x\r\n\r\n",
		"lower-http":         "GET / http/1.1\r\nHost: x\r\n\r\n",
		"no-host":            "GET / HTTP/1.1\r\n\r\n",
		"two-hosts":          "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
		"chunk-data-no-crlf": "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n",
	}
	for name, head := range cases {
		t.Run(name, func(t *testing.T) {
			c := rawConn(t, addr)
			c.Write([]byte(head + smuggled))
			got := readAll(c)
			if !strings.HasPrefix(got, "HTTP/1.1 400 ") {
				t.Fatalf("answered %q, want 400", got)
			}
			if strings.Count(got, "HTTP/1.1 ") != 1 || !strings.Contains(got, "Connection: close") {
				t.Fatalf("answered more than the 400, or did not close: %q", got)
			}
		})
	}
}

// TestLimits: an oversized head, target, field count and body get 431,
// 414, 431 and 413, the connection closed; the server goes on.
func TestLimits(t *testing.T) {
	addr := serve(t, &httpd.Server{Handler: http.HandlerFunc(hello), MaxBodyBytes: 1 << 20})
	many := strings.Repeat("X-A: b\r\n", 10000)
	cases := []struct{ name, req, status string }{
		{"1MB-field", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n", "431"},
		{"10000-fields", "GET / HTTP/1.1\r\nHost: x\r\n" + many + "\r\n", "431"},
		{"100KB-target", "GET /" + strings.Repeat("a", 100<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", "414"},
		{"body-cl", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", "413"},
		{"body-chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\n", "413"},
		{"h2-preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "505"},
		{"expect", "GET / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", "417"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := rawConn(t, addr)
			go c.Write([]byte(tc.req))
			got := readAll(c)
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") {
				t.Fatalf("answered %.80q, want %s", got, tc.status)
			}
		})
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
