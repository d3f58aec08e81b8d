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
//   - Output is bounded, and flow control is conn's, not the handler's
//     (see Flow control below): a handler that asks Conn.Writable between
//     replies keeps at most Options.HighWater plus one reply queued, never
//     sees ErrQueueFull, and is offered the requests it left again once the
//     queue is back at Options.LowWater. Above HighWater reading pauses, so
//     a slow reader pushes back on its peer instead of growing memory.
//   - Nothing is buffered per idle connection: reads go to a per-waiter
//     buffer, and only what the handler leaves unconsumed is kept; output
//     storage is allocated on a partial write and dropped when drained.
//   - Close flushes what was queued, sends FIN, and drains the peer until
//     its FIN, so the peer sees every byte written before Close; Abort
//     resets at once. Options.FlushTimeout bounds a stall, not a size: a
//     peer that keeps reading gets every byte of a large reply. Data that
//     arrived before the peer's FIN is delivered, and the handler can still
//     reply to all of it.
//   - Out of file descriptors, the server keeps serving its connections,
//     pauses accepting and resumes by itself; it burns no CPU meanwhile.
//   - All of this holds over TLS too (see TLS below).
//   - Lifetimes are bounded: idle, read and write deadlines fire on the
//     connection's own waiter and never after OnClose (deadline.go); Dial
//     never blocks a waiter and is cancelled by its context, Shutdown and
//     Close; Shutdown finishes the requests already read and resets what is
//     left when its context ends; Close resets at once.
//
// # Flow control
//
// A pipelining client may send thousands of requests in one read while it
// reads nothing back. A handler that answered them all at once would queue
// every reply. Instead, OnData runs requests in a loop and asks Writable
// before each one:
//
//	func (h *handler) OnData(c *conn.Conn) {
//		for c.Writable() {
//			req, ok := parse(c) // consumes one complete request, or none
//			if !ok {
//				return // incomplete: offered again, with more, when it arrives
//			}
//			c.Write(h.serve(req))
//		}
//		// Writable is false: more than HighWater is queued (or the
//		// connection is closing). Return; what is left stays buffered.
//	}
//
// The contract: Writable reports false once more than Options.HighWater is
// queued, and then reading pauses; when the socket has drained the queue to
// Options.LowWater, conn calls OnData again with the same unconsumed input,
// whether or not more bytes arrive, and resumes reading. A Write that starts
// with at most HighWater queued is always taken, whatever its size, so such
// a handler holds at most HighWater plus one reply and never sees
// ErrQueueFull. Options.MaxQueued bounds writers that ignore Writable (a
// goroutine publishing to many connections, say): a Write that starts above
// HighWater and would take the queue past MaxQueued fails with ErrQueueFull
// and queues nothing. A handler that also implements Drainer gets OnDrain at
// LowWater first, as a proxy wants. Server.Options returns the limits in
// force, defaults filled in.
//
// # Shutdown
//
// Server.Shutdown stops accepting and stops reading every connection, and
// lets each finish what it has read: OnData is offered the requests already
// buffered, under the same flow control, and its replies are flushed; then
// the connection is closed as Close does (FIN, drain until the peer's FIN).
// A handler can tell from Conn.Draining, true from then on. The peer's FIN
// without a HalfCloser is handled the same way: requests received before it
// are all answered. An idle client that has every byte but does not answer
// our FIN does not hold Shutdown up: it is closed without a reset and
// counted as drained. When Shutdown's context ends, a connection that still
// has work (unanswered requests, unsent output) is reset and counted as
// forced.
//
// # Slow handlers
//
// Handlers run on the poller's waiters. With the default, an epoll set per
// waiter, a connection stays on one waiter: the fastest dispatch for
// handlers of uniform, tiny cost, and a handler that blocks (a lock, a disk
// read, a call to another service, a Flush to a slow client) stalls every
// connection of its waiter, as on every per-loop event library, and holds
// back the release (OnClose, the descriptor's close) of every connection
// closed meanwhile until it returns. With Options.Poller.Topology set to
// poller.Shared, the next free waiter takes the next event, a waiter stuck
// in one handler hands the events it had taken to the others, and more
// waiters start while all are stuck (poller.Options.Overrun and
// MaxWaiters): a slow handler holds up its own connection only, and a
// waiter stuck in it is taken offline in the poller's reclaimer, so other
// connections are released (OnClose run, descriptor closed) as they close.
// Choose it for handlers of uneven cost or that may block. poller.Stealing keeps a
// set per waiter, with the default's dispatch speed while nothing blocks,
// and hands a stuck waiter's events and its set to another once the
// poller notices it (about Overrun): for handlers that are mostly cheap
// but sometimes block.
//
// # TLS
//
// With Options.TLS every accepted connection is a TLS server connection,
// and DialTLS dials a TLS client; the TLS is Go's crypto/tls, unmodified,
// so its security fixes and new key exchanges come with each Go release,
// and SNI (GetCertificate, GetConfigForClient), ALPN, client certificates,
// session resumption and the default post-quantum key exchange work as
// crypto/tls does them. The Handler is unchanged: OnData reads plaintext
// with Peek, Next and Discard, and Write takes plaintext, from any
// goroutine. Every guarantee above holds over TLS: no write reaches a
// reused fd, output (ciphertext) is bounded by the same limits and flow
// control, deadlines and Shutdown behave as in plaintext, and Close sends
// close_notify before the FIN (Abort does not). The peer's close_notify is
// its FIN, and like a FIN it ends reading only: output queued when it
// comes, or after, is still flushed (under Options.FlushTimeout) before
// our close_notify and FIN.
//
// OnOpen runs after the handshake, and Conn.ConnectionState has the
// negotiated version, cipher suite, ALPN protocol, server name and the
// peer's certificates from then on, OnClose included. An accepted
// connection whose handshake fails (not TLS, a refused certificate,
// Options.HandshakeTimeout, the server closing) runs OnClose alone, with
// ReasonHandshake and the error; one that is not TLS may first be
// answered in plaintext (Options.NotTLS). A connection costs a goroutine only while
// it handshakes: the handshake runs off the waiters, started by its first
// bytes; at most Options.HandshakeWorkers compute at once (one waiting for
// its peer holds none), and at most Options.MaxHandshakes are active,
// having received bytes (a connection whose first bytes come beyond it is
// reset). After the handshake the records are read, decrypted and
// written on the connection's waiter. ServerStats.TLS counts handshakes
// started, and each once as completed, failed by cause, timed out,
// refused or in progress, with their latency.
//
// Every method of Conn may be called from any goroutine, any number of
// times, except Peek, Next, Discard and Buffered, which read the inbound
// buffer and belong to OnData and OnDrain, and SetValue and Value, a plain
// field that the handler uses as one of its own: another goroutine must be
// ordered with its calls (see Conn). After Close, Abort or the end of the
// connection, methods return an error matching net.ErrClosed and never
// touch the fd.
package conn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// Sentinel errors. Test with errors.Is. Operations on a closed connection
// return errors matching net.ErrClosed.
var (
	// ErrQueueFull reports a Write that found more than
	// Options.HighWater queued and would have taken the queue past
	// Options.MaxQueued; nothing of it was written or queued. A handler
	// that checks Conn.Writable before each reply never sees it.
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
	// ReasonTimeout: a deadline expired (idle, read or write), or a
	// closing connection's output made no progress for
	// Options.FlushTimeout.
	ReasonTimeout
	// ReasonShutdown: Shutdown or Close of the server ended it.
	ReasonShutdown
	// ReasonHandshake: the TLS handshake of an accepted connection did not
	// complete (crypto/tls's error, ErrHandshakeTimeout, or the server
	// closing): OnOpen never ran for it, and this OnClose is the only
	// handler method that does.
	ReasonHandshake
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
	case ReasonHandshake:
		return "handshake"
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
	// offered again: with more input when it arrives, and, if the handler
	// stopped because Writable reported false, once the output queue has
	// drained to Options.LowWater (see Flow control in the package doc).
	OnData(c *Conn)
	// OnClose runs once, after the connection ended and no other method
	// of its handler runs or will run. err is what failed, if anything.
	// The connection's statistics and its waiter's are readable here. It
	// runs in the poller's release path (it is the registration's
	// OnRelease), with the releases of other connections after it: it
	// must not block, or they wait too.
	OnClose(c *Conn, reason Reason, err error)
}

