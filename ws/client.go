package ws

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Dialer opens client connections. The zero value dials without
// compression or subprotocol, with DefaultMaxMessageSize.
type Dialer struct {
	// TLSConfig configures wss:// connections; nil means the zero
	// tls.Config (the system's roots, the URL's host as server name).
	TLSConfig *tls.Config
	// Header holds extra fields for the opening handshake (Origin,
	// Cookie, Authorization...).
	Header http.Header
	// Subprotocols are offered in Sec-WebSocket-Protocol, in order.
	Subprotocols []string
	// Compression offers permessage-deflate (RFC 7692), allowing the
	// server to keep its window between messages (context takeover).
	Compression bool
	// ContextTakeover compresses each message sent against the ones
	// before it, if the server allows (a compressor kept per connection).
	ContextTakeover bool
	// MaxMessageSize bounds a message received; 0 means
	// DefaultMaxMessageSize.
	MaxMessageSize int64
	// NetDial dials the TCP connection; nil means a net.Dialer's.
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnPong, if not nil, is called by ReadMessage, on its goroutine,
	// with the payload of each pong that arrives (the answer to Ping),
	// valid during the call. Without it pongs are dropped.
	OnPong func(payload []byte)
}

// Dial connects to a ws:// or wss:// URL with a zero Dialer.
func Dial(ctx context.Context, rawURL string) (*ClientConn, *http.Response, error) {
	var d Dialer
	return d.Dial(ctx, rawURL)
}

