//go:build linux

// WebSocket interop: package ws against the two Go implementations most
// servers and clients meet, gorilla/websocket and coder/websocket, each way
// round (their clients against ws.Upgrader on httpd, ws.Dialer against
// their servers on net/http), in plaintext and over TLS, with and without
// permessage-deflate. They are tests, not benchmarks: every message is
// compared byte for byte, every close code and negotiated header checked,
// and compression proven by the bytes on the wire. They live here, not in
// package ws, so that gracepoll's go.mod does not depend on its peers.

package peers

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/ws"
)

// wsiSizes are the message sizes every echo test sends: the edges of the
// three length encodings of a frame header (7 bits, 16 bits, 64 bits), and
// DefaultMaxMessageSize itself, which both sides of package ws must accept.
var wsiSizes = []int{0, 1, 125, 126, 65535, 65536, ws.DefaultMaxMessageSize}

// wsiLimit is the MaxMessageSize of a connection that may receive
// wsiSizes' messages compressed. Package ws bounds a compressed message
// before inflating too, and a peer that compresses an incompressible
// message of DefaultMaxMessageSize sends a little more than that (deflate's
// stored blocks), so the bound has room for deflate's overhead; without
// compression the default is kept, to check that a message of exactly the
// limit is accepted.
func wsiLimit(compressed bool) int64 {
	if compressed {
		return ws.DefaultMaxMessageSize + 4096
	}
	return 0
}

// wsiPayloads caches the messages, text and binary, of each size.
var wsiPayloads sync.Map // [2]int{op, n} -> []byte

// wsiPayload returns a message of n bytes. Text is compressible UTF-8 with
// multi-byte characters (so that fragments and frames split characters);
// binary is random, every byte value, not compressible.
func wsiPayload(op ws.Opcode, n int) []byte {
	key := [2]int{int(op), n}
	if p, ok := wsiPayloads.Load(key); ok {
		return p.([]byte)
	}
	b := make([]byte, 0, n+64)
	if op == ws.OpText {
		for i := 0; len(b) < n; i++ {
			b = fmt.Appendf(b, "%d héllo wörld ✓ the quick brown fox; ", i%97)
		}
		b = b[:n]
		for !utf8.Valid(b) {
			b = b[:len(b)-1] // a character cut in two at the end
		}
		for len(b) < n {
			b = append(b, '.')
		}
	} else {
		r := rand.New(rand.NewPCG(uint64(n), 7))
		b = b[:n]
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	wsiPayloads.Store(key, b)
	return b
}

// wsiRandomText returns n random letters: text that deflate alone shrinks
// by about 40%, but to almost nothing against a window holding a copy of
// it, so that context takeover shows on the wire. n is kept small (2000 in
// the tests): BestSpeed's hash table loses most of a long random message's
// positions, so only a short one is found again whole.
func wsiRandomText(n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 11))
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	return b
}

// wsiRepeat sends msg twice and returns what the second round trip took
// on the wire, read and written.
func wsiRepeat(t *testing.T, e wsiEchoer, cc *wsiCountConn, msg []byte) (rd, wr int64) {
	t.Helper()
	for i := range 2 {
		rd0, wr0 := cc.rd.Load(), cc.wr.Load()
		if err := e.write(ws.OpText, msg); err != nil {
			t.Fatal(err)
		}
		if _, got, err := e.read(); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("round trip %d of %d bytes: %d back, %v", i, len(msg), len(got), err)
		}
		rd, wr = cc.rd.Load()-rd0, cc.wr.Load()-wr0
	}
	return rd, wr
}

var wsiCert struct {
	once           sync.Once
	server, client *tls.Config
	err            error
}

// wsiTLS returns the server and client TLS configurations of a self-signed
// certificate for 127.0.0.1, made once.
func wsiTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	wsiCert.once.Do(func() {
		c, err := NewCert()
		if err != nil {
			wsiCert.err = err
			return
		}
		if wsiCert.server, wsiCert.err = c.ServerConfig(); wsiCert.err != nil {
			return
		}
		wsiCert.client, wsiCert.err = c.ClientConfig()
	})
	if wsiCert.err != nil {
		t.Fatal(wsiCert.err)
	}
	return wsiCert.server.Clone(), wsiCert.client.Clone()
}

// wsiCountConn counts the bytes a client reads and writes on the TCP
// connection (under TLS, if any), so that compression can be seen on the
// wire; with record set it keeps what was written.
type wsiCountConn struct {
	net.Conn
	rd, wr atomic.Int64
	record bool
	mu     sync.Mutex
	out    bytes.Buffer
}

func (c *wsiCountConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.rd.Add(int64(n))
	return n, err
}

