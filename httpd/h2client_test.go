//go:build linux

package httpd_test

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// hostileClient is a raw HTTP/2 client for hostile tests, on the
// repository's own frame and HPACK packages over a plain TCP connection
// (h2c with prior knowledge). It sends whatever bytes a test builds,
// legal or not, and reads the server's frames on a goroutine of its own
// once startReading is called, so that the server's output never backs
// up into our writes unless a test chooses not to read. It does no flow
// control of its own: a test that wants a response opens the windows
// (await does).
type hostileClient struct {
	t   testing.TB
	nc  net.Conn
	enc *hpack.Encoder
	dec *hpack.Decoder
	// nextID is the next client stream identifier newStream hands out.
	nextID uint32
	// serverSettings are the parameters of the server's first SETTINGS.
	serverSettings map[h2frame.SettingID]uint32

	wmu sync.Mutex // one writer at a time: the test, and the reader's ACKs

	// rbuf[roff:] is what has been read and not yet parsed; readFrame's
	// alone (the handshake's, then the reading goroutine's).
	rbuf []byte
	roff int

	mu      sync.Mutex
	queue   []hostileFrame // frames read, not yet taken by next
	arrived chan struct{}  // signalled when queue grows or reading ends
	readErr error          // why reading ended, once it has
	done    chan struct{}  // closed when the reading goroutine returns
	reading bool
	closed  bool
}

// hostileFrame is one frame from the server, its payload copied. A
// HEADERS frame stands for its whole field block: its CONTINUATION
// frames are joined to it and the block decoded into Fields.
type hostileFrame struct {
	Type       h2frame.Type
	Flags      h2frame.Flags
	Stream     uint32
	Length     uint32
	Data       []byte        // DATA, PING, GOAWAY's debug data
	Fields     []hpack.Field // HEADERS
	Settings   []h2frame.Setting
	ErrCode    h2frame.ErrCode // RST_STREAM, GOAWAY
	LastStream uint32          // GOAWAY
	Increment  uint32          // WINDOW_UPDATE
}

func (f hostileFrame) String() string {
	s := fmt.Sprintf("%v stream=%d flags=%#x len=%d", f.Type, f.Stream, f.Flags, f.Length)
	switch f.Type {
	case h2frame.TypeRSTStream:
		s += " " + f.ErrCode.String()
	case h2frame.TypeGoAway:
		s += fmt.Sprintf(" %v last=%d debug=%q", f.ErrCode, f.LastStream, f.Data)
	case h2frame.TypeHeaders:
		s += fmt.Sprintf(" %v", f.Fields)
	case h2frame.TypeWindowUpdate:
		s += fmt.Sprintf(" +%d", f.Increment)
	case h2frame.TypeSettings:
		s += fmt.Sprintf(" %v", f.Settings)
	}
	return s
}

// status returns a HEADERS frame's :status, 0 if it has none.
func (f hostileFrame) status() int {
	for _, h := range f.Fields {
		if h.Name == ":status" {
			n, _ := strconv.Atoi(h.Value)
			return n
		}
	}
	return 0
}

var (
	// errNoFrame is next's error when no frame came in time.
	errNoFrame = errors.New("no frame in time")
	// errServerFrames reports frames from the server that break RFC
	// 9113: framing, field block or HPACK errors.
	errServerFrames = errors.New("bad frames from the server")
)

// dialHostile connects to addr, sends the preface with a SETTINGS frame
// carrying settings, reads the server's SETTINGS (failing the test if
// the server does not answer in HTTP/2), acknowledges it and starts
// reading. The connection is closed at cleanup.
func dialHostile(t testing.TB, addr string, settings ...h2frame.Setting) *hostileClient {
	t.Helper()
	c := dialHostileNoRead(t, addr, 0, settings...)
	c.startReading()
	return c
}

