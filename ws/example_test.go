package ws_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/ws"
)

// upper echoes text messages in upper case.
type upper struct{ ws.BaseHandler }

func (upper) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) {
	out := make([]byte, len(data))
	for i, b := range data {
		if 'a' <= b && b <= 'z' {
			b -= 'a' - 'A'
		}
		out[i] = b
	}
	c.WriteMessage(op, out)
}

// A server on httpd and a client: the Upgrader is an http.Handler.
func Example() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", &ws.Upgrader{Handler: upper{}, Compression: true})
	srv := &httpd.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := ws.Dialer{Compression: true}
	c, _, err := d.Dial(ctx, "ws://"+ln.Addr().String()+"/ws")
	if err != nil {
		log.Fatal(err)
	}
	c.WriteMessage(ws.OpText, []byte("hello, websocket"))
	op, msg, err := c.ReadMessage()
	fmt.Println(op, string(msg), err, c.Compressed())

	c.Close(ws.StatusNormal, "done")
	_, _, err = c.ReadMessage() // the server's answer to our close
	fmt.Println(err)
	// Output:
	// text HELLO, WEBSOCKET <nil> true
	// ws: closed with 1000
}

// room broadcasts every message to every connection.
type room struct {
	ws.BaseHandler
	mu    sync.Mutex
	conns map[*ws.Conn]bool
}

func (r *room) OnOpen(c *ws.Conn) {
	r.mu.Lock()
	r.conns[c] = true
	r.mu.Unlock()
	// The 101 goes out before OnOpen runs: a client knows it is in the
	// room, and will receive what is broadcast, once it reads this.
	c.WriteMessage(ws.OpText, []byte("welcome"))
}

func (r *room) OnClose(c *ws.Conn, _ *ws.CloseError) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

func (r *room) OnMessage(_ *ws.Conn, op ws.Opcode, data []byte) {
	// Encoded (and compressed) once, queued on every connection; a
	// connection too slow to take it is dropped, not waited for.
	m, err := ws.NewPreparedMessage(op, append([]byte(nil), data...))
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.WritePrepared(m)
	}
}

// Broadcast with a PreparedMessage.
func ExampleNewPreparedMessage() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	r := &room{conns: map[*ws.Conn]bool{}}
	srv := &httpd.Server{Handler: &ws.Upgrader{Handler: r}}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var clients []*ws.ClientConn
	for range 3 {
		c, _, err := ws.Dial(ctx, "ws://"+ln.Addr().String()+"/")
		if err != nil {
			log.Fatal(err)
		}
		defer c.CloseNow()
		c.ReadMessage() // the welcome
		clients = append(clients, c)
	}
	clients[0].WriteMessage(ws.OpText, []byte("hi all"))
	for i, c := range clients {
		_, msg, _ := c.ReadMessage()
		fmt.Println(i, string(msg))
	}
	// Output:
	// 0 hi all
	// 1 hi all
	// 2 hi all
}
