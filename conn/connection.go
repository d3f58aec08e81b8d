package conn

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// The states of a connection, guarded by Conn.mu:
//
//	open     reading and writing
//	closing  Close was called: no new writes; queued output is flushed,
//	         then FIN (shutdown) is sent and input is drained until the
//	         peer's FIN; FlushTimeout bounds each stall
//	ending   the registration was deleted: nothing more is read or
//	         written; OnClose follows after the grace period
//	released OnClose's path has begun; the poller closes the fd after it
//
// Independently, under mu: wshut (CloseWrite, or closing after its flush:
// FIN sent or due once the queue drains), finSent, eof (the peer's FIN was
// read), paused (PauseRead).
//
// Conn.flags holds what Writable and every event read without the mutex:
// one atomic word, each bit changed under mu (flagDialing and
// flagOwnHandler: before the registration is added). Besides mirrors of the state and of
// the interest set for the read path, it holds flagHigh (above HighWater
// until the queue drains to LowWater: reading paused, Writable false) and
// flagFinishing (open, but reading stopped by Shutdown or the peer's FIN:
// the handler finishes what it has read, then the connection closes).
const (
	stOpen = iota
	stClosing
	stEnding
	stReleased
)

// Bits of Conn.flags.
const (
	flagDeadlines     = 1 << iota // one was ever set (deadline.go): reads pay nothing otherwise
	flagDialing                   // a connect was pending (dial.go); stays set if it failed
	flagOwnHandler                // served by connExt.h, not the server's Handler (Dial's h)
	flagHigh                      // above HighWater, until LowWater
	flagNoWrite                   // writes refused (writeErr is not nil)
	flagFinishing                 // Shutdown or the peer's FIN: answer what was read, then close
	flagFinWait                   // closing, all output sent and FIN out: only the peer's FIN is awaited (Server.finWaits)
	flagReadable                  // Readable is in the registered interest set (events)
	flagClosing                   // state is closing or later
	flagEnding                    // state is ending or later
	flagTLS                       // connExt.tls is the connection's TLS (tls.go); set before it is registered
	flagHandshake                 // its TLS handshake has not completed; stays set if it failed
	flagWake                      // Wake: offer OnData at the next event, input or none (handoff.go)
	flagWakeDrain                 // Flush drained the queue from above HighWater: OnDrain and the offer at the next event
	flagReadFinishing             // ReadWhileFinishing: reading goes on while finishing
)

// Conn is one connection. Its methods are safe for concurrent use, except
// Peek, Next, Discard and Buffered, which read the input and belong to
// OnData and OnDrain, and SetValue and Value. Those two are a plain field,
// as the handler's own per-connection state would be: the handler's
// methods are serialised, each happening before the next, so they may
// call both freely and pay for no lock; another goroutine must order its
// calls with the handler's by synchronisation of its own, as for any
// variable they share (a goroutine started after SetValue may call
// Value).
type Conn struct {
	s   *Server
	hnd atomic.Uint64 // poller.Handle, set by Add or the first event
	at  int64         // accepted, in Server.clock's time

	// in holds what OnData left unconsumed between events; touched only
	// on the connection's waiter (OnData's serialisation). What OnData
	// reads now is its waiter's (Server.inputs).
	in []byte

	open   sync.Once    // OnOpen
	waiter atomic.Int32 // the waiter of its last event or release; -1 before

	mu     sync.Mutex
	out    []byte        // queued output; nil when drained
	events poller.Events // the interest set registered now
	state  uint8
	reason uint8 // a Reason, once reasonSet

	wshut, finSent, eof, paused, reasonSet bool

	flags atomic.Uint32

	bytesIn  atomic.Uint64 // written on the waiter
	bytesOut uint64        // under mu

	// value is SetValue's, the handler's own: no lock, as with the
	// handler's other state, which its serialisation orders.
	value any

	// What few connections need lives apart, allocated on first use
	// under mu: an idle connection stays small.
	*connExt

	prev, next *Conn // in the server's list of live connections
	fd         int
}

