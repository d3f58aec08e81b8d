package httpd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/h1"
)

// inlineBody is the largest Content-Length body a request may have and
// still run its handler on the waiter: such a body is awaited in the
// connection's input and read from there. A longer one, one announced
// with "Expect: 100-continue", and a chunked body not all in the input
// with its head, stream to a handler on a goroutine.
const inlineBody = 64 << 10

// outFlush is how much inline output gathers before it is written: the
// responses to one read of pipelined requests go out in one write.
const outFlush = 64 << 10

// handler is the conn.Handler of a Server: one per Server, stateless but
// for its configuration; each connection's state is an hconn.
type handler struct {
	srv     *Server
	handler http.Handler

	headerTimeout, idleTimeout time.Duration
	limits                     h1.Limits
	streams                    chan struct{} // a token per request on a goroutine (MaxStreams)

	ctx    context.Context // requests' base: cancelled by Close
	cancel context.CancelFunc

	date      h1.DateClock
	parsers   sync.Pool // *parser
	outBufs   sync.Pool // *[]byte, inline output
	responses sync.Pool // *response, of inline requests
	heads     sync.Pool // *h2head, an HTTP/2 request's fields as decoded
	switched  switchedSet

	http1 bool     // HTTP/1 is served (Server.Protocols)
	h2    h2config // HTTP/2's settings, and whether it is served
}

// The states of a connection, owned by its waiter.
const (
	csIdle     = iota // between requests, or reading a head
	csStream          // a request is served on a goroutine (hconn.st)
	csHijacked        // the handler took the connection (Hijack)
	csSwitched        // a Protocol serves the connection (Switch): hconn.up
	csClosing         // the last response is written; closing
)

// hconn is a connection's state, stored with conn.Conn.SetValue. Its
// fields are the waiter's: the handler's methods are serialised. A
// request served on a goroutine shares only its stream with the waiter.
type hconn struct {
	h     *handler
	c     *conn.Conn
	state uint8
	// heading: a head is in progress (ReadHeaderTimeout is in force).
	heading bool
	// p parses the head in progress; nil between requests, so that an
	// idle connection holds none.
	p *parser
	// out gathers the responses of inline requests until they are
	// written; nil outside OnData.
	out *[]byte
	st  *stream
	up  Protocol // after Switch
	nc  *netConn // for ConnState and Hijack, made on first use
	// remote is the client's address, for Request.RemoteAddr.
	remote string
	// local is the connection's net.Addr, for http.LocalAddrContextKey.
	local atomic.Value
	// pendingClose: close once out is written.
	pendingClose bool
	// eof: the client closed its side; close once what it sent before
	// is answered.
	eof bool
	// served: a request was read; HTTP/2's preface can no longer come.
	served bool
}

// parser is what parsing one request needs, pooled: a connection holds
// one only while a head is incomplete.
type parser struct {
	req   h1.Request
	chunk h1.ChunkedDecoder
	body  []byte // a chunked body decoded whole, for an inline handler
}

func (h *handler) OnOpen(c *conn.Conn) {
	hc := &hconn{h: h, c: c}
	c.SetValue(hc)
	h.connState(hc, http.StateNew)
	if cs, ok := c.ConnectionState(); ok && cs.NegotiatedProtocol == "h2" {
		hc.startH2()
	}
}

func (h *handler) getParser() *parser {
	if p, ok := h.parsers.Get().(*parser); ok {
		return p
	}
	return new(parser)
}

func (h *handler) getOut() *[]byte {
	if b, ok := h.outBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 16<<10)
	return &b
}

func (h *handler) OnClose(c *conn.Conn, reason conn.Reason, err error) {
	hc, ok := c.Value().(*hconn)
	if !ok {
		return // a TLS handshake that failed: OnOpen never ran
	}
	if hc.p != nil {
		hc.h.parsers.Put(hc.p)
		hc.p = nil
	}
	up := hc.up
	if st := hc.st; st != nil {
		st.mu.Lock()
		if st.hijacked {
			hc.state = csHijacked
		}
		st.mu.Unlock()
		up = st.end(errConnClosed)
	}
	if up != nil {
		h.switched.remove(hc)
		up.OnClose(c, reason, err)
		return
	}
	// StateHijacked is terminal, as net/http's doc says: the connection
	// was the handler's, and its end is not reported.
	if hc.state != csHijacked {
		h.connState(hc, http.StateClosed)
	}
}

// draining reports that the response being written is the connection's
// last: Shutdown began (or the client's FIN came with requests held
// back), so its head says "Connection: close", as net/http's does for a
// response written once Shutdown has begun, even to a request read
// before.
func (hc *hconn) draining() bool { return hc.c.Draining() }

// OnDrain wakes a request's goroutine waiting for the output queue. After
// the client's FIN it also finishes what OnData would: conn offers OnData
// only input left, and there may be none.
func (h *handler) OnDrain(c *conn.Conn) {
	hc, ok := c.Value().(*hconn)
	if !ok {
		return
	}
	if hc.up != nil {
		if d, ok := hc.up.(conn.Drainer); ok {
			d.OnDrain(c)
		}
		return
	}
	if hc.st != nil {
		hc.st.drained()
	}
	if hc.eof {
		h.OnData(c)
	}
}

