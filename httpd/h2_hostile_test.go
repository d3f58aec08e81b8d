//go:build linux

package httpd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/internal/h2frame"
	"github.com/gracepoll/gracepoll/internal/hpack"
)

// hostileMaxStreams is the SETTINGS_MAX_CONCURRENT_STREAMS httpd
// advertises by default.
const hostileMaxStreams = httpd.DefaultMaxConcurrentStreams

// hostileHandler serves the vectors' requests and counts its
// invocations and how many run at once, but those of "/", the
// well-behaved clients' path, whose streams are on connections of their
// own (MAX_CONCURRENT_STREAMS is per connection).
type hostileHandler struct {
	calls, running, peak atomic.Int64
	// started holds the s query parameter of the /block requests whose
	// handler started: the attacker's stream identifier.
	started sync.Map
	// linger is how long /block goes on after its context ends, as a
	// handler finishing its work would: a server that frees a stream's
	// slot when the stream is reset rather than when its handler returns
	// then runs more handlers at once than it allows streams.
	linger time.Duration
}

func (h *hostileHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" {
		io.WriteString(w, "ok")
		return
	}
	h.calls.Add(1)
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	switch r.URL.Path {
	case "/block":
		if id := r.URL.Query().Get("s"); id != "" {
			h.started.Store(id, true)
		}
		<-r.Context().Done()
		time.Sleep(h.linger)
	case "/big":
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		chunk := bytes.Repeat([]byte{'z'}, 16<<10)
		for n > 0 {
			k, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= k
		}
	case "/sink":
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	default:
		io.WriteString(w, "ok")
	}
}

type hostileOpts struct {
	idle       time.Duration // Server.IdleTimeout, if set
	highWater  int           // Options.HighWater, if set
	sendBuffer int           // Options.SendBuffer, if set
	linger     time.Duration // hostileHandler.linger
}

// hostileServer is a server under attack.
type hostileServer struct {
	addr  string
	h     *hostileHandler
	srv   *httpd.Server
	baseG int // goroutines once the server has served
}

// startHostile starts an h2c server (HTTP/1 and prior-knowledge HTTP/2)
// on a loopback port, serves a request of each version on it and notes
// the goroutines then, as the baseline settle returns to. The server is
// closed at cleanup.
func startHostile(t *testing.T, o hostileOpts) *hostileServer {
	t.Helper()
	s := &hostileServer{h: &hostileHandler{linger: o.linger}}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	s.srv = &httpd.Server{Handler: s.h, Protocols: p, IdleTimeout: o.idle, ErrorLog: log.New(io.Discard, "", 0)}
	s.srv.Options.HighWater = o.highWater
	s.srv.Options.SendBuffer = o.sendBuffer
	go s.srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if s.srv.Shutdown(ctx) != nil {
			s.srv.Close()
		}
	})
	if err := s.served(); err != nil {
		t.Fatalf("the server does not serve: %v", err)
	}
	// The least seen for a while: the warm-up's goroutines may still be
	// ending.
	s.baseG = runtime.NumGoroutine()
	for range 10 {
		time.Sleep(10 * time.Millisecond)
		s.baseG = min(s.baseG, runtime.NumGoroutine())
	}
	return s
}

// dial opens a raw HTTP/2 connection to the server, reading.
func (s *hostileServer) dial(t *testing.T, settings ...h2frame.Setting) *hostileClient {
	t.Helper()
	return dialHostile(t, s.addr, settings...)
}

// served checks that a well-behaved client gets its 200 on a connection
// of its own, in HTTP/2 and in HTTP/1.1.
func (s *hostileServer) served() error {
	c, err := openHostile(nil, s.addr, 0)
	if c != nil {
		defer c.close()
	}
	if err != nil {
		return err
	}
	c.startReading()
	e, err := c.roundTrip("/", 5*time.Second)
	if err != nil {
		return fmt.Errorf("HTTP/2: %w", err)
	}
	if e.status != 200 || e.body != 2 {
		return fmt.Errorf("HTTP/2: status %d, %d body bytes", e.status, e.body)
	}
	nc, err := net.DialTimeout("tcp", s.addr, timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if got := readAll(nc); !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "\r\n\r\nok") {
		return fmt.Errorf("HTTP/1.1: %q", shorten(got))
	}
	return nil
}