// connExt is the part of a connection's state that only some need: timers
// and deadlines, and a pending connect. Guarded by Conn.mu, except h, set
// before the connection is registered and never changed.
type connExt struct {
	h   Handler // Dial's handler, with flagOwnHandler
	err error   // what ended the connection, if anything failed

	flushStop     func() bool // Close's flush timer
	flushProgress int64       // when a closing connection's output last moved

	// Deadlines, in Server.clock's time (deadline.go).
	idle, progress  int64
	readAt, writeAt int64
	timerAt         int64
	timerStop       func() bool

	// A dialled connection until its connect completes (dial.go): dial
	// receives the result once; dialFailed says no handler method may
	// run for it.
	dial       chan error
	dialFailed bool

	// tls is a TLS connection's crypto/tls state (tls.go), with flagTLS;
	// set before the connection is registered and never changed.
	tls *tlsConn

	// holds counts Hold's not yet released: a finishing connection
	// waits for them (handoff.go).
	holds int
}

// handler returns the connection's Handler. connExt.h is set before the
// registration is added, so reading it needs no lock.
func (c *Conn) handler() Handler {
	if c.flags.Load()&flagOwnHandler != 0 {
		return c.connExt.h
	}
	return c.s.h
}

// ext returns the connection's extension, made on first use. The caller
// holds mu.
func (c *Conn) ext() *connExt {
	if c.connExt == nil {
		c.connExt = new(connExt)
	}
	return c.connExt
}

func (c *Conn) handle() poller.Handle { return poller.Handle(c.hnd.Load()) }

// setHandle records h once; events can arrive before Add returns it.
func (c *Conn) setHandle(h poller.Handle) {
	if c.hnd.Load() == 0 {
		c.hnd.CompareAndSwap(0, uint64(h))
	}
}

// Buffered returns how many input bytes OnData (or OnDrain) can read now.
func (c *Conn) Buffered() int {
	_, b := c.rest()
	return len(b)
}

// input returns the input OnData (or OnDrain) is reading now, on the
// connection's waiter, or nil outside them.
func (c *Conn) input() *input {
	w := c.waiter.Load()
	if w < 0 || int(w) >= len(c.s.inputs) {
		return nil
	}
	if in := &c.s.inputs[w]; in.c == c {
		return in
	}
	return nil
}

// rest returns the input being read and its unconsumed bytes; outside
// OnData and OnDrain, nil and none.
func (c *Conn) rest() (*input, []byte) {
	in := c.input()
	if in == nil {
		return nil, nil
	}
	return in, in.view[in.off:]
}

// Peek returns the next n input bytes without consuming them. If fewer are
// buffered it returns them all and ErrShortBuffer. The slice aliases the
// connection's buffer: it is valid until OnData returns or calls Next or
// Discard; copy what must outlive that.
func (c *Conn) Peek(n int) ([]byte, error) {
	if n < 0 {
		return nil, negative("Peek", n)
	}
	_, b := c.rest()
	if n > len(b) {
		return b[:len(b):len(b)], ErrShortBuffer
	}
	return b[:n:n], nil
}

// Next returns the next n input bytes and consumes them. If fewer are
// buffered it returns nil and ErrShortBuffer and consumes nothing. The
// slice's lifetime is Peek's.
func (c *Conn) Next(n int) ([]byte, error) {
	if n < 0 {
		return nil, negative("Next", n)
	}
	in, b := c.rest()
	if n > len(b) {
		return nil, ErrShortBuffer
	}
	if n > 0 {
		in.off += n
	}
	return b[:n:n], nil
}

// Discard consumes the next n input bytes and returns how many it
// consumed: all that are buffered, and ErrShortBuffer, if fewer than n.
// Discard(0) consumes nothing.
func (c *Conn) Discard(n int) (int, error) {
	if n < 0 {
		return 0, negative("Discard", n)
	}
	in, b := c.rest()
	var err error
	if n > len(b) {
		n, err = len(b), ErrShortBuffer
	}
	if n > 0 {
		in.off += n
	}
	return n, err
}