// dialHostileNoRead is dialHostile without the reading goroutine: after
// the server's SETTINGS nothing is read until startReading. rcvbuf, if
// not 0, sets the socket's receive buffer first, so that a server writing
// to a client that does not read is pushed back sooner.
func dialHostileNoRead(t testing.TB, addr string, rcvbuf int, settings ...h2frame.Setting) *hostileClient {
	t.Helper()
	c, err := openHostile(t, addr, rcvbuf, settings...)
	if c != nil {
		t.Cleanup(c.close)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openHostile is dialHostileNoRead returning its error, for goroutines
// other than the test's; the caller closes the client (if not nil).
func openHostile(t testing.TB, addr string, rcvbuf int, settings ...h2frame.Setting) (*hostileClient, error) {
	d := net.Dialer{Timeout: timeout}
	if rcvbuf > 0 {
		// Before connect, so that the window TCP offers is small from
		// the start rather than shrunk after autotuning grew it.
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			})
			return cmp.Or(err, serr)
		}
	}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &hostileClient{
		t:       t,
		nc:      nc,
		enc:     hpack.NewEncoder(),
		dec:     hpack.NewDecoder(hpack.DefaultDynamicTableSize, 0),
		nextID:  1,
		arrived: make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	b := append([]byte(h2frame.Preface), h2frame.AppendSettings(nil, settings...)...)
	if err := c.send(b); err != nil {
		return c, fmt.Errorf("sending the preface: %w", err)
	}
	// The server's first frame must be its SETTINGS (RFC 9113 section
	// 3.4); anything else means it does not speak h2c here.
	nc.SetReadDeadline(time.Now().Add(timeout))
	f, err := c.readFrame()
	nc.SetReadDeadline(time.Time{})
	if err != nil || f.Type != h2frame.TypeSettings || f.Flags.Has(h2frame.FlagAck) {
		return c, fmt.Errorf("no HTTP/2 from the server: first frame %v, %v (bytes %q)", f, err, c.rbuf[:min(len(c.rbuf), 80)])
	}
	c.serverSettings = map[h2frame.SettingID]uint32{}
	for _, s := range f.Settings {
		c.serverSettings[s.ID] = s.Value
	}
	if err := c.send(h2frame.AppendSettingsAck(nil)); err != nil {
		return c, fmt.Errorf("acknowledging SETTINGS: %w", err)
	}
	return c, nil
}

// close closes the connection and waits for the reading goroutine.
func (c *hostileClient) close() {
	c.mu.Lock()
	c.closed = true
	reading := c.reading
	c.mu.Unlock()
	c.nc.Close()
	if reading {
		<-c.done
	}
}

// send writes b whole, giving up after timeout (a server that stopped
// reading); its error is the write's.
func (c *hostileClient) send(b []byte) error {
	return c.sendWithin(b, timeout)
}

// sendWithin is send with its own bound.
func (c *hostileClient) sendWithin(b []byte, d time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(d))
	_, err := c.nc.Write(b)
	return err
}