// servedDuring checks served over and over until the function it
// returns is called, which fails the test if a check failed or none
// completed: other clients are served while one attacks.
func (s *hostileServer) servedDuring(t *testing.T) (stop func()) {
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if err := s.served(); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			} else {
				ok.Add(1)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() {
		t.Helper()
		close(done)
		wg.Wait()
		if failed.Load() > 0 {
			t.Errorf("another client was not served during the attack (%d of %d): %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
		}
	}
}

// settle checks that the attack is over for the server: no handler
// runs, its goroutines are back to the baseline (the attacker's
// connections must be closed first), and other clients are served.
func (s *hostileServer) settle(t *testing.T) {
	t.Helper()
	if err := s.served(); err != nil {
		t.Errorf("after the attack another client is not served: %v", err)
	}
	// Extra poller waiters started while handlers blocked retire a
	// second after the last block: give them a few.
	deadline := time.Now().Add(8 * time.Second)
	for {
		g := runtime.NumGoroutine()
		r := s.h.running.Load()
		if r == 0 && g <= s.baseG+3 {
			return
		}
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Errorf("after the attack: %d handlers still running, %d goroutines (baseline %d):\n%s", r, g, s.baseG, shorten(buf.String()))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lostOutput returns the server's count of queued output bytes dropped
// (by resets and timeouts): when a connection is dropped, what it had
// queued.
func (s *hostileServer) lostOutput() uint64 { return s.srv.Transport().Stats().LostOutput }

// maxQueued is the most output conn queues for a connection.
func (s *hostileServer) maxQueued() uint64 { return uint64(s.srv.Transport().Options().MaxQueued) }

// openConns returns the server's open connections.
func (s *hostileServer) openConns() int64 { return s.srv.Transport().Stats().Open }

// pollUntil polls cond until it holds or d passes, and reports which.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// hostileTally sums up frames read after an attack on many streams.
type hostileTally struct {
	rst    map[uint32]h2frame.ErrCode // the first RST_STREAM per stream
	codes  map[h2frame.ErrCode]int    // RST_STREAM codes, all streams
	status map[uint32]int             // response :status per stream
	goaway *hostileFrame
	frames int
}

func (ty *hostileTally) add(fs ...hostileFrame) {
	if ty.rst == nil {
		ty.rst, ty.codes, ty.status = map[uint32]h2frame.ErrCode{}, map[h2frame.ErrCode]int{}, map[uint32]int{}
	}
	for _, f := range fs {
		ty.frames++
		switch f.Type {
		case h2frame.TypeRSTStream:
			if _, ok := ty.rst[f.Stream]; !ok {
				ty.rst[f.Stream] = f.ErrCode
			}
			ty.codes[f.ErrCode]++
		case h2frame.TypeHeaders:
			if _, ok := ty.status[f.Stream]; !ok {
				ty.status[f.Stream] = f.status()
			}
		case h2frame.TypeGoAway:
			if ty.goaway == nil {
				ty.goaway = &f
			}
		}
	}
}

// covers reports whether a stream was still to be processed under the
// GOAWAY seen, if any.
func (ty *hostileTally) covers(id uint32) bool { return ty.goaway == nil || id <= ty.goaway.LastStream }

// isLast reports whether id is the last stream of the GOAWAY seen.
func (ty *hostileTally) isLast(id uint32) bool { return ty.goaway != nil && id == ty.goaway.LastStream }

func (ty *hostileTally) String() string {
	s := fmt.Sprintf("%d frames, RST_STREAM codes %v", ty.frames, ty.codes)
	if ty.goaway != nil {
		s += ", " + ty.goaway.String()
	}
	return s
}

// collect reads frames until the connection ends or none comes for
// quiet, into ty.
func (c *hostileClient) collect(ty *hostileTally, quiet time.Duration) error {
	for {
		f, err := c.next(quiet)
		if err != nil {
			if errors.Is(err, errNoFrame) {
				return nil
			}
			return err
		}
		ty.add(f)
	}
}

// sync sends a PING and reads into ty until its ACK (every frame sent
// before it processed), the connection's end or d.
func (c *hostileClient) sync(ty *hostileTally, d time.Duration) error {
	fs, err := c.ping(d)
	ty.add(fs...)
	return err
}

// codeIn reports whether code is one of ok.
func codeIn(code h2frame.ErrCode, ok ...h2frame.ErrCode) bool { return slices.Contains(ok, code) }

// expectHostileEnd waits for stream (0: the connection) to end in an
// error and checks how: RST_STREAM with one of streamCodes, or GOAWAY
// with one of connCodes (a stream error may be a connection error, RFC
// 9113 section 5.4). It returns true if the connection survives.
func expectHostileEnd(t *testing.T, c *hostileClient, stream uint32, streamCodes, connCodes []h2frame.ErrCode) bool {
	t.Helper()
	e := c.await(stream, timeout)
	switch {
	case e.rst && codeIn(e.code, streamCodes...):
		t.Logf("stream %d: %v", stream, e.String())
		return true
	case e.goaway && codeIn(e.code, connCodes...):
		t.Logf("stream %d: %v", stream, e.String())
		return false
	}
	t.Errorf("stream %d: want RST_STREAM %v or GOAWAY %v, got %v", stream, streamCodes, connCodes, e)
	return false
}

// hostileSurvives checks that a connection still serves a request
// after a stream error on it.
func hostileSurvives(t *testing.T, c *hostileClient) {
	t.Helper()
	if e, err := c.roundTrip("/", timeout); err != nil || e.status != 200 {
		t.Errorf("the connection does not serve after a stream error: %v %v", e, err)
	}
}

// The error codes the vectors expect.
const (
	rfcProtocol = h2frame.CodeProtocolError
	rfcRefused  = h2frame.CodeRefusedStream
	rfcClosed   = h2frame.CodeStreamClosed
	rfcFlow     = h2frame.CodeFlowControlError
	rfcCalm     = h2frame.CodeEnhanceYourCalm
)

// TestH2Hostile attacks httpd's HTTP/2 with the vectors of published
// HTTP/2 denial-of-service issues and protocol violations, each checking
// the error the server answers with (RFC 9113), that handlers, goroutines
// and memory stay bounded, and that other clients are served meanwhile.
func TestH2Hostile(t *testing.T) {
	// CVE-2023-44487: thousands of streams opened and reset, far beyond
	// MAX_CONCURRENT_STREAMS.
	t.Run("rapid_reset", func(t *testing.T) { attackStreams(t, rapidReset, 5000, 100, false) })
	t.Run("rapid_reset_started", func(t *testing.T) { attackStreams(t, rapidReset, 1000, 100, true) })
	t.Run("rapid_reset_over_limit", hostileRapidResetOverLimit)
	// CVE-2025-8671: streams the server resets, made to by the client.
	t.Run("made_you_reset", func(t *testing.T) { attackStreams(t, madeYouReset, 2000, 100, false) })
	t.Run("made_you_reset_started", func(t *testing.T) { attackStreams(t, madeYouReset, 1000, 100, true) })
	t.Run("connection_error_cancels", hostileConnErrorCancels)
	t.Run("continuation_flood", hostileContinuationFlood)
	t.Run("continuation_flood_empty", hostileContinuationFloodEmpty)
	t.Run("hpack_bomb", hostileHPACKBomb)
	// Floods of 17-18 MB calling for as much in answers: more than the
	// kernels' socket buffers on both sides can hold (some 10 MB on
	// loopback), so that a server that neither stops reading nor ends
	// the connection must hold the rest in its heap.
	t.Run("settings_flood", func(t *testing.T) {
		hostileFlood(t, h2frame.AppendSettings(nil), 2_000_000)
	})
	t.Run("ping_flood", func(t *testing.T) {
		hostileFlood(t, h2frame.AppendPing(nil, false, [8]byte{1}), 1_000_000)
	})
	t.Run("empty_data_flood", func(t *testing.T) {
		hostileFlood(t, nil, 200_000)
	})
	t.Run("empty_header_name", hostileEmptyHeaderName)
	t.Run("window_overflow", hostileWindowOverflow)
	t.Run("stream_ids", hostileStreamIDs)
	t.Run("closed_streams", hostileClosedStreams)
	t.Run("bad_preface", hostileBadPreface)
	t.Run("window_dribble", hostileWindowDribble)
	t.Run("zero_windows_memory", hostileZeroWindowsMemory)
	t.Run("window_never_opened", hostileWindowNeverOpened)
	t.Run("never_reads", hostileNeverReads)
}

// streamAttack is one way to open a stream and make it end at once:
// open appends the HEADERS (on stream id, which the caller's client
// hands out next), end the frames that end it.
type streamAttack struct {
	name string
	open func(c *hostileClient, b []byte, path string) []byte
	end  func(b []byte, id uint32) []byte
	// code is the RST_STREAM the server must answer end with (0: none,
	// the client resets the stream itself).
	code h2frame.ErrCode
	// response: a 4xx response instead of a reset is allowed (RFC 9113
	// section 8.1.1: a malformed request).
	response bool
	// never: the request is malformed, its handler must not run.
	never bool
}

func getBlock(c *hostileClient, b []byte, path string) []byte {
	b, _ = c.appendRequest(b, "GET", path, true)
	return b
}

// rapidReset: the client opens the stream and resets it (CVE-2023-44487).
var rapidReset = []streamAttack{{
	name: "RST_STREAM",
	open: getBlock,
	end:  func(b []byte, id uint32) []byte { return h2frame.AppendRSTStream(b, id, h2frame.CodeCancel) },
}}

// madeYouReset: the client makes the server reset the stream
// (CVE-2025-8671), each with the error code RFC 9113 calls for.
var madeYouReset = []streamAttack{{
	name: "WINDOW_UPDATE 0", // section 6.9
	open: getBlock,
	end:  func(b []byte, id uint32) []byte { return appendAnyWindowUpdate(b, id, 0) },
	code: rfcProtocol,
}, {
	name: "DATA after END_STREAM", // section 5.1, half-closed (remote)
	open: getBlock,
	end:  func(b []byte, id uint32) []byte { return h2frame.AppendData(b, id, false, []byte("x")) },
	code: rfcClosed,
}, {
	name: "content-length mismatch", // section 8.1.1
	open: func(c *hostileClient, b []byte, path string) []byte {
		b, _ = c.appendRequest(b, "POST", path, false, hpack.Field{Name: "content-length", Value: "10"})
		return b
	},
	end:      func(b []byte, id uint32) []byte { return h2frame.AppendData(b, id, true, []byte("abc")) },
	code:     rfcProtocol,
	response: true,
}, {
	name: "uppercase field name", // section 8.2
	open: func(c *hostileClient, b []byte, path string) []byte {
		b, _ = c.appendRequest(b, "GET", path, true, hpack.Field{Name: "X-Upper", Value: "1"})
		return b
	},
	end:      func(b []byte, id uint32) []byte { return b },
	code:     rfcProtocol,
	response: true,
	never:    true,
}}

// attackStreams runs attacks round-robin on n streams of /block, in
// batches. Back to back, each stream's ending frames follow its HEADERS
// in the same write, as a rapid reset sends them; staggered, a batch's
// HEADERS go first and its ending frames once its handlers have started
// (or a while has passed: refused streams never start), so that the
// streams end while their handlers run. Every handler lingers a second
// after its context ends: only a server that counts a handler against
// MAX_CONCURRENT_STREAMS until it returns, rather than until its stream
// ends, keeps them to 250. It checks that bound, the answer to each
// stream, and that the connection (unless GOAWAY ENHANCE_YOUR_CALM ended
// it) and the server still serve.
func attackStreams(t *testing.T, attacks []streamAttack, n, batch int, staggered bool) {
	s := startHostile(t, hostileOpts{linger: time.Second})
	stop := s.servedDuring(t)
	c := s.dial(t)
	if got := c.serverSettings[h2frame.SettingMaxConcurrentStreams]; got != hostileMaxStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", got, hostileMaxStreams)
	}
	kind := map[uint32]int{}
	var b []byte
	sent := 0
	for sent < n {
		b = b[:0]
		var ids []uint32
		starting := int64(0) // handlers the batch may start
		for i := range batch {
			k := (sent + i) % len(attacks)
			id := c.nextID
			b = attacks[k].open(c, b, "/block?s="+strconv.Itoa(int(id)))
			if !staggered {
				b = attacks[k].end(b, id)
			}
			if !attacks[k].never {
				starting++
			}
			kind[id] = k
			ids = append(ids, id)
		}
		if staggered {
			calls := s.h.calls.Load()
			if c.send(b) != nil {
				break
			}
			// Streams beyond the limit are refused and never start.
			pollUntil(100*time.Millisecond, func() bool { return s.h.calls.Load() >= calls+starting })
			b = b[:0]
			for _, id := range ids {
				b = attacks[kind[id]].end(b, id)
			}
		}
		if err := c.send(b); err != nil {
			t.Logf("write after %d streams: %v", sent, err)
			break
		}
		sent += batch
	}
	var ty hostileTally
	err := c.sync(&ty, timeout)
	stop()
	if err != nil && ty.goaway == nil {
		t.Fatalf("after %d streams: %v (%v)", sent, err, &ty)
	}
	c.collect(&ty, 50*time.Millisecond)
	bad := map[string]int{}
	var example []string
	for id, k := range kind {
		a := attacks[k]
		code, reset := ty.rst[id]
		status := ty.status[id]
		_, started := s.h.started.Load(strconv.Itoa(int(id)))
		var what string
		switch {
		case a.never && started:
			what = "handler called"
		case !ty.covers(id), ty.isLast(id):
			// GOAWAY's last stream may be the one that made the server
			// end the connection: that is its answer to it.
			continue
		case a.response && status >= 400 && status < 500:
			continue
		case a.code == 0 && (!reset || codeIn(code, rfcRefused, rfcProtocol)):
			// Reset by the client: refused (section 5.1.2) or not answered.
			continue
		case !reset:
			what = "no RST_STREAM"
		case code == a.code, !started && codeIn(code, rfcRefused, rfcProtocol):
			continue
		default:
			what = "RST_STREAM " + code.String()
		}
		bad[a.name+": "+what]++
		if len(example) < 4 {
			example = append(example, fmt.Sprintf("stream %d (%s): status %d, reset %v %v, handler started %v", id, a.name, status, reset, code, started))
		}
	}
	if len(bad) > 0 {
		t.Errorf("streams not answered as RFC 9113 says: %v; e.g. %v", bad, example)
	}
	if ty.goaway != nil || len(bad) > 0 {
		c.close() // for the handlers of streams not reset to end
	}
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == 0 }) {
		t.Errorf("%d handlers still run after their streams ended", s.h.running.Load())
	}
	t.Logf("%d streams sent; %d handlers called, at most %d at once; %v", sent, s.h.calls.Load(), s.h.peak.Load(), &ty)
	if p := s.h.peak.Load(); p > hostileMaxStreams {
		t.Errorf("%d handlers ran at once, beyond MAX_CONCURRENT_STREAMS %d", p, hostileMaxStreams)
	}
	if ty.goaway != nil && ty.goaway.ErrCode != rfcCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", ty.goaway.ErrCode)
	}
	if ty.goaway == nil && len(bad) == 0 {
		hostileSurvives(t, c)
	}
	c.close()
	s.settle(t)
}

