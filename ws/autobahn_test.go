package ws_test

// The Autobahn|Testsuite's server cases (the "fuzzingclient" run against
// an echo server), written as Go tests: Autobahn itself needs Python 2 or
// Docker. This file is the driver: one echo server shared by every case,
// a raw frame client, and the runner that makes each case a subtest named
// by its Autobahn ID. The cases are in autobahn_group*_test.go, and
// docs/websocket-conformance.md says how they map to Autobahn's.
//
// Every case asserts Autobahn's STRICT outcome: the exact frames the
// server sends, in order, and nothing else; the close code; the TCP close
// after the close frame.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/ws"
)

// abMaxMessage is the server's message limit: group 9 sends 16 MiB.
const abMaxMessage = 16 << 20

// abTimeout bounds each read: generous, as the race detector on two
// cores is slow, and a passing case never waits for it.
const abTimeout = 20 * time.Second

// abWait is how long a case waits before sending what comes after a
// frame that the server must answer first (Autobahn waits one second).
const abWait = time.Second

// abEcho echoes every message with its opcode, as Autobahn's test
// server does.
type abEcho struct{ ws.BaseHandler }

func (abEcho) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) { c.WriteMessage(op, data) }

var abServer struct {
	once sync.Once
	addr string
	err  error
}

// autobahnServer starts, once for the whole package, the server every
// case talks to: /echo without compression, /deflate with
// permessage-deflate and context takeover, /deflate-nctx without it.
func autobahnServer(t testing.TB) string {
	abServer.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			abServer.err = err
			return
		}
		mux := http.NewServeMux()
		mux.Handle("/echo", &ws.Upgrader{Handler: abEcho{}, MaxMessageSize: abMaxMessage})
		mux.Handle("/deflate", &ws.Upgrader{Handler: abEcho{}, MaxMessageSize: abMaxMessage,
			Compression: true, ContextTakeover: true})
		mux.Handle("/deflate-nctx", &ws.Upgrader{Handler: abEcho{}, MaxMessageSize: abMaxMessage,
			Compression: true})
		srv := &httpd.Server{Handler: mux}
		go srv.Serve(ln)
		abServer.addr = ln.Addr().String()
	})
	if abServer.err != nil {
		t.Fatal(abServer.err)
	}
	return abServer.addr
}

// abCase is one Autobahn case. Run drives the server through c, which the
// runner has connected to Path ("/echo" if empty) offering the
// Sec-WebSocket-Extensions Offer (none if empty).
type abCase struct {
	ID    string
	Desc  string
	Path  string
	Offer string
	Run   func(t *testing.T, c *rawClient)
}

// TestAutobahn runs every case as a subtest named by its Autobahn ID
// ("go test -run 'TestAutobahn/6\.4\.'" runs 6.4.x). The cases are
// mostly waiting on round trips, so they run many at once, from
// goroutines of their own rather than with t.Parallel, which -parallel
// (GOMAXPROCS by default) would hold to two on a small machine; group 9's
// run two at a time, as its 16 MiB messages would add up in memory.
func TestAutobahn(t *testing.T) {
	t.Parallel()
	autobahnServer(t)
	groups := [][]abCase{abGroup1(), abGroup2(), abGroup3(), abGroup4(), abGroup5(), abGroup6(),
		abGroup7(), abGroup9(), abGroup10(), abGroup12(), abGroup13()}
	light, heavy := make(chan struct{}, 16), make(chan struct{}, 2)
	seen := make(map[string]bool)
	var wg sync.WaitGroup
	for _, cases := range groups {
		for _, tc := range cases {
			if seen[tc.ID] {
				t.Fatalf("case %s twice in the table", tc.ID)
			}
			seen[tc.ID] = true
			sem := light
			if strings.HasPrefix(tc.ID, "9.") {
				sem = heavy
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				t.Run(tc.ID, func(t *testing.T) {
					path := tc.Path
					if path == "" {
						path = "/echo"
					}
					tc.Run(t, abDial(t, path, tc.Offer))
				})
			}()
		}
	}
	wg.Wait()
}

// rawClient is a WebSocket client that sends frames as it is told, valid
// or not, and reads the server's frames as they are: the fuzzing client.
type rawClient struct {
	t   testing.TB
	nc  net.Conn
	br  *bufio.Reader
	ext string // the server's Sec-WebSocket-Extensions answer
	key uint32 // state of the masking keys' generator
}

// The handshake key and its answer, from RFC 6455 section 1.3.
const (
	abKey    = "dGhlIHNhbXBsZSBub25jZQ=="
	abAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
)