// BaseHandler is a Handler whose methods do nothing but discard input.
// Embed it to implement only the methods a server needs:
//
//	type echo struct{ conn.BaseHandler }
//
//	func (echo) OnData(c *conn.Conn) { b, _ := c.Next(c.Buffered()); c.Write(b) }
type BaseHandler struct{}

// OnOpen does nothing.
func (BaseHandler) OnOpen(*Conn) {}

// OnData discards the input.
func (BaseHandler) OnData(c *Conn) { c.Discard(c.Buffered()) }

// OnClose does nothing.
func (BaseHandler) OnClose(*Conn, Reason, error) {}

// Drainer is implemented by a Handler that wants to know when a
// connection's queued output, having gone above Options.HighWater, has
// fallen to Options.LowWater: a proxy resumes reading its other side
// there. OnDrain runs on the connection's waiter, like OnData, and may read
// the input as OnData does; after it, OnData is offered what is left (a
// pipelining server needs no Drainer: see Flow control in the package doc).
type Drainer interface {
	OnDrain(c *Conn)
}

// HalfCloser is implemented by a Handler that wants to decide what to do
// when the peer closes its side (a TCP half-close, FIN). Without it the
// connection finishes the requests received before the FIN (as in
// Shutdown), flushes, and closes with ReasonPeerClosed. With it OnReadEOF
// runs (after OnData was offered everything that came before the FIN), and
// the connection stays open for writing until the handler calls Close.
type HalfCloser interface {
	OnReadEOF(c *Conn)
}

