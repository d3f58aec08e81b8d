package ws

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gracepoll/gracepoll/conn"
)

// Handler serves a server's WebSocket connections. OnOpen runs first, on
// the goroutine that called Upgrade; then OnMessage runs for each
// message, on the connection's waiter, one at a time, and must not block
// for long (the waiter serves other connections); OnClose runs once,
// last. Between messages a connection holds no goroutine.
type Handler interface {
	// OnOpen runs once the handshake is answered, before any message.
	OnOpen(c *Conn)
	// OnMessage receives a complete message: op is OpText (data is valid
	// UTF-8) or OpBinary. data is valid only until OnMessage returns (it
	// may be the connection's read buffer): copy what is kept.
	OnMessage(c *Conn, op Opcode, data []byte)
	// OnClose runs once the connection has ended; err says how (always
	// set: its Code is StatusAbnormal when no close frame was exchanged).
	OnClose(c *Conn, err *CloseError)
}

// BaseHandler is a Handler whose methods do nothing. Embed it to
// implement only the methods a server needs.
type BaseHandler struct{}

// OnOpen does nothing.
func (BaseHandler) OnOpen(*Conn) {}

// OnMessage does nothing.
func (BaseHandler) OnMessage(*Conn, Opcode, []byte) {}

// OnClose does nothing.
func (BaseHandler) OnClose(*Conn, *CloseError) {}

// Conn is a server's WebSocket connection. Its write methods
// (WriteMessage, WritePrepared, Ping, Close) may be called from any
// goroutine, concurrently: each frame is queued whole, on conn's bounded
// queue, and never blocks; after the connection ends they fail, and never
// reach a reused descriptor (conn's guarantee).
type Conn struct {
	c     *conn.Conn
	u     *Upgrader
	h     Handler
	value any

	subprotocol string
	deflate     bool // permessage-deflate was negotiated
	huffman     bool // compress without back-references (server_max_window_bits < 15)
	takeover    bool // the client keeps its window: so do we (rd.dict)

	rd reader // the waiter's

	// opening is held while OnOpen runs on the upgrade's goroutine: a
	// connection reset meanwhile has its OnClose wait for it, so that
	// OnClose is the handler's last call.
	opening sync.Mutex

	wmu       sync.Mutex
	closeSent bool        // our close frame is queued: nothing may follow it
	end       *CloseError // how it ends, once known; under wmu
}

// reader is the receive state, touched only by the handler methods on
// the connection's waiter (serialised by conn).
type reader struct {
	// The data frame whose payload is arriving (inFrame).
	inFrame   bool
	fin       bool
	key       [4]byte
	pos       int
	remaining int64

	// The message in progress: msgOp is 0 between messages.
	msgOp      Opcode
	compressed bool
	msg        *[]byte // reassembled payload, pooled
	text       utf8State

	dict []byte // the client's window, with context takeover

	started bool // OnData ran once
	closed  bool // a close frame arrived, or the connection failed: input is dropped
	pinged  bool // a keep-alive ping is unanswered and no input came since
}

// proto is Conn as conn sees it (httpd.Protocol): its methods are not
// Conn's API.
type proto Conn

// Subprotocol returns the subprotocol agreed in the handshake, or "".
func (w *Conn) Subprotocol() string { return w.subprotocol }

// Compressed reports whether permessage-deflate was agreed.
func (w *Conn) Compressed() bool { return w.deflate }

// SetValue stores a value with the connection (the application's
// per-connection state). It is a plain field: set it in OnOpen, or
// synchronise with the goroutines that read it.
func (w *Conn) SetValue(v any) { w.value = v }

// Value returns what SetValue stored.
func (w *Conn) Value() any { return w.value }

// LocalAddr returns the server's address of the connection.
func (w *Conn) LocalAddr() net.Addr { return w.c.LocalAddr() }

// RemoteAddr returns the client's address; nil once the connection has
// ended (in OnClose, say): keep it from OnOpen if it is needed then.
func (w *Conn) RemoteAddr() net.Addr { return w.c.RemoteAddr() }