func (c *wsiCountConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wr.Add(int64(n))
	if c.record {
		c.mu.Lock()
		c.out.Write(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// written returns a copy of what was written.
func (c *wsiCountConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

// wsiDialCounting returns a dial function that wraps its connection in a
// wsiCountConn and hands it over on ch.
func wsiDialCounting(record bool, ch chan<- *wsiCountConn) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &wsiCountConn{Conn: nc, record: record}
		select {
		case ch <- cc:
		default: // a second dial (none is expected): not wsiCounted
		}
		return cc, nil
	}
}

// The commands a test sends the echo servers, as text messages: anything
// else is echoed.
const (
	wsiCmdClose = "cmd:close" // the server closes with 4000 "x"
	wsiCmdProto = "cmd:proto" // the server answers "proto:" and its subprotocol
	wsiCmdPongs = "cmd:pongs" // gorilla's server answers how many pongs it had
)

// wsiEcho is the ws.Handler of our echo server. It reports how each
// connection ended on closed, and write errors (there should be none) on
// errs.
type wsiEcho struct {
	ws.BaseHandler
	closed chan *ws.CloseError
	errs   chan error
}

func (h *wsiEcho) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) {
	var err error
	switch {
	case op == ws.OpText && string(data) == wsiCmdClose:
		err = c.Close(4000, "x")
	case op == ws.OpText && string(data) == wsiCmdProto:
		err = c.WriteMessage(ws.OpText, []byte("proto:"+c.Subprotocol()))
	default:
		err = c.WriteMessage(op, data)
	}
	if err != nil {
		select {
		case h.errs <- err:
		default:
		}
	}
}

func (h *wsiEcho) OnClose(_ *ws.Conn, err *ws.CloseError) {
	select {
	case h.closed <- err:
	default:
	}
}

// wsiServer is our echo server on httpd.
type wsiServer struct {
	srv  *httpd.Server
	url  string // ws:// or wss:// and /ws
	echo *wsiEcho
}

// wsiStartServer serves up (its Handler set to a fresh wsiEcho) at /ws on
// 127.0.0.1, over TLS if secure, until the test ends.
func wsiStartServer(t *testing.T, up *ws.Upgrader, secure bool) *wsiServer {
	t.Helper()
	s := &wsiServer{echo: &wsiEcho{closed: make(chan *ws.CloseError, 1024), errs: make(chan error, 16)}}
	up.Handler = s.echo
	mux := http.NewServeMux()
	mux.Handle("/ws", up)
	s.srv = &httpd.Server{Handler: mux}
	scheme := "ws"
	if secure {
		s.srv.TLSConfig, _ = wsiTLS(t)
		scheme = "wss"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.srv.Serve(ln)
	s.url = scheme + "://" + ln.Addr().String() + "/ws"
	t.Cleanup(func() {
		s.srv.Close()
		select {
		case err := <-s.echo.errs:
			t.Errorf("server write: %v", err)
		default:
		}
	})
	return s
}

// nextClose waits for the next connection end our server reports.
func (s *wsiServer) nextClose(t *testing.T) *ws.CloseError {
	t.Helper()
	select {
	case e := <-s.echo.closed:
		return e
	case <-time.After(ioTimeout):
		t.Fatal("no OnClose on the server")
		return nil
	}
}

// wsiEchoer is a client connection of any of the three implementations,
// reduced to what the echo check needs.
type wsiEchoer interface {
	write(op ws.Opcode, p []byte) error
	read() (ws.Opcode, []byte, error)
}

type wsiGorilla struct{ c *websocket.Conn }

func (g wsiGorilla) write(op ws.Opcode, p []byte) error {
	g.c.SetWriteDeadline(time.Now().Add(ioTimeout))
	return g.c.WriteMessage(int(op), p)
}

func (g wsiGorilla) read() (ws.Opcode, []byte, error) {
	g.c.SetReadDeadline(time.Now().Add(ioTimeout))
	mt, p, err := g.c.ReadMessage()
	return ws.Opcode(mt), p, err
}

type wsiCoder struct {
	ctx context.Context
	c   *coder.Conn
}

func (c wsiCoder) write(op ws.Opcode, p []byte) error {
	return c.c.Write(c.ctx, coder.MessageType(op), p)
}

func (c wsiCoder) read() (ws.Opcode, []byte, error) {
	mt, p, err := c.c.Read(c.ctx)
	return ws.Opcode(mt), p, err
}

type wsiOurs struct{ c *ws.ClientConn }

func (w wsiOurs) write(op ws.Opcode, p []byte) error { return w.c.WriteMessage(op, p) }

func (w wsiOurs) read() (ws.Opcode, []byte, error) {
	w.c.SetReadDeadline(time.Now().Add(ioTimeout))
	return w.c.ReadMessage()
}

// wsiCheckEcho sends a text and a binary message of every size and checks
// that each comes back whole and alone. With the largest text message it
// checks compression on the wire: both ways under a quarter of the
// message when compressed, at least all of it when not.
func wsiCheckEcho(t *testing.T, c wsiEchoer, cc *wsiCountConn, compressed bool) {
	t.Helper()
	for _, op := range []ws.Opcode{ws.OpText, ws.OpBinary} {
		for _, n := range wsiSizes {
			msg := wsiPayload(op, n)
			rd0, wr0 := cc.rd.Load(), cc.wr.Load()
			if err := c.write(op, msg); err != nil {
				t.Fatalf("write %v %d: %v", op, n, err)
			}
			gop, got, err := c.read()
			if err != nil {
				t.Fatalf("read %v %d: %v", op, n, err)
			}
			if gop != op || !bytes.Equal(got, msg) {
				t.Fatalf("sent %v of %d bytes, got %v of %d bytes (equal %v)", op, n, gop, len(got), bytes.Equal(got, msg))
			}
			if op != ws.OpText || n != ws.DefaultMaxMessageSize {
				continue
			}
			rd, wr := cc.rd.Load()-rd0, cc.wr.Load()-wr0
			if compressed && (rd > int64(n)/4 || wr > int64(n)/4) {
				t.Errorf("compressed: %d bytes of text took %d bytes out, %d in", n, wr, rd)
			}
			if !compressed && (rd < int64(n) || wr < int64(n)) {
				t.Errorf("not compressed: %d bytes of text took only %d bytes out, %d in", n, wr, rd)
			}
		}
	}
}

// wsiCheckProto asks the server for its subprotocol.
func wsiCheckProto(t *testing.T, c wsiEchoer, want string) {
	t.Helper()
	if err := c.write(ws.OpText, []byte(wsiCmdProto)); err != nil {
		t.Fatal(err)
	}
	_, got, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "proto:"+want {
		t.Errorf("server's subprotocol: got %q, want %q", got, "proto:"+want)
	}
}

// wsiCounted takes the connection a wsiDialCounting function dialed.
func wsiCounted(t *testing.T, ch <-chan *wsiCountConn) *wsiCountConn {
	t.Helper()
	select {
	case cc := <-ch:
		return cc
	default:
		t.Fatal("the client did not dial through the counting dialer")
		return nil
	}
}

// Deflate answers: what the server agreed, as its response header says.
const (
	wsiNoTakeover      = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
	wsiOurTakeover     = "permessage-deflate; server_no_context_takeover" // ours with Upgrader.ContextTakeover
	wsiCoderTakeover   = "permessage-deflate"                             // coder's with CompressionContextTakeover
	wsiCoderNoTakeover = "permessage-deflate; client_no_context_takeover; server_no_context_takeover"
)

// wsiDialGorilla connects gorilla's client to url.
func wsiDialGorilla(t *testing.T, url string, d *websocket.Dialer, secure bool) (*websocket.Conn, *http.Response, *wsiCountConn) {
	t.Helper()
	ch := make(chan *wsiCountConn, 1)
	d.NetDialContext = wsiDialCounting(d.WriteBufferSize > 0 && d.WriteBufferSize < 4096, ch)
	d.HandshakeTimeout = ioTimeout
	if secure {
		_, d.TLSClientConfig = wsiTLS(t)
	}
	c, resp, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("gorilla dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, resp, wsiCounted(t, ch)
}

// TestWSInteropGorillaClient: gorilla's client against our server, over
// ws and wss, with and without permessage-deflate: echo of every size,
// the negotiated extension, the subprotocol, a ping answered, and the
// close handshake started by either side.
func TestWSInteropGorillaClient(t *testing.T) {
	for _, secure := range []bool{false, true} {
		for _, comp := range []bool{false, true} {
			t.Run(fmt.Sprintf("tls=%v/deflate=%v", secure, comp), func(t *testing.T) {
				up := &ws.Upgrader{Compression: true, MaxMessageSize: wsiLimit(comp), Subprotocols: []string{"chat.v2", "chat.v1"}}
				s := wsiStartServer(t, up, secure)
				d := &websocket.Dialer{EnableCompression: comp, Subprotocols: []string{"chat.v1", "chat.v2"}}
				c, resp, cc := wsiDialGorilla(t, s.url, d, secure)
				want := ""
				if comp {
					want = wsiNoTakeover
				}
				if got := resp.Header.Get("Sec-Websocket-Extensions"); got != want {
					t.Errorf("Sec-WebSocket-Extensions %q, want %q", got, want)
				}
				// The server's preference wins.
				if c.Subprotocol() != "chat.v2" {
					t.Errorf("subprotocol %q, want chat.v2", c.Subprotocol())
				}
				g := wsiGorilla{c}
				wsiCheckProto(t, g, "chat.v2")
				wsiCheckEcho(t, g, cc, comp)

				// A ping's payload comes back in the pong, before the
				// echo of a message sent after it.
				pongs := make(chan string, 1)
				c.SetPongHandler(func(s string) error { pongs <- s; return nil })
				ping := strings.Repeat("p", 125)
				if err := c.WriteControl(websocket.PingMessage, []byte(ping), time.Now().Add(ioTimeout)); err != nil {
					t.Fatal(err)
				}
				if err := g.write(ws.OpText, []byte("after ping")); err != nil {
					t.Fatal(err)
				}
				if _, p, err := g.read(); err != nil || string(p) != "after ping" {
					t.Fatalf("echo after ping: %q %v", p, err)
				}
				select {
				case p := <-pongs:
					if p != ping {
						t.Errorf("pong %q, want the ping's %q", p, ping)
					}
				default:
					t.Error("no pong before the echo of the message after the ping")
				}

				// The client closes: the server sees its code and reason,
				// and echoes the code.
				if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, "bye"), time.Now().Add(ioTimeout)); err != nil {
					t.Fatal(err)
				}
				_, _, err := g.read()
				var ce *websocket.CloseError
				if !errors.As(err, &ce) || ce.Code != 1000 {
					t.Errorf("client's close answered with %v, want close 1000", err)
				}
				// A gorilla application closes the TCP connection once it
				// has the answer; our server's connection ends with that
				// (it waits for the client's FIN, conn.Conn.Close).
				c.Close()
				e := s.nextClose(t)
				if e.Code != ws.StatusNormal || e.Reason != "bye" || !e.Remote || e.Err != nil {
					t.Errorf("server's OnClose: %+v, want 1000 \"bye\" remote, no error", e)
				}

				// The server closes: the client sees 4000 "x", and the
				// server the client's answer.
				c2, _, _ := wsiDialGorilla(t, s.url, &websocket.Dialer{EnableCompression: comp}, secure)
				g2 := wsiGorilla{c2}
				wsiCheckProto(t, g2, "") // no subprotocol offered, none agreed
				if err := g2.write(ws.OpText, []byte(wsiCmdClose)); err != nil {
					t.Fatal(err)
				}
				_, _, err = g2.read()
				if !errors.As(err, &ce) || ce.Code != 4000 || ce.Text != "x" {
					t.Errorf("server's close: client got %v, want close 4000 \"x\"", err)
				}
				c2.Close()
				e = s.nextClose(t)
				if e.Code != 4000 || e.Remote || e.Err != nil {
					t.Errorf("server's OnClose after its close: %+v, want 4000 not remote, no error", e)
				}
			})
		}
	}
}

// TestWSInteropKeepAlive: with Upgrader.PingInterval our server pings an
// idle connection; gorilla's and coder's clients, blocked reading, answer,
// so the connection outlives many intervals (without the pongs it would
// end after two, ErrPingTimeout). And a close frame without a status code
// is 1005 to both ends.
func TestWSInteropKeepAlive(t *testing.T) {
	const interval, idle = 30 * time.Millisecond, 400 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*ioTimeout)
	defer cancel()
	s := wsiStartServer(t, &ws.Upgrader{PingInterval: interval}, false)

	g, _, _ := wsiDialGorilla(t, s.url, &websocket.Dialer{}, false)
	var gpings atomic.Int32
	g.SetPingHandler(func(p string) error {
		gpings.Add(1)
		return g.WriteControl(websocket.PongMessage, []byte(p), time.Now().Add(ioTimeout))
	})
	var cpings atomic.Int32
	c, _, _ := wsiDialCoder(ctx, t, s.url, &coder.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { cpings.Add(1); return true },
	}, false)

	// Both read while idle; each gets the echo of a message sent after.
	echoes := make(chan error, 2)
	go func() {
		_, p, err := wsiGorilla{g}.read()
		if err == nil && string(p) != "after idle" {
			err = fmt.Errorf("gorilla got %q", p)
		}
		echoes <- err
	}()
	go func() {
		_, p, err := c.Read(ctx)
		if err == nil && string(p) != "after idle" {
			err = fmt.Errorf("coder got %q", p)
		}
		echoes <- err
	}()
	time.Sleep(idle)
	if err := g.WriteMessage(websocket.TextMessage, []byte("after idle")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, coder.MessageText, []byte("after idle")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-echoes; err != nil {
			t.Errorf("after %v idle with pings every %v: %v", idle, interval, err)
		}
	}
	// Pings come one interval after the last input or output, and the
	// next after another; under load fewer than idle/interval come, but
	// more than two, or the connections would have been reset.
	if n := gpings.Load(); n < 3 {
		t.Errorf("gorilla's client had %d pings in %v at an interval of %v", n, idle, interval)
	}
	if n := cpings.Load(); n < 3 {
		t.Errorf("coder's client had %d pings in %v at an interval of %v", n, idle, interval)
	}

	// A close frame without a code: 1005 (StatusNoStatus) both ways.
	if err := g.WriteControl(websocket.CloseMessage, nil, time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (wsiGorilla{g}).read(); !websocket.IsCloseError(err, websocket.CloseNoStatusReceived) {
		t.Errorf("empty close frame answered with %v, want 1005", err)
	}
	g.Close()
	if e := s.nextClose(t); e.Code != ws.StatusNoStatus || !e.Remote || e.Err != nil {
		t.Errorf("OnClose %+v, want 1005 remote, no error", e)
	}
}

