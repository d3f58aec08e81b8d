package conn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v3"

	"github.com/gracepoll/gracepoll/poller"
)

// Server serves connections accepted from its listeners with one Handler.
type Server struct {
	h      Handler
	opts   Options
	p      *poller.Poller
	bufs   [][]byte // one read buffer per waiter
	inputs []input  // per waiter: the input OnData is reading now

	mu        sync.Mutex
	listeners []*listener
	closed    bool

	conns   connList       // live, for Close and Shutdown
	joining *xsync.RBMutex // read-held by register, written by Close and Shutdown (awaitJoins)
	base    time.Time      // Server.clock's origin
	tls     tlsServer

	open, accepted                       atomic.Int64
	closedBy                             [numReasons]atomic.Uint64
	acceptPauses, acceptErrors           atomic.Uint64
	emfileLogged                         atomic.Bool
	pausedListeners                      atomic.Int32 // so that a release checks them without a lock
	timeouts                             atomic.Uint64
	closing                              atomic.Bool  // Shutdown or Close began: accepted connections are refused
	closeForced                          atomic.Int64 // connections Close reset before they ended, for Shutdown's count
	finWaits                             atomic.Int64 // connections with flagFinWait
	lostOutput                           atomic.Uint64
	readErrs, writeErrs, inboundOverflow atomic.Uint64
}

// listener is one listening socket the server owns (a duplicate, for
// Serve). The fd is the server's, not the poller's: Shutdown and Close
// close it as they begin, after deleting its registration, so that the
// socket stops listening at once (new connections are refused, as
// net/http's Shutdown refuses them) rather than after the poller's grace
// period, which a handler blocking its waiter may hold up for as long as
// it blocks. An accept event dispatched before the delete may still run:
// accept takes mu and finds the fd closed rather than reach a number the
// kernel may have given to another descriptor.
type listener struct {
	fd     int
	h      poller.Handle // set before the listener is listed, under Server.mu
	addr   net.Addr
	paused bool // accepting paused: out of file descriptors; guarded by Server.mu
	delay  time.Duration
	unlink string // a Unix socket path Listen created, removed when the listener closes

	mu     sync.Mutex // held around each accept and the close
	closed bool
}

// NewServer starts a poller for h. Add listeners with Listen or Serve.
func NewServer(h Handler, opts Options) (*Server, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil Handler", ErrInvalid)
	}
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	p, err := poller.New(opts.Poller)
	if err != nil {
		return nil, err
	}
	s := &Server{h: h, opts: opts, p: p, base: time.Now(), joining: xsync.NewRBMutex()}
	// Per-waiter buffers, made by each waiter on its first read: a shared
	// set may start extra waiters, up to MaxWaiters, that never run.
	s.bufs = make([][]byte, p.MaxWaiters())
	s.inputs = make([]input, p.MaxWaiters())
	if opts.TLS != nil {
		s.initTLS()
	}
	return s, nil
}

// Poller returns the server's poller, for its per-waiter statistics.
func (s *Server) Poller() *poller.Poller { return s.p }

// Options returns the options the server runs with, defaults filled in:
// the effective HighWater, LowWater and MaxQueued, for instance.
func (s *Server) Options() Options { return s.opts }

// Listen listens on a TCP ("tcp", "tcp4", "tcp6") or Unix ("unix") address
// and serves it; it returns the address bound (useful with port 0).
func (s *Server) Listen(network, address string) (net.Addr, error) {
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
	default:
		return nil, fmt.Errorf("%w: network %q: want tcp, tcp4, tcp6 or unix", ErrInvalid, network)
	}
	l, err := net.Listen(network, address)
	if err != nil {
		if _, bad := errors.AsType[*net.AddrError](err); bad {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return nil, fmt.Errorf("conn: %w", err) // errors.Is(err, syscall.EADDRINUSE) and the like
	}
	if ul, ok := l.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // the server's duplicate keeps serving the path
	}
	defer l.Close() // the server serves its own duplicate
	unlink := ""
	if network == "unix" {
		unlink = address
	}
	return s.serve(l, unlink)
}

