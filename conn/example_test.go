//go:build linux

package conn_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// upper answers every byte it gets in upper case.
type upper struct{}

func (upper) OnOpen(*conn.Conn) {}

func (upper) OnData(c *conn.Conn) {
	b, _ := c.Next(c.Buffered()) // valid until OnData returns
	c.Write(bytes.ToUpper(b))    // never blocks: what the socket does not take is queued
}

func (upper) OnClose(*conn.Conn, conn.Reason, error) {}

// A server is a Handler: here, one that answers in upper case.
func Example() {
	s, err := conn.NewServer(upper{}, conn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	addr, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}

	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	fmt.Fprintf(nc, "hello, poller\n")
	line, _ := bufio.NewReader(nc).ReadString('\n')
	fmt.Print(line)
	// Output: HELLO, POLLER
}

// hub keeps its subscribers, to which any goroutine may publish.
type hub struct {
	mu     sync.Mutex
	subs   map[*conn.Conn]bool
	joined chan struct{}
}

func (h *hub) OnOpen(c *conn.Conn) {
	h.mu.Lock()
	h.subs[c] = true
	h.mu.Unlock()
	h.joined <- struct{}{}
}

func (h *hub) OnData(c *conn.Conn) { c.Discard(c.Buffered()) }

func (h *hub) OnClose(c *conn.Conn, _ conn.Reason, _ error) {
	h.mu.Lock()
	delete(h.subs, c)
	h.mu.Unlock()
}

// publish writes msg to every subscriber. Conn.Write is safe from any
// goroutine: it never blocks, and a subscriber that has gone returns an
// error matching net.ErrClosed rather than writing anywhere else.
func (h *hub) publish(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.subs {
		c.Write([]byte(msg))
	}
}

// Writing to connections from a goroutine other than the handler's: a
// publish/subscribe broadcast.
func ExampleConn_Write() {
	h := &hub{subs: map[*conn.Conn]bool{}, joined: make(chan struct{}, 2)}
	s, err := conn.NewServer(h, conn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	addr, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}

	var clients []*bufio.Reader
	for range 2 {
		nc, err := net.Dial("tcp", addr.String())
		if err != nil {
			fmt.Println(err)
			return
		}
		defer nc.Close()
		clients = append(clients, bufio.NewReader(nc))
		<-h.joined
	}

	go h.publish("news: gracepoll ships conn\n")

	for i, r := range clients {
		line, _ := r.ReadString('\n')
		fmt.Printf("client %d got %s", i, line)
	}
	// Output:
	// client 0 got news: gracepoll ships conn
	// client 1 got news: gracepoll ships conn
}

// farewell answers the first line with a reply and closes gracefully.
type farewell struct{ closed chan conn.Reason }

func (farewell) OnOpen(*conn.Conn) {}

func (farewell) OnData(c *conn.Conn) {
	b, _ := c.Peek(c.Buffered())
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return // the rest of the line follows; what is left stays buffered
	}
	c.Discard(i + 1)
	c.Write([]byte("goodbye\n"))
	c.Close() // the reply is flushed first, then FIN
}

func (f farewell) OnClose(_ *conn.Conn, reason conn.Reason, _ error) { f.closed <- reason }

// A graceful close: the server replies and closes; the client reads the
// reply, then EOF.
func ExampleConn_Close() {
	h := farewell{closed: make(chan conn.Reason, 1)}
	s, err := conn.NewServer(h, conn.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	addr, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}

	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Fprintf(nc, "bye\n")
	reply, err := io.ReadAll(nc) // to EOF
	fmt.Printf("client read %q, then EOF (err %v)\n", reply, err)
	nc.Close()
	fmt.Println("server's OnClose:", <-h.closed)
	// Output:
	// client read "goodbye\n", then EOF (err <nil>)
	// server's OnClose: local-close
}

// repeater is a pipelining server: each request is a line, answered with
// the line repeated to 4 KB. It runs requests while the connection is
// Writable and leaves the rest buffered; conn offers them again once the
// client has read enough.
type repeater struct{ conn.BaseHandler }

func (repeater) OnData(c *conn.Conn) {
	for c.Writable() {
		b, _ := c.Peek(c.Buffered())
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return // incomplete: offered again, with more, when it arrives
		}
		reply := bytes.Repeat(b[:i+1], 4096/(i+1))
		c.Discard(i + 1)
		c.Write(reply)
	}
}

// Flow control for a pipelining client: 1,000 requests sent at once and
// not read for a while are answered, in bounded memory (HighWater plus one
// reply queued, not 4 MB), and all arrive once the client reads. The same
// loop serves through Shutdown, which answers what was read before closing.
func ExampleConn_Writable() {
	s, err := conn.NewServer(repeater{}, conn.Options{HighWater: 64 << 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	addr, err := s.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	nc, err := net.Dial("tcp", addr.String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	var reqs bytes.Buffer
	for i := range 1000 {
		fmt.Fprintf(&reqs, "%07d\n", i)
	}
	nc.Write(reqs.Bytes())
	time.Sleep(100 * time.Millisecond) // the client reads nothing yet
	fmt.Println("HighWater in force:", s.Options().HighWater)

	r := bufio.NewReader(nc)
	n := 0
	for ; n < 1000; n++ {
		line, err := r.ReadString('\n')
		if err != nil || line != fmt.Sprintf("%07d\n", n) {
			break
		}
		r.Discard(4096 - len(line)) // the rest of the reply
	}
	fmt.Println("replies in order:", n)
	drained, forced, err := s.Shutdown(context.Background())
	fmt.Println("shutdown:", drained, forced, err)
	// Output:
	// HighWater in force: 65536
	// replies in order: 1000
	// shutdown: 1 0 <nil>
}
