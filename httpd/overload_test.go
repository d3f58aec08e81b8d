//go:build linux

package httpd_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/httpd"
)

// TestMaxStreams: a request that would be served on a goroutine beyond
// Server.MaxStreams is answered 503 and its connection closed; requests
// served inline are not counted, and a slot freed is taken again.
func TestMaxStreams(t *testing.T) {
	release := make(chan struct{})
	addr := serve(t, &httpd.Server{MaxStreams: 1, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	})})
	// Expect: 100-continue runs on a goroutine, which the first holds.
	hold := "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n"
	first := rawConn(t, addr)
	io.WriteString(first, hold)
	firstR := bufio.NewReader(first)

	second := rawConn(t, addr)
	var resp *http.Response
	for range 100 { // until the first has taken the slot
		c := rawConn(t, addr)
		io.WriteString(c, strings.Replace(hold, "/hold", "/", 1))
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode == http.StatusServiceUnavailable {
			resp = r
			if _, err := io.ReadAll(io.MultiReader(r.Body, c)); err != nil {
				t.Errorf("the refused connection was not closed: %v", err)
			}
			break
		}
		r.Body.Close()
		c.Close()
	}
	if resp == nil {
		t.Fatal("no request was refused beyond MaxStreams: 1")
	}
	if !resp.Close {
		t.Errorf("503 without Connection: close: %v", resp.Header)
	}
	// An inline request is served meanwhile.
	io.WriteString(second, getReq)
	if r, err := http.ReadResponse(bufio.NewReader(second), nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("an inline request beside a full MaxStreams: %v, %v", r, err)
	}
	close(release)
	io.WriteString(first, "x")
	for {
		r, err := http.ReadResponse(firstR, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode != http.StatusContinue {
			if r.StatusCode != 200 {
				t.Fatalf("the held request: %v", r.Status)
			}
			break
		}
	}
}
