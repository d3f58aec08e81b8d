//go:build linux

package peers

import (
	"context"
	"net/http"
	"strconv"
	"sync"

	"github.com/coder/websocket"
	gorilla "github.com/gorilla/websocket"
	"github.com/lesismal/nbio/nbhttp"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/lxzan/gws"

	"github.com/gracepoll/gracepoll/httpd"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/gracepoll/gracepoll/ws"
)

// The WebSocket comparison's routes, the same on every server (Kind "ws"):
//
//	GET /echo              the WebSocket upgrade; each message is echoed
//	                       back whole with its opcode
//	GET /broadcast?seq=N   sends WSBroadcastPayload(N), a binary message,
//	                       to every WebSocket connection open on the server
//	                       and answers 200 "sent=K", K the connections
//	                       written to
//
// No server agrees compression (permessage-deflate): the comparison is of
// framing and I/O, and a compressing server would answer the clients that
// offer it. Every server refuses messages beyond WSMaxMessage.
const (
	WSPathEcho      = "/echo"
	WSPathBroadcast = "/broadcast"
	// WSMaxMessage is every server's limit on a message received: the
	// default of gracepoll's ws, set on the others (gorilla's and
	// coder's defaults are lower, nbio's and gws's higher).
	WSMaxMessage = 1 << 20
	// WSBroadcastSize is the broadcast message's size.
	WSBroadcastSize = 64
)

// WSBroadcastPayload is broadcast number seq's message: "broadcast N"
// padded with dots to WSBroadcastSize bytes, so that a client can tell
// one broadcast from another.
func WSBroadcastPayload(seq uint64) []byte {
	p := make([]byte, WSBroadcastSize)
	n := copy(p, "broadcast "+strconv.FormatUint(seq, 10)+" ")
	for i := n; i < len(p); i++ {
		p[i] = '.'
	}
	return p
}

// wsConns is the set of a server's open WebSocket connections, which
// every server keeps the same way (a map under a mutex) for /broadcast: its
// cost per connection is the same in every server's idle memory.
type wsConns[C comparable] struct {
	mu sync.Mutex
	m  map[C]struct{}
}

func (s *wsConns[C]) add(c C) {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[C]struct{}{}
	}
	s.m[c] = struct{}{}
	s.mu.Unlock()
}

func (s *wsConns[C]) remove(c C) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// snapshot returns the connections open now, so that the broadcast loop
// does not hold the lock that opening and closing take.
func (s *wsConns[C]) snapshot() []C {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]C, 0, len(s.m))
	for c := range s.m {
		out = append(out, c)
	}
	return out
}

// broadcastHandler serves /broadcast: send is called with the payload and
// returns how many connections it wrote to.
func broadcastHandler(send func(payload []byte) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seq, err := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
		if err != nil {
			http.Error(w, "want seq=N", http.StatusBadRequest)
			return
		}
		body := "sent=" + strconv.Itoa(send(WSBroadcastPayload(seq)))
		h := w.Header()
		h["Content-Type"], h["Content-Length"] = plainType, []string{strconv.Itoa(len(body))}
		w.Write([]byte(body))
	}
}

// netHTTPServer is a net/http server of the comparison, on a free port of
// 127.0.0.1.
type netHTTPServer struct {
	srv  *http.Server
	addr string
}

func startNetHTTP(h http.Handler) (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &netHTTPServer{srv: &http.Server{Handler: h}, addr: ln.Addr().String()}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *netHTTPServer) Addr() string { return s.addr }

// Close closes the listener; the hijacked WebSocket connections end with
// the process.
func (s *netHTTPServer) Close() error { return s.srv.Close() }

// WSGracepoll is gracepoll's ws on httpd, event-driven: OnMessage echoes
// with Conn.WriteMessage, /broadcast writes one ws.PreparedMessage to
// every connection.
type WSGracepoll struct {
	srv   *httpd.Server
	addr  string
	conns wsConns[*ws.Conn]
}

type wsGracepollHandler struct{ s *WSGracepoll }

func (h wsGracepollHandler) OnOpen(c *ws.Conn) { h.s.conns.add(c) }

func (h wsGracepollHandler) OnMessage(c *ws.Conn, op ws.Opcode, data []byte) {
	c.WriteMessage(op, data)
}

func (h wsGracepollHandler) OnClose(c *ws.Conn, _ *ws.CloseError) { h.s.conns.remove(c) }

