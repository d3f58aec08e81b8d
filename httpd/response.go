package httpd

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/internal/h1"
)

// bufferBeforeChunking is how much body a response holds before its head
// is written: a handler that writes less and returns gets a
// Content-Length; one that writes more, or flushes, gets chunked
// (HTTP/1.1) or a body ended by closing the connection (HTTP/1.0). It is
// net/http's figure.
const bufferBeforeChunking = 2048

// bigWrite is the size from which a body write goes to the connection as
// it is, after the output gathered so far, instead of being copied.
const bigWrite = 16 << 10

// response is a request's http.ResponseWriter. Its output goes to out:
// on the waiter, the connection's gathered output (hconn.out), written
// when OnData returns; on a request's goroutine, its own buffer, written
// as it fills. Framing is decided when the head is written (commit): the
// handler's Content-Length, chunked, or a body that ends with the
// connection.
type response struct {
	hc  *hconn
	req *http.Request
	ctx *reqCtx
	st  *stream // the request's goroutine, nil inline

	head, close10, keepAlive10 bool // HEAD; HTTP/1.0 asking close or keep-alive
	minor                      int

	header      http.Header
	snap        http.Header // the header as at WriteHeader (snapMap), nil if it was empty then
	snapMap     http.Header // snap's storage, kept with the pooled response
	status      int
	wroteHeader bool // the status is decided
	committed   bool // the head is in out
	pre         []byte

	out   *[]byte
	start int // where this response's head begins in out
	begin int // where its output not yet handed to the connection begins in out

	// deadline is the write deadline (WriteTimeout, SetWriteDeadline):
	// output handed to the connection after it is dropped.
	deadline time.Time

	chunked    bool
	declared   int64 // the handler's Content-Length, or -1
	written    int64 // body bytes written
	closeAfter bool  // the connection closes after this response
	trailers   []string
	hijacked   bool
	err        error // the first write error: the connection is gone

	preArr [bufferBeforeChunking]byte // pre's storage
}

// newResponse returns a response for r, reused from the server's pool:
// net/http's contract ends a ResponseWriter's use when its handler
// returns, so the inline path puts it back then (putResponse).
func newResponse(hc *hconn, r *http.Request, req *h1.Request) *response {
	w, _ := hc.h.responses.Get().(*response)
	if w == nil {
		w = &response{header: make(http.Header)}
	}
	header, snapMap := w.header, w.snapMap
	clear(header)
	clear(snapMap)
	*w = response{
		hc: hc, req: r, ctx: r.Context().(*reqCtx),
		head:     r.Method == "HEAD",
		minor:    req.Minor,
		header:   header,
		snapMap:  snapMap,
		declared: -1,
	}
	w.pre = w.preArr[:0]
	if req.Minor == 0 {
		w.close10 = req.Close
		w.keepAlive10 = !req.Close
	}
	w.closeAfter = req.Close || hc.c.Draining()
	if d := hc.h.srv.WriteTimeout; d > 0 {
		// From the end of the head, as net/http's; the connection is
		// reset if the response is still queued then.
		w.deadline = time.Now().Add(d)
		hc.c.SetWriteDeadline(w.deadline)
	}
	return w
}

// putResponse returns w to the pool once its handler has returned and
// its output is in the connection's buffer.
func (h *handler) putResponse(w *response) {
	if len(w.header) > 64 || len(w.snapMap) > 64 {
		return // an unusual one: let it go
	}
	w.hc, w.req, w.ctx, w.st, w.out, w.trailers, w.err = nil, nil, nil, nil, nil, nil, nil
	h.responses.Put(w)
}

// Header returns the header map that WriteHeader sends. As in net/http,
// the response's head is the header as it was at WriteHeader (or the
// first Write): WriteHeader copies it (snapshot), as the head itself is
// written later (with the body, if small), and changes after it are not
// sent. Only trailers (declared with the Trailer field, or
// http.TrailerPrefix) are taken from the live map, when the body ends.
func (w *response) Header() http.Header { return w.header }