// wsiFrame is a frame header a client wrote.
type wsiFrame struct {
	fin, rsv1, masked bool
	op                ws.Opcode
	n                 int
}

// wsiScanFrames parses the frames after the opening handshake in what a
// client wrote.
func wsiScanFrames(b []byte) ([]wsiFrame, error) {
	i := bytes.Index(b, []byte("\r\n\r\n"))
	if i < 0 {
		return nil, errors.New("no handshake")
	}
	b = b[i+4:]
	var fs []wsiFrame
	for len(b) > 0 {
		if len(b) < 2 {
			return fs, errors.New("truncated header")
		}
		f := wsiFrame{fin: b[0]&0x80 != 0, rsv1: b[0]&0x40 != 0, op: ws.Opcode(b[0] & 0xf), masked: b[1]&0x80 != 0}
		h, n := 2, int(b[1]&0x7f)
		switch n {
		case 126:
			if len(b) < 4 {
				return fs, errors.New("truncated header")
			}
			n, h = int(b[2])<<8|int(b[3]), 4
		case 127:
			if len(b) < 10 {
				return fs, errors.New("truncated header")
			}
			n = 0
			for _, c := range b[2:10] {
				n = n<<8 | int(c)
			}
			h = 10
		}
		if f.masked {
			h += 4
		}
		if len(b) < h+n {
			return fs, errors.New("truncated payload")
		}
		f.n = n
		fs = append(fs, f)
		b = b[h+n:]
	}
	return fs, nil
}

