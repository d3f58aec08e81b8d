package httpd

import (
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// h2Buffer is how much body an HTTP/2 response holds before its HEADERS
// go out: a handler that writes less and returns gets a Content-Length,
// as from net/http, whose figure it is.
const h2Buffer = 4 << 10

// h2response is an HTTP/2 stream's http.ResponseWriter, used by its
// handler's goroutine alone; what it shares with the connection (the
// encoder, the output, the windows) is under the connection's mu.
type h2response struct {
	st *h2stream
	sc *h2conn

	header      http.Header
	snap        http.Header // the header as at WriteHeader
	status      int
	wroteHeader bool
	sentHeader  bool
	head        bool
	buf         []byte // body held until the HEADERS go out
	small       [256]byte
	declared    int64 // the handler's Content-Length, or -1
	written     int64
	trailers    []string // declared with the Trailer field
	deadline    time.Time
	done        bool // the handler has returned
	overflow    bool // a write went beyond the Content-Length
	err         error
}

// init readies the response of st, which holds it.
func (w *h2response) init(st *h2stream) {
	*w = h2response{st: st, sc: st.sc, header: make(http.Header), declared: -1, head: st.r.Method == "HEAD"}
	w.buf = w.small[:0]
	if d := st.sc.hc.h.srv.WriteTimeout; d > 0 {
		w.deadline = time.Now().Add(d)
	}
}

// Header returns the header map that WriteHeader sends.
func (w *h2response) Header() http.Header { return w.header }

// WriteHeader sends an informational status (1xx) at once, and records
// a final one with the header as it is, for the HEADERS frame that goes
// out with the first body bytes or at the handler's end.
func (w *h2response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("httpd: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		sc := w.sc
		sc.mu.Lock()
		if code == http.StatusContinue {
			w.st.cont = false
		}
		w.informationalLocked(code, w.header)
		sc.flushLocked()
		sc.mu.Unlock()
		return
	}
	w.wroteHeader = true
	w.status = code
	// A copy of the map sharing the value slices, as the HTTP/1.1
	// response's snapshot: Set, Add and Del after WriteHeader leave it
	// as it was.
	w.snap = make(http.Header, len(w.header))
	for k, v := range w.header {
		w.snap[k] = v
	}
	if cl := w.snap.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.declared = v
		} else {
			w.sc.hc.h.srv.logf("httpd: invalid Content-Length %q", cl)
			w.snap.Del("Content-Length")
		}
	}
	for _, v := range w.snap["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" && validTrailer(k) {
				w.trailers = append(w.trailers, k)
			}
		}
	}
}

// informationalLocked appends a 1xx response's HEADERS; the caller holds
// mu.
func (w *h2response) informationalLocked(code int, h http.Header) {
	if w.st.resetErr != nil || w.sc.ended {
		return
	}
	block := w.sc.enc.AppendField(w.sc.hblock[:0], hpack.Field{Name: ":status", Value: strconv.Itoa(code)})
	block = w.appendFields(block, h, true)
	w.sc.appendBlock(w.st.id, false, block)
}

// Write writes body bytes: held up to h2Buffer until the HEADERS go out,
// then sent in DATA frames as the windows allow.
func (w *h2response) Write(p []byte) (int, error) {
	if w.err != nil {
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
	var over error
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		// As net/http's HTTP/2 server: what fits is sent, the write
		// fails, and the stream is reset at the handler's end.
		p, over = p[:w.declared-w.written], http.ErrContentLength
		w.overflow = true
	}
	w.written += int64(len(p))
	if !w.sentHeader && len(w.buf)+len(p) <= h2Buffer {
		w.buf = append(w.buf, p...)
		return len(p), over
	}
	if w.head {
		// What the buffer holds is sniffed, as for a GET; the HEADERS
		// go out now, without a Content-Length, and no body.
		if !w.sentHeader {
			if len(w.buf) < sniffLen {
				w.buf = append(w.buf, p[:min(len(p), sniffLen-len(w.buf))]...)
			}
			if err := w.send(nil, false); err != nil {
				return 0, err
			}
		}
		return len(p), over
	}
	if err := w.send(p, false); err != nil {
		return 0, err
	}
	return len(p), over
}