// hostileRapidResetOverLimit: with MAX_CONCURRENT_STREAMS streams open
// (their handlers blocked), a thousand more opened and reset at once:
// each is refused (RST_STREAM REFUSED_STREAM or PROTOCOL_ERROR, RFC 9113
// section 5.1.2) or the connection gets GOAWAY ENHANCE_YOUR_CALM; none of
// their handlers runs.
func hostileRapidResetOverLimit(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t)
	var b []byte
	var open []uint32
	for range hostileMaxStreams {
		var id uint32
		b, id = c.appendRequest(b, "GET", "/block", true)
		open = append(open, id)
	}
	c.mustSend(b)
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == hostileMaxStreams }) {
		t.Fatalf("%d handlers running, want %d", s.h.running.Load(), hostileMaxStreams)
	}
	b = b[:0]
	var extra []uint32
	for range 1000 {
		var id uint32
		b, id = c.appendRequest(b, "GET", "/block", true)
		b = h2frame.AppendRSTStream(b, id, h2frame.CodeCancel)
		extra = append(extra, id)
	}
	werr := c.send(b)
	var ty hostileTally
	if err := c.sync(&ty, timeout); err != nil && ty.goaway == nil {
		t.Fatalf("after 1000 streams beyond the limit (write: %v): %v (%v)", werr, err, &ty)
	}
	t.Logf("%d handlers called, at most %d at once; %v", s.h.calls.Load(), s.h.peak.Load(), &ty)
	if p := s.h.peak.Load(); p > hostileMaxStreams {
		t.Errorf("%d handlers ran at once, beyond MAX_CONCURRENT_STREAMS %d", p, hostileMaxStreams)
	}
	if ty.goaway != nil && ty.goaway.ErrCode != rfcCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", ty.goaway.ErrCode)
	}
	missing := 0
	for _, id := range extra {
		code, ok := ty.rst[id]
		switch {
		case !ty.covers(id), ty.isLast(id):
		case !ok:
			missing++
		case !codeIn(code, rfcRefused, rfcProtocol):
			t.Errorf("stream %d beyond the limit: RST_STREAM %v, want REFUSED_STREAM or PROTOCOL_ERROR", id, code)
		}
	}
	if missing > 0 {
		t.Errorf("%d streams beyond the limit were not refused", missing)
	}
	if ty.goaway != nil {
		// What a connection error does to running handlers is
		// connection_error_cancels's.
		c.close()
	} else {
		b = b[:0]
		for _, id := range open {
			b = h2frame.AppendRSTStream(b, id, h2frame.CodeCancel)
		}
		c.mustSend(b)
	}
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == 0 }) {
		t.Errorf("%d handlers still run after their streams were reset", s.h.running.Load())
	}
	if ty.goaway == nil {
		hostileSurvives(t, c)
	}
	c.close()
	s.settle(t)
}