// TestWSInteropGorillaFragmented: a message gorilla writes in pieces
// through NextWriter goes out as many frames (a small write buffer
// flushes a frame whenever it fills), with a ping between two of them;
// our server reassembles it, text split mid-character included, and
// answers the ping in the middle.
func TestWSInteropGorillaFragmented(t *testing.T) {
	for _, comp := range []bool{false, true} {
		t.Run(fmt.Sprintf("deflate=%v", comp), func(t *testing.T) {
			s := wsiStartServer(t, &ws.Upgrader{Compression: true}, false)
			c, _, cc := wsiDialGorilla(t, s.url, &websocket.Dialer{EnableCompression: comp, WriteBufferSize: 512}, false)
			pongs := make(chan string, 1)
			c.SetPongHandler(func(s string) error { pongs <- s; return nil })
			for _, op := range []ws.Opcode{ws.OpText, ws.OpBinary} {
				msg := wsiPayload(op, 65536)
				c.SetWriteDeadline(time.Now().Add(ioTimeout))
				w, err := c.NextWriter(int(op))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < len(msg); i += 1000 {
					if _, err := w.Write(msg[i:min(i+1000, len(msg))]); err != nil {
						t.Fatal(err)
					}
					if i == 32000 {
						if err := c.WriteControl(websocket.PingMessage, []byte("mid"), time.Now().Add(ioTimeout)); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				gop, got, err := wsiGorilla{c}.read()
				if err != nil || gop != op || !bytes.Equal(got, msg) {
					t.Fatalf("fragmented %v: got %v of %d bytes, %v", op, gop, len(got), err)
				}
				select {
				case p := <-pongs:
					if p != "mid" {
						t.Errorf("pong %q, want \"mid\"", p)
					}
				default:
					t.Error("no pong for the ping between fragments")
				}
			}
			// What went out: per message, a first frame of its opcode
			// (compressed or not), continuations, the last one final,
			// one ping among them.
			fs, err := wsiScanFrames(cc.written())
			if err != nil {
				t.Fatal(err)
			}
			var msgs, frames, pings int
			var inMsg bool
			for _, f := range fs {
				switch {
				case !f.masked:
					t.Fatalf("unmasked client frame %+v", f)
				case f.op == ws.OpPing:
					pings++
					// Compressed, the text may all still be in gorilla's
					// compressor when the ping goes out.
					if !inMsg && !comp {
						t.Errorf("ping outside a fragmented message")
					}
					continue
				case f.op == ws.OpText || f.op == ws.OpBinary:
					if inMsg {
						t.Fatalf("new message inside a message")
					}
					if f.rsv1 != comp {
						t.Errorf("first frame RSV1 %v with compression %v", f.rsv1, comp)
					}
					inMsg = true
				case f.op == ws.OpContinuation:
					if !inMsg || f.rsv1 {
						t.Fatalf("stray continuation %+v", f)
					}
				}
				frames++
				if f.fin {
					msgs++
					inMsg = false
				}
			}
			if msgs != 2 || pings != 2 || frames < 2*10 {
				t.Errorf("%d messages in %d frames with %d pings, want 2 messages in at least 20 frames with 2 pings", msgs, frames, pings)
			}
		})
	}
}

// TestWSInteropGorillaConcurrent: 200 gorilla clients at once, half of
// them compressing, each doing round trips of various sizes.
func TestWSInteropGorillaConcurrent(t *testing.T) {
	const clients, trips = 200, 10
	s := wsiStartServer(t, &ws.Upgrader{Compression: true}, false)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := websocket.Dialer{EnableCompression: i%2 == 0, HandshakeTimeout: ioTimeout}
			c, _, err := d.Dial(s.url, nil)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer c.Close()
			g := wsiGorilla{c}
			for j := range trips {
				op := ws.Opcode(1 + (i+j)%2)
				msg := wsiPayload(op, (i*131+j*977)%5000)
				if err := g.write(op, msg); err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				gop, got, err := g.read()
				if err != nil || gop != op || !bytes.Equal(got, msg) {
					t.Errorf("client %d trip %d: %v of %d bytes back for %v of %d, %v", i, j, gop, len(got), op, len(msg), err)
					return
				}
			}
			c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""), time.Now().Add(ioTimeout))
			if _, _, err := g.read(); !websocket.IsCloseError(err, 1000) {
				t.Errorf("client %d: close answered with %v", i, err)
			}
		}()
	}
	wg.Wait()
	for range clients {
		if e := s.nextClose(t); e.Code != ws.StatusNormal || !e.Remote {
			t.Errorf("OnClose %+v, want 1000 remote", e)
		}
	}
}