// NewWSGracepoll starts gracepoll's ws on httpd with their defaults.
func NewWSGracepoll() (Server, error) {
	ln, err := listenLoopback()
	if err != nil {
		return nil, err
	}
	s := &WSGracepoll{addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.Handle(WSPathEcho, &ws.Upgrader{Handler: wsGracepollHandler{s}, MaxMessageSize: WSMaxMessage})
	mux.Handle(WSPathBroadcast, broadcastHandler(func(p []byte) int {
		m, err := ws.NewPreparedMessage(ws.OpBinary, p)
		if err != nil {
			return 0
		}
		n := 0
		for _, c := range s.conns.snapshot() {
			if c.WritePrepared(m) == nil {
				n++
			}
		}
		return n
	}))
	s.srv = &httpd.Server{Handler: mux}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr returns the listening address.
func (s *WSGracepoll) Addr() string { return s.addr }

// Close closes the listener and every connection.
func (s *WSGracepoll) Close() error { return s.srv.Close() }

// gorillaConn is a gorilla connection with the mutex its docs ask of
// concurrent writers: the reading goroutine's echoes and the broadcast.
type gorillaConn struct {
	mu sync.Mutex
	c  *gorilla.Conn
}

// NewWSGorilla starts gorilla/websocket on net/http: a goroutine per
// connection (net/http's) reading with ReadMessage and echoing with
// WriteMessage, as gorilla's echo example does; the default Upgrader
// (4 KiB buffers, no compression). /broadcast writes one
// gorilla.PreparedMessage to every connection from its handler's
// goroutine (WritePreparedMessage, under the connection's write mutex),
// the way gorilla's docs give for sending a message to many connections.
func NewWSGorilla() (Server, error) {
	var conns wsConns[*gorillaConn]
	up := &gorilla.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc(WSPathEcho, func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadLimit(WSMaxMessage)
		gc := &gorillaConn{c: c}
		conns.add(gc)
		defer conns.remove(gc)
		for {
			mt, p, err := c.ReadMessage()
			if err != nil {
				return
			}
			gc.mu.Lock()
			err = c.WriteMessage(mt, p)
			gc.mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	mux.Handle(WSPathBroadcast, broadcastHandler(func(p []byte) int {
		m, err := gorilla.NewPreparedMessage(gorilla.BinaryMessage, p)
		if err != nil {
			return 0
		}
		n := 0
		for _, gc := range conns.snapshot() {
			gc.mu.Lock()
			err := gc.c.WritePreparedMessage(m)
			gc.mu.Unlock()
			if err == nil {
				n++
			}
		}
		return n
	}))
	return startNetHTTP(mux)
}

// NewWSCoder starts coder/websocket on net/http: a goroutine per
// connection (net/http's) reading with Read and echoing with Write,
// compression disabled (its default). /broadcast calls Write on every
// connection from its handler's goroutine: coder's Conn allows writes
// concurrent with the reader, and it has no prepared message.
func NewWSCoder() (Server, error) {
	var conns wsConns[*websocket.Conn]
	mux := http.NewServeMux()
	mux.HandleFunc(WSPathEcho, func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(WSMaxMessage)
		conns.add(c)
		defer conns.remove(c)
		ctx := r.Context()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, p); err != nil {
				return
			}
		}
	})
	mux.Handle(WSPathBroadcast, broadcastHandler(func(p []byte) int {
		n := 0
		ctx := context.Background()
		for _, c := range conns.snapshot() {
			if c.Write(ctx, websocket.MessageBinary, p) == nil {
				n++
			}
		}
		return n
	}))
	return startNetHTTP(mux)
}

// NewWSGws starts lxzan/gws on net/http: its event-driven Upgrader
// (OnMessage echoes with WriteMessage), each connection's ReadLoop on a
// goroutine of its own as gws's README starts it, its default options
// (no compression, no parallel message handling) but the message limit.
// /broadcast uses gws.Broadcaster, gws's helper that encodes the frame
// once and queues it on each connection's asynchronous writer.
func NewWSGws() (Server, error) {
	h := &gwsHandler{}
	up := gws.NewUpgrader(h, &gws.ServerOption{ReadMaxPayloadSize: WSMaxMessage})
	mux := http.NewServeMux()
	mux.HandleFunc(WSPathEcho, func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r)
		if err != nil {
			return
		}
		go c.ReadLoop()
	})
	mux.Handle(WSPathBroadcast, broadcastHandler(func(p []byte) int {
		b := gws.NewBroadcaster(gws.OpcodeBinary, p)
		defer b.Close()
		n := 0
		for _, c := range h.conns.snapshot() {
			if b.Broadcast(c) == nil {
				n++
			}
		}
		return n
	}))
	return startNetHTTP(mux)
}

type gwsHandler struct {
	gws.BuiltinEventHandler
	conns wsConns[*gws.Conn]
}

func (h *gwsHandler) OnOpen(c *gws.Conn) { h.conns.add(c) }

func (h *gwsHandler) OnClose(c *gws.Conn, _ error) { h.conns.remove(c) }

func (h *gwsHandler) OnMessage(c *gws.Conn, m *gws.Message) {
	defer m.Close()
	c.WriteMessage(m.Opcode, m.Bytes())
}

// WSNbio is lesismal/nbio's websocket on its nbhttp engine, event-driven:
// the engine's defaults (handlers on its executor) with
// ReleaseWebsocketPayload, as nbio's examples set it, and the message
// limit. OnMessage echoes with WriteMessage; /broadcast calls WriteMessage
// on every connection (nbio has no prepared message).
type WSNbio struct{ nbhttpServer }

// NewWSNbio starts nbio's websocket on 127.0.0.1, on a free port.
func NewWSNbio() (Server, error) {
	var conns wsConns[*nbws.Conn]
	up := nbws.NewUpgrader()
	up.MessageLengthLimit = WSMaxMessage
	up.OnOpen(conns.add)
	up.OnMessage(func(c *nbws.Conn, mt nbws.MessageType, data []byte) { c.WriteMessage(mt, data) })
	up.OnClose(func(c *nbws.Conn, _ error) { conns.remove(c) })
	mux := http.NewServeMux()
	mux.HandleFunc(WSPathEcho, func(w http.ResponseWriter, r *http.Request) { up.Upgrade(w, r, nil) })
	mux.Handle(WSPathBroadcast, broadcastHandler(func(p []byte) int {
		n := 0
		for _, c := range conns.snapshot() {
			if c.WriteMessage(nbws.BinaryMessage, p) == nil {
				n++
			}
		}
		return n
	}))
	s, err := startNbhttp(nbhttp.Config{Handler: mux, ReleaseWebsocketPayload: true})
	if err != nil {
		return nil, err
	}
	return &WSNbio{s}, nil
}

// Poller returns the poller under the server's httpd (for cmd/serve's
// statistics).
func (s *WSGracepoll) Poller() *poller.Poller { return s.srv.Transport().Poller() }