// Write queues b for the connection, in order with every other Write, and
// returns len(b) once it is written or queued. It never blocks. When the
// socket takes it all nothing is queued; otherwise the rest is copied and
// sent as the socket drains. A Write that starts with at most
// Options.HighWater queued is taken whatever its size; one that starts
// above it fails with ErrQueueFull, writing nothing, if it would take the
// queue past Options.MaxQueued (see Writable). After Close, CloseWrite or
// the end of the connection it returns an error matching net.ErrClosed: a
// Write racing a Close is either sent before the FIN or refused, and never
// reaches another connection that reuses the fd number.
func (c *Conn) Write(b []byte) (int, error) {
	return c.write(b, nil)
}

// Writev is Write of the concatenation of bufs, in one system call when
// the queue is empty.
func (c *Conn) Writev(bufs [][]byte) (int, error) {
	return c.write(nil, bufs)
}

func (c *Conn) write(b []byte, bufs [][]byte) (int, error) {
	total := len(b)
	for _, x := range bufs {
		total += len(x)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := testHookWritable(c.writeErr()); err != nil {
		return 0, err
	}
	if total == 0 {
		return 0, nil
	}
	if len(c.out) > c.s.opts.HighWater && len(c.out)+total > c.s.opts.MaxQueued {
		return 0, ErrQueueFull
	}
	if c.flags.Load()&flagTLS != 0 {
		return c.tlsWriteLocked(b, bufs, total)
	}
	return c.sendLocked(b, bufs, total)
}

// sendLocked writes b followed by bufs (total bytes) to the socket, and
// queues what it does not take. The caller holds mu.
func (c *Conn) sendLocked(b []byte, bufs [][]byte, total int) (int, error) {
	queuedBefore := len(c.out) > 0
	var took int
	if queuedBefore {
		c.out = appendAll(c.out, b, bufs)
	} else {
		var n int
		var err error
		if bufs != nil {
			n, err = writev(c.fd, bufs)
		} else {
			n, err = write(c.fd, b)
		}
		if n > 0 {
			c.bytesOut += uint64(n)
		}
		took = n
		if err != nil && !isAgain(err) {
			c.failLocked(err)
			return n, err
		}
		if n < total {
			rb, rbufs := skip(b, bufs, n)
			c.out = appendAll(make([]byte, 0, total-n), rb, rbufs)
		}
	}
	if len(c.out) > c.s.opts.HighWater {
		c.flags.Or(flagHigh)
	}
	c.wroteLocked(took, queuedBefore)
	c.updateLocked()
	return total, nil
}

// Writable reports whether the handler should go on producing output: the
// connection takes writes and no more than Options.HighWater is queued.
// Once it reports false, a handler returns from OnData leaving the rest of
// its input unconsumed; conn offers that input to OnData again when the
// queue has drained to Options.LowWater (see Flow control in the package
// doc). One atomic load: cheap enough to ask before every request.
func (c *Conn) Writable() bool {
	return c.flags.Load()&(flagHigh|flagNoWrite) == 0
}

// Draining reports whether the connection is finishing: Shutdown began, or
// the peer closed its side, so nothing more is read, and the connection
// closes once the handler has answered what it has read. A handler may,
// for example, tell its client it is going away. It also reports true once
// the connection is closing or closed.
func (c *Conn) Draining() bool {
	return c.flags.Load()&(flagFinishing|flagNoWrite) != 0
}

// skip returns b followed by bufs, less its first n bytes, as buffers.
func skip(b []byte, bufs [][]byte, n int) ([]byte, [][]byte) {
	if bufs == nil {
		return b[n:], nil
	}
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		return bufs[0][n:], bufs[1:]
	}
	return nil, nil
}

func appendAll(dst []byte, b []byte, bufs [][]byte) []byte {
	dst = append(dst, b...)
	for _, x := range bufs {
		dst = append(dst, x...)
	}
	return dst
}

// writeErr reports why the connection takes no more writes, if it does
// not. The caller holds mu.
func (c *Conn) writeErr() error {
	switch {
	case c.state == stClosing:
		return closedError{"is closing"}
	case c.state >= stEnding:
		return closedError{"is closed"}
	case c.wshut:
		return closedError{"is closed for writing"}
	}
	return nil
}

