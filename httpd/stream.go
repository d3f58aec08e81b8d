package httpd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/internal/h1"
)

// pipeBytes bounds the body bytes held for a handler on a goroutine: above
// it the connection stops reading until the handler has read half, and TCP
// pushes back on the client. A slow upload costs this plus one read.
const pipeBytes = 64 << 10

// maxDiscard is how much of a body its handler left unread the server
// still reads and drops to keep the connection; beyond it, the connection
// closes after the response (net/http's figure).
const maxDiscard = 256 << 10

// errOverloaded refuses a request beyond Server.MaxStreams.
var errOverloaded = &statusError{503, "too many requests in progress"}

// errBodyStalled fails a body read that waited IdleTimeout for a byte.
var errBodyStalled = errors.New("httpd: request body stalled")

type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }
func (e *statusError) Status() int   { return e.status }

// stream is a request served on a goroutine of its own: its body had not
// all arrived when its head was read, or it asks to upgrade. The waiter
// feeds the body into the stream (feed) and the handler's goroutine reads
// it (Read); what they share is under mu. The connection reads no further
// request meanwhile, and is held open (conn.Conn.Hold) until the
// response is written.
type stream struct {
	hc      *hconn
	upgrade bool
	ctx     *reqCtx
	token   sync.Once // returns the MaxStreams token
	unhold  func()    // conn.Conn.Hold's

	// Owned by the waiter (remaining is read under mu too).
	chunk     *h1.ChunkedDecoder // a chunked body's decoder, or nil
	remaining int64              // a Content-Length body's bytes to come
	discarded int64              // body bytes dropped after the handler returned

	ready chan struct{} // a byte or the body's end for the reader
	drain chan struct{} // the output queue drained to LowWater
	gone  chan struct{} // closed when the connection ends

	mu       sync.Mutex
	pipe     []byte // body bytes not yet read are pipe[r:]
	r        int
	bodyErr  error       // io.EOF once the body has all arrived; another error ends it
	trailer  http.Header // a chunked body's trailers, for Request.Trailer at its end
	paused   bool        // the connection stopped reading for the reader
	cont     bool        // "100 Continue" is due before the first body read
	deadline time.Time
	finished bool // the handler returned (or the hijacker closed)
	hijacked bool
	switched Protocol // Switch was called: the connection is its once the handler returns
	closing  bool     // the connection closes once the response is out
	ended    bool     // gone is closed
	closed   bool     // the handler closed r.Body
	// wdeadline is the response's write deadline: a 100 Continue due
	// after it is not sent, as net/http's write of it fails then.
	wdeadline time.Time
}