// mustSend is send failing the test on an error.
func (c *hostileClient) mustSend(b []byte) {
	c.t.Helper()
	if err := c.send(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// newStream returns the next client stream identifier.
func (c *hostileClient) newStream() uint32 {
	id := c.nextID
	c.nextID += 2
	return id
}

// block encodes fields into a field block with the connection's
// encoder, which must then be sent, in order, for the server's decoder
// to stay in step.
func (c *hostileClient) block(fields ...hpack.Field) []byte {
	var b []byte
	for _, f := range fields {
		b = c.enc.AppendField(b, f)
	}
	return b
}

// appendFieldBlock appends a HEADERS frame carrying block on stream,
// with as many CONTINUATION frames as the default frame size needs.
func appendFieldBlock(dst []byte, stream uint32, endStream bool, block []byte) []byte {
	const size = h2frame.DefaultMaxFrameSize
	first := block[:min(len(block), size)]
	block = block[len(first):]
	dst = h2frame.AppendHeaders(dst, stream, endStream, len(block) == 0, first)
	for len(block) > 0 {
		frag := block[:min(len(block), size)]
		block = block[len(frag):]
		dst = h2frame.AppendContinuation(dst, stream, len(block) == 0, frag)
	}
	return dst
}

// requestFields returns a request's pseudo-header fields, then extra.
func requestFields(method, path string, extra ...hpack.Field) []hpack.Field {
	f := []hpack.Field{
		{Name: ":method", Value: method},
		{Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "x"},
		{Name: ":path", Value: path},
	}
	return append(f, extra...)
}

// appendRequest appends the HEADERS of a request on a new stream and
// returns the stream.
func (c *hostileClient) appendRequest(dst []byte, method, path string, endStream bool, extra ...hpack.Field) ([]byte, uint32) {
	id := c.newStream()
	return appendFieldBlock(dst, id, endStream, c.block(requestFields(method, path, extra...)...)), id
}

// get sends a GET for path on a new stream and returns the stream.
func (c *hostileClient) get(path string) uint32 {
	c.t.Helper()
	b, id := c.appendRequest(nil, "GET", path, true)
	c.mustSend(b)
	return id
}

// appendAnyWindowUpdate appends a WINDOW_UPDATE with any increment,
// 0 and the reserved bit included, which h2frame refuses to build.
func appendAnyWindowUpdate(dst []byte, stream, increment uint32) []byte {
	dst = h2frame.AppendFrameHeader(dst, 4, h2frame.TypeWindowUpdate, 0, stream)
	return append(dst, byte(increment>>24), byte(increment>>16), byte(increment>>8), byte(increment))
}

// readFrame reads the next frame, HEADERS with its CONTINUATION frames
// joined and decoded. Its errors are the connection's (io.EOF when the
// server closed) or a malformed frame from the server.
func (c *hostileClient) readFrame() (hostileFrame, error) {
	var hdr *hostileFrame // a HEADERS frame waiting for its CONTINUATION
	var block []byte
	for {
		f, n, err := h2frame.Parse(c.rbuf[c.roff:], h2frame.DefaultMaxFrameSize)
		if errors.Is(err, h2frame.ErrIncomplete) {
			if c.roff > 0 {
				c.rbuf = c.rbuf[:copy(c.rbuf, c.rbuf[c.roff:])]
				c.roff = 0
			}
			if cap(c.rbuf)-len(c.rbuf) < 16<<10 {
				c.rbuf = append(c.rbuf, make([]byte, 32<<10)...)[:len(c.rbuf)]
			}
			k, rerr := c.nc.Read(c.rbuf[len(c.rbuf):cap(c.rbuf)])
			c.rbuf = c.rbuf[:len(c.rbuf)+k]
			if rerr != nil && k == 0 {
				return hostileFrame{}, rerr
			}
			continue
		}
		if err != nil {
			return hostileFrame{}, fmt.Errorf("%w: %w", errServerFrames, err)
		}
		c.roff += n
		if hdr != nil && (f.Type != h2frame.TypeContinuation || f.Stream != hdr.Stream) {
			return hostileFrame{}, fmt.Errorf("%w: %v inside a field block", errServerFrames, f.Type)
		}
		rf := hostileFrame{Type: f.Type, Flags: f.Flags, Stream: f.Stream, Length: f.Length,
			ErrCode: f.ErrCode, LastStream: f.LastStream, Increment: f.Increment}
		switch f.Type {
		case h2frame.TypeHeaders, h2frame.TypeContinuation:
			if f.Type == h2frame.TypeHeaders {
				hdr, block = &rf, nil
			} else if hdr == nil {
				return hostileFrame{}, fmt.Errorf("%w: CONTINUATION without HEADERS", errServerFrames)
			}
			block = append(block, f.Data...)
			if !f.Flags.Has(h2frame.FlagEndHeaders) {
				continue
			}
			rf = *hdr
			if err := c.dec.Decode(block, func(h hpack.Field) error {
				rf.Fields = append(rf.Fields, h)
				return nil
			}); err != nil {
				return hostileFrame{}, fmt.Errorf("%w: field block: %w", errServerFrames, err)
			}
			return rf, nil
		case h2frame.TypeSettings:
			for i := range f.NumSettings() {
				rf.Settings = append(rf.Settings, f.Setting(i))
			}
		default:
			rf.Data = append([]byte(nil), f.Data...)
		}
		return rf, nil
	}
}

// startReading starts the goroutine that reads the server's frames
// into the queue next takes them from, acknowledging SETTINGS as they
// come, until the connection fails or closes.
func (c *hostileClient) startReading() {
	c.mu.Lock()
	if c.reading || c.closed {
		c.mu.Unlock()
		return
	}
	c.reading = true
	c.mu.Unlock()
	go func() {
		defer close(c.done)
		for {
			f, err := c.readFrame()
			c.mu.Lock()
			if err != nil {
				c.readErr = err
			} else {
				c.queue = append(c.queue, f)
			}
			c.mu.Unlock()
			select {
			case c.arrived <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
			if f.Type == h2frame.TypeSettings && !f.Flags.Has(h2frame.FlagAck) {
				c.send(h2frame.AppendSettingsAck(nil))
			}
		}
	}()
}

// next returns the next frame read, waiting up to d; its error is
// errNoFrame, or why reading ended once every frame read was taken.
func (c *hostileClient) next(d time.Duration) (hostileFrame, error) {
	var expire <-chan time.Time
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			f := c.queue[0]
			c.queue[0] = hostileFrame{}
			c.queue = c.queue[1:]
			c.mu.Unlock()
			return f, nil
		}
		err := c.readErr
		c.mu.Unlock()
		if err != nil {
			return hostileFrame{}, err
		}
		if expire == nil {
			tm := time.NewTimer(d)
			defer tm.Stop()
			expire = tm.C
		}
		select {
		case <-c.arrived:
		case <-expire:
			return hostileFrame{}, errNoFrame
		}
	}
}

// closedByServer reports whether err, from reading, is the server
// closing the connection, gracefully (io.EOF) or not (a reset), rather
// than a timeout or bad frames.
func closedByServer(err error) bool {
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errNoFrame) || errors.Is(err, errServerFrames) {
		return false
	}
	return true
}

// hostileEnd is how a connection or a stream ended, as a test saw it.
type hostileEnd struct {
	rst      bool // RST_STREAM on the stream
	goaway   bool // GOAWAY (then usually closed)
	closed   bool // the connection closed (with or without GOAWAY)
	code     h2frame.ErrCode
	last     uint32 // GOAWAY's last stream
	status   int    // a response's :status
	endBody  bool   // the response ended (END_STREAM)
	body     int    // response body bytes
	frames   []hostileFrame
	readErr  error
	timedOut bool
}