// Serve serves l, a listener the caller made (a *net.TCPListener or
// *net.UnixListener), through a duplicate of its socket: closing l does
// not stop the server; Server.Close does. Serve returns at once. Shutdown
// and Close close the duplicate as they begin: the socket then stops
// listening, and new connections are refused, unless l (or another
// duplicate of it) is still open. After Shutdown or Close began, Serve
// returns an error matching net.ErrClosed.
func (s *Server) Serve(l net.Listener) error {
	_, err := s.serve(l, "")
	return err
}

func (s *Server) serve(l net.Listener, unlink string) (net.Addr, error) {
	fd, err := dupListener(l)
	if err != nil {
		return nil, err
	}
	ln := &listener{fd: fd, addr: l.Addr(), unlink: unlink}
	// Registered and listed in one critical section: Shutdown and Close,
	// which set closed under the same mutex, find the listener with its
	// handle, or this finds the server closed and registers nothing.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		closeFD(fd)
		return nil, closedError{"server is closed"}
	}
	h, err := s.p.Add(poller.Registration{
		FD:      fd,
		Events:  poller.Readable,
		OnEvent: func(e poller.Event) { s.accept(ln, e) },
	})
	if err != nil {
		closeFD(fd)
		return nil, err
	}
	ln.h = h
	s.listeners = append(s.listeners, ln)
	return ln.addr, nil
}

// closeListeners stops accepting and closes the listening sockets, as
// Shutdown and Close begin: the caller has set s.closed, so no listener
// joins after the copy.
func (s *Server) closeListeners() {
	s.mu.Lock()
	lns := append([]*listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, ln := range lns {
		ln.close(s.p)
	}
}

// close deletes the listener's registration (EPOLL_CTL_DEL before Delete
// returns) and closes its fd; a late accept event finds it closed.
// Idempotent.
func (ln *listener) close(p *poller.Poller) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.closed {
		return
	}
	ln.closed = true
	p.Delete(ln.h) // ErrClosed after the poller's Close: the set is gone already
	closeFD(ln.fd)
	if ln.unlink != "" {
		os.Remove(ln.unlink)
	}
}

// accept accepts a bounded batch of connections. Out of file descriptors
// it pauses the listener (no interest, so no wake-ups) and retries later:
// at once when one of the server's connections is released, else on a
// backoff timer.
func (s *Server) accept(ln *listener, e poller.Event) {
	for range s.opts.AcceptBatch {
		ln.mu.Lock()
		if ln.closed {
			ln.mu.Unlock()
			return
		}
		fd, err := accept(ln.fd)
		ln.mu.Unlock()
		if err != nil {
			switch {
			case isAgain(err):
			case isNoFDs(err):
				s.pauseAccept(ln, e.Handle, err)
			default:
				s.acceptErrors.Add(1) // aborted handshakes and the like
			}
			return
		}
		s.add(fd)
	}
}

