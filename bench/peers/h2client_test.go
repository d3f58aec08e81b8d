//go:build linux

package peers

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"

	"golang.org/x/net/http2/hpack"
)

// The HTTP/2 benchmarks' own client (RFC 9113), for what h2load does not
// do: check each answer byte for byte, hold thousands of idle
// connections without a goroutine each, and send on an open-loop
// schedule. Its framing is its own and its header compression is
// golang.org/x/net/http2/hpack's, not httpd's internal/h2frame and
// internal/hpack: a misreading shared by both ends of a test would pass
// unseen. It sends GET requests without bodies and reads small answers;
// the transfer benchmark uses net/http's client instead.

// h2Preface is the client connection preface (RFC 9113 section 3.4).
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Frame types (RFC 9113 section 6).
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2RSTStream    = 0x3
	h2Settings     = 0x4
	h2PushPromise  = 0x5
	h2Ping         = 0x6
	h2GoAway       = 0x7
	h2WindowUpdate = 0x8
	h2Continuation = 0x9
)

// Frame flags.
const (
	h2FlagEndStream  = 0x1 // DATA, HEADERS
	h2FlagAck        = 0x1 // SETTINGS, PING
	h2FlagEndHeaders = 0x4 // HEADERS, CONTINUATION
	h2FlagPadded     = 0x8 // DATA, HEADERS
	h2FlagPriority   = 0x20
)

const (
	// h2MaxFrame is the largest frame the client accepts: the
	// protocol's default SETTINGS_MAX_FRAME_SIZE, which it keeps.
	h2MaxFrame = 16384
	// h2MaxBody bounds a response body: the client reads the small
	// routes only, and a server that sends more is broken.
	h2MaxBody = 64 << 10
	// h2ConnWindow is what the client adds to the connection's flow-
	// control window at the start, and h2WindowRefill the bytes of
	// DATA after which it gives them back: the connection's window
	// never closes, so the client's reading, not flow control, paces
	// the server (each stream's default 65,535 bytes are far more than
	// a small answer).
	h2ConnWindow   = 16 << 20
	h2WindowRefill = 8 << 20
)

// appendH2Frame appends a frame with the payload to dst.
func appendH2Frame(dst []byte, typ, flags byte, stream uint32, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n>>16), byte(n>>8), byte(n), typ, flags)
	dst = binary.BigEndian.AppendUint32(dst, stream&math.MaxInt32)
	return append(dst, payload...)
}

// h2RequestBlock returns the header block of GET path, HPACK-encoded so
// that it changes neither side's dynamic table: :method and :scheme
// indexed from the static table, :authority and :path literals never
// indexed. One block then serves every request of a connection, as is,
// in any order.
func h2RequestBlock(scheme, authority, path string) []byte {
	var buf bytes.Buffer
	e := hpack.NewEncoder(&buf)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "GET"},
		{Name: ":scheme", Value: scheme},
		{Name: ":authority", Value: authority, Sensitive: true},
		{Name: ":path", Value: path, Sensitive: true},
	} {
		e.WriteField(f) // a bytes.Buffer does not fail
	}
	return buf.Bytes()
}

// h2Stream is one request of the client and what came back for it.
type h2Stream struct {
	id      uint32
	route   HTTPRoute
	status  int
	ctype   string
	body    []byte
	headers bool // the response's header block has come
	// The open-loop client's: when the schedule sent it, and the
	// sleep it asked for (0: a light request).
	due     time.Duration
	sleepMs int
}

// check checks the stream's answer (HTTPRoute.Check); with anyType, a
// missing content type counts as the route's (nghttpd serves a file
// whose name has no extension without one).
func (st *h2Stream) check(anyType bool) error {
	r := HTTPResponse{Status: st.status, ContentType: st.ctype, Body: st.body}
	if anyType && r.ContentType == "" {
		r.ContentType = st.route.ContentType
	}
	if err := st.route.Check(r); err != nil {
		return fmt.Errorf("stream %d: %w", st.id, err)
	}
	return nil
}

