package httpd

import (
	"errors"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// h2stream is a request on an HTTP/2 connection, from its HEADERS until
// its handler has returned. The waiter feeds its body (data) and
// windows; its handler's goroutine reads the body (Read) and writes the
// response (h2response). Everything they share is under the
// connection's mu.
type h2stream struct {
	sc  *h2conn
	id  uint32
	ctx *reqCtx
	r   *http.Request
	w   *h2response // resp

	handler http.Handler

	resp h2response

	// Made by the goroutine that first waits, under mu (signals to nil
	// are dropped: no one waits yet).
	ready chan struct{} // the body has bytes, ended, or the deadline moved
	wake  chan struct{} // a send window opened, the queue drained, or the stream ended

	// Under sc.mu.
	sendWindow     int64 // what we may still send
	recvWindow     int64 // what the client may still send
	refundS        uint32
	declared       int64 // the request's Content-Length, or -1
	received       int64
	discarded      int64  // body bytes dropped after the handler returned
	remoteDone     bool   // the client sent END_STREAM, or the stream was reset
	body           []byte // unread body bytes are body[bodyR:]
	bodyR          int
	bodyErr        error       // io.EOF once the body has all come
	bodyClosed     bool        // the handler closed the body, or returned
	trailer        http.Header // r.Trailer: the trailers the request declared
	pendingTrailer http.Header // trailers received, set in trailer at the body's end
	sawEOF         bool        // a read returned io.EOF
	resetErr       error       // why the stream was reset, if it was
	resetByUs      bool        // we sent its RST_STREAM: frames that follow are ignored
	handlerDone    bool
	sentEnd        bool // END_STREAM went out
	cont           bool // a 100 Continue is due before the first body read
	smallFrames    int  // DATA frames sent smaller than minData for a small window
	readDeadline   time.Time
}

// openStream starts the handler of a request decoded from a HEADERS
// block, on a goroutine of its own.
func (sc *h2conn) openStream(id uint32, r *http.Request, endStream bool, handler http.Handler) {
	st := &h2stream{
		sc: sc, id: id, r: r, ctx: r.Context().(*reqCtx),
		recvWindow: int64(sc.cfg.streamWindow),
		declared:   -1,
		remoteDone: endStream,
	}
	// Expect: 100-continue is answered at the first read, even of a body
	// known to be empty, as net/http does; the field is not passed on.
	expect := r.Header.Get("Expect") == "100-continue"
	if expect {
		r.Header.Del("Expect")
	}
	if endStream {
		st.bodyErr = io.EOF
		r.Body = http.NoBody
	}
	if !endStream || expect {
		r.Body = st
		if r.ContentLength >= 0 {
			st.declared = r.ContentLength
		}
		st.trailer = r.Trailer
		st.cont = expect
	}
	if t := sc.hc.h.srv.ReadTimeout; t > 0 {
		st.readDeadline = time.Now().Add(t)
	}
	st.w = &st.resp
	st.w.init(st)
	sc.mu.Lock()
	st.sendWindow = sc.peerWindow
	first := sc.running == 0
	sc.running++
	if sc.streams == nil {
		sc.streams = make(map[uint32]*h2stream)
	}
	sc.streams[id] = st
	if first {
		sc.unhold = sc.c.Hold()
	}
	sc.mu.Unlock()
	if first {
		sc.c.SetIdleTimeout(0) // a handler may wait for long: its stream is not idle
		sc.hc.h.connState(sc.hc, http.StateActive)
	}
	st.handler = handler
	sc.starting = append(sc.starting, st)
}

// startHandlers starts the handlers of the streams the frames just read
// opened, once they are all read: a stream the client reset in the same
// read never runs its handler, and the handlers of one read start
// together, so that their responses tend to leave in one write.
//
// Then the waiter yields once: the handlers run before it polls again
// (on a single P it would otherwise hold it, in epoll_wait, for up to the
// poller's hold), and those that finish at once leave their responses in
// the connection's buffer, which the waiter writes in one call as OnData
// returns.
func (sc *h2conn) startHandlers() {
	started := false
	for i, st := range sc.starting {
		sc.starting[i] = nil
		sc.mu.Lock()
		reset := st.resetErr != nil
		sc.mu.Unlock()
		if reset {
			st.end(h2frame.CodeNoError)
			continue
		}
		go st.run(st.handler)
		started = true
	}
	sc.starting = nil // an idle connection keeps no slice
	if started {
		runtime.Gosched()
	}
}

// run runs the handler, then ends the stream. A handler that panics
// gets its stream reset (INTERNAL_ERROR), as net/http's HTTP/2 server
// does; the connection goes on.
func (st *h2stream) run(handler http.Handler) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				st.sc.hc.h.srv.logf("httpd: panic serving %v: %v\n%s", st.sc.c.RemoteAddr(), v, debug.Stack())
			}
			st.end(h2frame.CodeInternalError)
			return
		}
	}()
	r := st.r
	if r.RequestURI == "*" && r.Method == "OPTIONS" && !st.sc.hc.h.srv.DisableGeneralOptionsHandler {
		handler = globalOptions{}
	}
	handler.ServeHTTP(st.w, r)
	code := st.w.finish()
	st.end(code)
}