func (s *Server) pauseAccept(ln *listener, h poller.Handle, err error) {
	s.acceptPauses.Add(1)
	if s.emfileLogged.CompareAndSwap(false, true) {
		s.opts.Logger.Warn("conn: out of file descriptors; accepting paused, existing connections served, retrying as descriptors free up (reported once; counted in ServerStats.AcceptPauses)",
			"listener", ln.addr.String(), "error", err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ln.paused {
		return
	}
	ln.paused = true
	s.pausedListeners.Add(1)
	ln.delay = min(max(2*ln.delay, 10*time.Millisecond), time.Second)
	s.p.Modify(h, 0)
	s.p.AfterFunc(h, ln.delay, func() { s.resumeAccept(ln) })
}

// resumeAccept lets a paused listener accept again.
func (s *Server) resumeAccept(ln *listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ln.paused {
		return
	}
	ln.paused = false
	s.pausedListeners.Add(-1)
	s.p.Modify(ln.h, poller.Readable)
}

// add registers an accepted connection and runs its OnOpen, or, with
// TLS, starts the timeout of its handshake, whose goroutine its first
// bytes start.
func (s *Server) add(fd int) {
	secure := s.opts.TLS != nil
	c, err := s.register(fd, nil, poller.Readable, nil, s.opts.TLS, true)
	if err != nil {
		if !errors.Is(err, net.ErrClosed) { // else accepted as Shutdown or Close began: refused
			s.acceptErrors.Add(1)
		}
		closeFD(fd)
		return
	}
	s.accepted.Add(1)
	if secure {
		c.mu.Lock()
		if c.state == stOpen {
			s.armHandshakeLocked(c)
		}
		c.mu.Unlock()
		return
	}
	c.startDeadlines()
	c.open.Do(func() { s.openAccepted(c) })
}

// register makes a connection of fd, served by h (nil: the server's
// Handler), and adds it to the poller with the interest set events; dial,
// if not nil, is a pending connect's (or TLS handshake's) result channel.
// With a TLS config the connection is TLS (a client if dial is not nil),
// in its handshake from the start if handshake. Once Shutdown or Close has
// begun it refuses the connection with an error matching net.ErrClosed. On
// error the fd is still the caller's.
func (s *Server) register(fd int, h Handler, events poller.Events, dial chan error, config *tls.Config, handshake bool) (*Conn, error) {
	// A connection joins whole or not at all as far as Shutdown and Close
	// can tell: they wait for those joining (awaitJoins) before they list
	// the live connections, and one that joins after sees them closing.
	// Listed before its registration and handle were in place, it would
	// be finished or cancelled with nothing to modify or delete, and left
	// registered until Shutdown's context ended.
	tok := s.joining.RLock()
	defer s.joining.RUnlock(tok)
	if s.closing.Load() {
		return nil, closedError{"server is closed"}
	}
	if !s.opts.Nagle {
		setNoDelay(fd)
	}
	if s.opts.SendBuffer > 0 {
		setSendBuffer(fd, s.opts.SendBuffer)
	}
	c := &Conn{s: s, fd: fd, at: s.clock()}
	c.setEventsLocked(events) // not yet shared
	if dial != nil || h != nil || config != nil {
		c.connExt = &connExt{dial: dial, h: h}
	}
	if config != nil {
		c.tls = newTLSConn(c, config, dial != nil)
		c.flags.Or(flagTLS)
		if handshake {
			c.flags.Or(flagHandshake)
		}
	}
	if dial != nil {
		c.flags.Or(flagDialing)
	}
	if h != nil {
		c.flags.Or(flagOwnHandler)
	}
	c.waiter.Store(-1)
	s.open.Add(1)
	s.conns.add(c)
	testHookRegister()
	hnd, err := s.p.Add(poller.Registration{
		FD:        fd,
		Events:    events,
		CloseFD:   testHookCloseFD(true),
		OnEvent:   c.onEvent,
		OnRelease: c.onRelease,
	})
	if err != nil {
		s.conns.remove(c)
		s.open.Add(-1)
		return nil, err
	}
	c.setHandle(hnd)
	return c, nil
}

// openAccepted runs OnOpen on the accepting waiter. A panic there must not
// end the listener's registration, as the poller would: the connection
// is reset instead.
func (s *Server) openAccepted(c *Conn) {
	defer func() {
		if v := recover(); v != nil {
			s.opts.Logger.Error("conn: OnOpen panicked; connection reset", "panic", fmt.Sprint(v))
			c.mu.Lock()
			c.setReasonLocked(ReasonError, fmt.Errorf("conn: OnOpen panicked: %v", v))
			c.resetLocked()
			c.mu.Unlock()
		}
	}()
	c.handler().OnOpen(c)
}

// input is what OnData (or OnDrain) of connection c reads on one waiter:
// view, of which off bytes are consumed. A waiter runs one handler at a
// time, so one per waiter is enough, and an idle connection keeps none.
type input struct {
	c    *Conn
	view []byte
	off  int
	_    [24]byte // a cache line each
}

// onEvent and onRelease are the connection's poller callbacks: method
// values, one small allocation each.
func (c *Conn) onEvent(e poller.Event)      { c.s.event(c, e) }
func (c *Conn) onRelease(r poller.Released) { c.s.release(c, r) }

// connList holds a server's live connections, in shards so that waiters
// accepting and closing at once rarely meet on one lock, and intrusive, so
// a connection costs two pointers rather than a map entry.
type connList struct {
	shards [16]struct {
		mu   sync.Mutex
		head *Conn
		_    [48]byte // a cache line each
	}
}

func (l *connList) add(c *Conn) {
	sh := &l.shards[uint(c.fd)%uint(len(l.shards))]
	sh.mu.Lock()
	c.next = sh.head
	if sh.head != nil {
		sh.head.prev = c
	}
	sh.head = c
	sh.mu.Unlock()
}

func (l *connList) remove(c *Conn) {
	sh := &l.shards[uint(c.fd)%uint(len(l.shards))]
	sh.mu.Lock()
	if c.prev != nil {
		c.prev.next = c.next
	} else if sh.head == c {
		sh.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.prev, c.next = nil, nil
	sh.mu.Unlock()
}

// all returns the live connections now.
func (l *connList) all() []*Conn {
	var cs []*Conn
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for c := sh.head; c != nil; c = c.next {
			cs = append(cs, c)
		}
		sh.mu.Unlock()
	}
	return cs
}

// event runs on the connection's waiter.
func (s *Server) event(c *Conn, e poller.Event) {
	c.setHandle(e.Handle)
	if w := int32(e.Waiter); c.waiter.Load() != w {
		c.waiter.Store(w) // rarely: a waiter's connections stay its own
	}
	f := c.flags.Load()
	if f&flagHandshake != 0 {
		s.handshakeEvent(c, e)
		return
	}
	if f&flagDialing != 0 && !s.connected(c, e) {
		return
	}
	c.open.Do(func() { c.handler().OnOpen(c) })
	drained := false
	if e.Events&poller.Writable != 0 {
		drained = s.flush(c)
	}
	if f&flagTLS != 0 {
		s.readTLS(c, e)
	} else if e.Events&(poller.Readable|poller.HangUp|poller.Error|poller.ReadHangUp) != 0 {
		s.read(c, e)
	}
	if f := c.flags.Load(); f&(flagWake|flagWakeDrain) != 0 {
		c.mu.Lock()
		f = c.flags.Load()
		c.flags.And(^uint32(flagWake | flagWakeDrain))
		c.updateLocked()
		c.mu.Unlock()
		s.resumeOffer(c, drained || f&flagWakeDrain != 0, f&flagWake != 0)
	} else if drained || c.flags.Load()&flagFinishing != 0 {
		s.resume(c, drained)
	}
}

// flush writes queued output as the socket takes it; once drained, it
// sends a FIN that is due. It reports whether the queue fell to LowWater
// after a high-water episode.
func (s *Server) flush(c *Conn) (drained bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state >= stEnding || len(c.out) == 0 {
		return false
	}
	n, err := write(c.fd, c.out)
	if n > 0 {
		c.bytesOut += uint64(n)
		c.out = c.out[n:]
		c.wroteLocked(n, true)
		if c.state == stClosing {
			c.flushProgress = c.s.clock()
		}
	}
	if err != nil && !isAgain(err) {
		s.writeErrs.Add(1)
		c.failLocked(err)
		return false
	}
	if len(c.out) == 0 {
		c.out = nil // no output storage while idle
		if c.wshut {
			c.finLocked()
		}
	}
	if c.flags.Load()&flagHigh != 0 && len(c.out) <= s.opts.LowWater {
		c.flags.And(^uint32(flagHigh))
		drained = true
	}
	c.updateLocked()
	return drained
}

// resume runs on the connection's waiter after its queue drained to
// LowWater, and on every event of a finishing connection. It runs OnDrain
// (after a drain), then offers OnData the input it left when Writable told
// it to stop; a finishing connection whose handler has answered all it can
// is closed.
func (s *Server) resume(c *Conn, drained bool) { s.resumeOffer(c, drained, false) }

// resumeOffer is resume; always offers OnData even with no input left
// (Wake).
func (s *Server) resumeOffer(c *Conn, drained, always bool) {
	if d, ok := c.handler().(Drainer); drained && ok && c.live() {
		s.offer(c, nil, d)
	}
	if (len(c.in) > 0 || always) && c.live() {
		s.offer(c, nil, nil)
	}
	if c.flags.Load()&flagTLS != 0 && c.live() {
		s.decrypt(c, int(c.waiter.Load())) // what the tls.Conn holds yet
	}
	c.mu.Lock()
	if c.state == stOpen && c.flags.Load()&(flagFinishing|flagHigh) == flagFinishing && !c.heldLocked() {
		// Not held back by the queue or by work elsewhere (Hold), so
		// what is left is an incomplete request, which no more input
		// will complete.
		c.closeLocked()
	}
	c.mu.Unlock()
}

// live reports whether the handler may still be offered input: the
// connection is open and not above HighWater.
func (c *Conn) live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stOpen && c.flags.Load()&flagHigh == 0
}

// read reads once into the waiter's buffer and hands the data to OnData;
// level-triggered, the next event reads more. It keeps only what OnData
// left unconsumed.
func (s *Server) read(c *Conn, e poller.Event) {
	f := c.flags.Load()
	reading := f&flagReadable != 0 || e.Events&(poller.HangUp|poller.Error) != 0
	if f&flagEnding != 0 || f&(flagFinishing|flagReadFinishing) == flagFinishing || !reading {
		return // ending or finishing (unless ReadWhileFinishing): nothing more is delivered
	}
	state := uint8(stOpen)
	if f&flagClosing != 0 {
		state = stClosing
	}
	buf := s.readBuf(e.Waiter)
	n, err := read(c.fd, buf)
	if e.Events&(poller.HangUp|poller.Error) != 0 {
		// The final event: read all that arrived before the hang-up
		// now, as no event follows.
		for n > 0 && err == nil && state == stOpen {
			c.bytesIn.Add(uint64(n))
			s.deliver(c, buf[:n])
			c.mu.Lock()
			state = c.state // OnData may have closed it
			c.mu.Unlock()
			n, err = read(c.fd, buf)
		}
	}
	switch {
	case n > 0:
		c.bytesIn.Add(uint64(n))
		if c.flags.Load()&flagDeadlines != 0 {
			c.readProgress()
		}
		if state != stOpen {
			return // draining the peer after our FIN (or ending): input is dropped
		}
		s.deliver(c, buf[:n])
	case err == nil: // EOF: the peer's FIN
		s.peerClosed(c)
	case isAgain(err):
	default:
		s.readErrs.Add(1)
		c.mu.Lock()
		c.failLocked(err)
		c.mu.Unlock()
	}
}

// deliver offers data, after any remainder, to OnData, and keeps what it
// leaves.
func (s *Server) deliver(c *Conn, data []byte) { s.offer(c, data, nil) }

// offer runs OnData (or d's OnDrain, if d is not nil) with the remainder
// followed by data as the connection's input, and keeps what it leaves
// unconsumed.
func (s *Server) offer(c *Conn, data []byte, d Drainer) {
	in := &s.inputs[c.waiter.Load()]
	fresh := len(c.in) == 0
	switch {
	case fresh:
		in.view = data
	case len(data) > 0:
		c.in = append(c.in, data...)
		in.view = c.in
	default:
		in.view = c.in
	}
	in.c, in.off = c, 0
	if d != nil {
		d.OnDrain(c)
	} else {
		c.handler().OnData(c)
	}
	rest, consumed := in.view[in.off:], in.off > 0
	in.c, in.view, in.off = nil, nil, 0
	if consumed && c.flags.Load()&flagDeadlines != 0 {
		c.consumed()
	}
	switch {
	case !fresh && !consumed && len(rest) <= s.opts.MaxBuffered:
		// Nothing consumed (a command still incomplete): c.in already
		// holds exactly the remainder; copying it onto itself for every
		// read would cost the square of a large value's size.
	case len(rest) == 0:
		c.in = nil // nothing kept between events
	case len(rest) > s.opts.MaxBuffered:
		s.inboundOverflow.Add(1)
		c.in = nil
		c.mu.Lock()
		c.setReasonLocked(ReasonError, ErrInboundFull)
		c.endLocked()
		c.mu.Unlock()
	case fresh || cap(c.in) > 2*len(rest)+4096:
		// The waiter's buffer is reused; a large one is not kept for a
		// small remainder.
		c.in = append(make([]byte, 0, len(rest)), rest...)
	default:
		c.in = append(c.in[:0], rest...)
	}
}

// peerClosed handles the peer's FIN: everything before it was offered to
// OnData. Requests it left because Writable said so are still answered:
// the connection finishes (resume) before it closes.
func (s *Server) peerClosed(c *Conn) {
	hc, _ := c.handler().(HalfCloser)
	c.mu.Lock()
	c.eof = true
	switch c.state {
	case stClosing:
		c.closingEOFLocked()
		c.mu.Unlock()
		return
	case stOpen:
		if hc == nil {
			if c.flags.Load()&flagHigh != 0 && len(c.in) > 0 || c.heldLocked() {
				c.finishLocked(ReasonPeerClosed)
			} else {
				c.setReasonLocked(ReasonPeerClosed, nil)
				c.closeLocked()
			}
			c.mu.Unlock()
			return
		}
	}
	c.updateLocked() // stop reading: EOF stays readable
	c.mu.Unlock()
	if hc != nil {
		hc.OnReadEOF(c)
	}
}

// release is the connection's poller OnRelease: no event runs or will run
// for it. The connection is marked released under its mutex before the
// poller closes the fd, so a Write that holds the mutex never reaches a
// closed, possibly reused, fd number.
func (s *Server) release(c *Conn, r poller.Released) {
	c.waiter.Store(int32(r.Waiter))
	c.mu.Lock()
	if c.connExt != nil && c.dial != nil {
		c.cancelDialLocked(closedError{"server is closed"})
	}
	failedDial := c.connExt != nil && c.dialFailed
	if c.flags.Load()&flagHandshake != 0 {
		// Never opened: OnClose says why, and only it runs.
		c.abortHandshakeLocked(closedError{"server is closed"})
		if !c.reasonSet || c.reason != uint8(ReasonHandshake) {
			c.reason, c.reasonSet = uint8(ReasonHandshake), true
			if c.errLocked() == nil {
				c.setErrLocked(closedError{"ended in its TLS handshake"})
			}
		}
	}
	c.state = stReleased
	c.flags.Or(flagNoWrite | flagClosing | flagEnding)
	if len(c.out) > 0 {
		s.lostOutput.Add(uint64(len(c.out)))
	}
	c.out, c.in = nil, nil
	if !c.reasonSet {
		switch r.Reason {
		case poller.Closed:
			c.reason = uint8(ReasonShutdown)
		case poller.Panicked:
			c.reason = uint8(ReasonError)
		default: // hung up
			c.reason = uint8(ReasonReset)
			if c.eof {
				c.reason = uint8(ReasonPeerClosed)
			}
		}
		c.reasonSet = true
	}
	reason, err := Reason(c.reason), c.errLocked()
	c.mu.Unlock()
	s.conns.remove(c)
	s.open.Add(-1)
	s.resumeAll()
	if failedDial {
		return // never opened: no handler method runs for it
	}
	s.closedBy[reason].Add(1)
	if reason != ReasonHandshake {
		// OnOpen comes first: a TLS connection that ended between its
		// handshake and its first event has not had it yet.
		c.open.Do(func() { c.handler().OnOpen(c) })
	}
	c.handler().OnClose(c, reason, err)
}

// resumeAll lets paused listeners accept again: a descriptor was freed.
func (s *Server) resumeAll() {
	if s.pausedListeners.Load() == 0 {
		return
	}
	s.mu.Lock()
	lns := append([]*listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, ln := range lns {
		s.resumeAccept(ln)
	}
}

// Close closes the server at once: listeners close, every connection is
// reset (OnClose with ReasonShutdown, or the reason it was already
// ending for), and the poller stops. A connection that arrives as Close
// begins is reset with the others, or refused before any handler method
// runs for it. It is idempotent and safe from any goroutine; from a
// handler it returns without waiting.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.awaitJoins()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeListeners()
	for _, c := range s.conns.all() {
		c.mu.Lock()
		if c.state < stEnding {
			c.setReasonLocked(ReasonShutdown, nil)
			if c.flags.Load()&flagHandshake == 0 { // one in its handshake was never the handler's
				s.closeForced.Add(1)
			}
			// Reset now, not when the poller closes: a handler still
			// running (writing a large reply, waiting in Flush) sees
			// its writes refused and returns, which the poller's
			// Close waits for.
			c.resetLocked()
		}
		c.mu.Unlock()
	}
	return s.p.Close()
}

// Done returns a channel closed once Close has finished.
func (s *Server) Done() <-chan struct{} { return s.p.Done() }

// ServerStats are a server's counters.
type ServerStats struct {
	Open         int64             `json:"open"`     // connections not yet closed
	Accepted     int64             `json:"accepted"` // since NewServer
	Closed       map[string]uint64 `json:"closed"`   // by Reason
	AcceptPauses uint64            `json:"accept_pauses"`
	AcceptErrors uint64            `json:"accept_errors"`
	LostOutput   uint64            `json:"lost_output"` // queued bytes dropped by Abort, resets and timeouts
	Timeouts     uint64            `json:"timeouts"`    // deadlines that expired
	TLS          TLSStats          `json:"tls"`
}

// Stats returns the server's counters: a few atomic loads. Poller().Stats()
// has the per-waiter table.
func (s *Server) Stats() ServerStats {
	st := ServerStats{
		Open:         s.open.Load(),
		Accepted:     s.accepted.Load(),
		Closed:       map[string]uint64{},
		AcceptPauses: s.acceptPauses.Load(),
		AcceptErrors: s.acceptErrors.Load(),
		LostOutput:   s.lostOutput.Load(),
		Timeouts:     s.timeouts.Load(),
		TLS:          s.tlsStats(),
	}
	for r := range numReasons {
		if n := s.closedBy[r].Load(); n > 0 {
			st.Closed[r.String()] = n
		}
	}
	return st
}

// readBuf returns waiter w's read buffer, made on its first use. Only that
// waiter calls it.
func (s *Server) readBuf(w int) []byte {
	if s.bufs[w] == nil {
		s.bufs[w] = make([]byte, s.opts.ReadBuffer)
	}
	return s.bufs[w]
}

// Test hooks (export_test.go sets them): testHookRegister runs as a
// connection is about to be registered, and testHookConnected as a pending
// connect's first event is looked at, so that a test can hold a joining
// connection there while Shutdown or Close begins.
var testHookRegister, testHookConnected = func() {}, func() {}