// Defaults of Options.
const (
	DefaultHighWater    = 1 << 20
	DefaultMaxQueued    = 4 << 20
	DefaultMaxBuffered  = 4 << 20
	DefaultFlushTimeout = 5 * time.Second
	DefaultAcceptBatch  = 32
	DefaultReadBuffer   = 64 << 10

	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxHandshakes    = 1024
)

// Options configures a Server. The zero value is a good default.
type Options struct {
	// Poller configures the server's poller; its zero value is the
	// poller's default (GOMAXPROCS waiters, one epoll set each). See Slow
	// handlers in the package doc for when to choose poller.Shared.
	Poller poller.Options
	// HighWater is the most output queued (written, not yet taken by the
	// socket) at which Writable still reports true; above it reading
	// pauses. 0 means DefaultHighWater, or MaxQueued/2 if that is less.
	// LowWater is where a queue that went above HighWater has drained
	// enough: reading resumes, OnDrain runs and OnData is offered what it
	// left; 0 means HighWater/4.
	HighWater, LowWater int
	// MaxQueued bounds the queue of writers that ignore Writable: a Write
	// that starts with more than HighWater queued fails with ErrQueueFull
	// if it would take the queue past MaxQueued. A Write that starts at or
	// below HighWater is taken whatever its size. 0 means
	// DefaultMaxQueued, or HighWater if that is more.
	MaxQueued int
	// MaxBuffered bounds the input a handler may leave unconsumed; 0 means
	// DefaultMaxBuffered.
	MaxBuffered int
	// FlushTimeout bounds a stall of a closing connection: while queued
	// output makes no progress for this long, the connection is reset
	// (ReasonTimeout); once everything is sent and our FIN is out, a peer
	// that does not answer with its FIN for this long is closed without a
	// reset. A peer that keeps reading gets every byte however long it
	// takes. 0 means DefaultFlushTimeout.
	FlushTimeout time.Duration
	// AcceptBatch is the most connections accepted per listener event;
	// 0 means DefaultAcceptBatch.
	AcceptBatch int
	// ReadBuffer is the size of each waiter's read buffer, the most one
	// read takes; 0 means DefaultReadBuffer.
	ReadBuffer int
	// Nagle keeps Nagle's algorithm on for TCP connections (it delays
	// small writes to coalesce them); by default TCP_NODELAY is set, so
	// every Write is sent at once.
	Nagle bool
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
	// Logger receives reports such as running out of file descriptors,
	// and the poller's too (its release watchdog's, misuse, recovered
	// panics) unless Poller.Logger is set; nil means slog.Default().
	// httpd.Server sets it, when it is nil and the Server's ErrorLog is
	// not, to write to that ErrorLog.
	Logger *slog.Logger

	// TLS, if not nil, makes every accepted connection a TLS server
	// connection with this configuration, run by crypto/tls itself (see
	// TLS in the package doc). It must have a certificate
	// (Certificates, GetCertificate or GetConfigForClient).
	TLS *tls.Config
	// HandshakeTimeout bounds a TLS handshake, from accept (or the
	// connect's completion) to its end, waiting for a worker included; 0
	// means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// HandshakeWorkers is the most TLS handshakes computing at once; a
	// handshake waiting for its peer holds none. 0 means GOMAXPROCS.
	HandshakeWorkers int
	// MaxHandshakes is the most TLS handshakes active at once
	// (TLSStats.Active): their first bytes arrived, and each has a
	// goroutine (waiting for its peer or for a worker); a connection whose
	// first bytes arrive beyond it is reset (ErrTooManyHandshakes,
	// TLSStats.Refused). A connection that has sent nothing yet has no
	// goroutine and does not count: like any idle connection it holds a
	// descriptor and its state, here until HandshakeTimeout (it is in
	// TLSStats.InProgress meanwhile). 0 means DefaultMaxHandshakes.
	MaxHandshakes int
	// NotTLS, if set, answers clients that do not speak TLS: when the
	// first record of an accepted connection is not a TLS handshake's, it
	// is called with that record's header (the first five bytes received,
	// a plaintext protocol's first word) on the handshake's goroutine, and
	// what it returns is sent in plaintext before the connection is
	// closed gracefully: its input drained, so that a reset cannot
	// overtake the reply (see Close). It returns nil to close at once, as
	// without NotTLS; conn neither modifies nor keeps what it returns, so
	// it may return the same slice every time. It needs TLS. httpd sets
	// it to answer plaintext HTTP as net/http does.
	NotTLS func(header [5]byte) []byte
}