// h2Session is the client side of one HTTP/2 connection, without I/O:
// out holds what is to be written, feed takes what was read. It answers
// SETTINGS and PING, keeps the connection's window open and ends with an
// error at anything a well-behaved server does not send to this client
// (RST_STREAM, GOAWAY, PUSH_PROMISE, DATA on no stream, an oversized
// frame or body).
type h2Session struct {
	dec     *hpack.Decoder
	in, out []byte
	streams map[uint32]*h2Stream
	nextID  uint32
	// maxStreams is the server's SETTINGS_MAX_CONCURRENT_STREAMS
	// (unlimited until it says).
	maxStreams uint32
	unacked    int // DATA bytes since the last WINDOW_UPDATE on stream 0
	// A header block being assembled from HEADERS and CONTINUATION
	// frames, for stream blockFor; endStream if its HEADERS ended the
	// stream.
	block     []byte
	blockFor  *h2Stream
	endStream bool
	decoding  *h2Stream // the stream whose block the decoder emits for
	trailers  bool      // decoding a second block: trailers, dropped
}

// newH2Session returns a session whose out holds the preface, the
// client's SETTINGS (no server push) and the widening of the
// connection's window.
func newH2Session() *h2Session {
	s := &h2Session{streams: map[uint32]*h2Stream{}, nextID: 1, maxStreams: math.MaxUint32}
	s.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		st := s.decoding
		if st == nil || s.trailers {
			return
		}
		switch f.Name {
		case ":status":
			st.status, _ = strconv.Atoi(f.Value)
		case "content-type":
			st.ctype = f.Value
		}
	})
	s.out = append(s.out, h2Preface...)
	s.out = appendH2Frame(s.out, h2Settings, 0, 0, []byte{0, 2, 0, 0, 0, 0}) // SETTINGS_ENABLE_PUSH 0
	s.out = appendH2Frame(s.out, h2WindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, h2ConnWindow))
	return s
}

// request queues GET route as a new stream whose header block is block
// (h2RequestBlock) and returns the stream.
func (s *h2Session) request(block []byte, route HTTPRoute) *h2Stream {
	st := &h2Stream{id: s.nextID, route: route}
	s.nextID += 2
	s.streams[st.id] = st
	s.out = appendH2Frame(s.out, h2Headers, h2FlagEndStream|h2FlagEndHeaders, st.id, block)
	return st
}

// open returns the number of streams waiting for their answer.
func (s *h2Session) open() int { return len(s.streams) }

// feed adds p, read from the connection, to what is buffered and runs
// every whole frame; done is called with each stream whose answer has
// ended, which the session then forgets.
func (s *h2Session) feed(p []byte, done func(*h2Stream) error) error {
	s.in = append(s.in, p...)
	off := 0
	for len(s.in)-off >= 9 {
		h := s.in[off:]
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		if n > h2MaxFrame {
			return fmt.Errorf("h2: a frame of %d bytes (type %d), over SETTINGS_MAX_FRAME_SIZE %d", n, h[3], h2MaxFrame)
		}
		if len(h) < 9+n {
			break
		}
		off += 9 + n
		id := binary.BigEndian.Uint32(h[5:9]) & math.MaxInt32
		if err := s.frame(h[3], h[4], id, h[9:9+n], done); err != nil {
			return err
		}
	}
	s.in = s.in[:copy(s.in, s.in[off:])]
	return nil
}

// unpad strips a padded frame's padding (RFC 9113 section 6.1).
func unpad(flags byte, p []byte) ([]byte, error) {
	if flags&h2FlagPadded == 0 {
		return p, nil
	}
	if len(p) < 1 || int(p[0]) > len(p)-1 {
		return nil, errors.New("h2: bad padding")
	}
	return p[1 : len(p)-int(p[0])], nil
}