// hostileConnErrorCancels: a connection error ends every stream (RFC
// 9113 section 5.4.1: GOAWAY, then the connection is closed), so the
// handlers still running on it see their contexts end, even while the
// client keeps its end of the TCP connection open. A bound of seconds
// here is no CPU timing: a cancellation takes microseconds, and the
// failure it catches lasts until conn's FlushTimeout (5 s).
func hostileConnErrorCancels(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t)
	var b []byte
	for range 10 {
		b, _ = c.appendRequest(b, "GET", "/block", true)
	}
	c.mustSend(b)
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == 10 }) {
		t.Fatalf("%d handlers running, want 10", s.h.running.Load())
	}
	c.mustSend(appendAnyWindowUpdate(nil, 0, 0)) // section 6.9: connection error PROTOCOL_ERROR
	e := c.await(0, timeout)
	if !e.goaway || e.code != rfcProtocol {
		t.Fatalf("WINDOW_UPDATE 0 on the connection: want GOAWAY PROTOCOL_ERROR, got %v", e)
	}
	if !pollUntil(2*time.Second, func() bool { return s.h.running.Load() == 0 }) {
		t.Errorf("%d handlers still run 2s after GOAWAY %v, the client's end of the connection open", s.h.running.Load(), e.code)
	}
	c.close()
	s.settle(t)
}

// appendRawHpackInt appends an HPACK integer (RFC 7541 section 5.1) with an
// n-bit prefix, the first byte's other bits set to flags.
func appendRawHpackInt(dst []byte, n uint, flags byte, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(dst, flags|byte(v))
	}
	dst = append(dst, flags|byte(limit))
	for v -= limit; v >= 128; v >>= 7 {
		dst = append(dst, byte(v&127)|128)
	}
	return append(dst, byte(v))
}

// appendRawLiteral appends a literal field without indexing, with a new
// name, not Huffman coded (RFC 7541 section 6.2.2): it leaves the
// dynamic tables alone, so the client's encoder stays in step with the
// server's decoder whatever the server makes of the field.
func appendRawLiteral(dst []byte, name, value string) []byte {
	dst = append(dst, 0)
	dst = appendRawHpackInt(dst, 7, 0, uint64(len(name)))
	dst = append(dst, name...)
	dst = appendRawHpackInt(dst, 7, 0, uint64(len(value)))
	return append(dst, value...)
}