// end: the handler has returned. A stream that did not end well is
// reset with code. One whose client is still sending stays open
// (half-closed, section 5.1) until its end, or maxDiscardH2 more bytes.
func (st *h2stream) end(code h2frame.ErrCode) {
	sc := st.sc
	sc.mu.Lock()
	st.handlerDone = true
	st.bodyClosed = true
	if unread := len(st.body) - st.bodyR; unread > 0 {
		sc.refundLocked(uint32(unread))
	}
	st.body, st.bodyR = nil, 0
	if st.resetErr == nil && (code != h2frame.CodeNoError || !st.sentEnd) {
		if code == h2frame.CodeNoError {
			code = h2frame.CodeInternalError // the response was cut short
		}
		*sc.out = h2frame.AppendRSTStream(sc.buf(), st.id, code)
		st.resetErr, st.resetByUs = errStreamGone, true
	}
	if st.resetErr != nil || st.remoteDone {
		sc.removeLocked(st)
	}
	sc.mu.Unlock()
	st.ctx.cancel(nil)
	sc.handlerDone()
}

// reset ends the stream on the client's RST_STREAM, a stream error we
// sent, or the connection's end: the body's reader and the response's
// writer wake with err, and the request's context is cancelled.
func (st *h2stream) reset(err error, byUs bool) {
	sc := st.sc
	sc.mu.Lock()
	if st.resetErr == nil {
		st.resetErr, st.resetByUs = err, byUs
	}
	st.bodyEnd(err)
	if st.handlerDone {
		sc.removeLocked(st)
	}
	signal(st.wake)
	sc.mu.Unlock()
	st.ctx.cancel(nil)
}

// bodyEnd ends the body with err unless it has all come; what is unread
// gives its window back. The caller holds mu.
func (st *h2stream) bodyEnd(err error) {
	st.remoteDone = true
	if st.bodyErr == nil {
		st.bodyErr = err
		if unread := len(st.body) - st.bodyR; unread > 0 {
			st.sc.refundLocked(uint32(unread))
		}
		st.body, st.bodyR = nil, 0
	}
	signal(st.ready)
}

