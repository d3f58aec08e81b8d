//go:build linux

package peers

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/kv/kvserver"
	"github.com/gracepoll/gracepoll/examples/kv/resp"
	"github.com/gracepoll/gracepoll/examples/kv/store"
)

// KVConn is examples/kv's server: kvserver.Handler on a conn.Server.
type KVConn struct{ connServer }

// connServer is a conn.Server listening on 127.0.0.1.
type connServer struct {
	*conn.Server
	addr string
}

// listenConn starts a conn.Server for h with opts, listening on
// 127.0.0.1 on a free port.
func listenConn(h conn.Handler, opts conn.Options) (connServer, error) {
	cs, err := conn.NewServer(h, opts)
	if err != nil {
		return connServer{}, err
	}
	a, err := cs.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		cs.Close()
		return connServer{}, err
	}
	return connServer{Server: cs, addr: a.String()}, nil
}

// Addr returns the server's address.
func (s connServer) Addr() string { return s.addr }

// NewKVConn starts examples/kv's server on 127.0.0.1, on a free port, with
// the options the example uses.
func NewKVConn() (*KVConn, error) { return newKVConn(nil) }

// newKVConn starts examples/kv's server with the example's options and
// tlsConfig as Options.TLS.
func newKVConn(tlsConfig *tls.Config) (*KVConn, error) {
	h := kvserver.New(store.New(0), 0)
	opts := h.Options()
	opts.TLS = tlsConfig
	cs, err := listenConn(h, opts)
	if err != nil {
		return nil, err
	}
	return &KVConn{cs}, nil
}

// kvFlushAt is how much output a server gathers before it writes, as
// kvserver does.
const kvFlushAt = 64 << 10

// kvRun runs every complete command at the start of in for sess, appending
// the replies to out, and returns the replies and the bytes consumed. A
// command still partly in flight is left unconsumed. flush, if the replies
// grow past kvFlushAt, writes them and returns the emptied slice. It is the
// loop of kvserver.Handler.OnData, shared by the net and gnet servers so
// that the three servers run the same code per command.
func kvRun(st *store.Store, sess *store.Session, p *resp.Parser, in, out []byte, flush func([]byte) []byte) ([]byte, int) {
	used := 0
	for !sess.Quit {
		args, n, err := p.Parse(in[used:])
		if errors.Is(err, resp.ErrIncomplete) {
			break
		}
		if err != nil { // answered, then the connection closes
			return resp.AppendError(out, "ERR "+err.Error()), len(in)
		}
		if used += n; len(args) > 0 {
			out = st.Exec(sess, args, out)
		}
		if len(out) >= kvFlushAt {
			out = flush(out)
		}
	}
	return out, used
}

// KVNet serves examples/kv's commands with Go's net package, a goroutine
// per connection reading into a buffer of its own (16 KB, grown for a long
// command, as Redis's query buffer).
type KVNet struct {
	NetEcho
	st  *store.Store
	ids atomic.Int64
}

// NewKVNet starts the net kv server on 127.0.0.1, on a free port.
func NewKVNet() (*KVNet, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return newKVNet(ln), nil
}

// newKVNet serves examples/kv's commands on ln.
func newKVNet(ln net.Listener) *KVNet {
	s := &KVNet{st: store.New(0)}
	s.ln, s.conns, s.serveConn = ln, map[net.Conn]struct{}{}, s.serveKV
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *KVNet) serveKV(c net.Conn) {
	sess := &store.Session{ID: s.ids.Add(1)}
	var p resp.Parser
	buf := make([]byte, 16<<10)
	out := make([]byte, 0, 16<<10)
	start, end := 0, 0
	write := func(b []byte) []byte {
		if _, err := c.Write(b); err != nil {
			sess.Quit = true
		}
		return b[:0]
	}
	for !sess.Quit {
		if end == len(buf) {
			if start > 0 {
				end = copy(buf, buf[start:end])
				start = 0
			} else if len(buf) >= resp.DefaultMaxBulk+64<<10 {
				return // a command longer than the server accepts
			} else {
				buf = append(buf, make([]byte, len(buf))...)
			}
		}
		n, err := c.Read(buf[end:])
		if err != nil {
			return
		}
		end += n
		var used int
		out, used = kvRun(s.st, sess, &p, buf[start:end], out, write)
		if start += used; start == end {
			start, end = 0, 0
		}
		out = write(out)
	}
}

// KVGnet serves examples/kv's commands on gnet v2: each OnTraffic parses
// what gnet has buffered, runs the complete commands and writes their
// replies in one Write.
type KVGnet struct {
	gnetServer
	st  *store.Store
	ids atomic.Int64
}

// NewKVGnet starts the gnet kv server on 127.0.0.1, on a free port.
func NewKVGnet() (*KVGnet, error) {
	s := &KVGnet{st: store.New(0)}
	if err := s.start(s); err != nil {
		return nil, err
	}
	return s, nil
}

type kvGnetSession struct {
	store.Session
	p resp.Parser
}

var kvOutBufs = sync.Pool{New: func() any { return new([]byte) }}

// OnOpen gives the connection its session.
func (s *KVGnet) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	sess := &kvGnetSession{}
	sess.ID = s.ids.Add(1)
	c.SetContext(sess)
	return nil, gnet.None
}

// OnTraffic runs every complete command buffered.
func (s *KVGnet) OnTraffic(c gnet.Conn) gnet.Action {
	sess := c.Context().(*kvGnetSession)
	in, _ := c.Peek(-1)
	bp := kvOutBufs.Get().(*[]byte)
	write := func(b []byte) []byte {
		if _, err := c.Write(b); err != nil {
			sess.Quit = true
		}
		return b[:0]
	}
	out, used := kvRun(s.st, &sess.Session, &sess.p, in, (*bp)[:0], write)
	c.Discard(used)
	*bp = write(out)
	if cap(*bp) <= 4<<20 {
		kvOutBufs.Put(bp)
	}
	if sess.Quit {
		return gnet.Close
	}
	return gnet.None
}
