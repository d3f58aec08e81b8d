package ws_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/ws"
)

type echo struct{ ws.BaseHandler }

func (echo) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) { c.WriteMessage(op, data) }

func TestSmoke(t *testing.T) {
	for _, comp := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/echo", &ws.Upgrader{Handler: echo{}, Compression: comp, ContextTakeover: true})
		srv := &httpd.Server{Handler: mux}
		go srv.Serve(ln)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d := ws.Dialer{Compression: comp, ContextTakeover: true}
		c, _, err := d.Dial(ctx, "ws://"+ln.Addr().String()+"/echo")
		if err != nil {
			t.Fatal(err)
		}
		for i, msg := range []string{"hello", strings.Repeat("abc", 1000), strings.Repeat("x", 200000)} {
			if err := c.WriteMessage(ws.OpText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			op, got, err := c.ReadMessage()
			if err != nil || op != ws.OpText || string(got) != msg {
				t.Fatalf("comp %v msg %d: %v %v %d bytes", comp, i, op, err, len(got))
			}
		}
		c.Close(ws.StatusNormal, "bye")
		_, _, err = c.ReadMessage()
		t.Logf("compressed %v: end %v", c.Compressed(), err)
		srv.Shutdown(ctx)
		cancel()
	}
}

// TestClientPong checks that the client hands each pong to Dialer.OnPong,
// in order with the messages: the server answers Ping before it echoes
// the message sent after it.
func TestClientPong(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/echo", &ws.Upgrader{Handler: echo{}})
	srv := &httpd.Server{Handler: mux}
	go srv.Serve(ln)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	defer srv.Shutdown(ctx)
	var pongs []string
	d := ws.Dialer{OnPong: func(p []byte) { pongs = append(pongs, string(p)) }}
	c, _, err := d.Dial(ctx, "ws://"+ln.Addr().String()+"/echo")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, p := range []string{"", "one", strings.Repeat("p", 125)} {
		if err := c.Ping([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WriteMessage(ws.OpText, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.ReadMessage(); err != nil || string(got) != "after" {
		t.Fatalf("ReadMessage = %q, %v", got, err)
	}
	if want := []string{"", "one", strings.Repeat("p", 125)}; strings.Join(pongs, "|") != strings.Join(want, "|") {
		t.Errorf("OnPong got %q, want %q", pongs, want)
	}
}
