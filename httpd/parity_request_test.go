//go:build linux

package httpd_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
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

// firstChunk sends addr a chunked request's head and first chunk, waits
// at most 1 s for its handler to start (started), and reports whether a
// response came within 300 ms more (early). Then it sends the body's end
// and a GET, and reads the responses.
func firstChunk(t *testing.T, addr string, started <-chan string) (first, second wireResp, early bool) {
	t.Helper()
	c := rawConn(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	select {
	case got := <-started:
		if got != "hello" {
			t.Errorf("%s: the handler read %q, want \"hello\"", addr, got)
		}
	case <-time.After(time.Second):
		t.Fatalf("%s: the handler did not start within 1 s", addr)
	}
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := br.Peek(1)
	early = err == nil
	c.SetReadDeadline(time.Now().Add(timeout))
	io.WriteString(c, "0\r\n\r\n"+getReq)
	first, _ = readWireResp(br, "POST")
	second, _ = readWireResp(br, "GET")
	return first, second, early
}

// TestParityChunkedFirstChunk: a chunked upload whose client waits for an
// answer to its first chunk starts its handler at once, which answers
// after reading that chunk, or without reading. httpd sends the answer
// at once: it is always full duplex. net/http holds it back until it has
// read what of the body its handler left (up to 256 KiB), unless the
// handler enables full duplex; the bytes are the same. (With full duplex,
// net/http's server fails the connection at the next request, so only the
// first response is compared then.)
func TestParityChunkedFirstChunk(t *testing.T) {
	for _, fullDuplex := range []bool{false, true} {
		for _, read := range []bool{true, false} {
			t.Run(fmt.Sprintf("fullDuplex=%v,read=%v", fullDuplex, read), func(t *testing.T) {
				started := make(chan string, 1)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if fullDuplex {
						http.NewResponseController(w).EnableFullDuplex()
					}
					if r.Method == "POST" {
						got := "hello" // not read: started all the same
						if read {
							b := make([]byte, 5)
							io.ReadFull(r.Body, b)
							got = string(b)
						}
						started <- got
					}
					io.WriteString(w, r.Method)
				})
				std, ours := serveBoth(t, h)
				a1, a2, aEarly := firstChunk(t, std, started)
				b1, b2, bEarly := firstChunk(t, ours, started)
				if !bEarly || aEarly != fullDuplex {
					t.Errorf("answered before the body's end: net/http %v, httpd %v; want %v, true", aEarly, bEarly, fullDuplex)
				}
				if !reflect.DeepEqual(a1, b1) || !fullDuplex && !reflect.DeepEqual(a2, b2) {
					t.Errorf("responses differ\nnet/http:\n%v\n%v\nhttpd:\n%v\n%v", a1, a2, b1, b2)
				}
				if b1.Err != "" || b2.Body != "GET" {
					t.Errorf("httpd: %v, %v", b1, b2)
				}
			})
		}
	}
}