// noWriteLocked marks the connection as taking no more writes, for
// Writable; the caller holds mu and has just made writeErr non-nil.
func (c *Conn) noWriteLocked() { c.flags.Or(flagNoWrite) }

// Queued returns how many output bytes are queued: written, not yet taken
// by the socket. Safe from any goroutine.
func (c *Conn) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out)
}

// PauseRead stops reading the connection until ResumeRead: its input
// stays in the kernel, and TCP flow control pushes back on the peer.
func (c *Conn) PauseRead() error { return c.setPaused(true) }

// ResumeRead undoes PauseRead.
func (c *Conn) ResumeRead() error { return c.setPaused(false) }

func (c *Conn) setPaused(p bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stOpen {
		return closedError{"is closed"}
	}
	c.paused = p
	c.updateLocked()
	return nil
}

// Close closes the connection gracefully: it stops accepting writes and
// reading, flushes what is queued, sends FIN and waits for the peer's FIN
// (draining its input). Options.FlushTimeout bounds each stall: output that
// makes no progress for that long is reset, and a peer that does not answer
// our FIN within it is closed without a reset. It returns at once; OnClose
// reports the end. A second call returns an error matching net.ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stOpen {
		return closedError{"is closed"}
	}
	c.setReasonLocked(ReasonLocalClose, nil)
	c.closeLocked()
	return nil
}

// closeLocked starts the graceful close. The caller holds mu and has set
// the reason.
func (c *Conn) closeLocked() {
	testHookEarlyClose(c)
	c.closeNotifyLocked()
	if c.state != stOpen {
		return // sending close_notify failed: ended already
	}
	c.state = stClosing
	c.flags.Or(flagClosing)
	c.wshut = true
	c.noWriteLocked()
	c.flags.And(^uint32(flagFinishing))
	if len(c.out) == 0 {
		if c.eof {
			// The peer's FIN was read and nothing is queued: the
			// close after the grace period sends ours. No shutdown
			// call, no timer: the common end of a connection.
			c.endLocked()
			return
		}
		c.finLocked()
	}
	if c.state != stClosing {
		return // ended already
	}
	c.ext().flushProgress = c.s.clock()
	c.armFlushLocked(c.s.opts.FlushTimeout)
	c.updateLocked()
}

// armFlushLocked arms the flush timer to fire after d.
func (c *Conn) armFlushLocked(d time.Duration) {
	if stop, err := c.s.p.AfterFunc(c.handle(), d, c.flushTimedOut); err == nil {
		c.flushStop = stop
	} else {
		c.flushStop = nil
	}
}

// finLocked sends FIN once the queue is empty; if the peer's FIN was read
// already, or the connection is closing and the peer's FIN is awaited in
// vain, it ends the connection.
func (c *Conn) finLocked() {
	if !c.finSent {
		c.finSent = true
		if err := shutdownWrite(c.fd); err != nil && c.state == stOpen {
			c.failLocked(err)
			return
		}
	}
	switch {
	case c.state != stClosing:
	case c.eof:
		c.endLocked()
	case c.flags.Load()&flagFinWait == 0:
		c.flags.Or(flagFinWait)
		c.s.finWaits.Add(1)
	}
}

// closingEOFLocked handles the peer's FIN (over TLS, its close_notify or
// FIN) on a closing connection: it ends reading, not the connection. Once
// our FIN is out the exchange is complete; until then the peer may still
// be reading what is queued, which is flushed as ever (FlushTimeout bounds
// a stall), and finLocked ends the connection after sending our FIN. The
// caller holds mu.
func (c *Conn) closingEOFLocked() {
	c.eof = true
	if c.finSent {
		c.endLocked()
		return
	}
	c.updateLocked() // no more reading: EOF stays readable
}