// data takes a DATA frame's payload p, n bytes against the windows
// (padding included), on the waiter. It returns the code to reset the
// stream with when the frame is an error.
func (st *h2stream) data(p []byte, n int64, end bool) (h2frame.ErrCode, bool) {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case st.remoteDone:
		sc.refundLocked(uint32(n))
		if st.resetByUs {
			return 0, true // sent before the client saw our RST_STREAM
		}
		return h2frame.CodeStreamClosed, false
	case n > st.recvWindow:
		sc.refundLocked(uint32(n))
		return h2frame.CodeFlowControlError, false
	}
	st.recvWindow -= n
	if pad := uint32(n) - uint32(len(p)); pad > 0 {
		st.refundLocked(pad)
	}
	st.received += int64(len(p))
	if st.declared >= 0 && (st.received > st.declared || end && st.received != st.declared) {
		// A body longer or shorter than its Content-Length is
		// malformed (section 8.1.1).
		st.bodyEnd(errors.New("httpd: HTTP/2 request body does not match its Content-Length"))
		return h2frame.CodeProtocolError, false
	}
	if st.bodyClosed {
		sc.refundLocked(uint32(len(p)))
	} else {
		if st.bodyR > 0 && len(st.body)+len(p) > cap(st.body) {
			// Move the unread bytes to the front rather than grow: the
			// buffer stays within about the window, however long the
			// body.
			st.body = st.body[:copy(st.body, st.body[st.bodyR:])]
			st.bodyR = 0
		}
		st.body = append(st.body, p...)
	}
	if end {
		st.remoteDone = true
		if st.bodyErr == nil {
			st.bodyErr = io.EOF
		}
	}
	if st.handlerDone {
		st.discarded += int64(len(p))
		switch {
		case end:
			sc.removeLocked(st)
		case st.discarded > maxDiscardH2:
			*sc.out = h2frame.AppendRSTStream(sc.buf(), st.id, h2frame.CodeNoError)
			st.resetErr, st.resetByUs = errStreamGone, true
			st.remoteDone = true
			sc.removeLocked(st)
		}
	}
	signal(st.ready)
	return 0, true
}

// maxDiscardH2 is how much body a stream whose handler has returned
// still takes (and drops) before it asks the client to stop sending
// with RST_STREAM NO_ERROR (section 8.1): the end of a body sent
// together with the request then ends the stream cleanly.
const maxDiscardH2 = 64 << 10

// trailers takes the request's trailers, which end its body. The caller
// holds mu.
func (st *h2stream) trailers(h http.Header) {
	if st.trailer != nil {
		st.pendingTrailer = h // set in r.Trailer when a read meets the body's end
	}
	st.remoteDone = true
	if st.bodyErr == nil {
		st.bodyErr = io.EOF
	}
	if st.handlerDone {
		st.sc.removeLocked(st)
	}
	signal(st.ready)
}

// refundLocked returns n bytes of both receive windows once read or
// dropped (see h2conn.refund). The caller holds mu.
func (st *h2stream) refundLocked(n uint32) {
	sc := st.sc
	sc.refundLocked(n)
	st.refundS += n
	if st.refundS >= sc.cfg.streamWindow/4 && !st.remoteDone && !sc.ended {
		*sc.out = h2frame.AppendWindowUpdate(sc.buf(), st.id, st.refundS)
		st.recvWindow += int64(st.refundS)
		st.refundS = 0
	}
}

// Read reads the request body (r.Body), waiting for DATA frames. Its
// reads return the window they free to the client.
func (st *h2stream) Read(p []byte) (int, error) {
	sc := st.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for {
		switch {
		case st.sawEOF:
			return 0, io.EOF
		case st.bodyClosed:
			return 0, errBodyClosed
		}
		if st.cont {
			st.cont = false
			if !st.w.wroteHeader && st.resetErr == nil {
				st.w.informationalLocked(http.StatusContinue, nil)
			}
		}
		if st.bodyR < len(st.body) {
			n := copy(p, st.body[st.bodyR:])
			st.bodyR += n
			if st.bodyR == len(st.body) {
				st.body, st.bodyR = st.body[:0], 0
			}
			st.refundLocked(uint32(n))
			sc.flushLocked()
			return n, nil
		}
		if st.bodyErr != nil {
			if st.bodyErr == io.EOF {
				st.setTrailers()
				st.sawEOF = true
			}
			return 0, st.bodyErr
		}
		sc.flushLocked() // a 100 Continue
		if sc.unreadLocked() {
			// The client's FIN: nothing more is read.
			return 0, io.ErrUnexpectedEOF
		}
		deadline := st.readDeadline
		if st.ready == nil {
			st.ready = make(chan struct{}, 1)
		}
		ready := st.ready
		sc.mu.Unlock()
		err := st.waitFor(ready, deadline)
		sc.mu.Lock()
		if err != nil {
			if errors.Is(err, errBodyStalled) {
				sc.mu.Unlock()
				sc.resetFromHandler(st.id, h2frame.CodeCancel)
				sc.flush()
				sc.mu.Lock()
			}
			return 0, err
		}
	}
}