// snapshot copies the header as it is at WriteHeader into snapMap,
// reused from one request to the next, so that it costs no allocation
// once the pooled response has served a request with as many fields. The
// value slices are shared: a handler's Set, Add or Del after WriteHeader
// leaves the copy as it was (Add appends beyond the copy's length); only
// assigning to an element of a value slice in place would show.
func (w *response) snapshot() {
	if len(w.header) == 0 {
		return // nothing to copy: commit finds snap nil, an empty head
	}
	if w.snapMap == nil {
		w.snapMap = make(http.Header, len(w.header))
	}
	for k, v := range w.header {
		w.snapMap[k] = v
	}
	w.snap = w.snapMap
}

// WriteHeader sends the status code; an informational one (1xx other than
// 101) is sent at once, with the header as it is, and WriteHeader may be
// called again.
func (w *response) WriteHeader(code int) {
	if w.hijacked {
		w.hc.h.srv.logf("httpd: response.WriteHeader on hijacked connection")
		return
	}
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("httpd: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		if code == http.StatusContinue && w.st != nil {
			w.st.sentContinue()
		}
		b := appendStatusLine(*w.out, code)
		b = appendHeader(b, w.header, noBodyFields) // RFC 9110 section 8.6
		*w.out = append(b, crlf...)
		w.sendIfStream()
		return
	}
	w.wroteHeader = true
	w.status = code
	w.snapshot() // before an invalid Content-Length goes, as net/http
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.declared = v
		} else {
			w.hc.h.srv.logf("httpd: invalid Content-Length %q", cl)
			w.header.Del("Content-Length")
		}
	}
}