// flushTimedOut runs on the connection's waiter when a closing
// connection's flush timer expires. Output that moved since re-arms it for
// the rest of the period: the timeout measures a stall, not the time a
// large reply takes. Output stuck for the whole period is reset; with all
// output sent, the peer has every byte and only its FIN is missing: the
// connection ends without a reset, and pending input is discarded first,
// as unread input would make the close send one.
func (c *Conn) flushTimedOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stClosing {
		return
	}
	c.flushStop = nil
	idle := time.Duration(c.s.clock() - c.flushProgress)
	if left := c.s.opts.FlushTimeout - idle; left > 0 {
		c.armFlushLocked(left)
		return
	}
	if len(c.out) > 0 {
		c.reason, c.reasonSet = uint8(ReasonTimeout), true
		c.setErrLocked(nil)
		c.resetLocked()
		return
	}
	c.quietEndLocked()
}

// quietEndLocked ends a closing connection whose output is all sent and
// whose FIN is out, without a reset: the input the peer sent since is
// discarded, so that the close does not answer it with one.
func (c *Conn) quietEndLocked() {
	discardInput(c.fd)
	c.endLocked()
}

// CloseWrite half-closes the connection: no more writes; once the queue
// has drained, FIN tells the peer. Reading goes on. A second call, or a
// call after Close, returns an error matching net.ErrClosed.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.writeErr(); err != nil {
		return err
	}
	c.closeNotifyLocked()
	if c.state != stOpen {
		return closedError{"is closed"}
	}
	c.wshut = true
	c.noWriteLocked()
	if len(c.out) == 0 {
		c.finLocked()
	}
	return nil
}

// Abort resets the connection at once (RST): queued output is dropped.
// OnClose follows with ReasonAbort. After the end of the connection it
// returns an error matching net.ErrClosed.
func (c *Conn) Abort() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= stEnding {
		return closedError{"is closed"}
	}
	c.reason, c.reasonSet = uint8(ReasonAbort), true
	c.setErrLocked(nil)
	c.resetLocked()
	return nil
}

// resetLocked ends the connection with an RST: SO_LINGER 0 makes the
// poller's close, after the grace period, reset it.
func (c *Conn) resetLocked() {
	setLingerZero(c.fd)
	c.endLocked()
}

// failLocked ends the connection after a system call failed.
func (c *Conn) failLocked(err error) {
	if isReset(err) {
		c.setReasonLocked(ReasonReset, err)
	} else {
		c.setReasonLocked(ReasonError, err)
	}
	c.endLocked()
}

// setErrLocked records what failed; the caller holds mu.
func (c *Conn) setErrLocked(err error) {
	if err != nil {
		c.ext().err = err
	} else if c.connExt != nil {
		c.connExt.err = nil
	}
}

// errLocked returns what failed, if anything; the caller holds mu.
func (c *Conn) errLocked() error {
	if c.connExt == nil {
		return nil
	}
	return c.connExt.err
}

func (c *Conn) setReasonLocked(r Reason, err error) {
	if !c.reasonSet {
		c.reason, c.reasonSet = uint8(r), true
		c.setErrLocked(err)
	}
}

// endLocked deletes the registration: no more events; OnClose follows
// after the grace period, and the poller closes the fd after OnClose.
func (c *Conn) endLocked() {
	if c.state >= stEnding {
		return
	}
	c.state = stEnding
	c.flags.Or(flagNoWrite | flagClosing | flagEnding)
	c.abortHandshakeLocked(closedError{"is closed"})
	if c.flags.Load()&flagFinWait != 0 {
		c.flags.And(^uint32(flagFinWait))
		c.s.finWaits.Add(-1)
	}
	if x := c.connExt; x != nil {
		if x.flushStop != nil {
			x.flushStop()
			x.flushStop = nil
		}
		if x.timerStop != nil {
			x.timerStop()
			x.timerStop, x.timerAt = nil, 0
		}
	}
	if len(c.out) > 0 {
		c.s.lostOutput.Add(uint64(len(c.out)))
	}
	c.out = nil
	c.s.p.Delete(c.handle()) // ErrStale: hung up already, its release is on the way
	testHookEarlyClose(c)
}