// setTrailers puts the trailers received into r.Trailer once a read
// meets the body's end, as net/http does. The caller holds mu.
func (st *h2stream) setTrailers() {
	for k, v := range st.pendingTrailer {
		if validTrailer(k) {
			st.trailer[k] = v
		}
	}
	st.pendingTrailer = nil
}

// errBodyClosed fails a read of a body its handler closed before its
// end (one that has met its end keeps returning io.EOF, as net/http's).
var errBodyClosed = errors.New("httpd: HTTP/2 request body read after Close")

// Close closes the body: reads fail, and what comes is dropped.
func (st *h2stream) Close() error {
	sc := st.sc
	sc.mu.Lock()
	if !st.bodyClosed {
		st.bodyClosed = true
		if unread := len(st.body) - st.bodyR; unread > 0 {
			sc.refundLocked(uint32(unread))
		}
		st.body, st.bodyR = nil, 0
		sc.flushLocked()
	}
	sc.mu.Unlock()
	return nil
}

// waitFor waits for ch, until deadline (os.ErrDeadlineExceeded) or for
// IdleTimeout without a signal (errBodyStalled).
func (st *h2stream) waitFor(ch chan struct{}, deadline time.Time) error {
	d, stalled := st.sc.hc.h.idleTimeout, true
	if !deadline.IsZero() {
		if until := time.Until(deadline); until < d {
			d, stalled = until, false
		}
	}
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		if stalled {
			return errors.Join(errBodyStalled, os.ErrDeadlineExceeded)
		}
		return os.ErrDeadlineExceeded
	}
}

// h2head is a request's fields as HPACK decodes them, checked as RFC 9113
// section 8.2 and 8.3 require; the connection's decoder fills one at a
// time.
type h2head struct {
	method, scheme, authority, path string
	header                          http.Header
	vals                            []string // the header's values
	regular                         bool     // a regular field came: no pseudo-header may follow
	trailer                         bool     // decoding trailers: no pseudo-header at all
	bad                             string   // why the request is malformed, if it is
	cookies                         int
}

func (h *h2head) reset(trailer bool) {
	*h = h2head{trailer: trailer}
}

// field takes one decoded field: it is the decoder's emit function.
func (sc *h2conn) field(f hpack.Field) error {
	h := sc.head
	if h.bad != "" {
		return nil
	}
	name, value := f.Name, f.Value
	if name == "" {
		h.bad = "empty field name"
		return nil
	}
	if name[0] == ':' {
		if h.regular || h.trailer {
			h.bad = "pseudo-header after a regular field, or in trailers"
			return nil
		}
		var p *string
		switch name {
		case ":method":
			p = &h.method
		case ":scheme":
			p = &h.scheme
		case ":authority":
			p = &h.authority
		case ":path":
			p = &h.path
		default:
			h.bad = "unknown pseudo-header " + name
			return nil
		}
		if *p != "" || value == "" {
			h.bad = "duplicate or empty " + name
			return nil
		}
		*p = value
		return nil
	}
	h.regular = true
	if !validH2Name(name) || !validH2Value(value) {
		h.bad = "invalid field " + name
		return nil
	}
	switch name {
	case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
		h.bad = "connection-specific field " + name
		return nil
	case "te":
		if value != "trailers" {
			h.bad = "te other than trailers"
			return nil
		}
	case "cookie":
		h.cookies++
	}
	if h.header == nil {
		h.header = make(http.Header, 8)
		h.vals = make([]string, 0, 8)
	}
	k := canonicalH2(name)
	if vs, ok := h.header[k]; ok {
		h.header[k] = append(vs, value)
		return nil
	}
	// One array holds the values of the fields seen once, as
	// textproto.Reader does: a value slice of capacity 1 each, so that
	// an Add copies rather than overwrites its neighbour.
	n := len(h.vals)
	h.vals = append(h.vals, value)
	h.header[k] = h.vals[n : n+1 : n+1]
	return nil
}

// validH2Name reports a field name RFC 9113 section 8.2.1 allows: a
// token in lowercase.
func validH2Name(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'A' <= c && c <= 'Z' || !isTokenChar(c) {
			return false
		}
	}
	return true
}

// validH2Value reports a field value without NUL, CR, LF or another
// control character but HTAB, as net/http checks (RFC 9113 section
// 8.2.1).
func validH2Value(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