// startStream serves the request whose head is the first n bytes of the
// input on a goroutine. It reports false: no further request is read now.
func (hc *hconn) startStream(n int) bool {
	h, req := hc.h, &hc.p.req
	select {
	case h.streams <- struct{}{}:
	default:
		hc.refuse(errOverloaded)
		return false
	}
	r, err := hc.newRequest(req)
	if err != nil {
		<-h.streams
		hc.refuse(err)
		return false
	}
	upgrade := isUpgrade(req)
	st := &stream{
		hc: hc, upgrade: upgrade, ctx: r.Context().(*reqCtx),
		ready: make(chan struct{}, 1), drain: make(chan struct{}, 1), gone: make(chan struct{}),
		remaining: max(req.ContentLength, 0),
		cont:      req.Continue,
	}
	if req.Chunked {
		st.chunk = &h1.ChunkedDecoder{MaxBodyBytes: h.srv.MaxBodyBytes, MaxTrailerBytes: h.limits.MaxHeadBytes}
	} else if st.remaining == 0 {
		st.bodyErr = io.EOF
	}
	if t := h.srv.ReadTimeout; t > 0 {
		st.deadline = time.Now().Add(t)
	}
	r.Body = st
	if st.bodyErr == io.EOF && !upgrade {
		r.Body = http.NoBody
	}
	w := newResponse(hc, r, req)
	w.st = st
	st.wdeadline = w.deadline
	if upgrade {
		w.out = new([]byte) // a 101 is written by Switch; a hijacker writes itself
	} else {
		w.out = h.getOut()
	}
	if upgrade && h.srv.ConnState != nil {
		hc.netConn() // ConnState's, on the waiter; else Hijack makes it
	}
	hc.flushOut() // the responses before it go first
	hc.c.Discard(n)
	req.Reset()
	hc.st, hc.state = st, csStream
	hc.c.SetIdleTimeout(0) // a handler may take its time; stalls are bounded below
	st.unhold = hc.c.Hold()
	hc.feed()
	h.connState(hc, http.StateActive)
	go func() {
		hc.run(w, r)
		st.mu.Lock()
		st.finished = true
		if st.switched != nil {
			st.mu.Unlock()
			h.recycle(w)
			// The connection is the Protocol's: feed hands it over.
			st.release()
			st.resume()
			st.unhold()
			return
		}
		hijacked := st.hijacked
		if !hijacked {
			// What the handler left in the pipe is dropped, as the
			// rest of the body will be (feed).
			st.discarded += int64(len(st.pipe) - st.r)
			st.pipe, st.r = nil, 0
		}
		// A body whose 100 Continue was never sent is not coming.
		st.closing = st.closing || w.closeAfter || st.bodyErr == nil && st.cont
		closing := st.closing
		st.mu.Unlock()
		if hijacked {
			return // the hijacker's netConn.Close ends it
		}
		h.recycle(w)
		if closing {
			hc.c.Close()
		}
		hc.c.SetIdleTimeout(h.idleTimeout)
		st.release()
		st.resume()
		st.unhold()
	}()
	return false
}

// recycle returns a stream's response and its output buffer to their
// pools once the handler has returned and the response is written: an
// upgrade is often the connection's only request, and a thousand
// upgrades a second should not make 20 KB of garbage each.
func (h *handler) recycle(w *response) {
	if out := w.out; out != nil && cap(*out) > 0 && cap(*out) <= 1<<20 {
		*out = (*out)[:0]
		h.outBufs.Put(out)
	}
	h.putResponse(w)
}

// unreadTooBig reports a Content-Length body of which maxDiscard or more
// is still unread: reading and dropping it after the handler returns is
// not worth keeping the connection, so the response says
// "Connection: close", as net/http's does. A chunked body's rest is not
// known: it is dropped up to maxDiscard, and the connection closed beyond.
func (st *stream) unreadTooBig() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.upgrade && st.chunk == nil && st.bodyErr == nil &&
		st.remaining+int64(len(st.pipe)-st.r) >= maxDiscard
}

// release returns the stream's MaxStreams token, once.
func (st *stream) release() { st.token.Do(func() { <-st.hc.h.streams }) }

// feed runs on the waiter while a stream exists: it moves body bytes
// from the connection's input into the pipe, and, once the handler has
// returned and the body is over, makes the connection idle again. It
// reports whether requests may be read again.
func (hc *hconn) feed() bool {
	st, c := hc.st, hc.c
	st.mu.Lock()
	if p := st.switched; p != nil {
		finished := st.finished
		if !finished && !st.paused {
			st.paused = true
			c.PauseRead() // until the handler returns (resume)
		}
		st.mu.Unlock()
		if finished {
			hc.takeSwitch(p)
		}
		return false
	}
	if st.hijacked {
		for c.Buffered() > 0 && len(st.pipe)-st.r < pipeBytes {
			b, _ := c.Peek(c.Buffered())
			st.push(b)
			c.Discard(len(b))
		}
		if len(st.pipe) > st.r {
			signal(st.ready)
		}
		st.pauseIfFull(c)
		st.mu.Unlock()
		return false
	}
	for st.bodyErr == nil && c.Buffered() > 0 && (st.finished || len(st.pipe)-st.r < pipeBytes) {
		b, _ := c.Peek(c.Buffered())
		var data []byte
		var n int
		var err error
		if st.chunk != nil {
			data, n, err = st.chunk.Decode(b)
			if err == h1.ErrIncomplete {
				c.Discard(n)
				break
			}
			if err == io.EOF && !st.finished {
				st.trailer = trailerHeader(st.chunk.Trailers) // before b goes
			}
		} else {
			n = int(min(int64(len(b)), st.remaining))
			data = b[:n]
			if st.remaining -= int64(n); st.remaining == 0 {
				err = io.EOF
			}
		}
		if st.finished {
			st.discarded += int64(len(data))
			if st.discarded > maxDiscard {
				// Checked before the body's end is decoded, so that
				// whether the connection closes does not depend on
				// how the body was split into reads.
				st.closing = true
				c.Discard(n)
				break
			}
		} else {
			st.push(data)
		}
		c.Discard(n)
		if err != nil {
			st.bodyErr = err
			if err != io.EOF {
				st.closing = true // a malformed or too large body: the framing is lost
			}
		}
	}
	if st.bodyErr != nil || len(st.pipe) > st.r {
		signal(st.ready)
	}
	if st.finished && st.bodyErr == nil && (st.discarded > maxDiscard || st.cont) {
		st.closing = true // not worth reading; with a 100-continue not sent, never coming
	}
	if !st.finished || st.bodyErr == nil && !st.closing {
		st.pauseIfFull(c)
		st.mu.Unlock()
		return false
	}
	closing := st.closing
	st.mu.Unlock()
	hc.st = nil
	if closing {
		hc.state = csClosing
		c.Close()
		return false
	}
	hc.state = csIdle
	hc.h.connState(hc, http.StateIdle)
	return true
}