// updateLocked registers the interest set the state calls for: Readable
// while reading (open, not paused, not above HighWater, not finishing,
// before the peer's FIN; or closing, to drain the peer), Writable while
// output is queued, and while finishing: its event runs the finish on the
// connection's waiter (Server.resume).
func (c *Conn) updateLocked() {
	if c.state >= stEnding {
		return
	}
	f := c.flags.Load()
	var want poller.Events
	switch {
	case f&flagHandshake != 0:
		if c.tls.hs.wantRead {
			want |= poller.Readable
		}
	case c.eof:
	case c.state == stClosing:
		want |= poller.Readable
	case !c.paused && f&flagHigh == 0 && f&(flagFinishing|flagReadFinishing) != flagFinishing:
		want |= poller.Readable
	}
	if len(c.out) > 0 || c.state == stOpen && f&flagFinishing != 0 && !c.heldLocked() || c.tlsPendingLocked() ||
		c.state == stOpen && f&(flagWake|flagWakeDrain) != 0 {
		want |= poller.Writable // flush, or an event to finish, decrypt or wake in
	}
	if want != c.events {
		if err := c.s.p.Modify(c.handle(), want); err == nil {
			c.setEventsLocked(want)
		}
	}
}

// setEventsLocked records the interest set registered now.
func (c *Conn) setEventsLocked(ev poller.Events) {
	c.events = ev
	if ev&poller.Readable != 0 {
		c.flags.Or(flagReadable)
	} else {
		c.flags.And(^uint32(flagReadable))
	}
}

// finishLocked makes an open connection finish: no more reading; the
// handler is offered what it has read, under flow control, and then the
// connection closes with reason r (Server.resume). The caller holds mu.
func (c *Conn) finishLocked(r Reason) {
	if c.state != stOpen || c.flags.Load()&flagFinishing != 0 {
		return
	}
	c.setReasonLocked(r, nil)
	c.flags.Or(flagFinishing)
	c.updateLocked()
}

// SetValue stores a value with the connection, typically the handler's
// per-connection state, set in OnOpen. It is a plain field, not safe for
// concurrent use: see Conn for who may call it and Value. (Go methods
// cannot take type parameters, and a type parameter on Server, Conn and
// Handler would reach every signature; a type assertion of the value
// costs about a nanosecond.)
func (c *Conn) SetValue(v any) { c.value = v }

// Value returns the value SetValue stored, or nil. It is not safe for
// concurrent use with SetValue: see Conn.
func (c *Conn) Value() any { return c.value }

// Handle returns the connection's poller registration, for
// Server.Poller().Info and the like.
func (c *Conn) Handle() poller.Handle { return c.handle() }

// LocalAddr returns the connection's local address, or nil once it is
// closed.
func (c *Conn) LocalAddr() net.Addr { return c.addr(sockName) }

// RemoteAddr returns the peer's address, or nil once it is closed.
func (c *Conn) RemoteAddr() net.Addr { return c.addr(peerName) }

func (c *Conn) addr(f func(int) net.Addr) net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= stReleased {
		return nil
	}
	return f(c.fd)
}

// Stats are one connection's counters.
// Byte counts are the socket's: ciphertext, on a TLS connection.
type Stats struct {
	BytesIn  uint64        `json:"bytes_in"`
	BytesOut uint64        `json:"bytes_out"` // taken by the socket
	Queued   int           `json:"queued"`    // written, not yet taken by the socket
	Age      time.Duration `json:"age"`
	// Waiter is the index of the connection's waiter, for
	// Server.Poller().WaiterStats (in OnClose too); -1 before its first
	// event.
	Waiter int `json:"waiter"`
}

// Stats returns the connection's counters. Safe from any goroutine, OnClose
// included.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	out, queued := c.bytesOut, len(c.out)
	c.mu.Unlock()
	return Stats{
		BytesIn:  c.bytesIn.Load(),
		BytesOut: out,
		Queued:   queued,
		Age:      time.Duration(c.s.clock() - c.at),
		Waiter:   int(c.waiter.Load()),
	}
}
