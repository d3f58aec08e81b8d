package conn

import (
	"context"
	"errors"
	"time"
)

// ErrInCallback reports a call that would wait for the calling handler
// itself (Shutdown from a handler): the work was started, not awaited.
var ErrInCallback = errors.New("conn: call would wait for the calling handler")

// Shutdown closes the server gracefully: it stops accepting, closes every
// connection as Close does (no more input, flush, FIN, wait for the peer's
// FIN), and waits until every OnClose has run. When ctx ends first it
// resets what is left (Close). It returns how many connections drained and
// how many were forced, then ctx's error if it ended first. Pending dials
// are cancelled. From a handler it starts the shutdown and returns
// ErrInCallback at once, as waiting there would wait for itself; Done
// reports the end.
func (s *Server) Shutdown(ctx context.Context) (drained, forced int, err error) {
	if s.p.InCallback() {
		go s.shutdown(context.WithoutCancel(ctx))
		return 0, 0, ErrInCallback
	}
	return s.shutdown(ctx)
}

func (s *Server) shutdown(ctx context.Context) (drained, forced int, err error) {
	s.closing.Store(true)
	s.mu.Lock()
	s.closed = true
	lns := append([]*listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, ln := range lns {
		if ln.h != 0 {
			s.p.Delete(ln.h) // stop accepting; the poller closes the socket
		}
	}
	conns := s.conns.all()
	dials := 0 // cancelled: never connections, neither drained nor forced
	for _, c := range conns {
		c.mu.Lock()
		if c.connExt != nil && c.dial != nil {
			dials++
			c.cancelDialLocked(closedError{"server is shutting down"})
		} else if c.state == stOpen {
			c.setReasonLocked(ReasonShutdown, nil)
			c.closeLocked()
		}
		c.mu.Unlock()
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for s.open.Load() > 0 {
		select {
		case <-ctx.Done():
			forced = int(s.open.Load())
			s.Close()
			return max(len(conns)-dials-forced, 0), forced, ctx.Err()
		case <-tick.C:
		}
	}
	// A Close from another goroutine may have ended the wait: what it
	// reset was forced, not drained.
	forced = min(int(s.closeForced.Load()), len(conns)-dials)
	return len(conns) - dials - forced, forced, s.Close()
}
