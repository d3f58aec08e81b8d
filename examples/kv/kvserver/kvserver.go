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
	ids     atomic.Int64
	clients atomic.Int64
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
// a command with an argument of MaxBulk bytes, and 64 MB of replies queued
// per client (reading pauses at half of it).
func (h *Handler) Options() conn.Options {
	maxBulk := h.MaxBulk
	if maxBulk <= 0 {
		maxBulk = resp.DefaultMaxBulk
	}
	return conn.Options{MaxBuffered: maxBulk + 64<<10, MaxQueued: max(64<<20, 2*maxBulk)}
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

// OnData runs every complete command buffered, in order, and writes their
// replies in one Write (or one per flushAt bytes). A command still partly
// in flight is left unconsumed: conn keeps it, and offers it again with
// the rest. Arguments are slices of conn's buffer, valid during OnData.
func (h *Handler) OnData(c *conn.Conn) {
	s := c.Value().(*session)
	in, _ := c.Peek(c.Buffered())
	bp := outBufs.Get().(*[]byte)
	out, used := (*bp)[:0], 0
	for !s.Quit {
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
			out = write(c, s, out)
		}
	}
	c.Discard(used)
	*bp = write(c, s, out)
	if cap(*bp) <= 4<<20 {
		outBufs.Put(bp)
	}
	if s.Quit {
		c.Close() // after what is queued is flushed
	}
}

// write writes out (conn copies what the socket does not take) and returns
// it emptied for reuse. Over Options.MaxQueued the client does not read
// its replies: it is reset, as Redis drops a client over its output limit.
// After any failure the remaining commands are not run.
func write(c *conn.Conn, s *session, out []byte) []byte {
	if _, err := c.Write(out); err != nil {
		s.Quit = true
		if errors.Is(err, conn.ErrQueueFull) {
			c.Abort()
		}
	}
	return out[:0]
}

func (h *Handler) OnClose(*conn.Conn, conn.Reason, error) { h.clients.Add(-1) }

// Clients returns the connections open now.
func (h *Handler) Clients() int64 { return h.clients.Load() }