// wsiDialCoder connects coder's client to url; its read limit is lifted to
// the largest message.
func wsiDialCoder(ctx context.Context, t *testing.T, url string, opts *coder.DialOptions, secure bool) (*coder.Conn, *http.Response, *wsiCountConn) {
	t.Helper()
	ch := make(chan *wsiCountConn, 1)
	tr := &http.Transport{DialContext: wsiDialCounting(false, ch)}
	if secure {
		_, tr.TLSClientConfig = wsiTLS(t)
	}
	opts.HTTPClient = &http.Client{Transport: tr}
	c, resp, err := coder.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("coder dial %s: %v", url, err)
	}
	c.SetReadLimit(ws.DefaultMaxMessageSize)
	t.Cleanup(func() { c.CloseNow() })
	return c, resp, wsiCounted(t, ch)
}

// TestWSInteropCoderClient: coder's client against our server, over ws
// and wss, with compression off, with context takeover (against a server
// that allows the client's and one that does not) and without: the
// negotiated extension, echo of every size, subprotocol, ping, and the
// close handshake started by either side.
func TestWSInteropCoderClient(t *testing.T) {
	cases := []struct {
		name     string
		mode     coder.CompressionMode
		takeover bool // Upgrader.ContextTakeover
		want     string
		secure   bool
	}{
		{"off", coder.CompressionDisabled, false, "", false},
		{"takeover", coder.CompressionContextTakeover, true, wsiOurTakeover, false},
		{"takeover-refused", coder.CompressionContextTakeover, false, wsiNoTakeover, false},
		{"no-takeover", coder.CompressionNoContextTakeover, true, wsiNoTakeover, false},
		{"tls/off", coder.CompressionDisabled, false, "", true},
		{"tls/takeover", coder.CompressionContextTakeover, true, wsiOurTakeover, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*ioTimeout)
			defer cancel()
			up := &ws.Upgrader{Compression: true, ContextTakeover: tc.takeover, MaxMessageSize: wsiLimit(tc.want != ""), Subprotocols: []string{"chat.v2", "chat.v1"}}
			s := wsiStartServer(t, up, tc.secure)
			var pongs atomic.Int32
			opts := &coder.DialOptions{
				CompressionMode: tc.mode,
				Subprotocols:    []string{"chat.v1", "chat.v2"},
				OnPongReceived:  func(context.Context, []byte) { pongs.Add(1) },
			}
			c, resp, cc := wsiDialCoder(ctx, t, s.url, opts, tc.secure)
			if got := resp.Header.Get("Sec-Websocket-Extensions"); got != tc.want {
				t.Errorf("Sec-WebSocket-Extensions %q, want %q", got, tc.want)
			}
			if c.Subprotocol() != "chat.v2" {
				t.Errorf("subprotocol %q, want chat.v2", c.Subprotocol())
			}
			e := wsiCoder{ctx, c}
			wsiCheckProto(t, e, "chat.v2")
			wsiCheckEcho(t, e, cc, tc.want != "")
			// With context takeover the messages refer to the ones before:
			// a second copy of a message costs next to nothing on the wire.
			if tc.mode == coder.CompressionContextTakeover {
				msg := wsiRandomText(2000)
				_, wr := wsiRepeat(t, e, cc, msg)
				if tc.takeover && wr > int64(len(msg))/10 || !tc.takeover && wr < int64(len(msg))/2 {
					t.Errorf("a repeated message of %d bytes took %d on the wire with the client's context takeover %v", len(msg), wr, tc.takeover)
				}
			}

			// Ping needs a reader to take the pong: one waits for the
			// echo of a message sent once the ping is answered.
			done := make(chan error, 1)
			go func() {
				_, p, err := c.Read(ctx)
				if err == nil && string(p) != "after ping" {
					err = fmt.Errorf("echo %q", p)
				}
				done <- err
			}()
			if err := c.Ping(ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
			if pongs.Load() != 1 {
				t.Errorf("%d pongs, want 1", pongs.Load())
			}
			if err := c.Write(ctx, coder.MessageText, []byte("after ping")); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			// The client closes: coder's Close waits for the answer.
			if err := c.Close(coder.StatusNormalClosure, "bye"); err != nil {
				t.Errorf("close handshake: %v", err)
			}
			ce := s.nextClose(t)
			if ce.Code != ws.StatusNormal || ce.Reason != "bye" || !ce.Remote || ce.Err != nil {
				t.Errorf("server's OnClose: %+v, want 1000 \"bye\" remote, no error", ce)
			}

			// The server closes.
			c2, _, _ := wsiDialCoder(ctx, t, s.url, &coder.DialOptions{CompressionMode: tc.mode}, tc.secure)
			if err := c2.Write(ctx, coder.MessageText, []byte(wsiCmdClose)); err != nil {
				t.Fatal(err)
			}
			_, _, err := c2.Read(ctx)
			var cerr coder.CloseError
			if !errors.As(err, &cerr) || cerr.Code != 4000 || cerr.Reason != "x" {
				t.Errorf("server's close: client got %v, want 4000 \"x\"", err)
			}
			ce = s.nextClose(t)
			if ce.Code != 4000 || ce.Remote || ce.Err != nil {
				t.Errorf("server's OnClose after its close: %+v, want 4000 not remote, no error", ce)
			}
		})
	}
}