// push appends b to the pipe. The caller holds mu.
func (st *stream) push(b []byte) {
	if st.r == len(st.pipe) {
		st.pipe, st.r = st.pipe[:0], 0
	} else if st.r > 0 && cap(st.pipe)-len(st.pipe) < len(b) {
		st.pipe = st.pipe[:copy(st.pipe, st.pipe[st.r:])]
		st.r = 0
	}
	st.pipe = append(st.pipe, b...)
}

// pauseIfFull stops reading the connection while the pipe is full, or
// while the body is over and the handler still runs (the next request
// waits in the kernel, not in memory). The caller holds mu.
func (st *stream) pauseIfFull(c interface{ PauseRead() error }) {
	full := len(st.pipe)-st.r >= pipeBytes || st.bodyErr != nil && !st.finished && !st.hijacked
	if full && !st.paused {
		st.paused = true
		c.PauseRead()
	}
}

// resume undoes pauseIfFull and offers the waiter what the connection
// holds. Any goroutine.
func (st *stream) resume() {
	st.mu.Lock()
	was := st.paused
	st.paused = false
	st.mu.Unlock()
	if was {
		st.hc.c.ResumeRead()
	}
	st.hc.c.Wake()
}

// Read reads the request body (the handler's r.Body) as the waiter feeds
// it, waiting for it; a body that stalls for IdleTimeout, or passes the
// read deadline, fails with os.ErrDeadlineExceeded.
func (st *stream) Read(p []byte) (int, error) { return st.read(p, true) }

// read reads what the waiter feeds: the body for r.Body, or, for a
// hijacked connection's netConn, what the client sends.
func (st *stream) read(p []byte, body bool) (int, error) {
	st.mu.Lock()
	if body && st.closed {
		st.mu.Unlock()
		return 0, http.ErrBodyReadAfterClose
	}
	for len(st.pipe) == st.r {
		switch {
		case st.finished && !st.hijacked:
			st.mu.Unlock()
			return 0, http.ErrBodyReadAfterClose
		case st.bodyErr != nil:
			err := st.bodyErr
			if err == io.EOF && st.trailer != nil {
				setTrailers(st.ctx.req, st.trailer)
				st.trailer = nil
			}
			st.mu.Unlock()
			return 0, err
		case st.ended:
			st.mu.Unlock()
			return 0, io.ErrUnexpectedEOF
		case st.cont:
			st.cont = false
			late := !st.wdeadline.IsZero() && !time.Now().Before(st.wdeadline)
			st.mu.Unlock()
			if !late {
				st.hc.c.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
			}
			st.mu.Lock()
			continue
		}
		deadline := st.deadline
		st.mu.Unlock()
		if err := st.waitFor(st.ready, deadline); err != nil {
			st.mu.Lock()
			if len(st.pipe) > st.r {
				break
			}
			if errors.Is(err, errBodyStalled) {
				st.closing = true // the rest of the body cannot be framed now
			}
			st.mu.Unlock()
			return 0, err
		}
		st.mu.Lock()
	}
	n := copy(p, st.pipe[st.r:])
	st.r += n
	var err error
	if body && !st.hijacked && st.r == len(st.pipe) && st.bodyErr == io.EOF && n > 0 {
		// The last bytes come with io.EOF, as net/http's body returns
		// them once nothing is left to read.
		err = io.EOF
		if st.trailer != nil {
			setTrailers(st.ctx.req, st.trailer)
			st.trailer = nil
		}
	}
	more := st.paused && len(st.pipe)-st.r < pipeBytes/2
	st.mu.Unlock()
	if more {
		st.resume()
	}
	return n, err
}