// hostileContinuationFlood: CVE-2023-45288. A HEADERS frame without
// END_HEADERS, then CONTINUATION frames of valid fields without end: the
// server must end the connection (GOAWAY) after a bounded amount, its
// memory bounded meanwhile.
func hostileContinuationFlood(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t)
	var frag []byte
	for len(frag) < h2frame.DefaultMaxFrameSize-1100 {
		frag = appendRawLiteral(frag, "x-flood", strings.Repeat("a", 1000))
	}
	id := c.newStream()
	var batch []byte
	for range 16 {
		batch = h2frame.AppendContinuation(batch, id, false, frag)
	}
	first := h2frame.AppendHeaders(nil, id, true, false, c.block(requestFields("GET", "/flood")...))
	before := heapInUse()
	stopHeap := make(chan struct{})
	peak := peakHeap(stopHeap)
	stop := s.servedDuring(t)
	const limit = 48 << 20
	written, werr := 0, c.send(first)
	for written < limit && werr == nil && !c.ended() {
		werr = c.sendWithin(batch, 2*time.Second)
		written += len(batch)
	}
	stop()
	close(stopHeap)
	growth := int64(<-peak) - int64(before)
	e := c.await(0, timeout)
	t.Logf("%d MiB of CONTINUATION written (write: %v); %v; heap grew %d KiB", written>>20, werr, e, growth>>10)
	if written >= limit {
		t.Errorf("the server took %d MiB of one field block without ending the connection", written>>20)
	}
	if !e.goaway || !codeIn(e.code, rfcCalm, rfcProtocol) {
		t.Errorf("want GOAWAY ENHANCE_YOUR_CALM or PROTOCOL_ERROR, got %v", e)
	}
	if growth > 16<<20 {
		t.Errorf("heap grew %d MiB during the flood", growth>>20)
	}
	if n := s.h.calls.Load(); n != 0 {
		t.Errorf("the handler was called %d times for a field block never ended", n)
	}
	c.close()
	s.settle(t)
}

// hostileContinuationFloodEmpty: CVE-2023-45288 with empty CONTINUATION
// frames, which grow no field block: the connection must still end
// after a bounded number of them.
func hostileContinuationFloodEmpty(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t)
	id := c.newStream()
	batch := bytes.Repeat(h2frame.AppendContinuation(nil, id, false, nil), 10_000)
	const limit = 10
	werr := c.send(h2frame.AppendHeaders(nil, id, true, false, c.block(requestFields("GET", "/flood")...)))
	sent := 0
	for sent < limit && werr == nil && !c.ended() {
		werr = c.sendWithin(batch, 2*time.Second)
		sent++
	}
	e := c.await(0, 2*time.Second)
	t.Logf("%d empty CONTINUATION frames written (write: %v); %v", sent*10_000, werr, e)
	if sent >= limit && !e.goaway && !e.closed {
		t.Errorf("the server took %d empty CONTINUATION frames without ending the connection", sent*10_000)
	} else if e.goaway && !codeIn(e.code, rfcCalm, rfcProtocol) {
		t.Errorf("want GOAWAY ENHANCE_YOUR_CALM or PROTOCOL_ERROR, got %v", e)
	}
	c.close()
	s.settle(t)
}

// ended reports, without waiting, whether the server sent GOAWAY or the
// connection ended.
func (c *hostileClient) ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readErr != nil {
		return true
	}
	for _, f := range c.queue {
		if f.Type == h2frame.TypeGoAway {
			return true
		}
	}
	return false
}

// hostileHPACKBomb: a field block of 16 KiB whose fields reference one 4 KB
// dynamic table entry 16,000 times decodes to 64 MB: the server must
// refuse it (431, or a stream or connection error) without allocating
// that, and not call the handler.
func hostileHPACKBomb(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t)
	bomb := hpack.Field{Name: "x-bomb", Value: strings.Repeat("b", 4000)}
	fields := requestFields("GET", "/bomb")
	for range 16000 {
		fields = append(fields, bomb)
	}
	calls := s.h.calls.Load()
	before := heapInUse()
	stopHeap := make(chan struct{})
	peak := peakHeap(stopHeap)
	survived := true
	for i := 0; i < 8 && survived; i++ {
		id := c.newStream()
		c.mustSend(appendFieldBlock(nil, id, true, c.block(fields...)))
		e := c.await(id, timeout)
		switch {
		case e.status == http.StatusRequestHeaderFieldsTooLarge && (e.endBody || e.rst):
		case e.rst && codeIn(e.code, rfcProtocol, rfcRefused, rfcCalm):
		case e.goaway && codeIn(e.code, rfcProtocol, rfcCalm):
			survived = false
		default:
			t.Fatalf("HPACK bomb on stream %d: want 431, RST_STREAM or GOAWAY, got %v", id, e)
		}
		if i == 0 {
			t.Logf("HPACK bomb: %v", e)
		}
	}
	close(stopHeap)
	growth := int64(<-peak) - int64(before)
	t.Logf("heap grew %d KiB", growth>>10)
	if growth > 16<<20 {
		t.Errorf("heap grew %d MiB decoding HPACK bombs", growth>>20)
	}
	if n := s.h.calls.Load() - calls; n != 0 {
		t.Errorf("the handler was called %d times with a bomb's fields", n)
	}
	if survived {
		hostileSurvives(t, c)
	}
	c.close()
	s.settle(t)
}

