package httpd

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// maxBlock bounds a field block gathered from HEADERS and CONTINUATION
// frames, as a multiple of the header list limit: Huffman coding can
// make a block longer than the fields it carries, but not by more. A
// block beyond it ends the connection (an endless CONTINUATION sequence,
// CVE-2023-45288, costs no more).
const maxBlock = 2

// junkLimit is how many frames that serve no request (PING, SETTINGS,
// empty DATA, refused and reset streams, WINDOW_UPDATE of a few bytes)
// a connection may send per junkWindow beyond two per request it opens;
// beyond it the connection gets GOAWAY ENHANCE_YOUR_CALM. It bounds the
// CPU of the floods of CVE-2019-9512, 9515 and 9518, and of streams
// opened and reset at once (CVE-2023-44487).
const (
	junkLimit  = 1000
	junkWindow = 10 * time.Second
)

// recentClosed is how many recently closed streams a connection
// remembers, to tell a frame for a stream it reset (ignored, RFC 9113
// section 5.1) from one for a stream the client ended (an error).
const recentClosed = 16

// A stream's window opened by less than minData and less than the data
// waiting gets a DATA frame as small at most maxSmallFrames times; then
// the stream waits for a window of minData. A client that opens its
// window a byte at a time (CVE-2019-9511, 9517) gets a few small frames,
// not a frame per byte, and a stream so starved is reset after
// IdleTimeout. The few allow a client with a tiny window (RFC 9113
// section 6.9.1 lets it have one) to see data.
const (
	minData        = 512
	maxSmallFrames = 4
)

// smallUpdate is the WINDOW_UPDATE increment below which the frame
// counts against the connection's allowance (junkLimit).
const smallUpdate = 512

// Errors of HTTP/2 streams, as a handler sees them in Read and Write.
var (
	errStreamReset = errors.New("httpd: HTTP/2 stream reset by the client")
	errStreamGone  = errors.New("httpd: HTTP/2 stream closed")
	errWindowStall = errors.New("httpd: HTTP/2 client kept its flow-control window shut")
)

// h2conn is an HTTP/2 connection (RFC 9113): a Protocol, so its frames
// are read and dispatched on the connection's waiter, event-driven as
// HTTP/1.1's requests are, and it holds no goroutine while no handler
// runs. Each request's handler runs on a goroutine of its own, so that
// one that blocks delays neither the other streams nor other connections.
//
// The waiter's fields are read and written by OnData alone; mu guards
// what the handlers' goroutines share with it: the streams, the
// encoder, the output and the send windows.
type h2conn struct {
	hc  *hconn
	c   *conn.Conn
	cfg *h2config

	// The waiter's.
	dec         hpack.Decoder
	preface     bool   // the client's preface has been read
	settings    bool   // its first SETTINGS has been read
	block       []byte // a field block waiting for its CONTINUATION frames
	blockStream uint32 // the stream whose block is incomplete, or 0
	blockFlags  h2frame.Flags
	blockErr    error // the HEADERS frame's own stream error, if any
	junk        int
	junkStart   time.Time
	head        *h2head // the request being decoded, from the server's pool during a block
	emit        func(hpack.Field) error
	starting    []*h2stream // streams opened by this read, their handlers not yet started

	mu         sync.Mutex
	streams    map[uint32]*h2stream // open and half-closed streams (section 5.1)
	running    int                  // handlers running
	lastStream uint32               // the highest stream the client opened
	closed     [recentClosed]uint32 // recently closed streams: reset by us if resetBit is set
	closedN    int
	enc        hpack.Encoder
	hblock     []byte  // scratch for encoding a field block
	out        *[]byte // frames not yet written; nil when none
	sendWindow int64   // the connection's send window
	peerWindow int64   // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int     // the client's SETTINGS_MAX_FRAME_SIZE
	connRefund uint32  // body bytes read whose window is not yet returned
	recvWindow int64   // what the client may still send on the connection
	goAway     bool    // GOAWAY sent: no new stream
	eof        bool    // the client closed its side
	ended      bool    // the connection is gone
	unhold     func()  // conn.Conn.Hold's while handlers run
}