// WriteString is Write of a string.
func (w *h2response) WriteString(s string) (int, error) {
	if !w.sentHeader && len(w.buf)+len(s) <= h2Buffer && w.wroteHeader && w.err == nil &&
		bodyAllowed(w.status) && (w.declared < 0 || w.written+int64(len(s)) <= w.declared) {
		w.buf = append(w.buf, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// send writes the HEADERS if they have not gone, what is held, and p;
// end ends the stream, with trailers if there are any.
func (w *h2response) send(p []byte, end bool) error {
	sc := w.sc
	sc.mu.Lock()
	defer sc.mu.Unlock()
	err := w.sendLocked(p, end)
	if st := w.st; st.sentEnd && st.remoteDone && st.resetErr == nil {
		// Closed on both sides (section 5.1): the client may open
		// another stream in its place now, so it no longer counts
		// against MAX_CONCURRENT_STREAMS, though its goroutine has yet
		// to return from finishing it.
		sc.removeLocked(st)
	}
	if end && sc.running > 1 {
		// Other handlers of the connection run: yield once, so that
		// those about to finish add their responses to this write.
		sc.mu.Unlock()
		runtime.Gosched()
		sc.mu.Lock()
	}
	sc.flushLocked()
	if err != nil && w.err == nil {
		w.err = err
	}
	return err
}

func (w *h2response) sendLocked(p []byte, end bool) error {
	if err := w.errLocked(); err != nil {
		return err
	}
	trailers := end && w.hasTrailers()
	endData := end && !trailers
	if w.head {
		p = nil
	}
	if !w.sentHeader {
		noData := w.head || len(w.buf) == 0 && len(p) == 0
		w.headersLocked(w.buf, p, end, endData && noData)
		held := w.buf
		w.buf = nil
		if !w.head && len(held) > 0 {
			if err := w.dataLocked(held, endData && len(p) == 0); err != nil {
				return err
			}
		}
	}
	if !w.st.sentEnd && (len(p) > 0 || endData) {
		if err := w.dataLocked(p, endData); err != nil {
			return err
		}
	}
	if trailers {
		// Encoded now, after the HEADERS: HPACK's tables change in the
		// order blocks are sent.
		w.sc.appendBlock(w.st.id, true, w.trailerBlock())
		w.st.sentEnd = true
	}
	return nil
}

// hasTrailers reports whether the handler set any trailer.
func (w *h2response) hasTrailers() bool {
	for _, k := range w.trailers {
		if len(w.header[k]) > 0 {
			return true
		}
	}
	for k, vs := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) && len(vs) > 0 {
			return true
		}
	}
	return false
}

// errLocked is the error a write meets: the stream reset, the
// connection gone, the write deadline passed. The caller holds mu.
func (w *h2response) errLocked() error {
	switch {
	case w.err != nil:
		return w.err
	case w.st.resetErr != nil:
		return w.st.resetErr
	case w.sc.ended:
		return errConnClosed
	case !w.deadline.IsZero() && !time.Now().Before(w.deadline):
		w.expireLocked()
		return w.err
	}
	return nil
}

// expireLocked resets a stream whose write deadline passed, as net/http
// does; the caller holds mu.
func (w *h2response) expireLocked() {
	w.err = os.ErrDeadlineExceeded
	st := w.st
	if st.resetErr == nil {
		*w.sc.out = h2frame.AppendRSTStream(w.sc.buf(), st.id, h2frame.CodeInternalError)
		st.resetErr, st.resetByUs = os.ErrDeadlineExceeded, true
		st.bodyEnd(os.ErrDeadlineExceeded)
	}
}

// headersLocked appends the response's HEADERS: the header as at
// WriteHeader, with the fields net/http adds (Content-Type sniffed from
// the first bytes, Content-Length when the whole body is known, Date).
func (w *h2response) headersLocked(held, p []byte, final, endStream bool) {
	w.sentHeader = true
	h := w.snap
	if h == nil {
		h = http.Header{}
	}
	if v, ok := h["Connection"]; ok {
		// Not an HTTP/2 field (section 8.2.2); "close" asks that the
		// connection end, as for HTTP/1.1: GOAWAY, then close once idle.
		if len(v) > 0 && strings.EqualFold(v[0], "close") {
			w.sc.goAwayLocked()
		}
	}
	block := w.sc.enc.AppendField(w.sc.hblock[:0], hpack.Field{Name: ":status", Value: statusText(w.status)})
	hasBody := bodyAllowed(w.status)
	if _, ok := h["Content-Type"]; !ok && hasBody {
		sniff := held
		if len(sniff) == 0 {
			sniff = p
		}
		if len(sniff) > 0 {
			block = w.sc.enc.AppendField(block, hpack.Field{Name: "content-type", Value: http.DetectContentType(sniff)})
		}
	}
	if _, ok := h["Content-Length"]; !ok && final && hasBody && (w.written > 0 || !w.head) {
		block = w.sc.enc.AppendField(block, hpack.Field{Name: "content-length", Value: strconv.FormatInt(w.written, 10)})
	}
	if _, ok := h["Date"]; !ok {
		block = w.sc.enc.AppendField(block, hpack.Field{Name: "date", Value: w.sc.hc.h.date.String()})
	}
	block = w.appendFields(block, h, !hasBody)
	w.sc.appendBlock(w.st.id, endStream, block)
	if endStream {
		w.st.sentEnd = true
	}
}

// appendFields encodes h's fields, in lowercase, leaving out those
// HTTP/2 forbids (section 8.2.2), trailers, invalid names and values,
// and the framing fields of a response without a body.
func (w *h2response) appendFields(block []byte, h http.Header, noBody bool) []byte {
	enc := &w.sc.enc
	for k, vs := range h {
		switch k {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Trailer":
			if k != "Trailer" {
				continue
			}
		case "Content-Length":
			if noBody {
				continue
			}
		}
		if strings.HasPrefix(k, http.TrailerPrefix) || !validFieldName(k) {
			continue
		}
		name := lowerH2(k)
		for _, v := range vs {
			if !validH2Value(v) {
				continue
			}
			block = enc.AppendField(block, hpack.Field{Name: name, Value: v})
		}
	}
	return block
}

// trailerBlock encodes the trailers the handler set: the declared ones
// and those with http.TrailerPrefix.
func (w *h2response) trailerBlock() []byte {
	block := w.sc.hblock[:0]
	add := func(k string, vs []string) {
		for _, v := range vs {
			if validH2Value(v) {
				block = w.sc.enc.AppendField(block, hpack.Field{Name: lowerH2(k), Value: v})
			}
		}
	}
	for _, k := range w.trailers {
		add(k, w.header[k])
	}
	for k, vs := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && validFieldName(name) {
			add(http.CanonicalHeaderKey(name), vs)
		}
	}
	return block
}

