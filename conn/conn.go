// Package conn serves stream connections (TCP over IPv4 and IPv6, Unix
// sockets) on gracepoll's poller, so that a server is a short Handler and
// the failures users of event-loop libraries report cannot happen.
//
// Each connection is a poller registration that owns its fd. Guarantees:
//
//   - No write ever reaches an fd number that was closed and reused. Writes
//     (from the handler or from any other goroutine) take the connection's
//     mutex and check it is still open; the connection is marked released
//     under that mutex in OnClose's path, and the poller closes the fd only
//     after that, after the grace period (Conn.Write, Server.release).
//   - Handlers of one connection never run at the same time: OnOpen first,
//     then OnData and OnDrain one at a time, on the connection's waiter;
//     OnClose runs once, after the grace period, and nothing else runs for
//     the connection after it starts (poller's per-registration
//     serialisation and its OnRelease).
//   - Output is bounded: Options.MaxQueued bounds what one connection may
//     have queued; a Write that would exceed it fails with ErrQueueFull
//     and queues nothing, and what was queued before is kept. Above
//     Options.HighWater reading pauses, so a slow reader pushes back on
//     its peer instead of growing memory (Conn.Write).
//   - Nothing is buffered per idle connection: reads go to a per-waiter
//     buffer, and only what the handler leaves unconsumed is kept; output
//     storage is allocated on a partial write and dropped when drained.
//   - Close flushes what was queued (within Options.FlushTimeout), sends
//     FIN, and drains the peer until its FIN, so the peer sees every byte
//     written before Close; Abort resets at once. Data that arrived before
//     the peer's FIN is delivered, and the handler can still reply.
//   - Out of file descriptors, the server keeps serving its connections,
//     pauses accepting and resumes by itself; it burns no CPU meanwhile.
//   - Lifetimes are bounded: idle, read and write deadlines fire on the
//     connection's own waiter and never after OnClose (deadline.go); Dial
//     never blocks a waiter and is cancelled by its context, Shutdown and
//     Close; Shutdown drains connections whose peers keep reading and
//     resets the rest when its context ends; Close resets at once.
//
// Every method of Conn may be called from any goroutine, any number of
// times, except Peek, Next, Discard and Buffered, which read the inbound
// buffer and belong to OnData and OnDrain. After Close, Abort or the end of the
// connection, methods return an error matching net.ErrClosed and never
// touch the fd.
package conn

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// Sentinel errors. Test with errors.Is. Operations on a closed connection
// return errors matching net.ErrClosed.
var (
	// ErrQueueFull reports a Write that would queue more than
	// Options.MaxQueued bytes on one connection; nothing of it was
	// written or queued.
	ErrQueueFull = errors.New("conn: output queue full")
	// ErrInvalid reports a bad argument: a negative size, a nil handler,
	// a bad address or network, invalid Options.
	ErrInvalid = errors.New("conn: invalid argument")
	// ErrShortBuffer reports a Peek or Next of more bytes than are
	// buffered, or a Discard of more than are buffered (which discards
	// them all). It is io.ErrShortBuffer.
	ErrShortBuffer = io.ErrShortBuffer
	// ErrInboundFull reports a connection whose handler left more than
	// Options.MaxBuffered unconsumed bytes: it is closed with ReasonError.
	ErrInboundFull = errors.New("conn: inbound buffer full")
)

// closedError wraps net.ErrClosed with what happened to the connection.
type closedError struct{ why string }

func (e closedError) Error() string { return "conn: connection " + e.why }
func (e closedError) Unwrap() error { return net.ErrClosed }

// Reason says why a connection ended.
type Reason int

const (
	// ReasonPeerClosed: the peer closed its side (FIN) and the connection
	// was closed after its output was flushed.
	ReasonPeerClosed Reason = iota
	// ReasonReset: the peer reset the connection, or it failed with
	// EPIPE.
	ReasonReset
	// ReasonLocalClose: Close was called.
	ReasonLocalClose
	// ReasonAbort: Abort was called.
	ReasonAbort
	// ReasonError: a system call failed, the inbound buffer overflowed, or
	// a handler panicked.
	ReasonError
	// ReasonTimeout: a deadline expired (idle, read or write), or Close
	// could not flush within Options.FlushTimeout.
	ReasonTimeout
	// ReasonShutdown: the server closed.
	ReasonShutdown
	numReasons
)