// NetConn returns the underlying connection, for its statistics and
// deadlines; writing to it directly would break the framing.
func (w *Conn) NetConn() *conn.Conn { return w.c }

// WriteMessage sends data as one message, op OpText (data must be UTF-8)
// or OpBinary, compressed if permessage-deflate was agreed and the
// message is large enough to gain. It returns ErrClosed once the close
// frame is out, and ErrSlowReader when the peer has left more than
// conn's Options.HighWater unread and the message would take its queue
// past Options.MaxQueued: the connection is then reset, as a reader that
// slow would only grow the queue (OnClose reports ErrSlowReader).
func (w *Conn) WriteMessage(op Opcode, data []byte) error {
	if op != OpText && op != OpBinary {
		return fmt.Errorf("%w: WriteMessage with opcode %v", ErrInvalid, op)
	}
	if op == OpText && !utf8.Valid(data) {
		return fmt.Errorf("%w: text message is not UTF-8", ErrInvalid)
	}
	var rsv byte
	var buf *[]byte
	if w.deflate && len(data) >= minCompress {
		buf = w.u.bufs.get()
		z, err := w.u.comp.compress((*buf)[:0], data, w.level())
		if err != nil {
			w.u.bufs.put(buf)
			return err
		}
		*buf, data, rsv = z, z, rsv1Bit
		defer w.u.bufs.put(buf)
	}
	return w.writeFrame(rsv, op, data)
}

func (w *Conn) level() int {
	if w.huffman {
		return -2 // flate.HuffmanOnly
	}
	return w.u.level()
}

// writeFrame queues one unmasked, final frame.
func (w *Conn) writeFrame(rsv byte, op Opcode, payload []byte) error {
	var arr [maxHeader]byte
	hdr := appendHeader(arr[:0], true, rsv, op, len(payload), nil)
	return w.writeRaw(hdr, payload, op == OpClose)
}

