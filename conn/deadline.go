package conn

import (
	"time"
)

// Deadlines. A connection has at most one poller timer armed, for its
// earliest deadline; it runs on the connection's waiter, serialised with
// its handler, and is stopped when the connection ends, so it never fires
// after OnClose. Moving a deadline is an atomic-free store under the
// connection's mutex, or a store on the waiter for progress: nothing is
// allocated or re-armed per read. When the timer fires it checks every
// deadline against the time; one that moved later re-arms it once.
//
//	idle   no progress for IdleTimeout: the handler consumed no input and
//	       the socket took no output (a peer trickling a byte a second
//	       into a request that never completes makes no progress)
//	read   SetReadDeadline's time passed with no input read since
//	write  SetWriteDeadline's time passed with output still queued

// Timeouter is implemented by a Handler that wants to decide what a
// timed-out connection does. OnTimeout runs on the connection's waiter;
// the handler may move the deadline (SetReadDeadline, SetWriteDeadline,
// SetIdleTimeout) or close the connection. Without it the connection is
// closed (Close: flush, FIN) with ReasonTimeout, or reset when the write
// or idle deadline expired with output queued: that output is stuck, and
// flushing it would only wait Options.FlushTimeout more.
type Timeouter interface {
	OnTimeout(c *Conn)
}

// SetIdleTimeout closes the connection (ReasonTimeout) once it has made no
// progress for d: no input consumed by its handler, no output taken by the
// socket. 0 disables it. It starts at Options.IdleTimeout.
func (c *Conn) SetIdleTimeout(d time.Duration) error {
	if d < 0 {
		return negative("SetIdleTimeout", int(d))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= stEnding {
		return closedError{"is closed"}
	}
	c.ext().idle = int64(d)
	c.progress = c.s.clock()
	c.flags.Or(flagDeadlines)
	c.armLocked()
	return nil
}

// SetReadDeadline closes the connection (ReasonTimeout) if t passes before
// input arrives; input after the call meets it. The zero time clears it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(func(x *connExt) *int64 { return &x.readAt }, t)
}

// SetWriteDeadline closes the connection (ReasonTimeout) if t passes while
// output is still queued. The zero time clears it.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(func(x *connExt) *int64 { return &x.writeAt }, t)
}

func (c *Conn) setDeadline(at func(*connExt) *int64, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= stEnding {
		return closedError{"is closed"}
	}
	c.ext()
	*at(c.connExt) = 0
	if !t.IsZero() {
		*at(c.connExt) = max(c.s.clockAt(t), 1)
		c.flags.Or(flagDeadlines)
	}
	c.armLocked()
	return nil
}

// clock is the server's monotonic clock in nanoseconds.
func (s *Server) clock() int64 { return int64(time.Since(s.base)) }

// clockAt converts t to the server's clock.
func (s *Server) clockAt(t time.Time) int64 { return int64(t.Sub(s.base)) }

// nextLocked returns the earliest deadline now in force, 0 if none.
func (c *Conn) nextLocked() int64 {
	if c.connExt == nil {
		return 0
	}
	var next int64
	consider := func(at int64) {
		if at > 0 && (next == 0 || at < next) {
			next = at
		}
	}
	if c.idle > 0 {
		consider(c.progress + c.idle)
	}
	consider(c.readAt)
	if len(c.out) > 0 {
		consider(c.writeAt)
	}
	return next
}

// armLocked arms the timer for the earliest deadline unless one is armed
// for that time or earlier.
func (c *Conn) armLocked() {
	next := c.nextLocked()
	if next == 0 && c.timerStop != nil {
		// No deadline left: free the timer now rather than when it
		// fires, as a connection that drops its deadlines (an upgraded
		// one) may then idle for hours.
		c.timerStop()
		c.timerStop, c.timerAt = nil, 0
	}
	if next == 0 || c.state >= stEnding || c.timerAt != 0 && c.timerAt <= next {
		return
	}
	if c.timerStop != nil {
		c.timerStop()
	}
	stop, err := c.s.p.AfterFunc(c.handle(), time.Duration(next-c.s.clock()), c.fire)
	if err != nil {
		c.timerStop, c.timerAt = nil, 0
		return
	}
	c.timerStop, c.timerAt = stop, next
}

