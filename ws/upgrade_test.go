package ws_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/ws"
)

// handshake sends a raw upgrade request and returns the response.
func handshake(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, hostileTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(hostileTimeout))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	return resp
}

// TestHandshake: requests that are not a valid opening handshake are
// refused with the status the RFC gives, and Upgrade says why; valid ones
// agree the subprotocol and permessage-deflate parameters the server
// supports.
func TestHandshake(t *testing.T) {
	errs := make(chan error, 1)
	u := &ws.Upgrader{
		Handler:      newRecorder(),
		Subprotocols: []string{"v2.chat", "v1.chat"},
		Compression:  true,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		_, err := u.Upgrade(w, r, u.Handler)
		errs <- err
	})
	srvAddr := serveMux(t, mux)
	const good = "Host: h\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
		err       error
		check     func(*http.Response) string
	}{
		{"RFC 6455's example", "GET /ws HTTP/1.1\r\n" + good + "\r\n", 101, nil, func(r *http.Response) string {
			if got := r.Header.Get("Sec-WebSocket-Accept"); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
				return "Sec-WebSocket-Accept " + got
			}
			return ""
		}},
		{"subprotocol by the server's preference", "GET /ws HTTP/1.1\r\n" + good + "Sec-WebSocket-Protocol: v1.chat, v2.chat\r\n\r\n", 101, nil, func(r *http.Response) string {
			if got := r.Header.Get("Sec-WebSocket-Protocol"); got != "v2.chat" {
				return "subprotocol " + got
			}
			return ""
		}},
		{"no common subprotocol", "GET /ws HTTP/1.1\r\n" + good + "Sec-WebSocket-Protocol: mqtt\r\n\r\n", 101, nil, func(r *http.Response) string {
			if got := r.Header.Values("Sec-WebSocket-Protocol"); len(got) > 0 {
				return "subprotocol " + strings.Join(got, ",")
			}
			return ""
		}},
		{"deflate, window 10 asked", "GET /ws HTTP/1.1\r\n" + good + "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=10; client_max_window_bits\r\n\r\n", 101, nil, func(r *http.Response) string {
			want := "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10"
			if got := r.Header.Get("Sec-WebSocket-Extensions"); got != want {
				return "extensions " + got
			}
			return ""
		}},
		{"deflate, bad offer then good one", "GET /ws HTTP/1.1\r\n" + good + "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=16, permessage-deflate; x=1, permessage-deflate\r\n\r\n", 101, nil, func(r *http.Response) string {
			if got := r.Header.Get("Sec-WebSocket-Extensions"); got != "permessage-deflate; server_no_context_takeover; client_no_context_takeover" {
				return "extensions " + got
			}
			return ""
		}},
		{"unknown extension only", "GET /ws HTTP/1.1\r\n" + good + "Sec-WebSocket-Extensions: x-webkit-deflate-frame\r\n\r\n", 101, nil, func(r *http.Response) string {
			if got := r.Header.Values("Sec-WebSocket-Extensions"); len(got) > 0 {
				return "extensions " + strings.Join(got, ",")
			}
			return ""
		}},
		{"POST", "POST /ws HTTP/1.1\r\n" + good + "Content-Length: 0\r\n\r\n", 405, ws.ErrBadHandshake, nil},
		{"version 8", "GET /ws HTTP/1.1\r\n" + strings.Replace(good, "Version: 13", "Version: 8", 1) + "\r\n", 426, ws.ErrBadHandshake, func(r *http.Response) string {
			if got := r.Header.Get("Sec-WebSocket-Version"); got != "13" {
				return "426 without Sec-WebSocket-Version: 13, got " + got
			}
			return ""
		}},
		{"key of 17 bytes", "GET /ws HTTP/1.1\r\n" + strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZQE=", 1) + "\r\n", 400, ws.ErrBadHandshake, nil},
		{"key not base64", "GET /ws HTTP/1.1\r\n" + strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25j!Q==", 1) + "\r\n", 400, ws.ErrBadHandshake, nil},
		{"short key", "GET /ws HTTP/1.1\r\n" + strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ=", 1) + "\r\n", 400, ws.ErrBadHandshake, nil},
		{"no Connection: Upgrade", "GET /ws HTTP/1.1\r\n" + strings.Replace(good, "keep-alive, Upgrade", "keep-alive", 1) + "\r\n", 400, ws.ErrBadHandshake, nil},
		{"other site's origin", "GET /ws HTTP/1.1\r\n" + good + "Origin: https://evil.example\r\n\r\n", 403, ws.ErrOrigin, nil},
		{"same origin", "GET /ws HTTP/1.1\r\n" + good + "Origin: http://h\r\n\r\n", 101, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := handshake(t, srvAddr, tc.req)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			var err error
			select {
			case err = <-errs:
			case <-time.After(hostileTimeout):
				t.Fatal("handler did not return")
			}
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("Upgrade returned %v, want %v", err, tc.err)
			}
			if tc.check != nil {
				if msg := tc.check(resp); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

// TestPingInterval: an idle connection is pinged; a client that answers
// stays, one that sends nothing is reset after another interval.
func TestPingInterval(t *testing.T) {
	rec := newRecorder()
	const interval = 100 * time.Millisecond
	_, addr := startServer(t, &ws.Upgrader{Handler: rec, PingInterval: interval}, conn.Options{})

	alive := dialWS(t, addr, nil)
	readDone := make(chan error, 1)
	go func() {
		_, _, err := alive.ReadMessage() // answers pings until the end
		readDone <- err
	}()
	silent := dialHostile(t, addr, "")
	_, _, op, _, err := silent.readFrame()
	if err != nil || op != ws.OpPing {
		t.Fatalf("silent client read %v %v, want a ping", op, err)
	}
	start := time.Now()
	e := rec.nextClose(t)
	if !errors.Is(e, ws.ErrPingTimeout) {
		t.Errorf("silent client's OnClose: %v, want ErrPingTimeout", e)
	}
	if el := time.Since(start); el > 20*interval {
		t.Errorf("silent client reset %v after its ping", el)
	}
	time.Sleep(5 * interval)
	select {
	case err := <-readDone:
		t.Fatalf("the client answering pings was dropped: %v", err)
	case e := <-rec.closes:
		t.Fatalf("another connection ended: %v", e)
	default:
	}
	alive.CloseNow()
}

// serveMux serves mux on a loopback httpd.Server until the test ends.
func serveMux(t *testing.T, mux *http.ServeMux) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httpd.Server{Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// slowOpen takes its time in OnOpen and records the order of its calls.
type slowOpen struct {
	ws.BaseHandler
	order chan string
}

func (h *slowOpen) OnOpen(*ws.Conn) {
	time.Sleep(200 * time.Millisecond)
	h.order <- "open"
}

func (h *slowOpen) OnClose(*ws.Conn, *ws.CloseError) { h.order <- "close" }

// TestOnCloseAfterOnOpen: a client that resets while OnOpen runs (on the
// upgrade's goroutine) gets OnClose after OnOpen, never before.
func TestOnCloseAfterOnOpen(t *testing.T) {
	h := &slowOpen{order: make(chan string, 2)}
	_, addr := startServer(t, &ws.Upgrader{Handler: h}, conn.Options{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	buf := make([]byte, 1)
	c.Read(buf) // the 101 is on its way: OnOpen runs
	c.(*net.TCPConn).SetLinger(0)
	c.Close() // a reset
	for _, want := range []string{"open", "close"} {
		select {
		case got := <-h.order:
			if got != want {
				t.Fatalf("handler calls out of order: %s before open returned", got)
			}
		case <-time.After(hostileTimeout):
			t.Fatalf("no %s", want)
		}
	}
}
