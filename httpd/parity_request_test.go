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

	"github.com/gracepoll/gracepoll/httpd"
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

// splitExchange is exchange with raw sent in parts 50 ms apart, so that
// a body arrives after its head and streams to its handler.
func splitExchange(t *testing.T, addr string, parts ...string) wireResult {
	t.Helper()
	c := rawConn(t, addr)
	go func() {
		for i, p := range parts {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := io.WriteString(c, p); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(c)
	var res wireResult
	for _, m := range requestMethods(strings.Join(parts, "")) {
		x, closed := readWireResp(br, m)
		res.Resps = append(res.Resps, x)
		if closed || x.Err != "" {
			res.Closed = closed
			return res
		}
	}
	c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	extra, err := io.ReadAll(br)
	res.Extra, res.Closed = string(extra), err == nil || errors.Is(err, syscall.ECONNRESET)
	return res
}

// reportTrailers answers with r.Trailer before the body is read and
// after, reading it with read.
func reportTrailers(read func(io.Reader)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "before %v nil=%v, Trailer field %q\n", r.Trailer, r.Trailer == nil, r.Header["Trailer"])
		if read != nil {
			read(r.Body)
		}
		fmt.Fprintf(w, "after %v nil=%v\n", r.Trailer, r.Trailer == nil)
	}
}

var (
	readAllBody  = func(r io.Reader) { io.ReadAll(r) }
	copyBody     = func(r io.Reader) { io.Copy(io.Discard, r) } // WriteTo, where the body has it
	readByteBody = func(r io.Reader) {
		b := make([]byte, 1)
		for {
			if _, err := r.Read(b); err != nil {
				return
			}
		}
	}
)

// TestParityRequestTrailers: a chunked request's Trailer field is taken
// out of r.Header, its names are r.Trailer's keys (nil values) before the
// body is read, and the trailer fields received (declared or not) are set
// in r.Trailer once a read meets the body's end, as in net/http; a body
// left unread leaves them unset. A Trailer field naming a framing field
// is refused with 400. The body arrives with its head (the handler runs
// inline) or after it (on a goroutine of its own).
func TestParityRequestTrailers(t *testing.T) {
	const head = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	const body = "5\r\nhello\r\n6\r\n world\r\n0\r\nX-A: 1\r\nx-c: 3\r\nX-A: 2\r\n\r\n"
	declared := head + "Trailer: X-A, x-b\r\nTrailer: X-D\r\n\r\n"
	cases := []parityCase{
		{name: "declared, ReadAll", raw: declared + body, handler: reportTrailers(readAllBody)},
		{name: "declared, io.Copy", raw: declared + body, handler: reportTrailers(copyBody)},
		{name: "declared, byte reads", raw: declared + body, handler: reportTrailers(readByteBody)},
		{name: "declared, unread", raw: declared + body, handler: reportTrailers(nil)},
		{name: "undeclared", raw: head + "\r\n" + body, handler: reportTrailers(readAllBody)},
		{name: "declared, none sent", raw: declared + "5\r\nhello\r\n0\r\n\r\n", handler: reportTrailers(readAllBody)},
		{name: "empty body", raw: declared + "0\r\nX-A: 1\r\n\r\n", handler: reportTrailers(readAllBody)},
		{name: "empty Trailer field", raw: head + "Trailer: ,\r\n\r\n" + body, handler: reportTrailers(readAllBody)},
		{name: "pipelined", raw: declared + body + declared + "0\r\nX-B: 2\r\n\r\n", handler: reportTrailers(readAllBody)},
		{name: "content-length", raw: "POST / HTTP/1.1\r\nHost: x\r\nTrailer: X-A\r\nContent-Length: 5\r\n\r\nhello",
			handler: reportTrailers(readAllBody)},
	}
	runParity(t, cases)

	// httpd's refusal carries a Date and a Content-Length (see the
	// package doc): the status and the close are compared.
	for _, k := range []string{"Content-Length", "transfer-encoding", "Trailer"} {
		t.Run("forbidden "+k, func(t *testing.T) {
			t.Parallel()
			raw := head + "Trailer: X-A, " + k + "\r\n\r\n" + body + getReq
			std, ours := parity(t, parityCase{raw: raw, handler: reportTrailers(readAllBody)})
			for _, x := range []wireResult{std, ours} {
				if len(x.Resps) != 1 || x.Resps[0].Status != "HTTP/1.1 400 Bad Request" ||
					x.Resps[0].Header.Get("Connection") != "close" || !x.Closed {
					t.Errorf("got\n%v\nwant one 400, Connection: close, closed\nnet/http:\n%v", ours, std)
				}
			}
		})
	}

	for _, read := range []struct {
		name string
		f    func(io.Reader)
	}{{"ReadAll", readAllBody}, {"io.Copy", copyBody}, {"unread", nil}} {
		t.Run("streamed, "+read.name, func(t *testing.T) {
			t.Parallel()
			std, ours := serveBoth(t, reportTrailers(read.f))
			parts := []string{declared + "5\r\nhello\r\n", "6\r\n world\r\n0\r\nX-A: 1\r\n", "x-c: 3\r\nX-A: 2\r\n\r\n" + getReq}
			a, b := splitExchange(t, std, parts...), splitExchange(t, ours, parts...)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("responses differ\nnet/http:\n%v\nhttpd:\n%v", a, b)
			}
		})
	}
}