// OnTimeout: a deadline passed (ReadHeaderTimeout, IdleTimeout,
// WriteTimeout). A connection in a request (a head or body in progress,
// output queued) is reset: a client that trickles bytes is not waited for
// again while it drains. An idle one is closed gracefully.
func (h *handler) OnTimeout(c *conn.Conn) {
	hc := c.Value().(*hconn)
	if hc.up != nil {
		if t, ok := hc.up.(conn.Timeouter); ok {
			t.OnTimeout(c)
		} else {
			c.Close()
		}
		return
	}
	if hc.heading || hc.st != nil || hc.p != nil || c.Queued() > 0 {
		c.Abort()
		return
	}
	c.Close()
}

// OnReadEOF: the client closed its side. What it sent before is answered:
// OnData was offered all of it, and requests it left, held back by flow
// control or behind a request served on a goroutine, come again (the
// drain, Wake); the connection closes once none is left (closeIfDone). A
// body still expected never comes.
func (h *handler) OnReadEOF(c *conn.Conn) {
	hc := c.Value().(*hconn)
	if hc.up != nil {
		if hcl, ok := hc.up.(conn.HalfCloser); ok {
			hcl.OnReadEOF(c)
		} else {
			c.Close()
		}
		return
	}
	hc.eof = true
	if hc.st != nil {
		hc.st.eof()
		c.Wake() // a stream that has finished becomes idle in OnData
		return
	}
	hc.closeIfDone()
}

// closeIfDone closes the connection after the client's FIN once nothing
// it sent is left to answer: no request runs, and none is held back by
// flow control (what is left is a request that can never complete).
func (hc *hconn) closeIfDone() {
	if hc.eof && hc.state == csIdle && hc.c.Writable() {
		hc.state = csClosing
		hc.c.Close()
	}
}

func (h *handler) OnData(c *conn.Conn) {
	hc := c.Value().(*hconn)
	if hc.st != nil && !hc.feed() && hc.up == nil {
		return // the stream's request still runs, or its body is still arriving
	}
	if hc.up != nil {
		hc.up.OnData(c)
		return
	}
	if hc.state != csIdle {
		return
	}
	if !hc.served && hc.h2Preface() {
		return
	}
	for c.Writable() && !hc.pendingClose {
		buf, _ := c.Peek(c.Buffered())
		if len(buf) == 0 {
			break
		}
		if hc.p == nil {
			hc.p = h.getParser()
		}
		n, err := hc.p.req.Parse(buf, h.limits)
		if err == h1.ErrIncomplete {
			if !hc.heading {
				hc.heading = true
				c.SetIdleTimeout(h.headerTimeout)
			}
			break
		}
		if err != nil {
			hc.refuse(err)
			break
		}
		if !hc.serve(buf, n) {
			break
		}
	}
	hc.flushOut()
	if hc.pendingClose && hc.state == csIdle {
		hc.state = csClosing
		c.Close()
	}
	hc.closeIfDone()
	if hc.state == csIdle && c.Buffered() == 0 && hc.p != nil {
		hc.h.parsers.Put(hc.p)
		hc.p = nil
	}
}

// serve serves the request whose head is buf[:n], inline if its body has
// arrived (or it has none), on a goroutine if the body is still to come.
// It reports whether the next request may be read now.
func (hc *hconn) serve(buf []byte, n int) bool {
	h, p := hc.h, hc.p
	req := &p.req
	hc.served = true
	if hc.heading {
		hc.heading = false
		hc.c.SetIdleTimeout(h.idleTimeout)
	}
	if max := h.srv.MaxBodyBytes; max > 0 && req.ContentLength > max {
		hc.refuse(h1.ErrBodyTooLarge)
		return false
	}
	upgrade := isUpgrade(req)
	var body []byte
	var trailer http.Header
	switch {
	case upgrade:
		return hc.startStream(n)
	case req.Chunked:
		p.chunk.Reset()
		p.chunk.MaxBodyBytes = h.srv.MaxBodyBytes
		p.chunk.MaxTrailerBytes = h.limits.MaxHeadBytes
		p.body = p.body[:0]
		m, err := decodeAll(&p.chunk, buf[n:], &p.body)
		switch {
		case err == nil:
			body = p.body
			trailer = trailerHeader(p.chunk.Trailers)
			n += m
		case err != h1.ErrIncomplete:
			hc.refuse(err)
			return false
		default:
			// Its length is unknown, and its client may wait for an
			// answer to what it sent before it sends the rest: the
			// handler starts now.
			return hc.startStream(n)
		}
	case req.ContentLength > 0:
		cl := req.ContentLength
		switch {
		case int64(len(buf)-n) >= cl:
			body = buf[n : n+int(cl)]
			n += int(cl)
		case req.Continue || cl > inlineBody:
			return hc.startStream(n)
		default:
			p.req.Reset()
			return false // wait for the rest of the body
		}
	}
	r, err := hc.newRequest(req)
	if err != nil {
		hc.refuse(err)
		return false
	}
	r.Body = http.NoBody
	var bb *bufBody
	if body != nil || trailer != nil {
		bb = &bufBody{b: body, trailer: trailer, req: r}
		r.Body = bb
	}
	if hc.out == nil {
		hc.out = h.getOut()
	}
	w := newResponse(hc, r, req)
	w.out = hc.out
	w.begin = len(*hc.out)
	h.connState(hc, http.StateActive)
	hc.run(w, r)
	hc.c.Discard(n)
	if w.closeAfter {
		hc.pendingClose = true
	}
	if bb != nil {
		bb.close()
	}
	h.putResponse(w)
	h.connState(hc, http.StateIdle)
	if len(*hc.out) >= outFlush {
		hc.flushOut()
	}
	return !hc.pendingClose
}

