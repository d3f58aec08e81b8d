// Package connecho is examples/echo's server on package conn: the whole
// server is Handler. The connection layer does the rest: reading into a
// per-waiter buffer, queueing what the socket does not take, switching
// Writable on and off, pausing reads above the high-water mark (pushing
// back on a client that does not read its replies), closing after a flush.
// Compare examples/echo/echoserver, the same server on the raw poller.
package connecho

import (
	"sync/atomic"

	"github.com/gracepoll/gracepoll/conn"
)

// Handler echoes every byte a connection sends, in order, and counts
// connections opened and closed (OnClose runs exactly once per OnOpen; a
// TLS connection whose handshake failed gets an OnClose alone, which is not
// counted).
type Handler struct {
	opened, closed atomic.Uint64
}

// OnOpen counts the connection.
func (h *Handler) OnOpen(*conn.Conn) { h.opened.Add(1) }

// OnData writes back everything buffered. Next returns a slice of conn's
// read buffer; Write sends it, or copies what the socket does not take, so
// nothing is kept once OnData returns.
func (h *Handler) OnData(c *conn.Conn) {
	b, _ := c.Next(c.Buffered())
	if _, err := c.Write(b); err != nil {
		// Closed, or the queue was past HighWater and this would pass
		// MaxQueued, which reading paused at HighWater prevents: reset
		// rather than lose part of the stream.
		c.Abort()
	}
}

// OnClose counts the connection's end, unless it never opened: a TLS
// handshake that failed (conn.ReasonHandshake) ran no OnOpen.
func (h *Handler) OnClose(_ *conn.Conn, reason conn.Reason, _ error) {
	if reason != conn.ReasonHandshake {
		h.closed.Add(1)
	}
}

// Opened and Closed return the connections opened and closed so far.
func (h *Handler) Opened() uint64 { return h.opened.Load() }
func (h *Handler) Closed() uint64 { return h.closed.Load() }