// writeRaw queues hdr and payload as one write, unless the close frame is
// out; closing marks this one as the close frame.
func (w *Conn) writeRaw(hdr, payload []byte, closing bool) error {
	w.wmu.Lock()
	if w.closeSent {
		w.wmu.Unlock()
		return ErrClosed
	}
	var err error
	if len(payload) == 0 {
		_, err = w.c.Write(hdr)
	} else {
		bufs := [2][]byte{hdr, payload}
		_, err = w.c.Writev(bufs[:])
	}
	if closing && err == nil {
		w.closeSent = true
	}
	w.wmu.Unlock()
	if errors.Is(err, conn.ErrQueueFull) {
		w.failSlow()
		return fmt.Errorf("%w: %w", ErrSlowReader, err)
	}
	if err != nil && !closing {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// failSlow resets a connection whose peer does not read.
func (w *Conn) failSlow() {
	w.setEnd(&CloseError{Code: StatusAbnormal, Err: fmt.Errorf("%w: %w", ErrSlowReader, conn.ErrQueueFull)})
	w.c.Abort()
}

// setEnd records how the connection ends, if nothing did before.
func (w *Conn) setEnd(e *CloseError) {
	w.wmu.Lock()
	if w.end == nil {
		w.end = e
	}
	w.wmu.Unlock()
}

// Ping sends a ping with data (at most 125 bytes); the peer answers with
// a pong, which is taken and dropped.
func (w *Conn) Ping(data []byte) error {
	if len(data) > maxControlPayload {
		return fmt.Errorf("%w: ping of %d bytes (at most 125)", ErrInvalid, len(data))
	}
	return w.writeFrame(0, OpPing, data)
}

// Close starts the closing handshake: it sends a close frame with code
// and reason (at most 123 bytes of UTF-8) and closes the connection when
// the peer answers with its own, or after Upgrader.CloseTimeout. Messages
// that arrive meanwhile are still delivered. Close returns ErrClosed if a
// close frame was already sent, and ErrInvalid for a code that may not be
// sent (1005, 1006, 1015, 0-999, 1016-2999, 5000 and above).
func (w *Conn) Close(code StatusCode, reason string) error {
	payload, err := closePayload(code, reason)
	if err != nil {
		return err
	}
	if err := w.writeFrame(0, OpClose, payload); err != nil {
		return err
	}
	w.setEnd(&CloseError{Code: code, Reason: reason})
	w.c.SetReadDeadline(time.Now().Add(w.u.closeTimeout()))
	return nil
}

// closePayload is a close frame's payload: the code, then the reason.
func closePayload(code StatusCode, reason string) ([]byte, error) {
	if !code.sendable() {
		return nil, fmt.Errorf("%w: close code %d may not be sent", ErrInvalid, code)
	}
	if len(reason) > maxControlPayload-2 || !utf8.ValidString(reason) {
		return nil, fmt.Errorf("%w: close reason must be at most 123 bytes of UTF-8", ErrInvalid)
	}
	b := make([]byte, 2, 2+len(reason))
	binary.BigEndian.PutUint16(b, uint16(code))
	return append(b, reason...), nil
}

// fail fails the connection (RFC 6455 section 7.1.7): a close frame with
// code, then the TCP close, and no more input.
func (w *Conn) fail(code StatusCode, cause error) {
	w.rd.closed = true
	reason := cause.Error()
	if len(reason) > maxControlPayload-2 {
		reason = reason[:maxControlPayload-2]
	}
	for !utf8.ValidString(reason) {
		reason = reason[:len(reason)-1]
	}
	w.setEnd(&CloseError{Code: code, Reason: reason, Err: cause})
	payload, _ := closePayload(code, reason)
	w.writeFrame(0, OpClose, payload)
	w.c.Close()
}

// OnData parses the frames the connection has received, delivering each
// complete message and answering control frames, as long as the output
// queue is below HighWater (conn offers the rest again at LowWater).
func (p *proto) OnData(c *conn.Conn) {
	w := (*Conn)(p)
	rd := &w.rd
	if !rd.started {
		// The first event on the connection's waiter: the keep-alive
		// starts here, not in Upgrade, where the HTTP handler still
		// runs and a deadline would be httpd's to handle.
		rd.started = true
		if w.u.PingInterval > 0 {
			c.SetIdleTimeout(w.u.PingInterval)
		}
	}
	if rd.closed {
		c.Discard(c.Buffered())
		return
	}
	if c.Buffered() > 0 {
		rd.pinged = false
	}
	for c.Writable() && !rd.closed {
		b, _ := c.Peek(c.Buffered())
		if rd.inFrame {
			if len(b) == 0 {
				return
			}
			chunk := b[:min(int64(len(b)), rd.remaining)]
			rd.pos = maskBytes(rd.key, rd.pos, chunk)
			if err := w.take(chunk); err != nil {
				w.fail(codeOf(err), err)
				return
			}
			c.Discard(len(chunk))
			if rd.remaining -= int64(len(chunk)); rd.remaining > 0 {
				return
			}
			rd.inFrame = false
			if rd.fin {
				w.endMessage()
			}
			continue
		}
		var h header
		n, err := parseHeader(b, &h)
		if err != nil {
			w.fail(StatusProtocolError, fmt.Errorf("%w: 64-bit payload length with its top bit set", ErrProtocol))
			return
		}
		if n == 0 {
			return
		}
		if err := w.check(&h); err != nil {
			w.fail(codeOf(err), err)
			return
		}
		if h.op.control() {
			if int64(len(b)-n) < h.length {
				return // at most 125 bytes: wait for all of it
			}
			payload := b[n : n+int(h.length)]
			maskBytes(h.key, 0, payload)
			w.control(h.op, payload)
			c.Discard(n + int(h.length))
			continue
		}
		if h.fin && rd.msgOp == 0 && h.rsv == 0 && int64(len(b)-n) >= h.length {
			// A whole unfragmented, uncompressed message: delivered from
			// the read buffer, not copied.
			payload := b[n : n+int(h.length)]
			maskBytes(h.key, 0, payload)
			if h.op == OpText && !utf8.Valid(payload) {
				w.fail(StatusInvalidData, ErrInvalidUTF8)
				return
			}
			w.h.OnMessage(w, h.op, payload)
			c.Discard(n + int(h.length))
			continue
		}
		if h.op != OpContinuation {
			rd.msgOp, rd.compressed, rd.text = h.op, h.rsv&rsv1Bit != 0, utf8State{}
			rd.msg = w.u.bufs.get()
		}
		rd.inFrame, rd.fin, rd.key, rd.pos, rd.remaining = true, h.fin, h.key, 0, h.length
		c.Discard(n)
		if h.length == 0 {
			rd.inFrame = false
			if h.fin {
				w.endMessage()
			}
		}
	}
}

// check applies RFC 6455's rules to a frame header before its payload is
// read.
func (w *Conn) check(h *header) error {
	rd := &w.rd
	have := int64(0)
	if rd.msg != nil {
		have = int64(len(*rd.msg))
	}
	limit := w.u.maxMessage()
	if rd.compressed || h.rsv != 0 {
		limit = compressedLimit(limit)
	}
	return checkFrame(h, true, w.deflate, rd.msgOp != 0, have, limit)
}

// codeOf is the close code that fails a connection for err.
func codeOf(err error) StatusCode {
	switch {
	case errors.Is(err, ErrInvalidUTF8):
		return StatusInvalidData
	case errors.Is(err, ErrTooBig):
		return StatusTooBig
	}
	return StatusProtocolError
}

// take appends a piece of a message's payload, validating text as it
// comes so that invalid UTF-8 fails at its first byte.
func (w *Conn) take(chunk []byte) error {
	rd := &w.rd
	if rd.msgOp == OpText && !rd.compressed && !rd.text.write(chunk) {
		return ErrInvalidUTF8
	}
	*rd.msg = append(*rd.msg, chunk...)
	return nil
}

// endMessage delivers the message whose final frame has arrived.
func (w *Conn) endMessage() {
	rd := &w.rd
	op, data := rd.msgOp, *rd.msg
	var out *[]byte
	if rd.compressed {
		out = w.u.bufs.get()
		var dict []byte
		if w.takeover {
			dict = rd.dict
		}
		z, err := w.u.decomp.decompress((*out)[:0], data, dict, w.u.maxMessage())
		if err != nil {
			w.u.bufs.put(out)
			w.fail(codeOf(err), err)
			return
		}
		*out, data = z, z
		if w.takeover {
			rd.dict = keepWindow(rd.dict, data)
		}
	}
	if op == OpText && (rd.compressed && !utf8.Valid(data) || !rd.compressed && !rd.text.complete()) {
		if out != nil {
			w.u.bufs.put(out)
		}
		w.fail(StatusInvalidData, ErrInvalidUTF8)
		return
	}
	w.h.OnMessage(w, op, data)
	if out != nil {
		w.u.bufs.put(out)
	}
	w.u.bufs.put(rd.msg)
	rd.msg, rd.msgOp, rd.compressed = nil, 0, false
}

// control answers a control frame (its payload unmasked).
func (w *Conn) control(op Opcode, payload []byte) {
	switch op {
	case OpPing:
		w.writeFrame(0, OpPong, payload) // after our close frame, none is due
	case OpPong:
	case OpClose:
		w.closeReceived(payload)
	}
}

// closeReceived handles the peer's close frame: an invalid one fails the
// connection; a valid one is answered (the code echoed, unless ours went
// first) and the connection closed.
func (w *Conn) closeReceived(payload []byte) {
	code, reason := StatusNoStatus, ""
	switch {
	case len(payload) == 1:
		w.fail(StatusProtocolError, fmt.Errorf("%w: close frame of 1 byte", ErrProtocol))
		return
	case len(payload) >= 2:
		code = StatusCode(binary.BigEndian.Uint16(payload))
		if !code.sendable() {
			w.fail(StatusProtocolError, fmt.Errorf("%w: close code %d", ErrProtocol, code))
			return
		}
		if !utf8.Valid(payload[2:]) {
			w.fail(StatusInvalidData, fmt.Errorf("%w (close reason)", ErrInvalidUTF8))
			return
		}
		reason = string(payload[2:])
	}
	w.rd.closed = true
	w.wmu.Lock()
	if w.end == nil || w.end.Err == nil {
		// The peer's close ends the handshake we started, or starts one.
		remote := !w.closeSent
		w.end = &CloseError{Code: code, Reason: reason, Remote: remote}
	}
	w.wmu.Unlock()
	if code == StatusNoStatus {
		payload = nil
	}
	w.writeFrame(0, OpClose, payload[:min(len(payload), 2)]) // ErrClosed if ours went first
	w.c.Close()
}

// OnTimeout: the peer did not answer our close frame in time, or a
// keep-alive interval passed without input.
func (p *proto) OnTimeout(c *conn.Conn) {
	w := (*Conn)(p)
	w.wmu.Lock()
	closing := w.closeSent
	w.wmu.Unlock()
	switch {
	case closing:
		w.setEnd(&CloseError{Code: StatusAbnormal, Err: ErrCloseTimeout})
		w.replaceEnd(ErrCloseTimeout)
		c.Abort()
	case w.rd.pinged:
		w.setEnd(&CloseError{Code: StatusAbnormal, Err: ErrPingTimeout})
		c.Abort()
	default:
		w.rd.pinged = true
		w.writeFrame(0, OpPing, nil)
		c.SetIdleTimeout(w.u.PingInterval)
	}
}

// replaceEnd marks the recorded end as failed with err (our close frame
// went out, the peer's never came).
func (w *Conn) replaceEnd(err error) {
	w.wmu.Lock()
	if w.end != nil && w.end.Err == nil {
		e := *w.end
		e.Err = err
		w.end = &e
	}
	w.wmu.Unlock()
}

// OnReadEOF: the peer closed its side. Without its close frame before,
// the connection ends abnormally (1006).
func (p *proto) OnReadEOF(c *conn.Conn) {
	w := (*Conn)(p)
	if !w.rd.closed {
		w.rd.closed = true
		w.setEnd(&CloseError{Code: StatusAbnormal, Err: io.ErrUnexpectedEOF})
	}
	c.Close()
}

// OnShutdown: the HTTP server shuts down; the client is told so (1001)
// and the connection closed once that is flushed.
func (p *proto) OnShutdown(c *conn.Conn) {
	w := (*Conn)(p)
	w.opening.Lock() // Upgrade has set w.c
	//lint:ignore SA2001 an empty critical section: Upgrade has returned
	w.opening.Unlock()
	w.Close(StatusGoingAway, "server shutting down")
	c.Close()
}

// OnClose reports the end to the handler and frees the buffers.
func (p *proto) OnClose(c *conn.Conn, reason conn.Reason, err error) {
	w := (*Conn)(p)
	w.opening.Lock()
	//lint:ignore SA2001 an empty critical section: OnOpen has returned
	w.opening.Unlock()
	w.wmu.Lock()
	w.closeSent = true
	e := w.end
	w.wmu.Unlock()
	if e == nil {
		if err == nil {
			err = fmt.Errorf("connection ended (%v)", reason)
		}
		e = &CloseError{Code: StatusAbnormal, Err: err}
	}
	if w.rd.msg != nil {
		w.u.bufs.put(w.rd.msg)
		w.rd.msg = nil
	}
	w.rd.dict = nil
	w.h.OnClose(w, e)
}

// bufPool pools message buffers: a connection holds one only while a
// fragmented or compressed message is arriving, or while it compresses
// one it sends.
type bufPool struct{ p sync.Pool }

func (bp *bufPool) get() *[]byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (bp *bufPool) put(b *[]byte) {
	if cap(*b) > 1<<20 {
		return // a rare large message: let it go
	}
	*b = (*b)[:0]
	bp.p.Put(b)
}
