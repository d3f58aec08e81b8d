package ws_test

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/ws"
)

const hostileTimeout = 20 * time.Second

// recorder is an echo Handler that records how connections ended.
type recorder struct {
	ws.BaseHandler
	closes chan *ws.CloseError
	conns  sync.Map // *ws.Conn -> struct{}
}

func newRecorder() *recorder { return &recorder{closes: make(chan *ws.CloseError, 100000)} }

func (r *recorder) OnOpen(c *ws.Conn) { r.conns.Store(c, struct{}{}) }

func (r *recorder) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) { c.WriteMessage(op, data) }

func (r *recorder) OnClose(c *ws.Conn, err *ws.CloseError) {
	r.conns.Delete(c)
	r.closes <- err
}

// nextClose waits for a connection's end.
func (r *recorder) nextClose(t *testing.T) *ws.CloseError {
	t.Helper()
	select {
	case e := <-r.closes:
		return e
	case <-time.After(hostileTimeout):
		t.Fatal("no connection ended")
		return nil
	}
}

// startServer serves u at /ws on a loopback port until the test ends.
func startServer(t *testing.T, u *ws.Upgrader, opts conn.Options) (srv *httpd.Server, addr string) {
	t.Helper()
	return startServerWith(t, &httpd.Server{Options: opts}, u)
}

// startServerWith is startServer with the server's fields set.
func startServerWith(t *testing.T, srv *httpd.Server, u *ws.Upgrader) (*httpd.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", u)
	srv.Handler, srv.ErrorLog = mux, log.New(io.Discard, "", 0)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, ln.Addr().String()
}

// hostileConn opens a WebSocket connection by hand, so that frames can be
// written byte by byte, unmasked or broken.
type hostileConn struct {
	net.Conn
	br *bufio.Reader
}

func dialHostile(t *testing.T, addr, extensions string) *hostileConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, hostileTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(hostileTimeout))
	var key [16]byte
	rand.Read(key[:])
	req := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) + "\r\n"
	if extensions != "" {
		req += "Sec-WebSocket-Extensions: " + extensions + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	rc := &hostileConn{Conn: c, br: bufio.NewReader(c)}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return rc
}

