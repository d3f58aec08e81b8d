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
//	         peer's FIN, all within FlushTimeout
//	ending   the registration was deleted: nothing more is read or
//	         written; OnClose follows after the grace period
//	released OnClose's path has begun; the poller closes the fd after it
//
// Independently: wshut (CloseWrite, or closing after its flush: FIN sent
// or due once the queue drains), eof (the peer's FIN was read), paused
// (PauseRead), high (reading paused by the HighWater mark).
const (
	stOpen = iota
	stClosing
	stEnding
	stReleased
)

// Conn is one connection. Its methods are safe for concurrent use, except
// Peek, Next, Discard and Buffered, which belong to OnData and OnDrain.
type Conn struct {
	s   *Server
	h   Handler
	fd  int
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
	// Flags: wshut: no more writes (FIN sent, or due after the queue);
	// finSent; eof: the peer's FIN was read; paused: PauseRead; high:
	// above HighWater until LowWater.
	wshut, finSent, eof, paused, high, reasonSet bool
	flags                                        atomic.Uint32 // flagDeadlines, flagDialing

	bytesIn, bytesOut atomic.Uint64

	// What few connections need lives apart, allocated on first use
	// under mu: an idle connection stays small.
	*connExt

	prev, next *Conn // in the server's list of live connections
}

// Bits of Conn.flags, read without the mutex on every event.
const (
	flagDeadlines = 1 << iota // one was ever set (deadline.go): reads pay nothing otherwise
	flagDialing               // a connect is pending (dial.go)
)

// connExt is the part of a connection's state that only some need: timers
// and deadlines, and a pending connect. Guarded by Conn.mu.
type connExt struct {
	err   error // what ended the connection, if anything failed
	value any   // SetValue's

	flushStop func() bool // Close's flush timer

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
}

// handler returns the connection's Handler.
func (c *Conn) handler() Handler { return c.h }

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
// sent as the socket drains. A Write that would queue more than
// Options.MaxQueued fails with ErrQueueFull and writes nothing. After
// Close, CloseWrite or the end of the connection it returns an error
// matching net.ErrClosed: a Write racing a Close is either sent before the
// FIN or refused, and never reaches another connection that reuses the fd
// number.
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
	if err := testHookWritable(c.writable()); err != nil {
		return 0, err
	}
	if total == 0 {
		return 0, nil
	}
	if len(c.out)+total > c.s.opts.MaxQueued {
		return 0, ErrQueueFull
	}
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
			c.bytesOut.Add(uint64(n))
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
		c.high = true
	}
	c.wroteLocked(took, queuedBefore)
	c.updateLocked()
	return total, nil
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

// writable reports why the connection takes no more writes, if it does
// not. The caller holds mu.
func (c *Conn) writable() error {
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
// (draining its input), all within Options.FlushTimeout, after which the
// connection is reset. It returns at once; OnClose reports the end. A
// second call returns an error matching net.ErrClosed.
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
	c.state = stClosing
	c.wshut = true
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
	if stop, err := c.s.p.AfterFunc(c.handle(), c.s.opts.FlushTimeout, c.flushTimedOut); err == nil {
		c.ext().flushStop = stop
	}
	c.updateLocked()
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
	if c.state == stClosing && c.eof {
		c.endLocked()
	}
}

func (c *Conn) flushTimedOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stClosing {
		return
	}
	c.reason, c.reasonSet = uint8(ReasonTimeout), true
	c.setErrLocked(nil)
	c.resetLocked()
}

// CloseWrite half-closes the connection: no more writes; once the queue
// has drained, FIN tells the peer. Reading goes on. A second call, or a
// call after Close, returns an error matching net.ErrClosed.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.writable(); err != nil {
		return err
	}
	c.wshut = true
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
// while reading (open, not paused, not above HighWater, before the peer's
// FIN; or closing, to drain the peer), Writable while output is queued.
func (c *Conn) updateLocked() {
	if c.state >= stEnding {
		return
	}
	var want poller.Events
	switch {
	case c.eof:
	case c.state == stClosing:
		want |= poller.Readable
	case !c.paused && !c.high:
		want |= poller.Readable
	}
	if len(c.out) > 0 {
		want |= poller.Writable
	}
	if want != c.events {
		if err := c.s.p.Modify(c.handle(), want); err == nil {
			c.events = want
		}
	}
}

// SetValue stores a user value with the connection.
func (c *Conn) SetValue(v any) {
	c.mu.Lock()
	c.ext().value = v
	c.mu.Unlock()
}

// Value returns the value SetValue stored, or nil.
func (c *Conn) Value() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connExt == nil {
		return nil
	}
	return c.value
}

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
	return Stats{
		BytesIn:  c.bytesIn.Load(),
		BytesOut: c.bytesOut.Load(),
		Queued:   c.Queued(),
		Age:      time.Duration(c.s.clock() - c.at),
		Waiter:   int(c.waiter.Load()),
	}
}