// TestWSInteropShutdown: httpd.Server.Shutdown tells every WebSocket
// client, gorilla's and coder's, compressing or not, that the server goes
// away (1001), and returns once they are gone.
func TestWSInteropShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*ioTimeout)
	defer cancel()
	s := wsiStartServer(t, &ws.Upgrader{Compression: true}, false)
	var gs []*websocket.Conn
	var cs []*coder.Conn
	for _, comp := range []bool{false, true} {
		g, _, _ := wsiDialGorilla(t, s.url, &websocket.Dialer{EnableCompression: comp}, false)
		mode := coder.CompressionDisabled
		if comp {
			mode = coder.CompressionContextTakeover
		}
		c, _, _ := wsiDialCoder(ctx, t, s.url, &coder.DialOptions{CompressionMode: mode}, false)
		// A round trip: the server has the connection before Shutdown.
		for _, e := range []wsiEchoer{wsiGorilla{g}, wsiCoder{ctx, c}} {
			if err := e.write(ws.OpText, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if _, _, err := e.read(); err != nil {
				t.Fatal(err)
			}
		}
		gs, cs = append(gs, g), append(cs, c)
	}
	shut := make(chan error, 1)
	go func() { shut <- s.srv.Shutdown(ctx) }()
	for i, g := range gs {
		if _, _, err := (wsiGorilla{g}).read(); !websocket.IsCloseError(err, websocket.CloseGoingAway) {
			t.Errorf("gorilla client %d: %v, want close 1001", i, err)
		}
		// As a gorilla application does on a read error: Shutdown waits
		// for the client's FIN (conn.Conn.Close), not just its close frame.
		g.Close()
	}
	for i, c := range cs {
		if _, _, err := c.Read(ctx); coder.CloseStatus(err) != coder.StatusGoingAway {
			t.Errorf("coder client %d: %v, want close 1001", i, err)
		}
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	for range len(gs) + len(cs) {
		if e := s.nextClose(t); e.Code != ws.StatusGoingAway || e.Remote {
			t.Errorf("OnClose %+v, want 1001 not remote", e)
		}
	}
}

// wsiPeerServer is a gorilla or coder echo server on net/http. It answers
// the same commands as ours and reports on ends how its connections ended
// (the error of its last read, or of its close).
type wsiPeerServer struct {
	url  string
	ends chan error
}

// wsiStartPeer serves h at /ws on httptest, over TLS if secure.
func wsiStartPeer(t *testing.T, secure bool, h func(ends chan<- error) http.HandlerFunc) *wsiPeerServer {
	t.Helper()
	p := &wsiPeerServer{ends: make(chan error, 16)}
	mux := http.NewServeMux()
	mux.Handle("/ws", h(p.ends))
	hs := httptest.NewUnstartedServer(mux)
	scheme := "ws"
	if secure {
		hs.TLS, _ = wsiTLS(t)
		hs.StartTLS()
		scheme = "wss"
	} else {
		hs.Start()
	}
	t.Cleanup(hs.Close)
	p.url = scheme + "://" + hs.Listener.Addr().String() + "/ws"
	return p
}

func (p *wsiPeerServer) nextEnd(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.ends:
		return err
	case <-time.After(ioTimeout):
		t.Fatal("the peer server's connection did not end")
		return nil
	}
}

// wsiGorillaServer echoes with gorilla's Upgrader, writing each message
// in pieces through a small buffer, so that a message over 512 bytes goes
// out in frames of 512 (compressed or not), and with a ping among the
// frames of a message over wsiMidPing bytes: our client must reassemble
// the fragments and answer the ping on the way (wsiCmdPongs tells).
func wsiGorillaServer(comp bool) func(chan<- error) http.HandlerFunc {
	return func(ends chan<- error) http.HandlerFunc {
		up := &websocket.Upgrader{EnableCompression: comp, WriteBufferSize: 512, Subprotocols: []string{"chat.v2", "chat.v1"}}
		return func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				ends <- err
				return
			}
			defer c.Close()
			pongs := 0
			c.SetPongHandler(func(string) error { pongs++; return nil })
			for {
				c.SetReadDeadline(time.Now().Add(ioTimeout))
				mt, p, err := c.ReadMessage()
				if err != nil {
					ends <- err
					return
				}
				switch {
				case mt == websocket.TextMessage && string(p) == wsiCmdClose:
					err = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4000, "x"), time.Now().Add(ioTimeout))
				case mt == websocket.TextMessage && string(p) == wsiCmdProto:
					err = c.WriteMessage(mt, []byte("proto:"+c.Subprotocol()))
				case mt == websocket.TextMessage && string(p) == wsiCmdPongs:
					err = c.WriteMessage(mt, []byte(strconv.Itoa(pongs)))
				default:
					err = wsiWritePieces(c, mt, p)
				}
				if err != nil {
					ends <- err
					return
				}
			}
		}
	}
}