// Write writes body bytes, writing the head first if it is not yet.
func (w *response) Write(p []byte) (int, error) {
	switch {
	case w.hijacked:
		return 0, http.ErrHijacked
	case w.err != nil:
		return 0, w.err
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		// Held for a HEAD as well: it is sniffed for the Content-Type
		// as for a GET, then dropped.
		if len(w.pre)+len(p) <= bufferBeforeChunking {
			w.pre = append(w.pre, p...)
			return len(p), nil
		}
		w.commit(false, p)
	}
	if w.head {
		return len(p), nil
	}
	if err := w.body(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteString is Write of a string.
func (w *response) WriteString(s string) (int, error) {
	if !w.wroteHeader && !w.hijacked {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed && len(w.pre)+len(s) <= bufferBeforeChunking && w.err == nil && !w.hijacked && w.wroteHeader && bodyAllowed(w.status) && w.declared < 0 {
		w.pre = append(w.pre, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// body writes p in the framing chosen.
func (w *response) body(p []byte) error {
	b := *w.out
	if w.chunked {
		b = strconv.AppendInt(b, int64(len(p)), 16)
		b = append(b, crlf...)
	}
	if len(p) >= bigWrite {
		*w.out = b
		return w.sendWith(p, w.chunked)
	}
	b = append(b, p...)
	if w.chunked {
		b = append(b, crlf...)
	}
	*w.out = b
	if len(b) >= outFlush {
		return w.send()
	}
	return nil
}

// commit writes the head into out; final says the handler has returned,
// so that a body held in pre gets a Content-Length. first is the body
// write that does not fit in pre, if any. The framing follows net/http's
// (chunkWriter.writeHeader), the handler's Transfer-Encoding included.
func (w *response) commit(final bool, first []byte) {
	w.committed = true
	h := w.snap // the header as at WriteHeader
	if h == nil {
		// It was empty (it may not be now): an empty map of our own,
		// as commit deletes fields from h.
		if w.snapMap == nil {
			w.snapMap = make(http.Header)
		}
		h = w.snapMap
	}
	st := w.status
	hasBody := bodyAllowed(st)
	hasTrailers := len(h["Trailer"]) > 0
	for _, v := range h["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" && validTrailer(k) {
				w.trailers = append(w.trailers, k)
			}
		}
	}
	hasTrailers = hasTrailers || hasPrefixedTrailer(h)
	if hasToken(h.Get("Connection"), "close") || w.st != nil && (w.st.continuePending() || w.st.unreadTooBig()) {
		// The client waits for a 100 Continue that is not coming, or
		// the body left unread is too large to drop: the next request
		// will not follow on this connection.
		w.closeAfter = true
	}
	te := h.Get("Transfer-Encoding")
	hasTE, hasCL := te != "", w.declared >= 0
	if hasCL && hasTE && te != "identity" {
		w.hc.h.srv.logf("httpd: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.declared)
		h.Del("Content-Length")
		hasCL = false
	}
	// Fields of our own, besides the handler's: framing, Content-Type,
	// Connection.
	cl, addTE := int64(-1), false
	ctype, conn := "", ""
	switch {
	case !hasBody: // 101 too
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
		if st == http.StatusNotModified {
			h.Del("Content-Type") // RFC 9110 section 15.4.5, as net/http
		}
	case w.head:
		h.Del("Transfer-Encoding")
		if final && !hasTrailers && !hasTE && h["Content-Length"] == nil && w.written > 0 {
			cl = w.written
		}
		if !hasCL {
			h.Del("Content-Length") // an invalid one (net/http sends it)
		}
	case hasCL:
		h.Del("Transfer-Encoding")
	case final && !hasTrailers && !hasTE && h["Content-Length"] == nil:
		cl = w.written
	case w.minor >= 1 && te == "identity":
		// A body that ends with the connection, as net/http (the
		// Server-Sent Events setup).
		w.closeAfter = true
		h.Del("Transfer-Encoding")
	case w.minor >= 1:
		w.chunked, addTE = true, true
		if te == "chunked" {
			h.Del("Transfer-Encoding") // sent as ours
		}
		h.Del("Content-Length")
	default:
		w.closeAfter = true // HTTP/1.0: the body ends with the connection
		h.Del("Transfer-Encoding")
		h.Del("Content-Length") // an invalid one (net/http sends it)
	}
	if _, ok := h["Content-Type"]; !ok && hasBody && !hasTE && h.Get("Content-Encoding") == "" {
		// net/http sniffs the first bytes written, up to its buffer:
		// what pre holds and the start of the write that did not fit.
		sniff := w.pre
		if len(sniff) == 0 {
			sniff = first
		} else if len(sniff) < sniffLen && len(first) > 0 {
			var arr [sniffLen]byte
			sniff = append(append(arr[:0], sniff...), first[:min(len(first), sniffLen-len(sniff))]...)
		}
		if len(sniff) > 0 {
			ctype = http.DetectContentType(sniff)
		}
	}
	w.closeAfter = w.closeAfter || w.hc.draining() // Shutdown began: see hconn.draining
	if w.closeAfter {
		if !hasToken(h.Get("Connection"), "close") {
			if st != http.StatusSwitchingProtocols {
				h.Del("Connection") // "keep-alive", say: as net/http
			}
			conn = "close"
		}
	} else if w.keepAlive10 {
		conn = "keep-alive"
	}
	b := *w.out
	w.start = len(b)
	b = appendStatusLine(b, st)
	if _, ok := h["Date"]; !ok {
		b = append(b, "Date: "...)
		b = w.hc.h.date.Append(b)
		b = append(b, crlf...)
	}
	b = appendHeader(b, h, nil)
	if cl >= 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, cl, 10)
		b = append(b, crlf...)
	}
	if addTE {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if ctype != "" {
		b = append(append(append(b, "Content-Type: "...), ctype...), crlf...)
	}
	if conn != "" {
		b = append(append(append(b, "Connection: "...), conn...), crlf...)
	}
	b = append(b, crlf...)
	*w.out = b
	if len(w.pre) > 0 {
		p := w.pre
		w.pre = nil
		if !w.head {
			if w.chunked {
				b = strconv.AppendInt(*w.out, int64(len(p)), 16)
				b = append(b, crlf...)
				b = append(b, p...)
				*w.out = append(b, crlf...)
			} else {
				*w.out = append(*w.out, p...)
			}
		}
	}
}

// sniffLen is how much of a body http.DetectContentType looks at.
const sniffLen = 512

// noBodyFields are the fields an informational response leaves out.
var noBodyFields = []string{"Content-Length", "Transfer-Encoding"}

// validTrailer reports whether a field may be a trailer, as net/http
// (httpguts.ValidTrailerHeader; RFC 9110 section 6.5.1): those that
// frame, route or authenticate a message may not.
func validTrailer(k string) bool {
	switch k {
	case "Authorization", "Cache-Control", "Connection", "Content-Encoding",
		"Content-Length", "Content-Range", "Content-Type", "Expect", "Host",
		"Keep-Alive", "Max-Forwards", "Pragma", "Proxy-Authenticate",
		"Proxy-Authorization", "Proxy-Connection", "Range", "Realm", "Te",
		"Trailer", "Transfer-Encoding", "Www-Authenticate":
		return false
	}
	return true
}

// finish ends the response once the handler has returned.
func (w *response) finish() {
	if w.hijacked || w.err != nil {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true, nil)
	}
	if w.chunked {
		b := append(*w.out, "0\r\n"...)
		b = appendTrailers(b, w.header, w.trailers)
		*w.out = append(b, crlf...)
	}
	if w.declared >= 0 && w.written < w.declared && !w.head && bodyAllowed(w.status) {
		w.closeAfter = true // the client waits for bytes that never come
	}
	if w.expired() {
		return
	}
	w.sendIfStream()
}

// expired reports that the write deadline has passed. What the response
// has not handed to the connection is dropped then, and the connection
// closes after the output before it: net/http's writes fail after the
// deadline, and it closes the connection.
func (w *response) expired() bool {
	if w.deadline.IsZero() || time.Now().Before(w.deadline) {
		return false
	}
	*w.out = (*w.out)[:w.begin]
	w.err = os.ErrDeadlineExceeded
	w.closeAfter = true
	return true
}

// panicked ends the response of a handler that panicked: a 500 if none
// of it was written yet; the connection closes either way.
func (w *response) panicked() {
	w.closeAfter = true
	if w.hijacked || w.err != nil {
		return
	}
	if !w.committed {
		w.pre = w.preArr[:0]
		clear(w.header)
		w.header.Set("Content-Type", "text/plain; charset=utf-8")
		clear(w.snapMap)
		w.snapshot()
		w.status, w.wroteHeader, w.declared, w.written = http.StatusInternalServerError, true, -1, 0
		w.pre = append(w.pre, "Internal Server Error\n"...)
		w.written = int64(len(w.pre))
		w.commit(true, nil)
	}
	// Committed: the client sees a body cut short (no last chunk, or
	// fewer bytes than the Content-Length) when the connection closes.
	w.chunked = false
	if w.expired() {
		return
	}
	w.sendIfStream()
}

// cancel ends the request's context once its handler has returned.
func (w *response) cancel() { w.ctx.cancel(nil) }

// Flush writes what the response holds to the connection, the head
// first (http.Flusher).
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush reporting an error: the connection is gone, or the
// response was hijacked (http.ResponseController.Flush).
func (w *response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if w.err != nil {
		return w.err
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	return w.send()
}

// SetReadDeadline bounds reading the request body
// (http.ResponseController): a read after t fails with
// os.ErrDeadlineExceeded. A body that arrived before the handler ran is
// read without waiting, and the deadline does not apply to it.
func (w *response) SetReadDeadline(t time.Time) error {
	if w.st != nil {
		w.st.setDeadline(t)
	}
	return nil
}

// SetWriteDeadline moves the write deadline to t, the zero time for none
// (http.ResponseController): output written after t is dropped and the
// connection closed, and the connection is reset if its output is still
// queued at t.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.deadline = t
	if w.st != nil {
		w.st.mu.Lock()
		w.st.wdeadline = t
		w.st.mu.Unlock()
	}
	return w.hc.c.SetWriteDeadline(t)
}

// EnableFullDuplex allows reading the body while writing the response
// (http.ResponseController). It is always so here: writing never ends
// the body.
func (w *response) EnableFullDuplex() error { return nil }

// Hijack hands the connection to the handler (http.Hijacker): on a
// request that asks to upgrade, or a CONNECT; others get ErrNotUpgrade.
// See Hijack in the package doc for what the handler receives.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.st == nil || !w.st.upgrade {
		return nil, nil, ErrNotUpgrade
	}
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.committed && len(*w.out) > 0 || w.err != nil {
		if err := w.send(); err != nil {
			return nil, nil, err
		}
	}
	w.hijacked = true
	nc := w.st.hijack()
	rw := bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))
	return nc, rw, nil
}