// rawFrame encodes a frame, masked with a fixed key when masked is set.
func rawFrame(fin bool, rsv byte, op ws.Opcode, payload []byte, masked bool) []byte {
	b0 := rsv | byte(op)
	if fin {
		b0 |= 0x80
	}
	var m byte
	if masked {
		m = 0x80
	}
	b := []byte{b0}
	switch n := len(payload); {
	case n <= 125:
		b = append(b, m|byte(n))
	case n <= 0xffff:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !masked {
		return append(b, payload...)
	}
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

// readFrame reads one server frame.
func (rc *hostileConn) readFrame() (fin bool, rsv byte, op ws.Opcode, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(rc.br, h[:]); err != nil {
		return
	}
	fin, rsv, op = h[0]&0x80 != 0, h[0]&0x70, ws.Opcode(h[0]&0x0f)
	if h[1]&0x80 != 0 {
		return fin, rsv, op, nil, errors.New("masked server frame")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, err = io.ReadFull(rc.br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		_, err = io.ReadFull(rc.br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	if err != nil {
		return
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(rc.br, payload)
	return
}

// expectClose reads until the server's close frame, checks its code,
// and checks that the server then closes the TCP connection.
func (rc *hostileConn) expectClose(t *testing.T, want ws.StatusCode) {
	t.Helper()
	for {
		_, _, op, p, err := rc.readFrame()
		if err != nil {
			t.Fatalf("want a close frame with %d, read error %v", want, err)
		}
		if op != ws.OpClose {
			continue
		}
		if len(p) < 2 || ws.StatusCode(binary.BigEndian.Uint16(p)) != want {
			t.Fatalf("close frame %x, want code %d", p, want)
		}
		break
	}
	if n, err := io.Copy(io.Discard, rc.br); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("after the close frame: %d bytes, %v (want the server's FIN)", n, err)
	}
	rc.Close() // as a client does at the server's FIN
}

// echoOnce checks that a client connection is served: one round trip.
func echoOnce(c *ws.ClientConn, msg string) error {
	if err := c.WriteMessage(ws.OpText, []byte(msg)); err != nil {
		return err
	}
	op, got, err := c.ReadMessage()
	if err != nil {
		return err
	}
	if op != ws.OpText || string(got) != msg {
		return fmt.Errorf("echo %v %q, want %q", op, got, msg)
	}
	return nil
}

func dialWS(t *testing.T, addr string, d *ws.Dialer) *ws.ClientConn {
	t.Helper()
	if d == nil {
		d = &ws.Dialer{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	c, _, err := d.Dial(ctx, "ws://"+addr+"/ws")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// TestHostileFraming: frames a client may not send fail the connection
// with the RFC's code, while another connection is served throughout.
func TestHostileFraming(t *testing.T) {
	rec := newRecorder()
	_, addr := startServer(t, &ws.Upgrader{Handler: rec}, conn.Options{})
	bystander := dialWS(t, addr, nil)
	huge := []byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4} // 2^63: top bit set
	big := []byte{0x82, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}
	for _, tc := range []struct {
		name  string
		bytes []byte
		want  ws.StatusCode
		cause error
	}{
		{"unmasked", rawFrame(true, 0, ws.OpText, []byte("hello"), false), ws.StatusProtocolError, ws.ErrProtocol},
		{"length 2^63", huge, ws.StatusProtocolError, ws.ErrProtocol},
		{"length 2^63-1", big, ws.StatusTooBig, ws.ErrTooBig},
		{"rsv1 without deflate", rawFrame(true, 0x40, ws.OpText, []byte("x"), true), ws.StatusProtocolError, ws.ErrProtocol},
		{"opcode 3", rawFrame(true, 0, 3, nil, true), ws.StatusProtocolError, ws.ErrProtocol},
		{"ping 126 bytes", rawFrame(true, 0, ws.OpPing, make([]byte, 126), true), ws.StatusProtocolError, ws.ErrProtocol},
		{"fragmented ping", rawFrame(false, 0, ws.OpPing, nil, true), ws.StatusProtocolError, ws.ErrProtocol},
		{"continuation first", rawFrame(true, 0, ws.OpContinuation, []byte("x"), true), ws.StatusProtocolError, ws.ErrProtocol},
		{"close code 1005", rawFrame(true, 0, ws.OpClose, []byte{0x03, 0xed}, true), ws.StatusProtocolError, ws.ErrProtocol},
		{"close reason not UTF-8", rawFrame(true, 0, ws.OpClose, []byte{0x03, 0xe8, 0xff}, true), ws.StatusInvalidData, ws.ErrInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialHostile(t, addr, "")
			rc.Write(tc.bytes)
			rc.expectClose(t, tc.want)
			e := rec.nextClose(t)
			if e.Code != tc.want || !errors.Is(e, tc.cause) || e.Remote {
				t.Errorf("OnClose got %v, want code %d caused by %v", e, tc.want, tc.cause)
			}
			if err := echoOnce(bystander, "still served"); err != nil {
				t.Fatalf("bystander: %v", err)
			}
		})
	}
}

// TestHostileTrickle: a frame arriving a byte at a time is reassembled,
// while other connections are served at their usual pace.
func TestHostileTrickle(t *testing.T) {
	_, addr := startServer(t, &ws.Upgrader{Handler: newRecorder()}, conn.Options{})
	bystander := dialWS(t, addr, nil)
	rc := dialHostile(t, addr, "")
	msg := []byte("trickled one byte at a time ✓")
	f := rawFrame(true, 0, ws.OpText, msg, true)
	done := make(chan error, 1)
	go func() {
		for i := range f {
			if _, err := rc.Write(f[i : i+1]); err != nil {
				done <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- nil
	}()
	var slowest time.Duration
	rounds := 0
	for waiting := true; waiting; rounds++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		default:
		}
		start := time.Now()
		if err := echoOnce(bystander, "meanwhile"); err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(start))
		time.Sleep(time.Millisecond)
	}
	_, _, op, got, err := rc.readFrame()
	if err != nil || op != ws.OpText || !bytes.Equal(got, msg) {
		t.Fatalf("trickled message echoed as %v %q (%v)", op, got, err)
	}
	if slowest > time.Second {
		t.Errorf("a bystander's round trip took %v while a frame trickled in", slowest)
	}
	t.Logf("%d bystander round trips during the trickle, slowest %v", rounds, slowest)
}

// TestHostileFragments: 10,000 fragments of one byte make one message.
func TestHostileFragments(t *testing.T) {
	_, addr := startServer(t, &ws.Upgrader{Handler: newRecorder()}, conn.Options{})
	rc := dialHostile(t, addr, "")
	var b bytes.Buffer
	want := make([]byte, 10000)
	for i := range want {
		want[i] = 'a' + byte(i%26)
		op := ws.OpContinuation
		if i == 0 {
			op = ws.OpText
		}
		b.Write(rawFrame(i == len(want)-1, 0, op, want[i:i+1], true))
	}
	if _, err := rc.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	_, _, op, got, err := rc.readFrame()
	if err != nil || op != ws.OpText || !bytes.Equal(got, want) {
		t.Fatalf("echo of 10,000 fragments: %v, %d bytes (%v)", op, len(got), err)
	}
}

// TestHostileUTF8Split: invalid UTF-8 across a fragment boundary fails
// the connection with 1007 as soon as the invalid byte arrives, before
// the message's final fragment.
func TestHostileUTF8Split(t *testing.T) {
	rec := newRecorder()
	_, addr := startServer(t, &ws.Upgrader{Handler: rec}, conn.Options{})
	rc := dialHostile(t, addr, "")
	// E0 needs A0-BF next: 80 makes an overlong form.
	rc.Write(rawFrame(false, 0, ws.OpText, []byte("ok \xe0"), true))
	rc.Write(rawFrame(false, 0, ws.OpContinuation, []byte("\x80\x80 and more"), true))
	rc.expectClose(t, ws.StatusInvalidData) // no final fragment was sent
	if e := rec.nextClose(t); !errors.Is(e, ws.ErrInvalidUTF8) {
		t.Errorf("OnClose got %v", e)
	}
}

// deflateMsg compresses p as one permessage-deflate message.
func deflateMsg(t *testing.T, p []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(p)
	w.Flush()
	out := b.Bytes()
	if !bytes.HasSuffix(out, []byte{0, 0, 0xff, 0xff}) {
		t.Fatal("no sync flush marker")
	}
	return out[:len(out)-4]
}

// TestHostileZipBomb: a message that inflates 1000x beyond the limit is
// refused with 1009, having inflated no more than the limit; one within
// the limit is delivered.
func TestHostileZipBomb(t *testing.T) {
	rec := newRecorder()
	const limit = 1 << 20
	_, addr := startServer(t, &ws.Upgrader{Handler: rec, Compression: true, MaxMessageSize: limit}, conn.Options{})
	ext := "permessage-deflate; client_no_context_takeover"

	ok := dialHostile(t, addr, ext)
	within := bytes.Repeat([]byte{'z'}, limit)
	ok.Write(rawFrame(true, 0x40, ws.OpBinary, deflateMsg(t, within), true))
	if _, rsv, op, got, err := ok.readFrame(); err != nil || op != ws.OpBinary || rsv != 0x40 {
		t.Fatalf("echo of a 1 MiB compressed message: %v rsv %x %v", op, rsv, err)
	} else if n := len(got); n > limit/100 {
		t.Errorf("echo sent %d compressed bytes for 1 MiB of one byte", n)
	}

	bomb := deflateMsg(t, make([]byte, 1000*(limit/100)))
	t.Logf("bomb: %d bytes inflating to %d (%dx the bomb, %dx the limit)", len(bomb), 1000*(limit/100), 1000*(limit/100)/len(bomb), 1000/100)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rc := dialHostile(t, addr, ext)
	rc.Write(rawFrame(true, 0x40, ws.OpBinary, bomb, true))
	rc.expectClose(t, ws.StatusTooBig)
	if e := rec.nextClose(t); !errors.Is(e, ws.ErrTooBig) {
		t.Errorf("OnClose got %v", e)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8*limit {
		t.Errorf("allocated %d bytes inflating a bomb refused at %d", grew, limit)
	}
}

// TestHostileNeverReads: a client that never reads while the server
// broadcasts is paused, then dropped at the queue's limit (ErrSlowReader);
// the readers get every message, and the server's memory stays bounded.
func TestHostileNeverReads(t *testing.T) {
	rec := newRecorder()
	opts := conn.Options{HighWater: 256 << 10, MaxQueued: 1 << 20, SendBuffer: 64 << 10}
	_, addr := startServer(t, &ws.Upgrader{Handler: rec}, opts)
	const readers = 8
	var clients []*ws.ClientConn
	for range readers {
		clients = append(clients, dialWS(t, addr, nil))
	}
	stuck, err := net.Dial("tcp", addr) // upgrades, then never reads
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	stuck.(*net.TCPConn).SetReadBuffer(16 << 10)
	io.WriteString(stuck, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	deadline := time.Now().Add(hostileTimeout)
	for n := 0; n != readers+1; {
		n = 0
		rec.conns.Range(func(any, any) bool { n++; return true })
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", n, readers+1)
		}
		time.Sleep(time.Millisecond)
	}
	const msgs = 400
	payload := bytes.Repeat([]byte("b"), 32<<10) // 400 x 32 KiB = 12.5 MiB to each
	var got sync.WaitGroup
	var readErrs atomic.Int32
	for _, c := range clients {
		got.Add(1)
		go func() {
			defer got.Done()
			for i := range msgs {
				if _, m, err := c.ReadMessage(); err != nil || len(m) != len(payload) {
					t.Errorf("reader: message %d: %d bytes, %v", i, len(m), err)
					readErrs.Add(1)
					return
				}
			}
		}()
	}
	pm, _ := ws.NewPreparedMessage(ws.OpBinary, payload)
	var slowErrs int
	var maxHeap uint64
	for i := range msgs {
		rec.conns.Range(func(k, _ any) bool {
			if err := k.(*ws.Conn).WritePrepared(pm); errors.Is(err, ws.ErrSlowReader) {
				slowErrs++
			}
			return true
		})
		if i%50 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			maxHeap = max(maxHeap, ms.HeapInuse)
		}
		// The readers drain meanwhile: a broadcaster that outruns them all
		// would drop them too, by design.
		for q := 0; q < 1000; q++ {
			busy := false
			rec.conns.Range(func(k, _ any) bool {
				if c := k.(*ws.Conn); c.NetConn().Queued() > opts.HighWater && c.NetConn().RemoteAddr().String() != stuck.LocalAddr().String() {
					busy = true
				}
				return true
			})
			if !busy {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	got.Wait()
	if readErrs.Load() > 0 {
		t.Fatal("readers lost messages")
	}
	if slowErrs != 1 {
		t.Errorf("%d writes failed with ErrSlowReader, want 1 (the stuck client, then it is gone)", slowErrs)
	}
	if e := rec.nextClose(t); !errors.Is(e, ws.ErrSlowReader) || !errors.Is(e, conn.ErrQueueFull) {
		t.Errorf("the stuck client's OnClose: %v", e)
	}
	t.Logf("peak heap in use while broadcasting %d MiB to each: %d MiB", msgs*len(payload)>>20, maxHeap>>20)
}

// TestHostileNoCloseAnswer: a client that never answers our close frame
// is reset after CloseTimeout.
func TestHostileNoCloseAnswer(t *testing.T) {
	rec := newRecorder()
	u := &ws.Upgrader{Handler: rec, CloseTimeout: 200 * time.Millisecond}
	_, addr := startServer(t, u, conn.Options{})
	rc := dialHostile(t, addr, "")
	var wc *ws.Conn
	for wc == nil {
		rec.conns.Range(func(k, _ any) bool { wc = k.(*ws.Conn); return false })
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := wc.Close(ws.StatusNormal, "bye"); err != nil {
		t.Fatal(err)
	}
	if err := wc.WriteMessage(ws.OpText, []byte("after")); !errors.Is(err, ws.ErrClosed) {
		t.Errorf("WriteMessage after Close: %v, want ErrClosed", err)
	}
	if _, _, op, p, err := rc.readFrame(); err != nil || op != ws.OpClose || string(p[2:]) != "bye" {
		t.Fatalf("read %v %q %v, want our close frame", op, p, err)
	}
	e := rec.nextClose(t)
	if el := time.Since(start); el < u.CloseTimeout || el > u.CloseTimeout+5*time.Second {
		t.Errorf("ended after %v, want about CloseTimeout (%v)", el, u.CloseTimeout)
	}
	if e.Code != ws.StatusNormal || !errors.Is(e, ws.ErrCloseTimeout) {
		t.Errorf("OnClose got %v, want 1000 with ErrCloseTimeout", e)
	}
}

// TestIdleConnectionsHoldNoGoroutine: upgraded, idle connections hold no
// goroutine of the server's.
func TestIdleConnectionsHoldNoGoroutine(t *testing.T) {
	_, addr := startServer(t, &ws.Upgrader{Handler: newRecorder()}, conn.Options{})
	dialWS(t, addr, nil) // the server's waiters are started
	base := runtime.NumGoroutine()
	const n = 500
	for i := range n {
		c := dialWS(t, addr, nil)
		if err := echoOnce(c, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The client side holds none either: ClientConn reads on the caller's
	// goroutine.
	time.Sleep(50 * time.Millisecond)
	if grew := runtime.NumGoroutine() - base; grew > n/10 {
		t.Errorf("%d goroutines more with %d idle connections", grew, n)
	}
}

// TestUpgradeStorm: 20,000 upgrades, thousands at a time, all answered
// (none refused for want of a goroutine slot), with one message each.
func TestUpgradeStorm(t *testing.T) {
	const total, atOnce = 20000, 4000 // two descriptors each in this process; 20,000 is the limit
	// An upgrade's handshake is served on a goroutine: beyond MaxStreams
	// (1,024 by default) at once it would be refused with 503.
	_, addr := startServerWith(t, &httpd.Server{MaxStreams: atOnce}, &ws.Upgrader{Handler: newRecorder()})
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	var failed atomic.Int32
	var firstErr atomic.Value
	start := time.Now()
	for i := range total {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
			defer cancel()
			c, _, err := ws.Dial(ctx, "ws://"+addr+"/ws")
			if err == nil {
				err = echoOnce(c, fmt.Sprint(i))
				c.CloseNow()
			}
			if err != nil && failed.Add(1) == 1 {
				firstErr.Store(err)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d upgrades failed; first: %v", n, total, firstErr.Load())
	}
	t.Logf("%d upgrades with a round trip each, %d at a time, in %v", total, atOnce, time.Since(start))
}
