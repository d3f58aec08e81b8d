package conn

import (
	"context"
	"os"
	"sync"
	"time"
)

// Work that leaves the handler's callbacks. A handler's methods run one at
// a time, and while one runs the connection's own events wait for it: its
// queue does not drain and its input is not offered. Two calls serve
// handlers whose work does not fit in one short callback: Flush, for a
// callback that produces more output than the queue should hold, and
// Wake, for work handed to another goroutine that must finish before the
// handler reads its next request.

// flushSlice bounds one wait in poll(2), so that Flush sees its context
// end and the connection's deadlines pass.
const flushSlice = 20 * time.Millisecond

// Flush waits until the socket has taken every queued byte, the
// connection ends or ctx ends, and returns nil, an error matching
// net.ErrClosed, or ctx's error.
//
// It is for output produced by blocking writes: a handler method that
// copies a large file into the connection calls Flush whenever Writable
// reports false, instead of returning. Since the connection's events wait
// for the running method, Flush writes the queue itself, on the calling
// goroutine, waiting for the socket in poll(2): the waiter is blocked
// meanwhile, as by any handler that blocks (see Slow handlers in the
// package doc). From another goroutine it does the same, and the waiter
// writes too; either way the writes hold the connection's mutex, so none
// reaches a reused fd number.
//
// The connection's write and idle deadlines still hold: one that passes
// while Flush waits resets the connection (ReasonTimeout), as it would
// have from the waiter, and Flush returns an error matching
// os.ErrDeadlineExceeded. A queue that drained from above Options.HighWater
// is reported as the waiter reports it: OnDrain, and OnData offered what
// it left, once the calling method has returned.
func (c *Conn) Flush(ctx context.Context) error {
	for {
		if c.s.flush(c) {
			c.wakeAt(flagWakeDrain)
		}
		c.mu.Lock()
		queued, state, fd := len(c.out), c.state, c.fd
		expired := queued > 0 && state < stEnding && c.flushExpiredLocked()
		if expired {
			c.s.timeouts.Add(1)
			c.setReasonLocked(ReasonTimeout, os.ErrDeadlineExceeded)
			c.resetLocked()
			state = c.state
		}
		c.mu.Unlock()
		switch {
		case expired:
			return os.ErrDeadlineExceeded
		case state >= stEnding:
			return closedError{"is closed"}
		case queued == 0:
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		wait := flushSlice
		if d, ok := ctx.Deadline(); ok {
			wait = max(min(wait, time.Until(d)), 0)
		}
		// fd is this connection's: its number is closed only after
		// the connection is released, which waits for a running handler
		// method; from another goroutine a stale number makes this
		// wait return early or late, never a write go astray.
		waitWritable(fd, wait)
	}
}

// flushExpiredLocked reports whether the write deadline, or the idle
// timeout, has passed with output queued. The caller holds mu.
func (c *Conn) flushExpiredLocked() bool {
	if c.connExt == nil || c.flags.Load()&flagDeadlines == 0 {
		return false
	}
	now := c.s.clock()
	return c.writeAt > 0 && c.writeAt <= now || c.idle > 0 && c.progress+c.idle <= now
}

// Wake runs OnData again, on the connection's waiter, with the input its
// handler left unconsumed (possibly none), whether or not more arrives. A
// handler that stops reading requests while one of them is served
// elsewhere (handed to another goroutine, whose reply must go out before
// the next request's) calls Wake from there once that reply is written.
// Above HighWater OnData is not run: the drain offers the input, as it
// always does. It is safe from any goroutine; after the end of the
// connection it returns an error matching net.ErrClosed.
func (c *Conn) Wake() error { return c.wakeAt(flagWake) }

// wakeAt asks for an event on the connection's waiter, serialised with
// its handler (after the running method, if one runs), in which the
// server acts on flag: it registers interest in Writable, which a socket
// with room in its send buffer reports at once. An event rather than a
// poller timer, because the input OnData reads is its waiter's, and only
// an event says which waiter runs it.
func (c *Conn) wakeAt(flag uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stOpen {
		return closedError{"is closed"}
	}
	c.flags.Or(flag)
	c.updateLocked()
	return nil
}

// ReadWhileFinishing keeps the connection read once it is finishing
// (Shutdown began): its handler goes on receiving input, for a protocol
// that needs its peer's messages to complete the replies in progress,
// such as HTTP/2's flow-control updates, and refuses new requests
// itself. The connection still closes once the handler has answered what
// it read and no Hold is out, and Shutdown's context still bounds it.
func (c *Conn) ReadWhileFinishing() {
	c.mu.Lock()
	c.flags.Or(flagReadFinishing)
	c.updateLocked()
	c.mu.Unlock()
}

// Hold says that work for the connection goes on outside its handler's
// methods (a request served on another goroutine, whose reply is still to
// come) and returns the function that says it is done. While a hold is
// out, a finishing connection (Shutdown, or the peer's FIN without a
// HalfCloser) stays open for that reply instead of closing once its
// handler has answered what it read; when the last hold is released, it
// finishes as it would have: OnData is offered what is left, then the
// connection closes. Shutdown's context still bounds the wait. done may be
// called from any goroutine; calls after the first do nothing.
func (c *Conn) Hold() (done func()) {
	c.mu.Lock()
	c.ext().holds++
	c.mu.Unlock()
	var once sync.Once
	return func() { once.Do(c.unhold) }
}

// heldLocked reports a Hold not yet released. The caller holds mu.
func (c *Conn) heldLocked() bool { return c.connExt != nil && c.holds > 0 }

func (c *Conn) unhold() {
	c.mu.Lock()
	c.holds--
	c.updateLocked() // a finishing connection wants its event again
	c.mu.Unlock()
}
