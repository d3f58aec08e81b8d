//go:build linux

package httpd_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestParityUnreadLargeBody: a handler that answers a 1 MiB upload
// without reading it gets "Connection: close" and the connection closes
// after the response, as net/http, which reads and drops at most 256 KiB
// of what its handler left to keep a connection: the client's next
// request goes on a new connection and is answered.
func TestParityUnreadLargeBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	})
	std, ours := serveBoth(t, h)
	for _, addr := range []string{std, ours} {
		tr := &http.Transport{}
		client := &http.Client{Transport: tr, Timeout: timeout}
		resp, err := client.Post("http://"+addr+"/", "application/octet-stream", bytes.NewReader(make([]byte, 1<<20)))
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" || err != nil || !resp.Close {
			t.Errorf("%s: got %q (%v), Close %v; want \"ok\" and Connection: close", addr, b, err, resp.Close)
		}
		resp, err = client.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("%s: the next request: %v", addr, err)
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
	}
}

// TestParityUnreadLargeBodyPipelined: after the response that closes the
// connection, a request sent behind the 1 MiB body is not answered; the
// connection ends (with a reset, from net/http, as it closes with input
// unread).
func TestParityUnreadLargeBodyPipelined(t *testing.T) {
	std, ours := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Method)
	}))
	for _, addr := range []string{std, ours} {
		c := rawConn(t, addr)
		go func() {
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<20)
			c.Write(make([]byte, 1<<20))
			io.WriteString(c, getReq)
		}()
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "POST" || !resp.Close {
			t.Errorf("%s: got %q, Close %v; want \"POST\" and Connection: close", addr, b, resp.Close)
		}
		rest, err := io.ReadAll(br)
		if len(rest) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: after the response: %q, %v; want the connection closed", addr, rest, err)
		}
	}
}

// TestParityUnreadSmallBody: a body left unread that is under 256 KiB is
// read and dropped after the response, and the connection kept, as in
// net/http (which drops it before writing the response).
func TestParityUnreadSmallBody(t *testing.T) {
	body := strings.Repeat("b", 200<<10)
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	runParity(t, []parityCase{
		{name: "content-length", handler: hello,
			raw: fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body) + getReq},
		{name: "chunked", handler: hello,
			raw: "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + getReq},
	})
}
