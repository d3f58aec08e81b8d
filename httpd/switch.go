package httpd

import (
	"net/http"
	"sync"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// A Protocol serves a connection after Switch, event-driven as a
// conn.Handler is: its methods run on the connection's waiter, one at a
// time, and the connection holds no goroutine between them. OnData reads
// the input with conn.Conn's Peek, Next and Discard; OnClose runs once,
// last. A Protocol may also implement conn.Drainer, conn.HalfCloser,
// conn.Timeouter and Shutdowner; without them the peer's FIN, a deadline
// and Server.Shutdown close the connection gracefully.
type Protocol interface {
	OnData(c *conn.Conn)
	OnClose(c *conn.Conn, reason conn.Reason, err error)
}

// Shutdowner is implemented by a Protocol that ends its connections
// itself when Server.Shutdown begins (a WebSocket sends its close frame):
// OnShutdown runs once, on Shutdown's goroutine, possibly while another
// method of the Protocol runs on the waiter. The connection must then be
// closed soon (conn.Conn.Close): Shutdown waits for it until its context
// ends.
type Shutdowner interface {
	OnShutdown(c *conn.Conn)
}

// Switch answers an upgrade request (one with an Upgrade field, as
// Hijack accepts) with "101 Switching Protocols" and w's header fields,
// and hands the connection to p: once the handler returns, p receives
// every byte that follows the request, starting with those already
// received, and the connection holds no goroutine. No HTTP deadline
// applies from then on: p sets its own (conn.Conn.SetReadDeadline...).
// The returned conn.Conn may be written from any goroutine at once (the
// 101 is queued before anything written after Switch returns).
//
// Switch returns ErrNotUpgrade for a request that did not ask to upgrade
// (and for a ResponseWriter that is not this package's, after unwrapping
// as http.ResponseController does), and http.ErrHijacked after Hijack or
// Switch, or once the response has begun.
func Switch(w http.ResponseWriter, p Protocol) (*conn.Conn, error) {
	for {
		if r, ok := w.(*response); ok {
			return r.switchTo(p)
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil, ErrNotUpgrade
		}
		w = u.Unwrap()
	}
}

func (w *response) switchTo(p Protocol) (*conn.Conn, error) {
	st := w.st
	if st == nil || !st.upgrade || w.req.Method == "CONNECT" {
		return nil, ErrNotUpgrade
	}
	if w.hijacked || w.committed || w.err != nil {
		return nil, http.ErrHijacked
	}
	// The head goes out through a pooled buffer: Write copies what the
	// socket does not take at once.
	out := w.hc.h.getOut()
	b := appendStatusLine((*out)[:0], http.StatusSwitchingProtocols)
	b = appendHeader(b, w.header, nil)
	b = append(b, crlf...)
	c := w.hc.c
	_, err := c.Write(b)
	if cap(b) <= 1<<20 {
		*out = b[:0]
		w.hc.h.outBufs.Put(out)
	}
	if err != nil {
		return nil, err
	}
	w.hijacked = true
	st.mu.Lock()
	st.switched = p
	st.bodyErr = nil // what follows is the new protocol's, not a body
	st.mu.Unlock()
	c.SetReadDeadline(time.Time{})
	c.SetWriteDeadline(time.Time{})
	w.hc.h.switched.add(w.hc, p)
	w.hc.h.connState(w.hc, http.StateHijacked)
	return c, nil
}

// takeSwitch makes the connection p's once its upgrade's handler has
// returned: the waiter calls it from feed.
func (hc *hconn) takeSwitch(p Protocol) {
	hc.st, hc.up, hc.state = nil, p, csSwitched
	// Nothing HTTP is needed any more: a long-lived connection should not
	// keep the parser (about a kilobyte) or the net.Conn made for Hijack.
	if hc.p != nil {
		hc.h.parsers.Put(hc.p)
		hc.p = nil
	}
	hc.nc = nil
}

// switchedSet is the connections handed to a Protocol, which Shutdown
// tells to end (Shutdowner).
type switchedSet struct {
	mu sync.Mutex
	m  map[*hconn]Protocol
}

func (s *switchedSet) add(hc *hconn, p Protocol) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*hconn]Protocol)
	}
	s.m[hc] = p
	s.mu.Unlock()
}

func (s *switchedSet) remove(hc *hconn) {
	s.mu.Lock()
	delete(s.m, hc)
	s.mu.Unlock()
}

// shutdown tells every switched connection that the server shuts down.
func (s *switchedSet) shutdown() {
	s.mu.Lock()
	all := make(map[*hconn]Protocol, len(s.m))
	for hc, p := range s.m {
		all[hc] = p
	}
	s.mu.Unlock()
	for hc, p := range all {
		if sd, ok := p.(Shutdowner); ok {
			sd.OnShutdown(hc.c)
		} else {
			hc.c.Close()
		}
	}
}