// String returns the reason in lower case, such as "peer-closed".
func (r Reason) String() string {
	switch r {
	case ReasonPeerClosed:
		return "peer-closed"
	case ReasonReset:
		return "reset"
	case ReasonLocalClose:
		return "local-close"
	case ReasonAbort:
		return "abort"
	case ReasonError:
		return "error"
	case ReasonTimeout:
		return "timeout"
	case ReasonShutdown:
		return "shutdown"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Handler serves connections. Its methods run on the connection's waiter
// (OnOpen may run on the waiter that accepted it), one at a time per
// connection, and must not block for long: the waiter serves other
// connections too.
type Handler interface {
	// OnOpen runs once, before any other method for the connection.
	OnOpen(c *Conn)
	// OnData runs when input is buffered: read it with Peek, Next and
	// Discard. What the handler leaves unconsumed stays buffered and is
	// offered again, with more, next time.
	OnData(c *Conn)
	// OnClose runs once, after the connection ended and no other method
	// of its handler runs or will run. err is what failed, if anything.
	// The connection's statistics and its waiter's are readable here.
	OnClose(c *Conn, reason Reason, err error)
}

// Drainer is implemented by a Handler that wants to know when a
// connection's queued output, having gone above Options.HighWater, has
// fallen to Options.LowWater: a proxy resumes reading its other side
// there, and a pipelining server resumes the requests it left in the
// input (OnDrain reads it with Peek, Next and Discard, as OnData does).
// OnDrain runs on the connection's waiter, like OnData.
type Drainer interface {
	OnDrain(c *Conn)
}

// ReadCloser is implemented by a Handler that wants to decide what to do
// when the peer closes its side (a half-close). Without it the connection
// is closed, after its queued output is flushed, with ReasonPeerClosed.
// With it OnReadEOF runs (after OnData delivered everything that came
// before the FIN), and the connection stays open for writing until the
// handler calls Close.
type ReadCloser interface {
	OnReadEOF(c *Conn)
}

// Defaults of Options.
const (
	DefaultMaxQueued    = 4 << 20
	DefaultMaxBuffered  = 4 << 20
	DefaultFlushTimeout = 5 * time.Second
	DefaultAcceptBatch  = 32
	DefaultReadBuffer   = 64 << 10
)

// Options configures a Server. The zero value is a good default.
type Options struct {
	// Poller configures the server's poller; its zero value is the
	// poller's default (GOMAXPROCS waiters, one epoll set each).
	Poller poller.Options
	// MaxQueued bounds the output one connection may have queued (bytes
	// written but not yet taken by the socket), and so any single write;
	// 0 means DefaultMaxQueued.
	MaxQueued int
	// HighWater pauses reading a connection while more than this is
	// queued; 0 means MaxQueued/2. LowWater resumes it (and calls
	// OnDrain); 0 means HighWater/4.
	HighWater, LowWater int
	// MaxBuffered bounds the input a handler may leave unconsumed; 0 means
	// DefaultMaxBuffered.
	MaxBuffered int
	// FlushTimeout bounds how long Close flushes queued output and waits
	// for the peer's FIN before the connection is reset; 0 means
	// DefaultFlushTimeout.
	FlushTimeout time.Duration
	// AcceptBatch is the most connections accepted per listener event;
	// 0 means DefaultAcceptBatch.
	AcceptBatch int
	// ReadBuffer is the size of each waiter's read buffer, the most one
	// read takes; 0 means DefaultReadBuffer.
	ReadBuffer int
	// Delay keeps Nagle's algorithm on accepted TCP connections; by
	// default TCP_NODELAY is set.
	Delay bool
	// SendBuffer sets SO_SNDBUF on accepted connections; 0 keeps the
	// system's default. A small one makes most large writes partial.
	SendBuffer int
	// IdleTimeout closes a connection that made no progress for this
	// long: its handler consumed no input and the socket took no output
	// (Conn.SetIdleTimeout). 0: none.
	IdleTimeout time.Duration
	// ReadTimeout closes a connection that received no input for this
	// long: the read deadline is set this far ahead at open and after
	// every read (Conn.SetReadDeadline). 0: none.
	ReadTimeout time.Duration
	// WriteTimeout closes a connection whose queued output made no
	// progress for this long (Conn.SetWriteDeadline). 0: none.
	WriteTimeout time.Duration
	// Logger receives reports such as running out of file descriptors;
	// nil means slog.Default().
	Logger *slog.Logger
}

// normalize validates o and fills in defaults.
func (o *Options) normalize() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case o.MaxQueued < 0, o.HighWater < 0, o.LowWater < 0, o.MaxBuffered < 0, o.AcceptBatch < 0, o.ReadBuffer < 0, o.FlushTimeout < 0, o.SendBuffer < 0,
		o.IdleTimeout < 0, o.ReadTimeout < 0, o.WriteTimeout < 0:
		return bad("negative size or duration in Options")
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = DefaultMaxQueued
	}
	if o.HighWater == 0 {
		o.HighWater = o.MaxQueued / 2
	}
	if o.LowWater == 0 {
		o.LowWater = o.HighWater / 4
	}
	if o.HighWater > o.MaxQueued || o.LowWater > o.HighWater {
		return bad("want LowWater <= HighWater <= MaxQueued, have %d, %d, %d", o.LowWater, o.HighWater, o.MaxQueued)
	}
	if o.MaxBuffered == 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	if o.FlushTimeout == 0 {
		o.FlushTimeout = DefaultFlushTimeout
	}
	if o.AcceptBatch == 0 {
		o.AcceptBatch = DefaultAcceptBatch
	}
	if o.ReadBuffer == 0 {
		o.ReadBuffer = DefaultReadBuffer
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Poller.Logger == nil {
		o.Poller.Logger = o.Logger
	}
	return nil
}

func negative(op string, n int) error {
	return fmt.Errorf("%w: %s(%d): negative size", ErrInvalid, op, n)
}