// hostileFlood: CVE-2019-9512 (PING), 9515 (SETTINGS), 9518 (empty DATA).
// A client floods frames and never reads what they call for: the
// server's memory stays bounded (its output queue is bounded by conn's
// HighWater, past which it stops reading; or it ends the connection,
// with GOAWAY ENHANCE_YOUR_CALM), and other clients are served. frame is
// the frame repeated, nil for empty DATA on a stream whose handler
// reads its body.
func hostileFlood(t *testing.T, frame []byte, count int) {
	// A HighWater of 256 KiB and a socket send buffer of 16 KiB: what
	// the server and the kernel may hold is well below what the flood's
	// answers take, so that a server that stops reading is seen to.
	s := startHostile(t, hostileOpts{highWater: 256 << 10, sendBuffer: 16 << 10})
	c := dialHostileNoRead(t, s.addr, 4<<10)
	if frame == nil {
		b, id := c.appendRequest(nil, "POST", "/sink", false)
		c.mustSend(b)
		frame = h2frame.AppendData(nil, id, false, nil)
	}
	const batch = 1000
	frames := bytes.Repeat(frame, batch)
	lost := s.lostOutput()
	before := heapInUse()
	stopHeap := make(chan struct{})
	peak := peakHeap(stopHeap)
	stop := s.servedDuring(t)
	sent := 0
	var werr error
	for sent < count && werr == nil {
		// A write that makes no progress for a while: the server paused
		// reading us.
		werr = c.sendWithin(frames, 500*time.Millisecond)
		sent += batch
	}
	stop()
	close(stopHeap)
	growth := int64(<-peak) - int64(before)
	outcome := "all taken"
	switch {
	case closedByServer(werr):
		outcome = "closed: " + werr.Error()
	case werr != nil:
		outcome = "paused"
	}
	// Read what the server sent, for its GOAWAY, if any.
	c.startReading()
	var ty hostileTally
	rerr := c.collect(&ty, 500*time.Millisecond)
	t.Logf("%d frames written, %s; heap grew %d KiB; then read %v; output dropped %d KiB",
		sent, outcome, growth>>10, &ty, (s.lostOutput()-lost)>>10)
	if growth > 4<<20 {
		t.Errorf("heap grew %d KiB during the flood", growth>>10)
	}
	if l := s.lostOutput() - lost; l > s.maxQueued() {
		t.Errorf("%d KiB of output was queued to a client that reads nothing", l>>10)
	}
	if ty.goaway != nil && ty.goaway.ErrCode != rfcCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", ty.goaway.ErrCode)
	}
	if werr == nil && ty.goaway == nil && !closedByServer(rerr) {
		// Every frame taken, and the connection still open: their
		// answers were dropped or queued (the heap bound above), and the
		// flood costs CPU for as long as the client likes.
		t.Errorf("%d frames taken without GOAWAY, closing or pausing", sent)
	}
	c.close()
	s.settle(t)
}

// hostileEmptyHeaderName: CVE-2019-9516. A field with an empty name is a
// malformed request (RFC 9113 section 8.2.1): stream error
// PROTOCOL_ERROR, or a connection error; after a stream error the
// connection serves other streams.
func hostileEmptyHeaderName(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t)
	calls := s.h.calls.Load()
	b, id := c.appendRequest(nil, "GET", "/x", true, hpack.Field{Name: "", Value: "x"})
	c.mustSend(b)
	e := c.await(id, timeout)
	ok := false
	switch {
	case e.rst && e.code == rfcProtocol, e.status == 400 && (e.endBody || e.rst):
		ok = true
	case e.goaway && codeIn(e.code, rfcProtocol, h2frame.CodeCompressionError):
	default:
		t.Errorf("empty field name: want RST_STREAM or GOAWAY PROTOCOL_ERROR, got %v", e)
	}
	t.Logf("empty field name: %v", e)
	if ok {
		hostileSurvives(t, c)
	}
	if n := s.h.calls.Load() - calls; n > 1 {
		t.Errorf("the handler was called %d times", n)
	} else if n == 1 && !ok {
		t.Errorf("the handler was called with an empty field name")
	}
	c.close()
	s.settle(t)
}

// hostileWindowOverflow: a WINDOW_UPDATE taking a window past 2^31-1 (RFC
// 9113 section 6.9.1): on a stream, RST_STREAM FLOW_CONTROL_ERROR; on
// the connection, GOAWAY FLOW_CONTROL_ERROR; and a SETTINGS_INITIAL_
// WINDOW_SIZE that takes an open stream's window past it, GOAWAY
// FLOW_CONTROL_ERROR (section 6.9.2).
func hostileWindowOverflow(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	t.Run("stream", func(t *testing.T) {
		c := s.dial(t)
		id := c.get("/block")
		if !pollUntil(timeout, func() bool { return s.h.running.Load() == 1 }) {
			t.Fatal("the handler did not start")
		}
		c.mustSend(h2frame.AppendWindowUpdate(nil, id, h2frame.MaxWindowSize))
		if expectHostileEnd(t, c, id, []h2frame.ErrCode{rfcFlow}, []h2frame.ErrCode{rfcFlow}) {
			hostileSurvives(t, c)
		}
		if !pollUntil(timeout, func() bool { return s.h.running.Load() == 0 }) {
			t.Error("the handler of the reset stream still runs")
		}
	})
	t.Run("connection", func(t *testing.T) {
		c := s.dial(t)
		c.mustSend(h2frame.AppendWindowUpdate(nil, 0, h2frame.MaxWindowSize))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcFlow})
	})
	t.Run("connection_sum", func(t *testing.T) {
		c := s.dial(t)
		c.mustSend(h2frame.AppendWindowUpdate(h2frame.AppendWindowUpdate(nil, 0, 1<<30), 0, 1<<30))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcFlow})
	})
	t.Run("initial_window_size", func(t *testing.T) {
		c := s.dial(t)
		id := c.get("/block")
		// The stream's window: 65,535 at first, now 2^31-1.
		c.mustSend(h2frame.AppendWindowUpdate(nil, id, h2frame.MaxWindowSize-65535))
		c.mustSend(h2frame.AppendSettings(nil, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Value: 65536}))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcFlow})
	})
	s.settle(t)
}

