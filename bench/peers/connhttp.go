//go:build linux

package peers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/h1"
	"github.com/gracepoll/gracepoll/poller"
)

// ConnHTTP is a minimal HTTP/1.1 server written directly on package conn,
// without httpd: HTTPHandler's routes (GET /plaintext, /json, /sleep?ms=N)
// answered from OnData on the connection's waiter, the sleep included
// (inline, blocking the waiter as a handler calling a database would). It
// is the floor under httpd in the HTTP comparison: the same transport,
// poller topology and waiter bound as httpd's defaults, without
// net/http's interface (no http.Request, no ResponseWriter, no header
// map). It parses only what the benchmarks send: GET requests without a
// body, keep-alive (HTTP/1.1 unless "Connection: close"), pipelined or
// not; a request with a body is answered 501 and the connection closed.
type ConnHTTP struct{ connServer }

// connHTTPMaxHead bounds a request head: beyond it 431 and close.
const connHTTPMaxHead = 8 << 10

// NewConnHTTP starts the raw HTTP server on conn with httpd's default
// poller configuration: one shared epoll set (poller.Shared), GOMAXPROCS
// waiters growing up to poller.MaxWaiters while handlers block.
func NewConnHTTP() (Server, error) { return startConnHTTP(poller.Shared) }

// NewConnHTTPStealing is NewConnHTTP on poller.Stealing.
func NewConnHTTPStealing() (Server, error) { return startConnHTTP(poller.Stealing) }

func startConnHTTP(t poller.Topology) (*ConnHTTP, error) {
	opts := conn.Options{Poller: poller.Options{Topology: t, MaxWaiters: poller.MaxWaiters}}
	cs, err := listenConn(new(connHTTPHandler), opts)
	if err != nil {
		return nil, err
	}
	return &ConnHTTP{cs}, nil
}

// connHTTPHandler is ConnHTTP's conn.Handler.
type connHTTPHandler struct {
	conn.BaseHandler
	date h1.DateClock // formats the Date field once a second, as httpd does
}

// connHTTPOut is a pool of response buffers: the answers to the requests
// of one OnData call are written together, in one Write.
var connHTTPOut = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// OnData answers every whole request head buffered, in order, and leaves
// a partial one for later.
func (h *connHTTPHandler) OnData(c *conn.Conn) {
	bp := connHTTPOut.Get().(*[]byte)
	out := (*bp)[:0]
	defer func() {
		*bp = out[:0]
		connHTTPOut.Put(bp)
	}()
	for {
		b, _ := c.Peek(c.Buffered())
		end := bytes.Index(b, []byte("\r\n\r\n"))
		if end < 0 {
			if len(b) > connHTTPMaxHead {
				out = appendConnHTTPError(out, &h.date, http.StatusRequestHeaderFieldsTooLarge)
				c.Write(out)
				c.Close()
			} else if len(out) > 0 {
				c.Write(out)
			}
			return
		}
		req, ok := parseConnHTTPHead(b[:end])
		if _, err := c.Discard(end + 4); err != nil {
			c.Abort()
			return
		}
		var status int
		switch {
		case !ok:
			status = http.StatusBadRequest
		case req.body:
			status = http.StatusNotImplemented
		case !req.get:
			status = http.StatusMethodNotAllowed
		}
		if status != 0 {
			out = appendConnHTTPError(out, &h.date, status)
			c.Write(out)
			c.Close()
			return
		}
		path, query, _ := bytes.Cut(req.target, []byte("?"))
		switch string(path) {
		case "/plaintext":
			out = appendConnHTTPResponse(out, &h.date, http.StatusOK, "text/plain", []byte(PlaintextBody))
		case "/json":
			body, err := json.Marshal(httpMessage{Message: PlaintextBody})
			if err != nil {
				out = appendConnHTTPError(out, &h.date, http.StatusInternalServerError)
				break
			}
			out = appendConnHTTPResponse(out, &h.date, http.StatusOK, "application/json", body)
		case "/sleep":
			d, ok := sleepMillis(string(query))
			if !ok {
				out = appendConnHTTPError(out, &h.date, http.StatusBadRequest)
				break
			}
			// What is answered already goes out first: the sleep holds
			// only this request and those behind it.
			if len(out) > 0 {
				c.Write(out)
				out = out[:0]
			}
			time.Sleep(d)
			out = appendConnHTTPResponse(out, &h.date, http.StatusOK, "text/plain", []byte(SleepBody))
		default:
			out = appendConnHTTPError(out, &h.date, http.StatusNotFound)
		}
		if req.close {
			c.Write(out)
			c.Close()
			return
		}
	}
}

// connHTTPRequest is what ConnHTTP reads of a request head.
type connHTTPRequest struct {
	target []byte // aliases the head
	get    bool   // method GET
	close  bool   // HTTP/1.0, or "Connection: close"
	body   bool   // a Content-Length other than 0, or a Transfer-Encoding
}

// parseConnHTTPHead parses a request head without its final CRLFCRLF; it
// reports false for a malformed one.
func parseConnHTTPHead(head []byte) (connHTTPRequest, bool) {
	var r connHTTPRequest
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || len(target) == 0 || target[0] != '/' {
		return r, false
	}
	switch string(version) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.close = true
	default:
		return r, false
	}
	r.target, r.get = target, string(method) == http.MethodGet
	for len(rest) > 0 {
		var field []byte
		field, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(field, []byte(":"))
		if !ok {
			return r, false
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Connection")):
			r.close = r.close || bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Content-Length")):
			r.body = r.body || string(value) != "0"
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			r.body = true
		}
	}
	return r, true
}

// appendConnHTTPResponse appends a response with its status line,
// Content-Length, Content-Type and Date, and body.
func appendConnHTTPResponse(out []byte, date *h1.DateClock, status int, contentType string, body []byte) []byte {
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(status)...)
	out = append(out, "\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\nContent-Type: "...)
	out = append(out, contentType...)
	out = append(out, "\r\nDate: "...)
	out = date.Append(out)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...)
}

// appendConnHTTPError appends an error response, its status text as a
// text/plain body.
func appendConnHTTPError(out []byte, date *h1.DateClock, status int) []byte {
	return appendConnHTTPResponse(out, date, status, "text/plain; charset=utf-8", []byte(http.StatusText(status)+"\n"))
}