// wsiMidPing is where gorilla's server pings in the middle of a message.
const wsiMidPing = 32000

// wsiWritePieces writes p as one message in pieces of 1000 bytes, pinging
// after the piece at wsiMidPing.
func wsiWritePieces(c *websocket.Conn, mt int, p []byte) error {
	c.SetWriteDeadline(time.Now().Add(ioTimeout))
	w, err := c.NextWriter(mt)
	if err != nil {
		return err
	}
	for i := 0; i < len(p); i += 1000 {
		if _, err := w.Write(p[i:min(i+1000, len(p))]); err != nil {
			return err
		}
		if i == wsiMidPing {
			if err := c.WriteControl(websocket.PingMessage, []byte("mid"), time.Now().Add(ioTimeout)); err != nil {
				return err
			}
		}
	}
	return w.Close()
}

// wsiCoderServer echoes with coder's Accept.
func wsiCoderServer(mode coder.CompressionMode) func(chan<- error) http.HandlerFunc {
	return func(ends chan<- error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			c, err := coder.Accept(w, r, &coder.AcceptOptions{CompressionMode: mode, Subprotocols: []string{"chat.v2", "chat.v1"}})
			if err != nil {
				ends <- err
				return
			}
			defer c.CloseNow()
			c.SetReadLimit(ws.DefaultMaxMessageSize)
			ctx, cancel := context.WithTimeout(r.Context(), 2*ioTimeout)
			defer cancel()
			for {
				mt, p, err := c.Read(ctx)
				if err != nil {
					ends <- err
					return
				}
				switch {
				case mt == coder.MessageText && string(p) == wsiCmdClose:
					// Close waits for the client's answer.
					ends <- c.Close(4000, "x")
					return
				case mt == coder.MessageText && string(p) == wsiCmdProto:
					err = c.Write(ctx, mt, []byte("proto:"+c.Subprotocol()))
				default:
					err = c.Write(ctx, mt, p)
				}
				if err != nil {
					ends <- err
					return
				}
			}
		}
	}
}