// hostileStreamIDs: client streams must be odd and increasing (RFC 9113
// section 5.1.1): an even one, one below a stream already opened, and
// a closed stream's reused, are connection errors PROTOCOL_ERROR (or
// STREAM_CLOSED for the closed stream, section 5.1); HEADERS again on a
// stream the client half-closed is a stream error STREAM_CLOSED.
func hostileStreamIDs(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	calls := s.h.calls.Load()
	t.Run("even", func(t *testing.T) {
		c := s.dial(t)
		c.mustSend(appendFieldBlock(nil, 2, true, c.block(requestFields("GET", "/x")...)))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcProtocol})
	})
	t.Run("backwards", func(t *testing.T) {
		c := s.dial(t)
		c.mustSend(appendFieldBlock(nil, 5, true, c.block(requestFields("GET", "/block")...)))
		c.mustSend(appendFieldBlock(nil, 3, true, c.block(requestFields("GET", "/x")...)))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcProtocol, rfcClosed})
	})
	t.Run("reuse_closed", func(t *testing.T) {
		c := s.dial(t)
		if _, err := c.roundTrip("/", timeout); err != nil {
			t.Fatal(err)
		}
		c.mustSend(appendFieldBlock(nil, 1, true, c.block(requestFields("GET", "/x")...)))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcProtocol, rfcClosed})
	})
	t.Run("reuse_half_closed", func(t *testing.T) {
		c := s.dial(t)
		id := c.get("/block")
		c.mustSend(appendFieldBlock(nil, id, false, c.block(requestFields("GET", "/x")...)))
		if expectHostileEnd(t, c, id, []h2frame.ErrCode{rfcClosed}, []h2frame.ErrCode{rfcProtocol, rfcClosed}) {
			hostileSurvives(t, c)
		}
	})
	// The two /block streams only: no handler for a stream with a bad
	// identifier.
	if n := s.h.calls.Load() - calls; n > 2 {
		t.Errorf("%d handler calls, want 2 (/block's)", n)
	}
	s.settle(t)
}

// hostileClosedStreams: DATA on a stream that finished, or that the client
// reset, is an error STREAM_CLOSED (RFC 9113 section 5.1: a stream error
// after RST_STREAM, a connection error after END_STREAM, which a server
// that forgot the stream may answer as a stream error); DATA on a stream
// never opened is a connection error PROTOCOL_ERROR.
func hostileClosedStreams(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	t.Run("after_end", func(t *testing.T) {
		c := s.dial(t)
		if _, err := c.roundTrip("/", timeout); err != nil {
			t.Fatal(err)
		}
		c.mustSend(h2frame.AppendData(nil, 1, true, []byte("late")))
		if expectHostileEnd(t, c, 1, []h2frame.ErrCode{rfcClosed}, []h2frame.ErrCode{rfcClosed}) {
			hostileSurvives(t, c)
		}
	})
	t.Run("after_reset", func(t *testing.T) {
		c := s.dial(t)
		b, id := c.appendRequest(nil, "POST", "/block", false)
		c.mustSend(b)
		if !pollUntil(timeout, func() bool { return s.h.running.Load() == 1 }) {
			t.Fatal("the handler did not start")
		}
		c.mustSend(h2frame.AppendRSTStream(nil, id, h2frame.CodeCancel))
		c.mustSend(h2frame.AppendData(nil, id, true, []byte("late")))
		if expectHostileEnd(t, c, id, []h2frame.ErrCode{rfcClosed}, []h2frame.ErrCode{rfcClosed}) {
			hostileSurvives(t, c)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c := s.dial(t)
		c.mustSend(h2frame.AppendData(nil, 7, true, []byte("never opened")))
		expectHostileEnd(t, c, 0, nil, []h2frame.ErrCode{rfcProtocol})
	})
	s.settle(t)
}

// hostileBadPreface: RFC 9113 section 3.4. Garbage instead of the preface
// gets the connection closed; bytes that are an HTTP/1.1 request are
// served as one on an h2c server, "Upgrade: h2c" ignored; the preface
// not followed by SETTINGS is a connection error PROTOCOL_ERROR.
func hostileBadPreface(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	exchange := func(t *testing.T, b string) string {
		nc := rawConn(t, s.addr)
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(nc, b)
		got, err := io.ReadAll(nc)
		if err != nil && !isReset(err) {
			t.Errorf("the connection was not closed: %v after %q", err, shorten(string(got)))
		}
		return string(got)
	}
	for _, c := range []struct{ name, send string }{
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"},
		{"corrupt_preface", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"},
		{"truncated_preface_then_garbage", "PRI * HTTP/2.0\r\n\r\nSM\r\n\x00\x00\x00\x00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := exchange(t, c.send)
			if strings.HasPrefix(got, "HTTP/1.1 2") {
				t.Errorf("served: %q", shorten(got))
			}
			t.Logf("%q", shorten(got))
		})
	}
	t.Run("http1_fallback", func(t *testing.T) {
		got := exchange(t, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "ok") {
			t.Errorf("an HTTP/1.1 request on an h2c server: %q", shorten(got))
		}
	})
	t.Run("upgrade_h2c_ignored", func(t *testing.T) {
		got := exchange(t, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.HasSuffix(got, "ok") {
			t.Errorf("an Upgrade: h2c request: %q", shorten(got))
		}
	})
	t.Run("no_settings_first", func(t *testing.T) {
		nc := rawConn(t, s.addr)
		io.WriteString(nc, h2frame.Preface)
		nc.Write(h2frame.AppendPing(nil, false, [8]byte{}))
		// The server's SETTINGS may come first; then GOAWAY, or a close.
		c := &hostileClient{t: t, nc: nc, dec: hpack.NewDecoder(hpack.DefaultDynamicTableSize, 0)}
		for {
			f, err := c.readFrame()
			if err != nil {
				if !closedByServer(err) {
					t.Errorf("the connection was not closed: %v", err)
				}
				t.Logf("closed: %v", err)
				return
			}
			if f.Type == h2frame.TypeGoAway {
				if f.ErrCode != rfcProtocol {
					t.Errorf("GOAWAY %v, want PROTOCOL_ERROR", f.ErrCode)
				}
				t.Logf("%v", f)
				return
			}
			if f.Type != h2frame.TypeSettings && f.Type != h2frame.TypeWindowUpdate {
				t.Errorf("answered %v to a preface without SETTINGS", f)
			}
		}
	})
	s.settle(t)
}

// hostileWindowDribble: CVE-2019-9511, 9517. A client whose stream
// window is 0 opens it a byte at a time: the server must not answer each byte
// with a DATA frame of its own (a frame header per byte of data, and as
// many writes); once the window opens the response completes.
func hostileWindowDribble(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Value: 0})
	const size = 256 << 10
	id := c.get("/big?n=" + strconv.Itoa(size))
	var dataFrames, dataBytes int
	count := func(f hostileFrame) {
		if f.Type == h2frame.TypeData && f.Stream == id {
			dataFrames++
			dataBytes += len(f.Data)
		}
	}
	const grants = 1000
	for range grants {
		c.mustSend(h2frame.AppendWindowUpdate(nil, id, 1))
		time.Sleep(time.Millisecond)
		for {
			f, err := c.next(0)
			if err != nil {
				break
			}
			count(f)
		}
	}
	for {
		f, err := c.next(200 * time.Millisecond)
		if err != nil {
			break
		}
		count(f)
	}
	t.Logf("%d bytes granted a byte at a time: %d DATA frames, %d bytes", grants, dataFrames, dataBytes)
	if dataFrames > dataBytes/16+2 {
		t.Errorf("%d DATA frames for %d bytes: the server follows a window opened a byte at a time", dataFrames, dataBytes)
	}
	// Open both windows: the rest must come.
	c.mustSend(h2frame.AppendWindowUpdate(h2frame.AppendWindowUpdate(nil, id, size), 0, size))
	e := c.await(id, timeout)
	if !e.endBody || dataBytes+e.body != size {
		t.Errorf("after opening the window: %v, %d bytes in all, want %d", e, dataBytes+e.body, size)
	}
	c.close()
	s.settle(t)
}