// TestParityWriteTimeoutPaths: WriteTimeout on the paths of a response
// not covered by TestParityWriteTimeout, as in net/http: a response to a
// body streamed to its handler, a large write, and the deadline moved or
// cleared with http.ResponseController. Output written after the
// deadline is not sent and the connection closes; output before it is.
func TestParityWriteTimeoutPaths(t *testing.T) {
	const wt = 200 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/extend":
			rc.SetWriteDeadline(time.Now().Add(time.Minute))
		case "/clear":
			rc.SetWriteDeadline(time.Time{})
		case "/shorten":
			rc.SetWriteDeadline(time.Now().Add(wt / 4))
			time.Sleep(wt / 2)
			io.WriteString(w, "late for the shortened deadline")
			return
		case "/fast":
			io.WriteString(w, "in time")
			return
		}
		time.Sleep(2 * wt)
		if r.URL.Path == "/big" {
			w.Write(bytes.Repeat([]byte("b"), 100<<10))
			return
		}
		io.WriteString(w, "late")
	})
	std, ours := serveBothWith(t, &httpd.Server{Handler: h, WriteTimeout: wt}, func(s *http.Server) { s.WriteTimeout = wt })
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	streamed := func(path string) []string {
		return []string{"POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", "0\r\n\r\n"}
	}
	for _, c := range []struct {
		name  string
		parts []string
	}{
		{"late", []string{get("/late")}},
		{"large write, late", []string{get("/big")}},
		{"streamed, in time", streamed("/fast")},
		{"streamed, late", streamed("/late")},
		{"streamed, in time, then late", append(streamed("/fast"), get("/late"))},
		{"deadline extended", []string{get("/extend")}},
		{"deadline cleared", []string{get("/clear")}},
		{"deadline shortened", []string{get("/shorten")}},
		{"streamed, deadline extended", streamed("/extend")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a, b := splitExchange(t, std, c.parts...), splitExchange(t, ours, c.parts...)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("responses differ\nnet/http:\n%v\nhttpd:\n%v", a, b)
			}
		})
	}
}

// TestParityWriteTimeoutQueued: a response the client does not read in
// time fails the handler's writes once WriteTimeout has passed, and the
// connection ends with the response cut short, as in net/http.
func TestParityWriteTimeoutQueued(t *testing.T) {
	const wt = 200 * time.Millisecond
	writeErr := make(chan error, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 256 { // 16 MiB: more than the socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})
	std, ours := serveBothWith(t, &httpd.Server{Handler: h, WriteTimeout: wt}, func(s *http.Server) { s.WriteTimeout = wt })
	for _, addr := range []string{std, ours} {
		c := rawConn(t, addr)
		io.WriteString(c, getReq)
		select {
		case err := <-writeErr:
			if err == nil {
				t.Fatalf("%s: 16 MiB written to a client that reads nothing", addr)
			}
		case <-time.After(timeout):
			t.Fatalf("%s: the handler's writes did not fail", addr)
		}
		n, err := io.Copy(io.Discard, c)
		if n >= 16<<20 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: read %d bytes, %v; want the response cut short and the connection ended", addr, n, err)
		}
	}
}

// TestParityWriteTimeoutHijacked: Hijack ends the request's write
// deadline, as net/http's clears its connection's: what the handler
// writes after it reaches a client that reads late.
func TestParityWriteTimeoutHijacked(t *testing.T) {
	const wt = 100 * time.Millisecond
	const size = 16 << 20 // more than the socket buffers hold
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		time.Sleep(2 * wt)
		c.Write(bytes.Repeat([]byte("h"), size))
	})
	std, ours := serveBothWith(t, &httpd.Server{Handler: h, WriteTimeout: wt}, func(s *http.Server) { s.WriteTimeout = wt })
	for _, addr := range []string{std, ours} {
		c := rawConn(t, addr)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
		time.Sleep(5 * wt) // the output queues, past the deadline
		if n, err := io.Copy(io.Discard, c); n != size || err != nil {
			t.Errorf("%s: read %d bytes, %v; want %d", addr, n, err, size)
		}
	}
}