// normalize validates o and fills in defaults.
func (o *Options) normalize() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	switch {
	case o.MaxQueued < 0, o.HighWater < 0, o.LowWater < 0, o.MaxBuffered < 0, o.AcceptBatch < 0, o.ReadBuffer < 0, o.FlushTimeout < 0, o.SendBuffer < 0,
		o.IdleTimeout < 0, o.ReadTimeout < 0, o.WriteTimeout < 0,
		o.HandshakeTimeout < 0, o.HandshakeWorkers < 0, o.MaxHandshakes < 0:
		return bad("negative size or duration in Options")
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = max(DefaultMaxQueued, o.HighWater)
	}
	if o.HighWater == 0 {
		o.HighWater = min(DefaultHighWater, o.MaxQueued/2)
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
	if o.TLS != nil && len(o.TLS.Certificates) == 0 && o.TLS.GetCertificate == nil && o.TLS.GetConfigForClient == nil {
		return bad("Options.TLS has no certificate (Certificates, GetCertificate or GetConfigForClient)")
	}
	if o.NotTLS != nil && o.TLS == nil {
		return bad("Options.NotTLS without Options.TLS")
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.HandshakeWorkers == 0 {
		o.HandshakeWorkers = runtime.GOMAXPROCS(0)
	}
	if o.MaxHandshakes == 0 {
		o.MaxHandshakes = DefaultMaxHandshakes
	}
	if o.Poller.Logger == nil {
		o.Poller.Logger = o.Logger
	}
	return nil
}

func negative(op string, n int) error {
	return fmt.Errorf("%w: %s(%d): negative size", ErrInvalid, op, n)
}