// Close ends the handler's reading of the body: later reads fail with
// http.ErrBodyReadAfterClose. What it left is dropped once it returns.
func (st *stream) Close() error {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	return nil
}

// waitFor waits for ch, the connection's end, the deadline or a stall
// of IdleTimeout.
func (st *stream) waitFor(ch <-chan struct{}, deadline time.Time) error {
	d := st.hc.h.idleTimeout
	stalled := true
	st.mu.Lock()
	if st.hijacked && ch == st.ready {
		d, stalled = time.Duration(1<<63-1), false
	}
	st.mu.Unlock()
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
	case <-st.gone:
		return errConnClosed
	case <-t.C:
		if stalled {
			return errors.Join(errBodyStalled, os.ErrDeadlineExceeded)
		}
		return os.ErrDeadlineExceeded
	}
}

// waitDrain waits while more than HighWater is queued: OnDrain signals
// the queue's fall to LowWater. A queue that makes no progress for
// IdleTimeout resets the connection.
func (st *stream) waitDrain(ctx context.Context) error {
	c := st.hc.c
	for !c.Writable() {
		if err := ctx.Err(); err != nil {
			return err
		}
		before := c.Stats().BytesOut
		err := st.waitFor(st.drain, time.Time{})
		switch {
		case err == nil:
		case errors.Is(err, errBodyStalled) && c.Stats().BytesOut == before:
			c.Abort()
			return os.ErrDeadlineExceeded
		case errors.Is(err, errBodyStalled):
			// Output moved meanwhile: not a stall.
		default:
			return err
		}
		if c.Draining() && !c.Writable() && c.Queued() == 0 {
			return errConnClosed // closed for writing
		}
	}
	return nil
}

func (st *stream) drained() { signal(st.drain) }

// continuePending reports a 100 Continue due and not sent.
func (st *stream) continuePending() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cont && st.bodyErr == nil
}

// sentContinue records that the handler sent its own 100 Continue, or a
// final response: none is due any more.
func (st *stream) sentContinue() {
	st.mu.Lock()
	st.cont = false
	st.mu.Unlock()
}

// eof records the client's FIN: a body still expected never comes.
func (st *stream) eof() {
	st.mu.Lock()
	if st.bodyErr == nil {
		st.bodyErr = io.ErrUnexpectedEOF
		if st.hijacked {
			st.bodyErr = io.EOF
		}
	}
	st.mu.Unlock()
	signal(st.ready)
	// As net/http's background read does: a client that has closed its
	// side is taken to be gone.
	st.ctx.cancel(nil)
}

// end records the connection's end: waits end, the context is cancelled.
func (st *stream) end(err error) Protocol {
	st.mu.Lock()
	if !st.ended {
		st.ended = true
		close(st.gone)
	}
	hijacked, p := st.hijacked, st.switched
	st.mu.Unlock()
	st.ctx.cancel(nil)
	if hijacked {
		st.release()
	}
	return p
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// setDeadline sets the body's read deadline.
func (st *stream) setDeadline(t time.Time) {
	st.mu.Lock()
	st.deadline = t
	st.mu.Unlock()
	signal(st.ready)
}