// fire runs on the connection's waiter when its timer expires. OnOpen
// comes first: it may still be running on the waiter that accepted the
// connection, or (TLS) be due with the connection's first event.
func (c *Conn) fire() {
	if _, ok := c.handler().(Timeouter); ok {
		c.open.Do(func() { c.handler().OnOpen(c) })
	}
	c.mu.Lock()
	c.timerStop, c.timerAt = nil, 0
	now := c.s.clock()
	next := c.nextLocked()
	if c.state >= stEnding || next == 0 || next > now {
		c.armLocked() // moved later, or met: re-arm once
		c.mu.Unlock()
		return
	}
	to, custom := c.handler().(Timeouter)
	if !custom {
		c.s.timeouts.Add(1)
		// Output stuck for the write or idle deadline would not flush
		// now either: reset rather than wait FlushTimeout more.
		stuck := len(c.out) > 0 && (c.writeAt > 0 && c.writeAt <= now || c.idle > 0 && c.progress+c.idle <= now)
		if c.state == stOpen && !stuck {
			c.setReasonLocked(ReasonTimeout, nil)
			c.closeLocked()
		} else {
			c.reason, c.reasonSet = uint8(ReasonTimeout), true
			c.setErrLocked(nil)
			c.resetLocked()
		}
		c.mu.Unlock()
		return
	}
	// The hook decides; a deadline it leaves expired fires again after
	// it, not in a loop: the next check comes with its next event or
	// when it moves a deadline.
	c.readAt, c.writeAt = 0, 0
	c.progress = now
	c.mu.Unlock()
	c.s.timeouts.Add(1)
	to.OnTimeout(c)
	c.mu.Lock()
	c.armLocked()
	c.mu.Unlock()
}

// readProgress records input, on the waiter, when deadlines are in use:
// it meets the read deadline (or moves it by Options.ReadTimeout).
func (c *Conn) readProgress() {
	c.mu.Lock()
	c.readAt = 0
	if t := c.s.opts.ReadTimeout; t > 0 {
		c.readAt = c.s.clock() + int64(t)
	}
	c.mu.Unlock()
}

// consumed records the handler's progress on its input, on the waiter,
// when deadlines are in use.
func (c *Conn) consumed() {
	c.mu.Lock()
	c.progress = c.s.clock()
	c.mu.Unlock()
}

// wroteLocked records output the socket took (n > 0) or output newly
// queued; the caller holds mu.
func (c *Conn) wroteLocked(n int, queuedBefore bool) {
	if c.flags.Load()&flagDeadlines == 0 {
		return
	}
	now := c.s.clock()
	if n > 0 {
		c.progress = now
	}
	if t := c.s.opts.WriteTimeout; t > 0 && len(c.out) > 0 && (n > 0 || !queuedBefore) {
		c.writeAt = now + int64(t)
	}
	c.armLocked()
}

// startDeadlines applies Options' timeouts to a new connection.
func (c *Conn) startDeadlines() {
	o := &c.s.opts
	if o.IdleTimeout == 0 && o.ReadTimeout == 0 && o.WriteTimeout == 0 {
		return
	}
	c.mu.Lock()
	now := c.s.clock()
	// The connection is registered already, so on a shared set its first
	// event may have run on another waiter, and its handler set its own
	// deadlines, before this: those stay.
	own := c.flags.Load()&flagDeadlines != 0
	if x := c.ext(); !own || x.idle == 0 {
		x.idle, x.progress = int64(o.IdleTimeout), now
	}
	if o.ReadTimeout > 0 && (!own || c.readAt == 0) {
		c.readAt = now + int64(o.ReadTimeout)
	}
	c.flags.Or(flagDeadlines)
	c.armLocked()
	c.mu.Unlock()
}