// Dial connects to rawURL (ws://, wss://, or http:// and https:// for
// the same) and performs the opening handshake, within ctx: its deadline
// and cancellation bound the dial and the handshake. The response is
// returned also when the server refused the upgrade (the error then
// matches ErrBadHandshake), with the first 64 KiB of its body, which
// usually says why, already read into Body: closing it is not needed.
func (d *Dialer) Dial(ctx context.Context, rawURL string) (*ClientConn, *http.Response, error) {
	if d.MaxMessageSize < 0 {
		return nil, nil, fmt.Errorf("%w: negative MaxMessageSize", ErrInvalid)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	secure := false
	switch u.Scheme {
	case "ws", "http":
	case "wss", "https":
		secure = true
	default:
		return nil, nil, fmt.Errorf("%w: URL scheme %q (want ws or wss)", ErrInvalid, u.Scheme)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if secure {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	dial := d.NetDial
	if dial == nil {
		var nd net.Dialer
		dial = nd.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	// The handshake is bounded by ctx: its deadline, and its cancellation
	// closes the connection under the blocked read or write.
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	fail := func(resp *http.Response, err error) (*ClientConn, *http.Response, error) {
		stop()
		nc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, resp, err
	}
	if secure {
		cfg := &tls.Config{}
		if d.TLSConfig != nil {
			cfg = d.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		if len(cfg.NextProtos) == 0 {
			cfg.NextProtos = []string{"http/1.1"}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(nil, err)
		}
		nc = tc
	}
	var keyBytes [16]byte
	crand.Read(keyBytes[:])
	key := base64.StdEncoding.EncodeToString(keyBytes[:])
	req := &http.Request{Method: "GET", URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: make(http.Header), Host: u.Host}
	for k, v := range d.Header {
		req.Header[k] = v
	}
	req.Header["Upgrade"] = []string{"websocket"}
	req.Header["Connection"] = []string{"Upgrade"}
	req.Header["Sec-WebSocket-Key"] = []string{key}
	req.Header["Sec-WebSocket-Version"] = []string{"13"}
	if len(d.Subprotocols) > 0 {
		req.Header["Sec-WebSocket-Protocol"] = []string{strings.Join(d.Subprotocols, ", ")}
	}
	if d.Compression {
		req.Header["Sec-WebSocket-Extensions"] = []string{deflateName + "; client_max_window_bits"}
	}
	var hs bytes.Buffer
	fmt.Fprintf(&hs, "GET %s HTTP/1.1\r\nHost: %s\r\n", u.RequestURI(), u.Host)
	req.Header.Write(&hs)
	hs.WriteString("\r\n")
	if _, err := nc.Write(hs.Bytes()); err != nil {
		return fail(nil, err)
	}
	br := bufio.NewReaderSize(nc, 4096)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(nil, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return fail(resp, fmt.Errorf("%w: status %s", ErrBadHandshake, resp.Status))
	}
	switch {
	case !headerHasToken(resp.Header, "Upgrade", "websocket"), !headerHasToken(resp.Header, "Connection", "upgrade"):
		return fail(resp, fmt.Errorf("%w: response lacks Upgrade: websocket or Connection: Upgrade", ErrBadHandshake))
	case resp.Header.Get("Sec-Websocket-Accept") != acceptKey(key):
		return fail(resp, fmt.Errorf("%w: wrong Sec-WebSocket-Accept", ErrBadHandshake))
	}
	cc := &ClientConn{nc: nc, br: br, resp: resp, maxMsg: d.MaxMessageSize, onPong: d.OnPong, rng: newMaskRand()}
	if cc.maxMsg == 0 {
		cc.maxMsg = DefaultMaxMessageSize
	}
	if p := resp.Header.Get("Sec-Websocket-Protocol"); p != "" {
		if !contains(d.Subprotocols, p) {
			return fail(resp, fmt.Errorf("%w: server chose subprotocol %q, not offered", ErrBadHandshake, p))
		}
		cc.subprotocol = p
	}
	if vals := resp.Header.Values("Sec-Websocket-Extensions"); len(vals) > 0 {
		exts, ok := parseExtensions(vals)
		if !ok || len(exts) != 1 || exts[0].name != deflateName || !d.Compression {
			return fail(resp, fmt.Errorf("%w: server agreed extensions %q, not offered", ErrBadHandshake, vals))
		}
		p, ok := deflateOffer(exts[0])
		if !ok {
			return fail(resp, fmt.Errorf("%w: bad permessage-deflate parameters %q", ErrBadHandshake, vals))
		}
		cc.deflate = true
		cc.keepDict = !p.serverNoTakeover
		cc.level = flate.BestSpeed
		if p.clientBits < 15 {
			cc.level = flate.HuffmanOnly // no back-references: within any window
		}
		if d.ContextTakeover && !p.clientNoTakeover && p.clientBits == 15 {
			cc.zw, _ = flate.NewWriter(&cc.zbuf, flate.BestSpeed)
		}
	}
	stop()
	nc.SetDeadline(time.Time{})
	return cc, resp, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ClientConn is a client's WebSocket connection, read by a goroutine of
// its own (ReadMessage blocks), as in most clients. Writes may come from
// any goroutine, concurrently with ReadMessage.
type ClientConn struct {
	nc          net.Conn
	br          *bufio.Reader
	resp        *http.Response
	subprotocol string
	maxMsg      int64
	onPong      func([]byte)

	deflate  bool
	level    int  // flate level when not taking over: HuffmanOnly if the server narrowed our window
	keepDict bool // the server keeps its window: so does the reader
	dict     []byte
	decomp   decompressors
	comp     compressors
	zw       *flate.Writer // compresses with context takeover
	zbuf     bytes.Buffer

	// The reader's.
	msg      []byte
	inflated []byte
	closed   *CloseError

	wmu       sync.Mutex
	rng       *rand.ChaCha8
	wbuf      []byte
	closeSent bool
}

// newMaskRand returns the source of masking keys: RFC 6455 section 5.3
// wants them unpredictable, so it is seeded from crypto/rand.
func newMaskRand() *rand.ChaCha8 {
	var seed [32]byte
	crand.Read(seed[:])
	return rand.NewChaCha8(seed)
}

// Subprotocol returns the subprotocol the server agreed, or "".
func (c *ClientConn) Subprotocol() string { return c.subprotocol }

// Compressed reports whether permessage-deflate was agreed.
func (c *ClientConn) Compressed() bool { return c.deflate }

// NetConn returns the underlying connection.
func (c *ClientConn) NetConn() net.Conn { return c.nc }

// SetReadDeadline sets the deadline of ReadMessage.
func (c *ClientConn) SetReadDeadline(t time.Time) error { return c.nc.SetReadDeadline(t) }

// WriteMessage sends data as one message (OpText, UTF-8, or OpBinary),
// compressed if permessage-deflate was agreed and it is large enough.
func (c *ClientConn) WriteMessage(op Opcode, data []byte) error {
	if op != OpText && op != OpBinary {
		return fmt.Errorf("%w: WriteMessage with opcode %v", ErrInvalid, op)
	}
	if op == OpText && !utf8.Valid(data) {
		return fmt.Errorf("%w: text message is not UTF-8", ErrInvalid)
	}
	if !c.deflate || len(data) < minCompress {
		return c.WriteFrame(true, 0, op, data)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var z []byte
	if c.zw != nil {
		c.zbuf.Reset()
		if _, err := c.zw.Write(data); err != nil {
			return err
		}
		if err := c.zw.Flush(); err != nil {
			return err
		}
		z = bytes.TrimSuffix(c.zbuf.Bytes(), deflateTail[:4])
	} else {
		var err error
		if z, err = c.comp.compress(nil, data, c.level); err != nil {
			return err
		}
	}
	return c.writeFrameLocked(true, rsv1Bit, op, z)
}

// WriteFrame sends one frame as it is given, masked: a fragment of a
// message (fin false, or op OpContinuation), a control frame, reserved
// bits (rsv in place, 0x70). It checks nothing, so that tests can send
// what a broken peer would; after a close frame it returns ErrClosed.
func (c *ClientConn) WriteFrame(fin bool, rsv byte, op Opcode, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeFrameLocked(fin, rsv, op, payload)
}

func (c *ClientConn) writeFrameLocked(fin bool, rsv byte, op Opcode, payload []byte) error {
	if c.closeSent {
		return ErrClosed
	}
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], uint32(c.rng.Uint64()))
	b := appendHeader(c.wbuf[:0], fin, rsv, op, len(payload), key[:])
	h := len(b)
	b = append(b, payload...)
	maskBytes(key, 0, b[h:])
	if cap(b) <= 64<<10 {
		c.wbuf = b
	}
	if op == OpClose {
		c.closeSent = true
	}
	_, err := c.nc.Write(b)
	return err
}

// Ping sends a ping (at most 125 bytes).
func (c *ClientConn) Ping(data []byte) error {
	if len(data) > maxControlPayload {
		return fmt.Errorf("%w: ping of %d bytes (at most 125)", ErrInvalid, len(data))
	}
	return c.WriteFrame(true, 0, OpPing, data)
}

// Close sends a close frame with code and reason. The peer answers with
// its own, which ReadMessage returns as a *CloseError; then close the
// connection with CloseNow. (A reader that is not running will not see
// the answer: CloseNow after Close is then fine too.)
func (c *ClientConn) Close(code StatusCode, reason string) error {
	payload, err := closePayload(code, reason)
	if err != nil {
		return err
	}
	return c.WriteFrame(true, 0, OpClose, payload)
}

// CloseNow closes the TCP connection without a closing handshake.
func (c *ClientConn) CloseNow() error { return c.nc.Close() }

// ReadMessage returns the next message: its opcode (OpText or OpBinary)
// and payload, valid until the next ReadMessage. Pings are answered and
// pongs given to Dialer.OnPong on the way. When the connection ends it returns a
// *CloseError: the peer's close frame (answered, then the connection
// closed), or ours when the peer broke the protocol (Err says how), or
// StatusAbnormal and the read's error.
func (c *ClientConn) ReadMessage() (Opcode, []byte, error) {
	if c.closed != nil {
		return 0, nil, c.closed
	}
	op, data, err := c.read()
	if err != nil {
		var ce *CloseError
		if !errors.As(err, &ce) {
			ce = &CloseError{Code: StatusAbnormal, Err: err}
			c.nc.Close()
		}
		c.closed = ce
		return 0, nil, ce
	}
	return op, data, nil
}

// limit is the most a message may take as it arrives.
func (c *ClientConn) limit(compressed bool) int64 {
	if compressed {
		return compressedLimit(c.maxMsg)
	}
	return c.maxMsg
}

// failRead fails the connection from the client's side.
func (c *ClientConn) failRead(code StatusCode, err error) error {
	if payload, e := closePayload(code, ""); e == nil {
		c.WriteFrame(true, 0, OpClose, payload)
	}
	c.nc.Close()
	return &CloseError{Code: code, Err: err}
}

func (c *ClientConn) read() (Opcode, []byte, error) {
	c.msg = c.msg[:0]
	var msgOp Opcode
	var compressed bool
	var text utf8State
	for {
		b, err := c.br.Peek(2)
		if err != nil {
			return 0, nil, err
		}
		var h header
		n, perr := parseHeader(b, &h)
		if n == 0 && perr == nil {
			need := 2
			switch b[1] & 0x7f {
			case 126:
				need = 4
			case 127:
				need = 10
			}
			if b[1]&maskBit != 0 {
				need += 4
			}
			if b, err = c.br.Peek(need); err != nil {
				return 0, nil, err
			}
			n, perr = parseHeader(b, &h)
		}
		if perr != nil {
			return 0, nil, c.failRead(StatusProtocolError, perr)
		}
		c.br.Discard(n)
		if err := checkFrame(&h, false, c.deflate, msgOp != 0, int64(len(c.msg)), c.limit(compressed || h.rsv != 0)); err != nil {
			return 0, nil, c.failRead(codeOf(err), err)
		}
		if h.op.control() {
			var buf [maxControlPayload]byte
			p := buf[:h.length]
			if _, err := io.ReadFull(c.br, p); err != nil {
				return 0, nil, err
			}
			switch h.op {
			case OpPing:
				c.WriteFrame(true, 0, OpPong, p)
			case OpPong:
				if c.onPong != nil {
					c.onPong(p)
				}
			case OpClose:
				return 0, nil, c.closeReceived(p)
			}
			continue
		}
		if h.op != OpContinuation {
			msgOp, compressed = h.op, h.rsv != 0
		}
		start := len(c.msg)
		c.msg = append(c.msg, make([]byte, h.length)...)
		if _, err := io.ReadFull(c.br, c.msg[start:]); err != nil {
			return 0, nil, err
		}
		if msgOp == OpText && !compressed && !text.write(c.msg[start:]) {
			return 0, nil, c.failRead(StatusInvalidData, ErrInvalidUTF8)
		}
		if !h.fin {
			continue
		}
		data := c.msg
		if compressed {
			var dict []byte
			if c.keepDict {
				dict = c.dict
			}
			out, err := c.decomp.decompress(c.inflated[:0], data, dict, c.maxMsg)
			if err != nil {
				return 0, nil, c.failRead(codeOf(err), err)
			}
			c.inflated, data = out, out
			if c.keepDict {
				c.dict = keepWindow(c.dict, data)
			}
		}
		if msgOp == OpText && (compressed && !utf8.Valid(data) || !compressed && !text.complete()) {
			return 0, nil, c.failRead(StatusInvalidData, ErrInvalidUTF8)
		}
		return msgOp, data, nil
	}
}

// closeReceived answers the server's close frame and closes.
func (c *ClientConn) closeReceived(p []byte) error {
	code, reason := StatusNoStatus, ""
	switch {
	case len(p) == 1:
		return c.failRead(StatusProtocolError, fmt.Errorf("%w: close frame of 1 byte", ErrProtocol))
	case len(p) >= 2:
		code = StatusCode(binary.BigEndian.Uint16(p))
		if !code.sendable() {
			return c.failRead(StatusProtocolError, fmt.Errorf("%w: close code %d", ErrProtocol, code))
		}
		if !utf8.Valid(p[2:]) {
			return c.failRead(StatusInvalidData, ErrInvalidUTF8)
		}
		reason = string(p[2:])
	}
	c.wmu.Lock()
	remote := !c.closeSent
	c.wmu.Unlock()
	if remote {
		c.WriteFrame(true, 0, OpClose, p[:min(len(p), 2)])
	}
	c.nc.Close()
	return &CloseError{Code: code, Reason: reason, Remote: remote}
}
