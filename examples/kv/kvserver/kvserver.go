// Package kvserver is examples/kv's transport: a conn.Handler that parses
// RESP commands out of conn's inbound buffer and runs them on a
// store.Store. Everything a raw event loop would need besides (read
// buffers, a command split across reads, an output queue, partial writes,
// switching Writable on and off, closing after a flush) is package conn's.
package kvserver

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/examples/kv/resp"
	"github.com/gracepoll/gracepoll/examples/kv/store"
)

// Handler serves the Redis protocol on a store.
type Handler struct {
	Store   *store.Store
	MaxBulk int // longest argument; 0 means resp.DefaultMaxBulk
	// MaxClientOut, if positive, disconnects a client whose unread
	// replies queued on its connection pass it, as Redis's
	// client-output-buffer-limit does. 0, the default as in Redis, never
	// disconnects: conn's flow control holds a client that does not read
	// to Options.HighWater plus one reply, and runs its remaining
	// commands as it reads; so only a limit below that bites. Set it
	// before serving.
	MaxClientOut int
	ids          atomic.Int64
	clients      atomic.Int64
}

// New returns a Handler for st whose INFO reports connected_clients.
func New(st *store.Store, maxBulk int) *Handler {
	h := &Handler{Store: st, MaxBulk: maxBulk}
	st.Info = func(b []byte) []byte {
		return fmt.Appendf(b, "# Clients\r\nconnected_clients:%d\r\n\r\n", h.Clients())
	}
	return h
}

// Options returns conn.Options that fit h: room in the inbound buffer for
// a command with an argument of MaxBulk bytes. The output bound is conn's
// default: a reply of any size is taken, and a client that does not read
// is held at HighWater plus one reply.
func (h *Handler) Options() conn.Options {
	maxBulk := h.MaxBulk
	if maxBulk <= 0 {
		maxBulk = resp.DefaultMaxBulk
	}
	return conn.Options{MaxBuffered: maxBulk + 64<<10}
}

type session struct {
	store.Session
	p resp.Parser
}

// flushAt is how much output OnData gathers before it writes.
const flushAt = 64 << 10

var outBufs = sync.Pool{New: func() any { return new([]byte) }}

func (h *Handler) OnOpen(c *conn.Conn) {
	s := &session{p: resp.Parser{MaxBulk: h.MaxBulk}}
	s.ID = h.ids.Add(1)
	h.clients.Add(1)
	c.SetValue(s)
}

// OnData runs the complete commands buffered, in order, while the
// connection is Writable, and writes their replies in one Write (or one
// per flushAt bytes). It leaves the rest unconsumed: a command still
// partly in flight, which conn offers again with the rest, and commands
// held back because the client is not reading its replies, which conn
// offers again once it has. Arguments are slices of conn's buffer, valid
// during OnData.
func (h *Handler) OnData(c *conn.Conn) {
	s := c.Value().(*session)
	in, _ := c.Peek(c.Buffered())
	bp := outBufs.Get().(*[]byte)
	out, used := (*bp)[:0], 0
	for !s.Quit && c.Writable() {
		args, n, err := s.p.Parse(in[used:])
		if errors.Is(err, resp.ErrIncomplete) {
			break
		}
		if err != nil { // answered, then the connection closes
			out, s.Quit, used = resp.AppendError(out, "ERR "+err.Error()), true, len(in)
			break
		}
		if used += n; len(args) > 0 {
			out = h.Store.Exec(&s.Session, args, out)
		}
		if len(out) >= flushAt {
			out = h.write(c, s, out)
		}
	}
	c.Discard(used)
	*bp = h.write(c, s, out)
	if cap(*bp) <= 4<<20 {
		outBufs.Put(bp)
	}
	if s.Quit {
		c.Close() // after what is queued is flushed
	}
}

// write writes out (conn copies what the socket does not take) and returns
// it emptied for reuse. After a failure, or past MaxClientOut, the client
// is disconnected and its remaining commands are not run.
func (h *Handler) write(c *conn.Conn, s *session, out []byte) []byte {
	if len(out) == 0 {
		return out
	}
	if _, err := c.Write(out); err != nil {
		s.Quit = true
		if errors.Is(err, conn.ErrQueueFull) {
			c.Abort() // never with Writable checked: rather a reset than a gap in the replies
		}
	} else if h.MaxClientOut > 0 && c.Queued() > h.MaxClientOut {
		s.Quit = true
		c.Abort()
	}
	return out[:0]
}

// OnClose counts the client gone. A TLS connection whose handshake failed
// (conn.ReasonHandshake) never opened, so it was never counted.
func (h *Handler) OnClose(_ *conn.Conn, reason conn.Reason, _ error) {
	if reason != conn.ReasonHandshake {
		h.clients.Add(-1)
	}
}

// Clients returns the connections open now.
func (h *Handler) Clients() int64 { return h.clients.Load() }