// resetBit marks, in h2conn.closed, a stream that we reset: frames the
// client sent before it saw the reset are ignored (RFC 9113 section 5.1).
const resetBit = 1 << 31

// startH2 makes hc an HTTP/2 connection and sends the server's preface.
// For a TLS connection that negotiated "h2" it runs in OnOpen; for h2c,
// when OnData finds the client's preface.
func (hc *hconn) startH2() {
	h := hc.h
	sc := &h2conn{
		hc: hc, c: hc.c, cfg: &h.h2,
		dec:        *hpack.NewDecoder(h.h2.decoderTable, h.h2.maxHeaderList),
		enc:        *hpack.NewEncoder(),
		recvWindow: int64(h.h2.connWindow),
		sendWindow: 65535,
		peerWindow: 65535,
		peerFrame:  h2frame.DefaultMaxFrameSize,
	}
	sc.emit = sc.field
	if h.h2.encoderTable < hpack.DefaultDynamicTableSize {
		sc.enc.SetMaxDynamicTableSize(h.h2.encoderTable)
	}
	hc.up, hc.state = sc, csSwitched
	// During Shutdown the streams in progress still need the client's
	// WINDOW_UPDATEs and bodies; new streams are ignored after GOAWAY.
	hc.c.ReadWhileFinishing()
	if hc.p != nil {
		h.parsers.Put(hc.p)
		hc.p = nil
	}
	h.switched.add(hc, sc)

	sc.mu.Lock()
	b := sc.buf()
	b = h2frame.AppendSettings(b,
		h2frame.Setting{ID: h2frame.SettingMaxConcurrentStreams, Value: h.h2.maxStreams},
		h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Value: h.h2.streamWindow},
		h2frame.Setting{ID: h2frame.SettingMaxFrameSize, Value: h.h2.maxFrame},
		h2frame.Setting{ID: h2frame.SettingMaxHeaderListSize, Value: h.h2.maxHeaderList},
		h2frame.Setting{ID: h2frame.SettingHeaderTableSize, Value: h.h2.decoderTable},
	)
	if n := h.h2.connWindow - 65535; n > 0 {
		b = h2frame.AppendWindowUpdate(b, 0, n)
	}
	*sc.out = b
	sc.mu.Unlock()
	if cs, ok := hc.c.ConnectionState(); ok && !h.h2.secureEnough(cs) {
		sc.fail(h2frame.CodeInadequateSecurity, "TLS version or cipher suite below RFC 9113 section 9.2")
	}
	sc.flush()
}

// buf returns the output buffer, taking one from the pool if there is
// none. The caller holds mu.
func (sc *h2conn) buf() []byte {
	if sc.out == nil {
		sc.out = sc.hc.h.getOut()
	}
	return *sc.out
}

// flush writes the output, the caller not holding mu.
func (sc *h2conn) flush() {
	sc.mu.Lock()
	sc.flushLocked()
	sc.mu.Unlock()
}

// flushLocked writes the output gathered so far, in the order appended
// (the order HPACK needs). The caller holds mu: conn's Write never
// blocks (what the socket does not take is queued), and handlers that
// finish together have appended their responses meanwhile, so one write
// carries them (see h2response.send). An idle connection keeps no buffer.
func (sc *h2conn) flushLocked() {
	if sc.out == nil {
		return
	}
	if len(*sc.out) > 0 {
		sc.c.Write(*sc.out)
		*sc.out = (*sc.out)[:0]
	}
	if sc.running == 0 {
		if cap(*sc.out) <= 1<<20 {
			sc.hc.h.outBufs.Put(sc.out)
		}
		sc.out = nil
	}
}