// send writes out to the connection, then waits while the queue is above
// HighWater.
func (w *response) send() error { return w.sendWith(nil, false) }

// sendWith writes out followed by p (and a CRLF after p if crlfAfter).
func (w *response) sendWith(p []byte, crlfAfter bool) error {
	if w.err != nil || w.expired() {
		return w.err
	}
	c := w.hc.c
	var err error
	switch {
	case p == nil && len(*w.out) > 0:
		_, err = c.Write(*w.out)
	case p != nil:
		if w.st == nil && c.Queued() > 0 {
			// A large body written inline goes to the socket as it
			// takes it: queued behind earlier output, each write would
			// be copied into a queue growing to HighWater.
			if err = c.Flush(w.ctx); err != nil {
				break
			}
		}
		bufs := [][]byte{*w.out, p}
		if crlfAfter {
			bufs = append(bufs, crlf)
		}
		_, err = c.Writev(bufs)
	}
	*w.out = (*w.out)[:0]
	w.begin = 0
	if err == nil {
		if w.st != nil {
			err = w.st.waitDrain(w.ctx)
		} else {
			err = w.hc.wait(w.ctx)
		}
	}
	if err != nil {
		w.err = err
		w.closeAfter = true
	}
	return err
}

// sendIfStream writes out now on a request's goroutine; inline output
// goes out when OnData returns.
func (w *response) sendIfStream() {
	if w.st != nil {
		w.send()
	}
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

func hasPrefixedTrailer(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// appendHeader appends h's fields in key order, leaving out the keys in
// skip and those with http.TrailerPrefix. A field whose name is not a token
// is left out; CR and LF in a value become spaces, so that a value cannot
// start another field (response splitting).
func appendHeader(b []byte, h http.Header, skip []string) []byte {
	var small [16]string
	keys := small[:0]
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || slices.Contains(skip, k) || !validFieldName(k) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, crlf...)
		}
	}
	return b
}

// appendTrailers appends the trailer fields: the declared ones and those
// with http.TrailerPrefix.
func appendTrailers(b []byte, h http.Header, declared []string) []byte {
	for _, k := range declared {
		for _, v := range h[k] {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, crlf...)
		}
	}
	for k, vs := range h {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok || !validFieldName(name) {
			continue
		}
		for _, v := range vs {
			b = append(b, name...)
			b = append(b, ": "...)
			b = appendValue(b, v)
			b = append(b, crlf...)
		}
	}
	return b
}

func appendValue(b []byte, v string) []byte {
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' || c == 0 {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

var _ interface {
	http.ResponseWriter
	http.Flusher
	http.Hijacker
} = (*response)(nil)

var _ context.Context = (*reqCtx)(nil)
