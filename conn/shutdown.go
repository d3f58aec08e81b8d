package conn

import (
	"context"
	"errors"
	"time"
)

// ErrInCallback reports a call that would wait for the calling handler
// itself (Shutdown from a handler): the work was started, not awaited.
var ErrInCallback = errors.New("conn: call would wait for the calling handler")

// Shutdown closes the server gracefully: it closes its listeners at once
// (connections arriving then are refused, as net/http's Shutdown refuses
// them; see Serve for a listening socket shared with the caller), stops
// reading every connection and lets each finish what it has read (OnData is
// offered the requests already buffered, under flow control; Draining
// reports true), flushes their replies, then closes it as Close does (FIN,
// drain until the peer's FIN). It waits until every connection has ended
// and every OnClose has run, then closes the server.
//
// A connection that has sent everything and waits only for its peer's FIN
// (an idle client, which may not notice ours for a long time) does not
// hold Shutdown up: once no connection has anything else to do, those whose
// output the peer has acknowledged are closed without a reset and counted
// as drained. When ctx ends first, a connection that still has work
// (requests not yet answered, output not yet taken by the socket) is reset
// and counted as forced, and Shutdown returns ctx's error; one that only
// waits for the peer's FIN is closed without a reset, counted as drained,
// and is no error. Pending dials are cancelled, and accepted connections
// still in their TLS handshake reset (OnClose with ReasonHandshake alone):
// neither is counted.
//
// A connection that arrives as Shutdown begins (accepted, or dialled with
// Dial) is either treated and counted as one that arrived before, or
// refused: closed before any handler method runs for it (its Dial fails
// with an error matching net.ErrClosed) and counted as neither. Shutdown
// settles which before it acts on the others, so none is left to ctx's
// end.
//
// From a handler Shutdown starts the shutdown and returns ErrInCallback at
// once, as waiting there would wait for itself; Done reports the end.
func (s *Server) Shutdown(ctx context.Context) (drained, forced int, err error) {
	if s.p.InCallback() {
		go s.shutdown(context.WithoutCancel(ctx))
		return 0, 0, ErrInCallback
	}
	return s.shutdown(ctx)
}

func (s *Server) shutdown(ctx context.Context) (drained, forced int, err error) {
	s.closing.Store(true)
	s.awaitJoins()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeListeners() // new connections are refused from here on
	conns := s.conns.all()
	dials := 0 // cancelled: never connections, neither drained nor forced
	for _, c := range conns {
		if c.shutdown() {
			dials++
		}
	}
	total := len(conns) - dials
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for s.open.Load() > 0 {
		if open := s.open.Load(); open > 0 && open == s.finWaits.Load() {
			s.endSettled()
		}
		select {
		case <-ctx.Done():
			forced = s.endRest()
			s.Close()
			if forced > 0 {
				err = ctx.Err()
			}
			return max(total-forced, 0), forced, err
		case <-tick.C:
		}
	}
	// A Close from another goroutine may have ended the wait: what it
	// reset was forced, not drained.
	forced = min(int(s.closeForced.Load()), total)
	return total - forced, forced, s.Close()
}

// awaitJoins waits for the connections that saw the server open in
// register to finish registering. The caller has set closing, so every
// connection is then registered, and listed by s.conns.all, or refused.
func (s *Server) awaitJoins() {
	s.joining.Lock()
	//lint:ignore SA2001 the empty critical section is that fence
	s.joining.Unlock()
}

// shutdown makes c finish; a pending dial, or an accepted connection in
// its TLS handshake, it cancels instead, and reports that it was not yet a
// connection.
func (c *Conn) shutdown() (notYet bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connExt != nil && (c.dial != nil || c.dialFailed) {
		// Pending, or failed and on its way out: never a connection.
		if c.dial != nil {
			c.cancelDialLocked(closedError{"server is shutting down"})
		}
		return true
	}
	if c.flags.Load()&flagHandshake != 0 {
		// Accepted, in its TLS handshake: not yet a connection of the
		// handler's.
		if c.state < stEnding {
			c.setReasonLocked(ReasonHandshake, closedError{"server is shutting down"})
			c.resetLocked()
		}
		return true
	}
	c.finishLocked(ReasonShutdown)
	return false
}

// endSettled ends, without a reset, the connections that wait only for
// the peer's FIN and whose output the peer has acknowledged (TCP), or
// read (Unix): it has every byte, and an idle client may not answer our
// FIN for a long time. Shutdown calls it once no connection has anything
// else left to do. A peer that sends more after this gets a reset for it,
// as it would for anything sent after our close; on Linux the replies it
// has not read yet stay readable before that reset is reported.
func (s *Server) endSettled() {
	for _, c := range s.conns.all() {
		c.mu.Lock()
		if c.flags.Load()&flagFinWait != 0 && c.state == stClosing && unacked(c.fd) == 0 {
			c.quietEndLocked()
		}
		c.mu.Unlock()
	}
}

// endRest ends the connections left when Shutdown's context ends: those
// that have sent everything and wait only for the peer's FIN end without a
// reset (what the kernel has not yet delivered, it still delivers); the
// rest are left to Close, which resets them. It returns how many it left.
func (s *Server) endRest() (forced int) {
	for _, c := range s.conns.all() {
		c.mu.Lock()
		switch {
		case c.flags.Load()&flagFinWait != 0 && c.state == stClosing:
			c.quietEndLocked()
		case c.state < stEnding:
			forced++
		}
		c.mu.Unlock()
	}
	return forced
}