// OnData reads and dispatches the frames buffered, while the output
// queue takes more: a client that sends PINGs or SETTINGS and reads no
// acknowledgement stops being read at conn's HighWater.
func (sc *h2conn) OnData(c *conn.Conn) {
	defer sc.flush()
	defer sc.startHandlers()
	for c.Writable() {
		buf, _ := c.Peek(c.Buffered())
		if len(buf) == 0 {
			return
		}
		if !sc.preface {
			n, err := h2frame.MatchPreface(buf)
			if err == h2frame.ErrIncomplete {
				return
			}
			if err != nil {
				c.Close() // not HTTP/2: no GOAWAY is due (section 3.4)
				return
			}
			sc.preface = true
			c.Discard(n)
			continue
		}
		f, n, err := h2frame.Parse(buf, sc.cfg.maxFrame)
		if err == h2frame.ErrIncomplete {
			return
		}
		if err != nil {
			var fe *h2frame.Error
			errors.As(err, &fe)
			if fe.StreamID() == 0 {
				sc.fail(fe.Code(), fe.Error())
				return
			}
			if f.Type == h2frame.TypeHeaders {
				// The block must still be decoded, to keep HPACK's
				// tables in step; the stream is refused after.
				sc.blockErr = err
			} else {
				sc.resetStream(fe.StreamID(), fe.Code())
				c.Discard(n)
				continue
			}
		}
		ok := sc.frame(&f)
		c.Discard(n)
		if !ok {
			return
		}
	}
}

// frame dispatches one frame; false ends reading (a connection error).
func (sc *h2conn) frame(f *h2frame.Frame) bool {
	if sc.blockStream != 0 && (f.Type != h2frame.TypeContinuation || f.Stream != sc.blockStream) {
		return sc.fail(h2frame.CodeProtocolError, "frame inside a field block")
	}
	if !sc.settings {
		if f.Type != h2frame.TypeSettings || f.Flags.Has(h2frame.FlagAck) {
			return sc.fail(h2frame.CodeProtocolError, "first frame not SETTINGS")
		}
		sc.settings = true
	}
	switch f.Type {
	case h2frame.TypeData:
		return sc.onData(f)
	case h2frame.TypeHeaders:
		return sc.onHeaders(f)
	case h2frame.TypeContinuation:
		return sc.onContinuation(f)
	case h2frame.TypePriority:
		return true // deprecated (section 5.3.2): ignored
	case h2frame.TypeRSTStream:
		return sc.onReset(f)
	case h2frame.TypeSettings:
		return sc.onSettings(f)
	case h2frame.TypePushPromise:
		return sc.fail(h2frame.CodeProtocolError, "PUSH_PROMISE from a client")
	case h2frame.TypePing:
		if f.Flags.Has(h2frame.FlagAck) {
			return true
		}
		if !sc.spend(1) {
			return false
		}
		sc.mu.Lock()
		*sc.out = h2frame.AppendPing(sc.buf(), true, [8]byte(f.Data))
		sc.mu.Unlock()
		return true
	case h2frame.TypeGoAway:
		sc.onGoAway()
		return true
	case h2frame.TypeWindowUpdate:
		return sc.onWindowUpdate(f)
	}
	return true // an unknown type is ignored (section 5.5)
}

// spend counts n frames that serve no request against the connection's
// allowance, and ends it when that is exhausted.
func (sc *h2conn) spend(n int) bool {
	now := time.Now()
	if now.Sub(sc.junkStart) > junkWindow {
		sc.junkStart, sc.junk = now, 0
	}
	sc.junk += n
	if sc.junk > junkLimit {
		return sc.fail(h2frame.CodeEnhanceYourCalm, "too many frames that serve no request")
	}
	return true
}

// earn gives back allowance for a request opened.
func (sc *h2conn) earn() {
	if sc.junk > 0 {
		sc.junk = max(sc.junk-2, 0)
	}
}

// fail ends the connection with a connection error (section 5.4.1):
// GOAWAY with code, then close. It returns false, for frame's callers.
func (sc *h2conn) fail(code h2frame.ErrCode, why string) bool {
	sc.mu.Lock()
	if !sc.goAway || code != h2frame.CodeNoError {
		*sc.out = h2frame.AppendGoAway(sc.buf(), sc.lastStream, code, []byte(why))
	}
	sc.goAway = true
	sc.flushLocked()
	streams := slices.Collect(maps.Values(sc.streams))
	sc.mu.Unlock()
	// The connection is over for every stream, though closing it waits
	// for the client's FIN: the handlers still running are cancelled now.
	for _, st := range streams {
		st.reset(errConnClosed, false)
	}
	sc.c.Close()
	return false
}