// frame runs one frame.
func (s *h2Session) frame(typ, flags byte, id uint32, p []byte, done func(*h2Stream) error) error {
	if s.blockFor != nil && typ != h2Continuation {
		return fmt.Errorf("h2: frame type %d inside stream %d's header block", typ, s.blockFor.id)
	}
	switch typ {
	case h2Data:
		st := s.streams[id]
		if st == nil {
			return fmt.Errorf("h2: DATA on stream %d, not open", id)
		}
		// Flow control counts the whole payload, padding included.
		s.unacked += len(p)
		if s.unacked >= h2WindowRefill {
			s.out = appendH2Frame(s.out, h2WindowUpdate, 0, 0, binary.BigEndian.AppendUint32(nil, uint32(s.unacked)))
			s.unacked = 0
		}
		data, err := unpad(flags, p)
		if err != nil {
			return err
		}
		if !st.headers {
			return fmt.Errorf("h2: DATA before HEADERS on stream %d", id)
		}
		if len(st.body)+len(data) > h2MaxBody {
			return fmt.Errorf("h2: stream %d: a body over %d bytes", id, h2MaxBody)
		}
		st.body = append(st.body, data...)
		if flags&h2FlagEndStream != 0 {
			return s.finish(st, done)
		}
	case h2Headers:
		st := s.streams[id]
		if st == nil {
			return fmt.Errorf("h2: HEADERS on stream %d, not open", id)
		}
		frag, err := unpad(flags, p)
		if err != nil {
			return err
		}
		if flags&h2FlagPriority != 0 {
			if len(frag) < 5 {
				return errors.New("h2: HEADERS too short for its priority")
			}
			frag = frag[5:]
		}
		s.block, s.blockFor, s.endStream = append(s.block[:0], frag...), st, flags&h2FlagEndStream != 0
		if flags&h2FlagEndHeaders != 0 {
			return s.endBlock(done)
		}
	case h2Continuation:
		if s.blockFor == nil || s.blockFor.id != id {
			return fmt.Errorf("h2: CONTINUATION on stream %d outside its header block", id)
		}
		s.block = append(s.block, p...)
		if flags&h2FlagEndHeaders != 0 {
			return s.endBlock(done)
		}
	case h2RSTStream:
		code := uint32(0)
		if len(p) == 4 {
			code = binary.BigEndian.Uint32(p)
		}
		return fmt.Errorf("h2: stream %d reset by the server, error code %#x", id, code)
	case h2Settings:
		if flags&h2FlagAck != 0 {
			return nil
		}
		if len(p)%6 != 0 {
			return fmt.Errorf("h2: SETTINGS of %d bytes", len(p))
		}
		for i := 0; i < len(p); i += 6 {
			if binary.BigEndian.Uint16(p[i:]) == 3 { // SETTINGS_MAX_CONCURRENT_STREAMS
				s.maxStreams = binary.BigEndian.Uint32(p[i+2:])
			}
		}
		s.out = appendH2Frame(s.out, h2Settings, h2FlagAck, 0, nil)
	case h2Ping:
		if flags&h2FlagAck == 0 {
			s.out = appendH2Frame(s.out, h2Ping, h2FlagAck, 0, p)
		}
	case h2GoAway:
		if len(p) < 8 {
			return errors.New("h2: GOAWAY too short")
		}
		return fmt.Errorf("h2: GOAWAY from the server: last stream %d, error code %#x, %q",
			binary.BigEndian.Uint32(p)&math.MaxInt32, binary.BigEndian.Uint32(p[4:]), p[8:])
	case h2PushPromise:
		return errors.New("h2: PUSH_PROMISE after SETTINGS_ENABLE_PUSH 0")
	}
	// WINDOW_UPDATE (the client sends no DATA), PRIORITY and unknown
	// types need nothing.
	return nil
}