// hostileZeroWindowsMemory: many streams of large responses to a client
// whose windows are 0: the server holds a bounded part of each, not the
// responses.
func hostileZeroWindowsMemory(t *testing.T) {
	s := startHostile(t, hostileOpts{})
	c := s.dial(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Value: 0})
	const streams, size = 64, 1 << 20
	before := heapInUse()
	stopHeap := make(chan struct{})
	peak := peakHeap(stopHeap)
	var b []byte
	var ids []uint32
	for range streams {
		var id uint32
		b, id = c.appendRequest(b, "GET", "/big?n="+strconv.Itoa(size), true)
		ids = append(ids, id)
	}
	c.mustSend(b)
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == streams }) {
		t.Errorf("%d handlers running, want %d", s.h.running.Load(), streams)
	}
	time.Sleep(300 * time.Millisecond) // for the handlers to write what they may
	close(stopHeap)
	growth := int64(<-peak) - int64(before)
	t.Logf("%d streams of %d MiB to a zero window: heap grew %d KiB", streams, size>>20, growth>>10)
	if growth > 24<<20 {
		t.Errorf("heap grew %d MiB for %d MiB of responses that cannot be sent", growth>>20, streams*size>>20)
	}
	b = b[:0]
	for _, id := range ids {
		b = h2frame.AppendRSTStream(b, id, h2frame.CodeCancel)
	}
	c.mustSend(b)
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == 0 }) {
		t.Errorf("%d handlers still write to reset streams", s.h.running.Load())
	}
	c.close()
	s.settle(t)
}

// hostileWindowNeverOpened: a client that reads but never opens its zero
// window gets the stream or the connection dropped after IdleTimeout,
// and the handler writing to it returns.
func hostileWindowNeverOpened(t *testing.T) {
	s := startHostile(t, hostileOpts{idle: time.Second})
	c := s.dial(t, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Value: 0})
	id := c.get("/big?n=" + strconv.Itoa(1<<20))
	start := time.Now()
	e := c.await(id, 5*time.Second)
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), e)
	if !e.rst && !e.goaway && !e.closed {
		t.Errorf("a window never opened: want the stream or the connection dropped after IdleTimeout (1s), got %v", e)
		c.close()
	}
	if !pollUntil(timeout, func() bool { return s.h.running.Load() == 0 }) {
		t.Error("the handler still runs")
	}
	c.close()
	s.settle(t)
}

// hostileNeverReads: a client with its windows wide open asks for large
// responses on many streams and reads nothing: the server's queued
// output stays bounded (conn's HighWater), other clients are served, and
// the connection is dropped after IdleTimeout.
func hostileNeverReads(t *testing.T) {
	s := startHostile(t, hostileOpts{idle: time.Second})
	c := dialHostileNoRead(t, s.addr, 4<<10, h2frame.Setting{ID: h2frame.SettingInitialWindowSize, Value: h2frame.MaxWindowSize})
	const streams, size = 100, 1 << 20
	b := h2frame.AppendWindowUpdate(nil, 0, h2frame.MaxWindowSize-65535)
	for range streams {
		b, _ = c.appendRequest(b, "GET", "/big?n="+strconv.Itoa(size), true)
	}
	open := s.openConns()
	lost := s.lostOutput()
	before := heapInUse()
	stopHeap := make(chan struct{})
	peak := peakHeap(stopHeap)
	stop := s.servedDuring(t)
	c.mustSend(b)
	time.Sleep(500 * time.Millisecond)
	stop()
	dropped := pollUntil(8*time.Second, func() bool { return s.openConns() < open })
	close(stopHeap)
	growth := int64(<-peak) - int64(before)
	t.Logf("%d streams of %d MiB not read: heap grew %d KiB; dropped %v, output dropped %d KiB",
		streams, size>>20, growth>>10, dropped, (s.lostOutput()-lost)>>10)
	if growth > 24<<20 {
		t.Errorf("heap grew %d MiB for a client that reads nothing", growth>>20)
	}
	if l := s.lostOutput() - lost; l > s.maxQueued() {
		t.Errorf("%d KiB of output was queued to a client that reads nothing", l>>10)
	}
	if dropped {
		// The connection that closed must be this one: reading it now
		// finds what the kernel holds, then its end.
		c.startReading()
		if e := c.await(0, 5*time.Second); !e.closed && !e.goaway {
			t.Errorf("the connection that read nothing is still open: %v", e)
			dropped = false
		}
	}
	if !dropped {
		t.Errorf("a connection that reads nothing was not dropped after IdleTimeout")
	}
	if !pollUntil(5*time.Second, func() bool { return s.h.running.Load() == 0 }) {
		t.Errorf("%d handlers still write to a dropped connection", s.h.running.Load())
		c.close()
	}
	c.close()
	s.settle(t)
}