// wsiDialOurs connects our client to url.
func wsiDialOurs(t *testing.T, url string, d *ws.Dialer, secure bool) (*ws.ClientConn, *http.Response, *wsiCountConn) {
	t.Helper()
	ch := make(chan *wsiCountConn, 1)
	d.NetDial = wsiDialCounting(false, ch)
	if secure {
		_, d.TLSConfig = wsiTLS(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	c, resp, err := d.Dial(ctx, url)
	if err != nil {
		t.Fatalf("ws dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, resp, wsiCounted(t, ch)
}

// TestWSInteropClient: our client against gorilla's and coder's servers,
// over ws and wss, with compression (coder's server keeping its context
// between messages, so that our client must inflate against its window;
// our client compressing with and without its own context takeover): the
// negotiated extension, echo of every size (gorilla's server sending
// each in 512-byte fragments with a ping among them, which our client
// must answer), subprotocol, and the close handshake started by either
// side, as both ends see it.
func TestWSInteropClient(t *testing.T) {
	cases := []struct {
		name       string
		server     func(chan<- error) http.HandlerFunc
		coder      bool
		dialer     ws.Dialer
		want       string // Sec-WebSocket-Extensions
		secure     bool
		contextual bool // the client compresses against its window
	}{
		{"gorilla/off", wsiGorillaServer(false), false, ws.Dialer{}, "", false, false},
		{"gorilla/deflate", wsiGorillaServer(true), false, ws.Dialer{Compression: true, ContextTakeover: true}, wsiNoTakeover, false, false},
		{"gorilla/tls/deflate", wsiGorillaServer(true), false, ws.Dialer{Compression: true}, wsiNoTakeover, true, false},
		{"coder/off", wsiCoderServer(coder.CompressionDisabled), true, ws.Dialer{Compression: true}, "", false, false},
		{"coder/takeover", wsiCoderServer(coder.CompressionContextTakeover), true, ws.Dialer{Compression: true, ContextTakeover: true}, wsiCoderTakeover, false, true},
		{"coder/takeover-server-only", wsiCoderServer(coder.CompressionContextTakeover), true, ws.Dialer{Compression: true}, wsiCoderTakeover, false, false},
		{"coder/no-takeover", wsiCoderServer(coder.CompressionNoContextTakeover), true, ws.Dialer{Compression: true, ContextTakeover: true}, wsiCoderNoTakeover, false, false},
		{"coder/tls/takeover", wsiCoderServer(coder.CompressionContextTakeover), true, ws.Dialer{Compression: true, ContextTakeover: true}, wsiCoderTakeover, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := wsiStartPeer(t, tc.secure, tc.server)
			d := tc.dialer
			d.Subprotocols = []string{"chat.v1", "chat.v2"}
			d.MaxMessageSize = wsiLimit(tc.want != "")
			c, resp, cc := wsiDialOurs(t, p.url, &d, tc.secure)
			if got := resp.Header.Get("Sec-Websocket-Extensions"); got != tc.want {
				t.Errorf("Sec-WebSocket-Extensions %q, want %q", got, tc.want)
			}
			if c.Compressed() != (tc.want != "") {
				t.Errorf("Compressed() %v with Sec-WebSocket-Extensions %q", c.Compressed(), tc.want)
			}
			if c.Subprotocol() != "chat.v2" {
				t.Errorf("subprotocol %q, want chat.v2", c.Subprotocol())
			}
			e := wsiOurs{c}
			wsiCheckProto(t, e, "chat.v2")
			wsiCheckEcho(t, e, cc, tc.want != "")
			if !tc.coder {
				// Every message echoed past wsiMidPing had a ping in its
				// middle, which our client answered.
				want := 0
				for _, n := range wsiSizes {
					if n > wsiMidPing {
						want += 2 // text and binary
					}
				}
				if err := e.write(ws.OpText, []byte(wsiCmdPongs)); err != nil {
					t.Fatal(err)
				}
				if _, got, err := e.read(); err != nil || string(got) != strconv.Itoa(want) {
					t.Errorf("gorilla's server had %q pongs (%v), want %d", got, err, want)
				}
			}
			if tc.coder && tc.want == wsiCoderTakeover {
				// The server compresses against its window: a repeated
				// message comes back in a few bytes, and our client
				// inflates it against the window it kept. Ours does the
				// same when it keeps its own.
				msg := wsiRandomText(2000)
				rd, wr := wsiRepeat(t, e, cc, msg)
				if rd > int64(len(msg))/10 {
					t.Errorf("the server's repeat of %d bytes took %d on the wire: no context takeover?", len(msg), rd)
				}
				if tc.contextual && wr > int64(len(msg))/10 || !tc.contextual && wr < int64(len(msg))/2 {
					t.Errorf("our repeat of %d bytes took %d on the wire with our context takeover %v", len(msg), wr, tc.contextual)
				}
			}
			if err := c.Ping([]byte("ping")); err != nil {
				t.Fatal(err)
			}

			// We close.
			if err := c.Close(ws.StatusNormal, "bye"); err != nil {
				t.Fatal(err)
			}
			_, _, err := e.read()
			var ce *ws.CloseError
			if !errors.As(err, &ce) || ce.Code != ws.StatusNormal || ce.Remote || ce.Err != nil {
				t.Errorf("our close answered with %v, want 1000 not remote", err)
			}
			wsiCheckPeerEnd(t, p.nextEnd(t), 1000, "bye", tc.coder)

			// The server closes.
			c2, _, _ := wsiDialOurs(t, p.url, &ws.Dialer{Compression: tc.dialer.Compression}, tc.secure)
			e2 := wsiOurs{c2}
			wsiCheckProto(t, e2, "")
			if err := e2.write(ws.OpText, []byte(wsiCmdClose)); err != nil {
				t.Fatal(err)
			}
			_, _, err = e2.read()
			if !errors.As(err, &ce) || ce.Code != 4000 || ce.Reason != "x" || !ce.Remote || ce.Err != nil {
				t.Errorf("server's close: got %v, want 4000 \"x\" remote", err)
			}
			if tc.coder {
				// coder's Close returns once our answer came.
				if err := p.nextEnd(t); err != nil {
					t.Errorf("coder's close handshake: %v", err)
				}
			} else {
				wsiCheckPeerEnd(t, p.nextEnd(t), 4000, "", false)
			}
		})
	}
}

// wsiCheckPeerEnd checks the error a peer server's read ended with: the
// close frame it received.
func wsiCheckPeerEnd(t *testing.T, err error, code int, reason string, isCoder bool) {
	t.Helper()
	if isCoder {
		var ce coder.CloseError
		if !errors.As(err, &ce) || int(ce.Code) != code || ce.Reason != reason {
			t.Errorf("coder's server saw %v, want close %d %q", err, code, reason)
		}
		return
	}
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code || ce.Text != reason {
		t.Errorf("gorilla's server saw %v, want close %d %q", err, code, reason)
	}
}

// TestWSInteropNetHTTPRefused: an Upgrader mounted on net/http's server,
// which cannot hand a connection to package ws, answers gorilla's and
// coder's clients 500 with a body saying why (not 200 with the upgrade's
// fields and nothing else, which clients report only as an unexpected
// status), and logs it to the server's ErrorLog.
func TestWSInteropNetHTTPRefused(t *testing.T) {
	const msg = "ws: Upgrade needs an httpd.Server; this is net/http's\n"
	var logged strings.Builder
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(&ws.Upgrader{Handler: ws.BaseHandler{}})
	srv.Config.ErrorLog = log.New(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), "", 0)
	srv.Start()
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")

	d := websocket.Dialer{HandshakeTimeout: ioTimeout}
	c, resp, err := d.Dial(url, nil)
	if c != nil {
		c.Close()
		t.Fatal("gorilla connected")
	}
	if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("gorilla: %v, response %v; want ErrBadHandshake and 500", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	t.Logf("gorilla: %v: %s, %q", err, resp.Status, body)
	if string(body) != msg {
		t.Errorf("gorilla read %q, want %q", body, msg)
	}
	if v := resp.Header.Get("Sec-WebSocket-Accept"); v != "" {
		t.Errorf("the 500 has Sec-WebSocket-Accept: %q", v)
	}

	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	cc, resp, err := coder.Dial(ctx, url, nil)
	if cc != nil {
		cc.CloseNow()
		t.Fatal("coder connected")
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("coder: %v, response %v; want an error and 500", err, resp)
	}
	body, _ = io.ReadAll(resp.Body)
	t.Logf("coder: %v: %s, %q", err, resp.Status, body)
	if string(body) != msg {
		t.Errorf("coder read %q, want %q", body, msg)
	}

	mu.Lock()
	defer mu.Unlock()
	if want := msg + msg; logged.String() != want {
		t.Errorf("ErrorLog got %q, want %q", logged.String(), want)
	}
}

// writerFunc is an io.Writer made of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