func (e hostileEnd) String() string {
	var s string
	switch {
	case e.rst:
		s = "RST_STREAM " + e.code.String()
	case e.goaway:
		s = fmt.Sprintf("GOAWAY %v (last stream %d)", e.code, e.last)
	case e.closed:
		s = fmt.Sprintf("closed without GOAWAY (%v)", e.readErr)
	case e.timedOut:
		s = "nothing in time"
	case e.status != 0:
		s = fmt.Sprintf("status %d", e.status)
	default:
		s = fmt.Sprintf("read error %v", e.readErr)
	}
	if e.status != 0 && (e.rst || e.goaway || e.closed) {
		s += fmt.Sprintf(" after status %d", e.status)
	}
	if len(e.frames) > 0 {
		n := min(len(e.frames), 8)
		s += fmt.Sprintf("; frames seen: %v", e.frames[len(e.frames)-n:])
	}
	return s
}

// await reads frames for up to d until stream ends (a response with
// END_STREAM, or RST_STREAM on it), or the connection does (GOAWAY, or
// closing); stream 0 waits for the connection alone. It opens the flow
// control windows for the DATA it takes, so that a response of any size
// completes.
func (c *hostileClient) await(stream uint32, d time.Duration) hostileEnd {
	var e hostileEnd
	deadline := time.Now().Add(d)
	for {
		f, err := c.next(time.Until(deadline))
		if err != nil {
			if errors.Is(err, errNoFrame) {
				e.timedOut = true
			} else {
				e.readErr = err
				e.closed = closedByServer(err)
			}
			return e
		}
		if len(e.frames) < 64 {
			e.frames = append(e.frames, f)
		} else {
			e.frames = append(e.frames[:0:0], e.frames[32:]...)
			e.frames = append(e.frames, f)
		}
		switch {
		case f.Type == h2frame.TypeGoAway:
			e.goaway, e.code, e.last = true, f.ErrCode, f.LastStream
			// A graceful GOAWAY (NO_ERROR) lets a stream it covers
			// finish; an error ends everything.
			if f.ErrCode != h2frame.CodeNoError || stream == 0 || stream > f.LastStream {
				return e
			}
		case stream == 0:
		case f.Stream != stream:
		case f.Type == h2frame.TypeRSTStream:
			e.rst, e.code = true, f.ErrCode
			return e
		case f.Type == h2frame.TypeHeaders:
			// The final status, or an interim (1xx) one until it comes;
			// trailers have none.
			if s := f.status(); s >= 200 || s != 0 && e.status == 0 {
				e.status = s
			}
			if f.Flags.Has(h2frame.FlagEndStream) {
				e.endBody = true
				return e
			}
		case f.Type == h2frame.TypeData:
			e.body += len(f.Data)
			if f.Length > 0 {
				var b []byte
				b = h2frame.AppendWindowUpdate(b, 0, f.Length)
				if !f.Flags.Has(h2frame.FlagEndStream) {
					b = h2frame.AppendWindowUpdate(b, stream, f.Length)
				}
				c.send(b)
			}
			if f.Flags.Has(h2frame.FlagEndStream) {
				e.endBody = true
				return e
			}
		}
	}
}

// roundTrip sends a GET for path on a new stream and waits for its
// response; it returns an error unless a response with END_STREAM came.
func (c *hostileClient) roundTrip(path string, d time.Duration) (hostileEnd, error) {
	b, id := c.appendRequest(nil, "GET", path, true)
	if err := c.send(b); err != nil {
		return hostileEnd{}, err
	}
	e := c.await(id, d)
	if !e.endBody || e.rst {
		return e, fmt.Errorf("GET %s on stream %d: %v", path, id, e)
	}
	return e, nil
}

// ping sends a PING and waits up to d for its ACK: every frame sent
// before it has then been processed (section 6.7 answers in order). It
// returns the frames read meanwhile and an error if no ACK came.
func (c *hostileClient) ping(d time.Duration) ([]hostileFrame, error) {
	data := [8]byte{'h', 'o', 's', 't', 'i', 'l', 'e', '!'}
	if err := c.send(h2frame.AppendPing(nil, false, data)); err != nil {
		return nil, err
	}
	var seen []hostileFrame
	deadline := time.Now().Add(d)
	for {
		f, err := c.next(time.Until(deadline))
		if err != nil {
			return seen, err
		}
		if f.Type == h2frame.TypePing && f.Flags.Has(h2frame.FlagAck) && string(f.Data) == string(data[:]) {
			return seen, nil
		}
		seen = append(seen, f)
	}
}