// decodeAll decodes a whole chunked body from src into dst, and returns
// how many bytes of src it took: nil at its end, h1.ErrIncomplete before.
func decodeAll(d *h1.ChunkedDecoder, src []byte, dst *[]byte) (int, error) {
	n := 0
	for {
		data, m, err := d.Decode(src[n:])
		n += m
		switch {
		case err == nil:
			*dst = append(*dst, data...)
		case err == io.EOF:
			return n, nil
		default:
			return n, err
		}
	}
}

// isUpgrade reports a request that asks to switch protocols (the parser
// leaves h2c out) or is a CONNECT: its handler may Hijack the connection.
func isUpgrade(req *h1.Request) bool {
	return req.Upgrade || string(req.Method) == "CONNECT"
}

// run runs the handler for w's request, recovering a panic as net/http
// does: 500 if nothing was written, the connection closed either way.
func (hc *hconn) run(w *response, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				hc.h.srv.logf("httpd: panic serving %v: %v\n%s", hc.c.RemoteAddr(), v, debug.Stack())
			}
			w.panicked()
		}
		w.cancel()
	}()
	h := hc.h.handler
	if r.RequestURI == "*" && r.Method == "OPTIONS" && !hc.h.srv.DisableGeneralOptionsHandler {
		h = globalOptions{}
	}
	h.ServeHTTP(w, r)
	w.finish()
}

// globalOptions answers "OPTIONS *", a question about the server rather
// than a resource (RFC 9110 section 9.3.7), as net/http's server does:
// 200 with an empty body. Up to 4 KiB of a request body is read (its use
// is reserved); a larger one closes the connection.
type globalOptions struct{}

func (globalOptions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10))
	}
}

// refuse answers a request that cannot be served (a malformed head, a
// limit) with err's status and closes the connection.
func (hc *hconn) refuse(err error) {
	status := h1.Status(err)
	var b []byte
	if hc.out != nil {
		b = *hc.out
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nDate: "...) // RFC 9110 section 6.6.1
	b = hc.h.date.Append(b)
	msg := err.Error()
	var he *h1.Error
	if errors.As(err, &he) {
		msg = he.Error()
	}
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(msg)+1), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, msg...)
	b = append(b, '\n')
	if hc.out != nil {
		*hc.out = b
	} else {
		hc.c.Write(b)
	}
	hc.pendingClose = true
	if hc.p != nil {
		hc.p.req.Reset()
	}
}

// flushOut writes the gathered inline responses.
func (hc *hconn) flushOut() {
	if hc.out == nil {
		return
	}
	if len(*hc.out) > 0 {
		hc.c.Write(*hc.out)
	}
	*hc.out = (*hc.out)[:0]
	if cap(*hc.out) <= 1<<20 {
		hc.h.outBufs.Put(hc.out)
	}
	hc.out = nil
}

// wait waits, on the waiter, until the queue is below HighWater again: the
// connection's events wait for the running handler, so the handler's
// goroutine writes the queue out itself (conn.Conn.Flush).
func (hc *hconn) wait(ctx context.Context) error {
	if hc.c.Writable() {
		return nil
	}
	return hc.c.Flush(ctx)
}

func (h *handler) connState(hc *hconn, s http.ConnState) {
	if h.srv.ConnState != nil {
		h.srv.ConnState(hc.netConn(), s)
	}
}

var errConnClosed = errors.New("httpd: connection closed")

// appendStatusLine appends "HTTP/1.1 code text\r\n".
func appendStatusLine(b []byte, code int) []byte {
	if code == 200 {
		return append(b, "HTTP/1.1 200 OK\r\n"...)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	b = append(b, text...)
	return append(b, "\r\n"...)
}

var crlf = []byte("\r\n")

// hasToken reports whether a comma-separated list holds token, in any
// case.
func hasToken(list, token string) bool {
	for list != "" {
		var t string
		t, list, _ = strings.Cut(list, ",")
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}