// onSettings applies the client's settings and acknowledges them.
func (sc *h2conn) onSettings(f *h2frame.Frame) bool {
	if f.Flags.Has(h2frame.FlagAck) {
		return true
	}
	if !sc.spend(1) {
		return false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i := range f.NumSettings() {
		s := f.Setting(i)
		switch s.ID {
		case h2frame.SettingHeaderTableSize:
			sc.enc.SetMaxDynamicTableSize(min(s.Value, sc.cfg.encoderTable))
		case h2frame.SettingInitialWindowSize:
			// Section 6.9.2: the change applies to every open stream's
			// window, which may go negative but not beyond 2^31-1.
			delta := int64(s.Value) - sc.peerWindow
			sc.peerWindow = int64(s.Value)
			for _, st := range sc.streams {
				st.sendWindow += delta
				if st.sendWindow > h2frame.MaxWindowSize {
					sc.mu.Unlock()
					sc.fail(h2frame.CodeFlowControlError, "SETTINGS_INITIAL_WINDOW_SIZE overflows a window")
					sc.mu.Lock()
					return false
				}
				if delta > 0 {
					signal(st.wake)
				}
			}
		case h2frame.SettingMaxFrameSize:
			sc.peerFrame = int(s.Value)
		}
	}
	*sc.out = h2frame.AppendSettingsAck(sc.buf())
	return true
}

// onWindowUpdate opens a send window (section 6.9).
func (sc *h2conn) onWindowUpdate(f *h2frame.Frame) bool {
	if f.Increment < smallUpdate && !sc.spend(1) {
		return false
	}
	sc.mu.Lock()
	if f.Stream == 0 {
		sc.sendWindow += int64(f.Increment)
		over := sc.sendWindow > h2frame.MaxWindowSize
		if !over {
			for _, st := range sc.streams {
				signal(st.wake)
			}
		}
		sc.mu.Unlock()
		if over {
			return sc.fail(h2frame.CodeFlowControlError, "connection window above 2^31-1")
		}
		return true
	}
	st := sc.streams[f.Stream]
	idle := f.Stream > sc.lastStream
	sc.mu.Unlock()
	if st == nil {
		if idle {
			return sc.fail(h2frame.CodeProtocolError, "WINDOW_UPDATE on an idle stream")
		}
		return true // a closed stream: allowed for a while (section 6.9)
	}
	sc.mu.Lock()
	st.sendWindow += int64(f.Increment)
	over := st.sendWindow > h2frame.MaxWindowSize
	signal(st.wake)
	sc.mu.Unlock()
	if over {
		sc.resetStream(f.Stream, h2frame.CodeFlowControlError)
	}
	return true
}

// onReset: the client cancelled a stream. Its handler sees its context
// cancelled, and its reads and writes fail; the stream counts against
// MAX_CONCURRENT_STREAMS until the handler returns.
func (sc *h2conn) onReset(f *h2frame.Frame) bool {
	sc.mu.Lock()
	st := sc.streams[f.Stream]
	idle := f.Stream > sc.lastStream
	sc.mu.Unlock()
	if st == nil {
		if idle {
			return sc.fail(h2frame.CodeProtocolError, "RST_STREAM on an idle stream")
		}
		return true
	}
	if !sc.spend(1) {
		return false
	}
	st.reset(errStreamReset, false)
	return true
}

// onGoAway: the client will open no more streams; those running finish,
// then the connection closes.
func (sc *h2conn) onGoAway() {
	sc.mu.Lock()
	sc.goAway = true
	idle := sc.running == 0
	sc.mu.Unlock()
	if idle {
		sc.c.Close()
	}
}

// resetStream sends RST_STREAM with code for a stream error (section
// 5.4.2), ends the stream's body and remembers the stream as reset by us.
func (sc *h2conn) resetStream(id uint32, code h2frame.ErrCode) {
	sc.spend(1) // the waiter's: a reset the client provoked
	sc.resetFromHandler(id, code)
}

// resetFromHandler is resetStream for a reset the server decides (a
// stalled body or window), from any goroutine.
func (sc *h2conn) resetFromHandler(id uint32, code h2frame.ErrCode) {
	sc.mu.Lock()
	st := sc.streams[id]
	*sc.out = h2frame.AppendRSTStream(sc.buf(), id, code)
	if st == nil {
		sc.rememberLocked(id | resetBit)
	}
	sc.mu.Unlock()
	if st != nil {
		st.reset(errStreamGone, true)
	}
}

// rememberLocked records a closed stream; the caller holds mu.
func (sc *h2conn) rememberLocked(v uint32) {
	sc.closed[sc.closedN%recentClosed] = v
	sc.closedN++
}

// closedState reports whether id is a stream recently closed, and
// whether we reset it; the caller holds mu.
func (sc *h2conn) closedState(id uint32) (known, reset bool) {
	for _, v := range sc.closed {
		if v&^resetBit == id && id != 0 {
			return true, v&resetBit != 0
		}
	}
	return false, false
}

// onData takes a DATA frame into its stream's body (section 6.1),
// accounting it against both receive windows.
func (sc *h2conn) onData(f *h2frame.Frame) bool {
	n := int64(f.Length)
	sc.mu.Lock()
	if n > sc.recvWindow {
		sc.mu.Unlock()
		return sc.fail(h2frame.CodeFlowControlError, "DATA beyond the connection window")
	}
	sc.recvWindow -= n
	st := sc.streams[f.Stream]
	idle := f.Stream > sc.lastStream
	_, ourReset := sc.closedState(f.Stream)
	sc.mu.Unlock()
	if st == nil {
		sc.refund(uint32(n))
		switch {
		case idle:
			return sc.fail(h2frame.CodeProtocolError, "DATA on an idle stream")
		case ourReset:
			return true // sent before the client saw our RST_STREAM
		}
		sc.resetStream(f.Stream, h2frame.CodeStreamClosed)
		return true
	}
	if len(f.Data) == 0 && !f.Flags.Has(h2frame.FlagEndStream) && !sc.spend(1) {
		return false
	}
	code, ok := st.data(f.Data, n, f.Flags.Has(h2frame.FlagEndStream))
	if !ok {
		sc.resetStream(f.Stream, code)
	}
	return true
}

// refund returns n bytes of the connection's receive window: body bytes
// read by a handler, or dropped. The WINDOW_UPDATE waits until a quarter
// of the window is due, so that reading a byte at a time does not send a
// frame a byte.
func (sc *h2conn) refund(n uint32) {
	sc.mu.Lock()
	sc.refundLocked(n)
	sc.mu.Unlock()
}

func (sc *h2conn) refundLocked(n uint32) {
	sc.connRefund += n
	if sc.connRefund >= sc.cfg.connWindow/4 && !sc.ended {
		*sc.out = h2frame.AppendWindowUpdate(sc.buf(), 0, sc.connRefund)
		sc.recvWindow += int64(sc.connRefund)
		sc.connRefund = 0
	}
}

// unreadLocked reports that the connection is no longer read: the
// client closed its side. (Shutdown does not stop reading it:
// ReadWhileFinishing.) The caller holds mu.
func (sc *h2conn) unreadLocked() bool { return sc.eof }

// OnDrain: the output queue fell to LowWater; streams waiting for it
// go on.
func (sc *h2conn) OnDrain(c *conn.Conn) {
	sc.mu.Lock()
	for _, st := range sc.streams {
		signal(st.wake)
	}
	sc.mu.Unlock()
}

// OnTimeout: no stream ran and nothing moved for IdleTimeout (or
// ReadHeaderTimeout before the preface): GOAWAY, then close.
func (sc *h2conn) OnTimeout(c *conn.Conn) {
	sc.fail(h2frame.CodeNoError, "idle")
}

// OnReadEOF: the client closed its side. Streams whose handlers run
// finish their responses; the connection closes after the last.
func (sc *h2conn) OnReadEOF(c *conn.Conn) {
	sc.mu.Lock()
	sc.goAway, sc.eof = true, true
	idle := sc.running == 0
	for _, st := range sc.streams {
		// No body byte and no WINDOW_UPDATE can come any more: readers
		// end, and writers waiting for a window are reset.
		st.bodyEnd(errStreamGone)
		signal(st.wake)
	}
	sc.mu.Unlock()
	if idle {
		c.Close()
	}
}

// OnShutdown: Server.Shutdown began. GOAWAY tells the client the last
// stream served; the streams running finish, then the connection closes.
func (sc *h2conn) OnShutdown(c *conn.Conn) {
	sc.mu.Lock()
	if !sc.goAway && !sc.ended {
		*sc.out = h2frame.AppendGoAway(sc.buf(), sc.lastStream, h2frame.CodeNoError, nil)
		sc.goAway = true
	}
	idle := sc.running == 0
	sc.flushLocked()
	sc.mu.Unlock()
	if idle {
		c.Close()
	}
}

// OnClose: the connection ended. Every handler still running sees its
// context cancelled and its reads and writes fail.
func (sc *h2conn) OnClose(c *conn.Conn, reason conn.Reason, err error) {
	sc.mu.Lock()
	sc.ended = true
	streams := slices.Collect(maps.Values(sc.streams))
	if sc.out != nil {
		sc.hc.h.outBufs.Put(sc.out)
		sc.out = nil
	}
	unhold := sc.unhold
	sc.unhold = nil
	sc.mu.Unlock()
	for _, st := range streams {
		st.reset(errConnClosed, false)
	}
	if unhold != nil {
		unhold()
	}
	sc.hc.h.connState(sc.hc, http.StateClosed)
}

// removeLocked forgets a stream that is closed: its handler returned
// and the client finished sending, or it was reset. The caller holds mu.
func (sc *h2conn) removeLocked(st *h2stream) {
	if sc.streams[st.id] != st {
		return
	}
	delete(sc.streams, st.id)
	if len(sc.streams) == 0 {
		sc.streams = nil // an idle connection keeps no map
	}
	v := st.id
	if st.resetByUs {
		v |= resetBit
	}
	sc.rememberLocked(v)
}

// handlerDone: a handler returned. The last one lets an idle connection
// go idle (IdleTimeout), and a finishing one close.
func (sc *h2conn) handlerDone() {
	sc.mu.Lock()
	sc.running--
	idle := sc.running == 0
	var unhold func()
	closing := false
	if idle {
		unhold, sc.unhold = sc.unhold, nil
		closing = sc.goAway
	}
	sc.flushLocked()
	sc.mu.Unlock()
	if idle {
		sc.c.SetIdleTimeout(sc.hc.h.idleTimeout)
		sc.hc.h.connState(sc.hc, http.StateIdle)
		if unhold != nil {
			unhold()
		}
		if closing {
			sc.c.Close()
		}
	}
}

var (
	_ Protocol            = (*h2conn)(nil)
	_ conn.Drainer        = (*h2conn)(nil)
	_ conn.Timeouter      = (*h2conn)(nil)
	_ conn.HalfCloser     = (*h2conn)(nil)
	_ Shutdowner          = (*h2conn)(nil)
	_ http.Flusher        = (*h2response)(nil)
	_ http.Pusher         = (*h2response)(nil)
	_ http.ResponseWriter = (*h2response)(nil)
)

// h2Preface looks at a plain connection's first bytes: with h2c served,
// HTTP/2's preface makes it an HTTP/2 connection; without HTTP/1 served,
// anything else closes it. It reports whether OnData is done with them.
func (hc *hconn) h2Preface() bool {
	h, c := hc.h, hc.c
	if _, tls := c.ConnectionState(); tls || !h.h2.plain && h.http1 {
		if tls && !h.http1 {
			c.Close() // no ALPN "h2": HTTP/1.1, which is not served
			return true
		}
		return false
	}
	buf, _ := c.Peek(c.Buffered())
	_, err := h2frame.MatchPreface(buf)
	switch {
	case err == h2frame.ErrIncomplete && h.h2.plain:
		return true // more is needed to tell
	case err == nil && h.h2.plain:
		hc.startH2()
		hc.up.OnData(c)
		return true
	case !h.http1:
		c.Close()
		return true
	}
	return false
}