// appendBlock frames a field block as HEADERS and, beyond the client's
// frame size, CONTINUATION frames; the caller holds mu.
func (sc *h2conn) appendBlock(id uint32, endStream bool, block []byte) {
	b := sc.buf()
	first := min(len(block), sc.peerFrame)
	b = h2frame.AppendHeaders(b, id, endStream, first == len(block), block[:first])
	for rest := block[first:]; len(rest) > 0; {
		n := min(len(rest), sc.peerFrame)
		b = h2frame.AppendContinuation(b, id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	*sc.out = b
	if cap(block) <= 16<<10 {
		sc.hblock = block[:0] // the next block's scratch
	}
}

// dataLocked sends p in DATA frames as the windows and the output queue
// allow, waiting for them; end sets END_STREAM on the last. The caller
// holds mu, released while it waits.
func (w *h2response) dataLocked(p []byte, end bool) error {
	st, sc := w.st, w.sc
	for {
		if err := w.errLocked(); err != nil {
			return err
		}
		if len(p) == 0 {
			if end {
				*sc.out = h2frame.AppendData(sc.buf(), st.id, true, nil)
				st.sentEnd = true
			}
			return nil
		}
		n := int64(min(len(p), sc.peerFrame))
		n = min(n, st.sendWindow, sc.sendWindow)
		small := n < int64(min(len(p), minData))
		if n > 0 && (!small || st.smallFrames < maxSmallFrames) && sc.c.Writable() {
			if small {
				st.smallFrames++
			}
			last := end && int(n) == len(p)
			*sc.out = h2frame.AppendData(sc.buf(), st.id, last, p[:n])
			st.sendWindow -= n
			sc.sendWindow -= n
			p = p[n:]
			if len(*sc.out) >= outFlush {
				sc.flushLocked()
			}
			if last {
				st.sentEnd = true
				return nil
			}
			continue
		}
		sc.flushLocked()
		if err := w.waitLocked(n <= 0 || small); err != nil {
			return err
		}
	}
}

// waitLocked waits, mu released, for a window to open (window) or the
// output queue to drain. A window shut for IdleTimeout resets the
// stream; a queue that does not move for IdleTimeout (the client reads
// nothing) resets the connection.
func (w *h2response) waitLocked(window bool) error {
	sc, st := w.sc, w.st
	sc.mu.Unlock()
	defer sc.mu.Lock()
	if !window {
		before := sc.c.Stats().BytesOut
		ctx, cancel := context.WithTimeout(context.Background(), sc.hc.h.idleTimeout)
		if !w.deadline.IsZero() {
			ctx, cancel = context.WithDeadline(context.Background(), w.deadline)
		}
		err := sc.c.Flush(ctx)
		cancel()
		if err != nil && ctx.Err() != nil && sc.c.Stats().BytesOut == before {
			sc.c.Abort()
			return os.ErrDeadlineExceeded
		}
		if err != nil && ctx.Err() == nil || !sc.c.Writable() && sc.c.Queued() == 0 {
			return errConnClosed // closed for writing
		}
		return nil
	}
	sc.mu.Lock()
	unread := sc.unreadLocked()
	if st.wake == nil {
		st.wake = make(chan struct{}, 1)
	}
	wake, deadline := st.wake, w.deadline
	sc.mu.Unlock()
	var err error
	if !unread {
		err = st.waitFor(wake, deadline)
		sc.mu.Lock()
		unread = sc.unreadLocked()
		sc.mu.Unlock()
	}
	if err == nil && unread {
		// The client's FIN: no WINDOW_UPDATE is read any more.
		sc.resetFromHandler(st.id, h2frame.CodeCancel)
		sc.flush()
		return errStreamGone
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errBodyStalled):
		sc.resetFromHandler(st.id, h2frame.CodeCancel)
		sc.flush()
		return errWindowStall
	default:
		sc.mu.Lock()
		w.expireLocked()
		sc.flushLocked()
		sc.mu.Unlock()
		return w.err
	}
}

// finish ends the response once the handler has returned: what is held
// and the trailers go out, and END_STREAM. It returns the code to reset
// the stream with if it could not end well: a body shorter than its
// Content-Length.
func (w *h2response) finish() h2frame.ErrCode {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	short := w.declared >= 0 && w.written < w.declared && !w.head && bodyAllowed(w.status)
	if err := w.send(nil, !short && !w.overflow); err != nil || short || w.overflow {
		return h2frame.CodeInternalError
	}
	return h2frame.CodeNoError
}

// Flush sends the HEADERS and what is held (http.Flusher).
func (w *h2response) Flush() { w.FlushError() }

// FlushError is Flush reporting an error (http.ResponseController).
func (w *h2response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.send(nil, false)
}

// Push answers http.ErrNotSupported: server push is not offered (and
// browsers have dropped it).
func (w *h2response) Push(string, *http.PushOptions) error { return http.ErrNotSupported }

// SetReadDeadline sets the request body's read deadline
// (http.ResponseController).
func (w *h2response) SetReadDeadline(t time.Time) error {
	w.sc.mu.Lock()
	w.st.readDeadline = t
	signal(w.st.ready)
	w.sc.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the response's write deadline
// (http.ResponseController): writes after it fail and the stream is
// reset.
func (w *h2response) SetWriteDeadline(t time.Time) error {
	w.sc.mu.Lock()
	w.deadline = t
	signal(w.st.wake)
	w.sc.mu.Unlock()
	return nil
}

// EnableFullDuplex does nothing: HTTP/2 streams are full duplex.
func (w *h2response) EnableFullDuplex() error { return nil }

// goAwayLocked sends GOAWAY: no stream after the last is served, and the
// connection closes once the streams running are done. The caller holds
// mu.
func (sc *h2conn) goAwayLocked() {
	if sc.goAway || sc.ended {
		return
	}
	sc.goAway = true
	*sc.out = h2frame.AppendGoAway(sc.buf(), sc.lastStream, h2frame.CodeNoError, nil)
}

// statusText is a status code's digits, without allocating for the
// common ones.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 204:
		return "204"
	case 206:
		return "206"
	case 301:
		return "301"
	case 302:
		return "302"
	case 304:
		return "304"
	case 400:
		return "400"
	case 404:
		return "404"
	case 500:
		return "500"
	}
	return strconv.Itoa(code)
}

// lowerH2 returns a canonical field name in lowercase, without
// allocating for the common ones.
func lowerH2(k string) string {
	switch k {
	case "Content-Type":
		return "content-type"
	case "Content-Length":
		return "content-length"
	case "Content-Encoding":
		return "content-encoding"
	case "Cache-Control":
		return "cache-control"
	case "Date":
		return "date"
	case "Etag":
		return "etag"
	case "Last-Modified":
		return "last-modified"
	case "Location":
		return "location"
	case "Server":
		return "server"
	case "Set-Cookie":
		return "set-cookie"
	case "Vary":
		return "vary"
	case "Trailer":
		return "trailer"
	case "X-Content-Type-Options":
		return "x-content-type-options"
	case "Accept-Ranges":
		return "accept-ranges"
	case "Grpc-Status":
		return "grpc-status"
	case "Grpc-Message":
		return "grpc-message"
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(k)
		}
	}
	return k
}