// endBlock decodes a whole header block: the answer's head, or its
// trailers (decoded to keep the table in step, then dropped).
func (s *h2Session) endBlock(done func(*h2Stream) error) error {
	st := s.blockFor
	s.blockFor, s.decoding, s.trailers = nil, st, st.headers
	_, err := s.dec.Write(s.block)
	if err == nil {
		err = s.dec.Close()
	}
	s.decoding = nil
	if err != nil {
		return fmt.Errorf("h2: stream %d: HPACK: %w", st.id, err)
	}
	if !st.headers && st.status >= 100 && st.status < 200 {
		st.status = 0 // an interim answer: the final one follows
		return nil
	}
	st.headers = true
	if s.endStream {
		return s.finish(st, done)
	}
	return nil
}

// finish ends a stream whose answer has come.
func (s *h2Session) finish(st *h2Stream, done func(*h2Stream) error) error {
	if !st.headers {
		return fmt.Errorf("h2: stream %d ended without a head", st.id)
	}
	delete(s.streams, st.id)
	return done(st)
}

// h2Dial dials addr, and with cfg non-nil completes a TLS handshake
// whose ALPN must select "h2", within ioTimeout; the connection's
// deadline stays set ioTimeout from the dial.
func h2Dial(addr string, cfg *tls.Config) (net.Conn, error) {
	if cfg == nil {
		c, err := net.DialTimeout("tcp", addr, ioTimeout)
		if err == nil {
			c.SetDeadline(time.Now().Add(ioTimeout))
		}
		return c, err
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	c, err := tlsDial(addr, cfg)
	if err != nil {
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN selected %q, want \"h2\" (the server does not offer HTTP/2 over TLS)", p)
	}
	return c, nil
}

// errH2AnsweredH1 says that a server answered the HTTP/2 preface with
// an HTTP/1.1 response: it does not speak HTTP/2 on that connection.
var errH2AnsweredH1 = errors.New("the server answered the HTTP/2 preface in HTTP/1.1")

// h2Get sends GET route on c, a connection on which nothing has been
// sent yet, and reads until its answer has ended; it returns the
// session (for more requests) and the stream, unchecked. What the
// session has to send after the answer (a SETTINGS acknowledgement) is
// written before it returns.
func h2Get(c net.Conn, scheme, authority string, route HTTPRoute) (*h2Session, *h2Stream, error) {
	s := newH2Session()
	s.request(h2RequestBlock(scheme, authority, route.Path), route)
	var got *h2Stream
	buf := make([]byte, 16<<10)
	first := true
	for {
		if len(s.out) > 0 {
			if _, err := c.Write(s.out); err != nil {
				return nil, nil, err
			}
			s.out = s.out[:0]
		}
		if got != nil {
			return s, got, nil
		}
		n, err := c.Read(buf)
		if n > 0 && first && bytes.HasPrefix(buf[:n], []byte("HTTP/1.")) {
			return nil, nil, fmt.Errorf("GET %s: %w: %q", route.Path, errH2AnsweredH1, buf[:min(n, 64)])
		}
		first = false
		if n > 0 {
			if ferr := s.feed(buf[:n], func(st *h2Stream) error { got = st; return nil }); ferr != nil {
				return nil, nil, ferr
			}
		}
		if err != nil && got == nil {
			if err == io.EOF {
				err = errors.New("connection closed before the answer (does the server speak HTTP/2 here?)")
			}
			return nil, nil, fmt.Errorf("GET %s: %w", route.Path, err)
		}
	}
}

// probeH2 sends GET route to addr over HTTP/2 on a connection of its
// own, h2c with prior knowledge or, with cfg, TLS with ALPN "h2", and
// checks the answer (anyType: see h2Stream.check).
func probeH2(addr string, cfg *tls.Config, route HTTPRoute, anyType bool) error {
	c, err := h2Dial(addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	_, st, err := h2Get(c, scheme, addr, route)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return st.check(anyType)
}