// abDial connects to path and completes the opening handshake, offering
// the extensions in offer. The connection is closed when t ends.
func abDial(t testing.TB, path, offer string) *rawClient {
	t.Helper()
	addr := autobahnServer(t)
	nc, err := net.DialTimeout("tcp", addr, abTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n", path, addr)
	fmt.Fprintf(&req, "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", abKey)
	if offer != "" {
		fmt.Fprintf(&req, "Sec-WebSocket-Extensions: %s\r\n", offer)
	}
	req.WriteString("\r\n")
	nc.SetDeadline(time.Now().Add(abTimeout))
	if _, err := io.WriteString(nc, req.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != abAccept {
		t.Fatalf("handshake answered %s, accept %q", resp.Status, resp.Header.Get("Sec-WebSocket-Accept"))
	}
	nc.SetDeadline(time.Time{})
	exts := resp.Header.Values("Sec-WebSocket-Extensions")
	if len(exts) > 1 {
		t.Fatalf("Sec-WebSocket-Extensions answered %d times: %q", len(exts), exts)
	}
	c := &rawClient{t: t, nc: nc, br: br, key: 0x9e3779b9}
	if len(exts) == 1 {
		c.ext = exts[0]
	}
	return c
}

// maskKey returns the next masking key: xorshift, so that keys vary (a
// server that ignored them would echo garbage) without crypto/rand.
func (c *rawClient) maskKey() [4]byte {
	c.key ^= c.key << 13
	c.key ^= c.key >> 17
	c.key ^= c.key << 5
	var k [4]byte
	binary.BigEndian.PutUint32(k[:], c.key)
	return k
}

// frame encodes a masked client frame. rsv is the three reserved bits as
// Autobahn numbers them (4 is RSV1, 1 is RSV3); op may be any 4-bit value.
func (c *rawClient) frame(fin bool, rsv byte, op ws.Opcode, payload []byte) []byte {
	b0 := rsv<<4 | byte(op)&0x0f
	if fin {
		b0 |= 0x80
	}
	b := make([]byte, 0, 14+len(payload))
	switch n := len(payload); {
	case n <= 125:
		b = append(b, b0, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, b0, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, b0, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	key := c.maskKey()
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, payload...)
	// Eight octets at a time: group 9 masks 16 MiB messages, and under
	// the race detector an octet at a time would dominate its time.
	p := b[start:]
	k := uint64(binary.LittleEndian.Uint32(key[:]))
	k |= k << 32
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k)
		p = p[8:]
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
	return b
}

// abChopMode is how a case's octets are handed to TCP: Autobahn sends them
// in one write, frame by frame, or octet by octet.
type abChopMode int

const (
	abOneChop abChopMode = iota
	abFrameChops
	abOctetChops
)

// send writes frames. Write errors are only logged: a server that
// failed the connection may reset it under the rest of a case's frames,
// and what the case asserts is what it reads.
func (c *rawClient) send(mode abChopMode, frames ...[]byte) {
	switch mode {
	case abOneChop:
		c.write(bytes.Join(frames, nil))
	case abFrameChops:
		for _, f := range frames {
			c.write(f)
		}
	case abOctetChops:
		for _, f := range frames {
			c.chop(f, 1, 0)
		}
	}
}

// sendFrame sends one frame in one write.
func (c *rawClient) sendFrame(fin bool, rsv byte, op ws.Opcode, payload []byte) {
	c.write(c.frame(fin, rsv, op, payload))
}

// chop writes b in pieces of n octets, pausing between them.
func (c *rawClient) chop(b []byte, n int, pause time.Duration) {
	for len(b) > 0 {
		k := min(n, len(b))
		if !c.write(b[:k]) {
			return
		}
		b = b[k:]
		if pause > 0 && len(b) > 0 {
			time.Sleep(pause)
		}
	}
}

func (c *rawClient) write(b []byte) bool {
	c.nc.SetWriteDeadline(time.Now().Add(abTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Logf("write: %v", err)
		return false
	}
	return true
}

// abFrame is a frame the server sent.
type abFrame struct {
	fin     bool
	rsv     byte // Autobahn's numbering, as in frame
	op      ws.Opcode
	masked  bool
	payload []byte
}

func (f abFrame) String() string {
	p := f.payload
	if len(p) > 32 {
		p = p[:32]
	}
	return fmt.Sprintf("{fin %v rsv %d op %v masked %v %d bytes %q}", f.fin, f.rsv, f.op, f.masked, len(f.payload), p)
}

// readFrame reads the server's next frame within d.
func (c *rawClient) readFrame(d time.Duration) (abFrame, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	var f abFrame
	var h [8]byte
	if _, err := io.ReadFull(c.br, h[:2]); err != nil {
		return f, err
	}
	f.fin, f.rsv, f.op, f.masked = h[0]&0x80 != 0, h[0]>>4&7, ws.Opcode(h[0]&0x0f), h[1]&0x80 != 0
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		if _, err := io.ReadFull(c.br, h[:2]); err != nil {
			return f, err
		}
		n = uint64(binary.BigEndian.Uint16(h[:2]))
	case 127:
		if _, err := io.ReadFull(c.br, h[:8]); err != nil {
			return f, err
		}
		n = binary.BigEndian.Uint64(h[:8])
	}
	if f.masked {
		if _, err := io.ReadFull(c.br, h[:4]); err != nil {
			return f, err
		}
	}
	if n > abMaxMessage {
		return f, fmt.Errorf("frame of %d bytes", n)
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(c.br, f.payload); err != nil {
		return f, err
	}
	return f, nil
}

// next reads the next frame, failing the test if there is none or it is
// not a valid server frame (masked, or RSV bits other than RSV1).
func (c *rawClient) next() abFrame {
	c.t.Helper()
	f, err := c.readFrame(abTimeout)
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	if f.masked || f.rsv&^4 != 0 {
		c.t.Fatalf("invalid server frame %v", f)
	}
	return f
}

// expectMessage reads the next message, which must be op with payload,
// uncompressed: its frames must be the next ones.
func (c *rawClient) expectMessage(op ws.Opcode, payload []byte) {
	c.t.Helper()
	f := c.next()
	if f.op != op || f.rsv != 0 {
		c.t.Fatalf("got %v, want a %v message of %d bytes", f, op, len(payload))
	}
	got := f.payload
	for !f.fin {
		if f = c.next(); f.op != ws.OpContinuation || f.rsv != 0 {
			c.t.Fatalf("got %v within a %v message", f, op)
		}
		got = append(got, f.payload...)
	}
	if !bytes.Equal(got, payload) {
		c.t.Fatalf("echo differs: got %d bytes, want %d; first difference at %d", len(got), len(payload), abFirstDiff(got, payload))
	}
}

func abFirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// expectPong reads the next frame, which must be a pong with payload.
func (c *rawClient) expectPong(payload []byte) {
	c.t.Helper()
	if f := c.next(); f.op != ws.OpPong || !f.fin || !bytes.Equal(f.payload, payload) {
		c.t.Fatalf("got %v, want a pong %q", f, payload)
	}
}

// abNoCode asks expectClose for a close frame without a payload.
const abNoCode = -1

// expectClose reads the next frame, which must be a close frame with
// code (or an empty one for abNoCode) and a UTF-8 reason; answers it as
// Autobahn does; and then expects the server to close the TCP connection
// with nothing more sent.
func (c *rawClient) expectClose(code int) {
	c.t.Helper()
	f := c.next()
	if f.op != ws.OpClose || !f.fin {
		c.t.Fatalf("got %v, want a close frame with %d", f, code)
	}
	switch {
	case code == abNoCode && len(f.payload) != 0:
		c.t.Fatalf("got close frame %q, want an empty one", f.payload)
	case code != abNoCode && len(f.payload) < 2:
		c.t.Fatalf("got close frame %q, want code %d", f.payload, code)
	case code != abNoCode && int(binary.BigEndian.Uint16(f.payload)) != code:
		c.t.Fatalf("got close code %d (%q), want %d", binary.BigEndian.Uint16(f.payload), f.payload[2:], code)
	case len(f.payload) > 2 && !utf8.Valid(f.payload[2:]):
		c.t.Fatalf("close reason %q is not UTF-8", f.payload[2:])
	}
	// Autobahn answers the server's close frame, whoever started.
	c.write(c.frame(true, 0, ws.OpClose, f.payload[:min(2, len(f.payload))]))
	c.expectTCPClose()
}

// expectTCPClose expects the server to close the connection (a FIN, or
// a reset when our answer crossed its close) with nothing more sent.
func (c *rawClient) expectTCPClose() {
	c.t.Helper()
	f, err := c.readFrame(abTimeout)
	switch {
	case err == nil:
		c.t.Fatalf("got %v after the close frame", f)
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.t.Fatalf("the server did not close the connection after its close frame")
	case err != io.EOF && !errors.Is(err, syscall.ECONNRESET):
		c.t.Fatalf("after the close frame: %v, want EOF", err)
	}
}

// closeNormal starts a clean close handshake, as Autobahn ends a case
// that passed: the server must echo 1000 and close.
func (c *rawClient) closeNormal() {
	c.t.Helper()
	c.sendFrame(true, 0, ws.OpClose, abClosePayload(1000, ""))
	c.expectClose(1000)
}

// expectSilence asserts that the server sends nothing for d: a case in
// progress must not have been answered or failed yet.
func (c *rawClient) expectSilence(d time.Duration) {
	c.t.Helper()
	f, err := c.readFrame(d)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("got %v (%v) while the server should be waiting", f, err)
	}
}

// abClosePayload is a close frame's payload: code, then reason.
func abClosePayload(code uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}
