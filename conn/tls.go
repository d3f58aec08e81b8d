package conn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gracepoll/gracepoll/poller"
)

// TLS is crypto/tls itself, driven without a goroutine per connection
// (docs/design.md, "TLS on the unmodified crypto/tls"). A tls.Conn reads
// and writes through a transport of conn's (tlsConn) instead of a socket:
//
//	handshake  on a goroutine of its own, started when the first bytes
//	           arrive: its reads take the socket directly and, when it is
//	           empty, wait (holding no worker) for the waiter to report it
//	           readable; its writes go to the connection's queue. At most
//	           HandshakeWorkers of them compute at once. The handshake's
//	           error is sticky in crypto/tls, so it could not be driven
//	           from events.
//	records    after the handshake, on the connection's waiter: the waiter
//	           reads ciphertext into its buffer and calls tls.Conn.Read,
//	           whose transport hands that ciphertext over and then fails
//	           with a temporary error, which crypto/tls does not remember
//	           (a partial record waits in its input for more). Writes are
//	           tls.Conn.Write under the connection's mutex, whose records
//	           are gathered and queued as one write.
//
// Every call into the tls.Conn in the record phase holds Conn.mu, so the
// order of locks is always Conn.mu, then crypto/tls's own: a Read that
// must write (a KeyUpdate reply, an alert) writes under the mutex it
// already holds, and records reach the queue in sequence-number order.

// Errors of TLS connections.
var (
	// ErrHandshakeTimeout reports a TLS handshake that did not complete
	// within Options.HandshakeTimeout.
	ErrHandshakeTimeout = errors.New("conn: TLS handshake timed out")
	// ErrTooManyHandshakes reports a connection reset as its handshake
	// began: Options.MaxHandshakes were in progress.
	ErrTooManyHandshakes = errors.New("conn: too many TLS handshakes in progress")
)

// TLSStats are a server's TLS handshake counters. A handshake starts when
// its connection is accepted (or a DialTLS's connect completes) and ends
// once, in exactly one of Handshakes, Failed, TimedOut and Refused; until
// then it is in progress. So every reading, even under load, has
//
//	Started = Handshakes + (the sum of Failed) + TimedOut + Refused + InProgress
type TLSStats struct {
	Started    uint64 `json:"started"`    // accepted, or dialled and connected
	Handshakes uint64 `json:"handshakes"` // completed
	// Failed counts handshakes that failed, by cause: "eof" (the peer
	// closed), "reset", "not-tls" (the first bytes were not a TLS
	// record), "remote-alert" (the peer refused, such as our
	// certificate), "certificate" (the peer's certificate was refused),
	// "tls" (any other crypto/tls error), "cancelled" (Shutdown, Close, a
	// Dial's context).
	Failed   map[string]uint64 `json:"failed"`
	TimedOut uint64            `json:"timed_out"` // Options.HandshakeTimeout expired
	// Refused counts connections reset as their first bytes came, with
	// Options.MaxHandshakes active (ErrTooManyHandshakes).
	Refused uint64 `json:"refused"`
	// InProgress counts handshakes started and not ended, connections
	// that have sent nothing yet included.
	InProgress int64 `json:"in_progress"`
	// Active counts the handshakes that have a goroutine: those in
	// progress whose first bytes arrived, and dials; Options.MaxHandshakes
	// bounds the accepted ones. A handshake that ended by its timeout or
	// the connection's end counts here until its goroutine returns.
	Active int64 `json:"active"`
	// P50 and P99 are the handshake latency, from accept (or the
	// connect's completion) to the end of the handshake, over the last
	// 1,024 handshakes.
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
}

// Handshake failure causes, indexes of tlsServer.failed.
const (
	causeEOF = iota
	causeReset
	causeNotTLS
	causeRemoteAlert
	causeCertificate
	causeTLS
	causeCancelled
	numCauses
)

var causeNames = [numCauses]string{"eof", "reset", "not-tls", "remote-alert", "certificate", "tls", "cancelled"}

// tlsServer is a server's TLS state.
type tlsServer struct {
	workers  chan struct{} // a token per handshake computing now
	active   atomic.Int64  // handshakes with a goroutine: what MaxHandshakes bounds
	started  atomic.Uint64 // counted before any end of the same handshake (tlsStats)
	done     atomic.Uint64
	timedOut atomic.Uint64
	refused  atomic.Uint64
	failed   [numCauses]atomic.Uint64
	latency  latencyRing

	once  sync.Once
	plain [][]byte // per waiter: plaintext that OnData reads, decrypted
}

// initTLS readies s for TLS connections: made before the first one is
// registered, so its waiters see it.
func (s *Server) initTLS() {
	s.tls.once.Do(func() {
		s.tls.workers = make(chan struct{}, s.opts.HandshakeWorkers)
		s.tls.plain = make([][]byte, s.p.MaxWaiters()) // made on first use, as Server.bufs
	})
}

// admit counts one more active handshake, unless max are.
func (t *tlsServer) admit(max int) bool {
	for {
		n := t.active.Load()
		if n >= int64(max) {
			return false
		}
		if t.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// tlsConn is a TLS connection's crypto/tls state and its transport: the
// net.Conn the tls.Conn reads and writes.
type tlsConn struct {
	c      *Conn
	tc     *tls.Conn
	client bool // a DialTLS's

	// The record phase, guarded by Conn.mu.
	in      []byte  // ciphertext read, not yet taken by tc
	ownIn   bool    // in is the connection's, not a waiter's buffer
	sockErr error   // the socket's EOF or read error, reported once in is empty
	cork    *[]byte // records of the Write in progress, sent as one
	pending bool    // tc may hold input not yet delivered: decrypt again

	// hs is the handshake in progress; nil once it completed. Set before
	// the connection is registered; read and cleared under Conn.mu.
	hs *handshake
}

// handshake is a TLS handshake in progress.
type handshake struct {
	start    int64         // Server.clock at accept or connect
	ready    chan struct{} // the waiter saw the socket readable
	abort    chan struct{} // closed when the connection ends
	aborted  bool          // under Conn.mu
	why      error         // why it was aborted
	started  bool          // the goroutine runs; under Conn.mu
	finished bool          // the goroutine is done with it; under Conn.mu
	wantRead bool          // the goroutine waits for input: Readable; under Conn.mu
	begun    bool          // accepted, or a dial past its connect: its end is counted; under Conn.mu
	counted  bool          // in TLSStats.Started; under Conn.mu
	token    bool          // holds a worker; the goroutine's own
	stop     func() bool   // the timeout
}

// newTLSConn makes c a TLS connection: client (a Dial) or server.
func newTLSConn(c *Conn, config *tls.Config, client bool) *tlsConn {
	t := &tlsConn{c: c, client: client, hs: &handshake{
		start: c.s.clock(), ready: make(chan struct{}, 1), abort: make(chan struct{}),
		wantRead: !client, // a server starts once the ClientHello arrives
		begun:    !client, // an accepted connection's handshake begins at accept
	}}
	if client {
		t.tc = tls.Client(t, config)
	} else {
		t.tc = tls.Server(t, config)
	}
	return t
}

// ConnectionState returns the negotiated TLS parameters (version, cipher
// suite, ALPN protocol, server name, the peer's certificates) and true,
// or false for a connection without TLS. It is complete from OnOpen on,
// and readable in OnClose; in the OnClose of a failed handshake
// (ReasonHandshake) it has what was negotiated before the failure.
func (c *Conn) ConnectionState() (tls.ConnectionState, bool) {
	if c.flags.Load()&flagTLS == 0 {
		return tls.ConnectionState{}, false
	}
	return c.connExt.tls.tc.ConnectionState(), true
}

// DialTLS is Dial followed by a TLS handshake as a client with config
// (its ServerName, if empty, is the address's host): the handshake runs
// off the waiters, and ctx, Options.HandshakeTimeout, Shutdown and Close
// cancel it as they cancel the connect. It returns once the handshake is
// complete; OnOpen follows on the connection's waiter. A failed handshake
// runs no handler method and leaves no fd behind.
func (s *Server) DialTLS(ctx context.Context, network, address string, config *tls.Config, h Handler) (*Conn, error) {
	if config == nil {
		return nil, fmt.Errorf("%w: nil tls.Config", ErrInvalid)
	}
	if config.ServerName == "" && network != "unix" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		config = config.Clone()
		config.ServerName = host
	}
	s.initTLS()
	return s.dial(ctx, network, address, h, config)
}

// armHandshakeLocked begins c's handshake: its timeout starts. The
// caller holds mu. An accepted connection's handshake may have begun, even
// ended, on another waiter before its accept could arm it.
func (s *Server) armHandshakeLocked(c *Conn) {
	hs := c.tls.hs
	if hs == nil || hs.finished || hs.aborted {
		return
	}
	hs.begun = true
	s.tls.startedLocked(hs)
	if c.connExt.dial != nil {
		hs.start = s.clock() // from the connect's completion; accepted: from newTLSConn
	}
	if stop, err := s.p.AfterFunc(c.handle(), s.opts.HandshakeTimeout, c.handshakeTimedOut); err == nil {
		hs.stop = stop
	}
}

// startHandshakeLocked starts the goroutine of c's handshake, counted in
// progress; the caller holds mu. An accepted connection is reset instead
// if MaxHandshakes are active: it reports whether it started.
func (s *Server) startHandshakeLocked(c *Conn) bool {
	hs := c.tls.hs
	s.tls.startedLocked(hs) // its first event may come before its accept armed it
	if c.connExt.dial != nil {
		s.tls.active.Add(1) // the caller's own dial: not refused
	} else if !s.tls.admit(s.opts.MaxHandshakes) {
		s.tls.refused.Add(1)
		c.abortHandshakeLocked(ErrTooManyHandshakes) // counted: not cancelled too
		c.setReasonLocked(ReasonHandshake, ErrTooManyHandshakes)
		c.resetLocked()
		return false
	}
	hs.started = true
	go s.handshake(c, hs)
	return true
}

// handshakeEvent runs on the waiter for an event of a connection in its
// handshake: it flushes the handshake's output and reports input to the
// handshake's goroutine, starting it on the first.
func (s *Server) handshakeEvent(c *Conn, e poller.Event) {
	if e.Events&poller.Writable != 0 {
		s.flush(c)
	}
	if e.Events&(poller.Readable|poller.HangUp|poller.Error|poller.ReadHangUp) == 0 {
		return
	}
	c.mu.Lock()
	hs := c.tls.hs
	if hs == nil || c.state >= stEnding {
		c.mu.Unlock()
		return
	}
	if c.state == stClosing {
		s.refusedEvent(c, e.Waiter)
		c.mu.Unlock()
		return
	}
	hs.wantRead = false
	c.updateLocked() // no Readable until the goroutine finds the socket empty
	woke := true
	if !hs.started {
		woke = s.startHandshakeLocked(c)
	} else {
		select {
		case hs.ready <- struct{}{}:
		default:
			woke = false
		}
	}
	c.mu.Unlock()
	if woke {
		// Let the handshake run now, on this P. Otherwise it waits in
		// this P's run queue until sysmon takes the P from the waiter
		// blocked in epoll_wait (20 µs or more) and wakes a thread for
		// it: measured, that made a handshake cost 1.2x the CPU of one
		// on Go's netpoller; yielding here, 0.9x.
		runtime.Gosched()
	}
}

// handshake runs c's TLS handshake, then switches the connection to the
// record phase, where OnOpen runs on its waiter; or ends it.
func (s *Server) handshake(c *Conn, hs *handshake) {
	t := c.tls
	err := s.work(hs)
	if err == nil {
		err = t.tc.Handshake()
	}
	s.idle(hs)
	s.tls.active.Add(-1)
	reply := s.notTLSReply(t, err)
	c.mu.Lock()
	hs.finished = true
	if hs.stop != nil {
		hs.stop()
	}
	opened := false
	switch {
	case hs.aborted:
		// Ended by its timeout, Shutdown, Close or a cancelled Dial:
		// counted there.
	case err != nil:
		s.tls.failed[failCause(err)].Add(1)
		err = fmt.Errorf("conn: TLS handshake: %w", err)
		if c.connExt.dial != nil {
			c.cancelDialLocked(err)
			break
		}
		c.setReasonLocked(ReasonHandshake, err)
		if len(reply) > 0 {
			c.refuseLocked(reply)
			break
		}
		c.endLocked() // an alert crypto/tls sent is on its way
	default:
		s.tls.done.Add(1)
		s.tls.latency.add(time.Duration(s.clock() - hs.start))
		t.hs = nil
		t.pending = true // the handshake's last read may have taken application data
		c.flags.And(^uint32(flagHandshake | flagDialing))
		c.updateLocked() // Readable, and Writable for a first event: OnOpen, then what is pending
		if c.connExt.dial != nil {
			c.dial <- nil
			c.dial = nil
		}
		opened = true
	}
	c.mu.Unlock()
	if opened {
		c.startDeadlines()
	}
}

// notTLSReply is Options.NotTLS's answer to an accepted connection whose
// handshake failed on a first record that is not a TLS handshake's:
// crypto/tls reports that one, alone, with a RecordHeaderError that
// carries the connection.
func (s *Server) notTLSReply(t *tlsConn, err error) []byte {
	var rh tls.RecordHeaderError
	if err == nil || t.client || s.opts.NotTLS == nil || !errors.As(err, &rh) || rh.Conn == nil {
		return nil
	}
	return s.opts.NotTLS(rh.RecordHeader)
}

// refuseLocked sends reply, in plaintext, to a connection whose first
// record was not TLS, and closes it gracefully (Close). It stays in its
// handshake, never the handler's: OnClose, with ReasonHandshake, is the
// only method that runs for it. Until the peer's FIN its input is read
// and dropped (refusedEvent), as input left unread would make the close
// send a reset, which can destroy the reply before the peer reads it. The
// caller holds mu.
func (c *Conn) refuseLocked(reply []byte) {
	if _, err := c.sendLocked(reply, nil, len(reply)); err != nil {
		return // the socket failed: ended
	}
	c.tls.hs.wantRead = true // what updateLocked asks Readable for in a handshake
	c.closeLocked()
}

// refusedEvent reads and drops the input of a connection refused by
// refuseLocked, up to the peer's FIN. The caller holds mu.
func (s *Server) refusedEvent(c *Conn, waiter int) {
	buf := s.readBuf(waiter)
	for range 16 { // then the next event: Readable is level-triggered
		n, err := read(c.fd, buf)
		switch {
		case n > 0:
			c.bytesIn.Add(uint64(n))
			continue
		case err == nil:
			c.tls.hs.wantRead = false // EOF stays readable
			c.closingEOFLocked()
		case isAgain(err):
		default:
			c.failLocked(err)
		}
		return
	}
}

// abortHandshakeLocked ends c's handshake, if it is in one: its goroutine
// stops waiting and fails. The caller holds mu.
func (c *Conn) abortHandshakeLocked(why error) {
	if c.flags.Load()&flagTLS == 0 {
		return
	}
	hs := c.tls.hs
	if hs == nil || hs.aborted || hs.finished {
		return
	}
	hs.aborted, hs.why = true, why
	close(hs.abort)
	if !hs.begun {
		return // a dial still connecting: no handshake yet
	}
	c.s.tls.startedLocked(hs) // ended before its first event or its accept
	if why != ErrHandshakeTimeout && why != ErrTooManyHandshakes {
		c.s.tls.failed[causeCancelled].Add(1) // timeouts and refusals are counted where they happen
	}
}

// startedLocked counts hs in TLSStats.Started, once, and before any of its
// ends is counted. The caller holds the connection's mutex.
func (t *tlsServer) startedLocked(hs *handshake) {
	if !hs.counted {
		hs.counted = true
		t.started.Add(1)
	}
}

// handshakeTimedOut runs on the waiter when a handshake has taken
// Options.HandshakeTimeout: the connection is reset.
func (c *Conn) handshakeTimedOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flags.Load()&flagHandshake == 0 || c.state != stOpen { // closing: refused, under FlushTimeout
		return
	}
	c.s.tls.timedOut.Add(1)
	c.abortHandshakeLocked(ErrHandshakeTimeout)
	if c.connExt.dial != nil {
		c.cancelDialLocked(ErrHandshakeTimeout)
		return
	}
	c.setReasonLocked(ReasonHandshake, ErrHandshakeTimeout)
	c.resetLocked()
}

// work takes a handshake worker, unless hs holds one; it waits until one
// is free or the handshake is aborted.
func (s *Server) work(hs *handshake) error {
	if hs.token {
		return nil
	}
	select {
	case s.tls.workers <- struct{}{}:
		hs.token = true
		return nil
	case <-hs.abort:
		return hs.why
	}
}

// idle gives back hs's worker, if it holds one.
func (s *Server) idle(hs *handshake) {
	if hs.token {
		hs.token = false
		<-s.tls.workers
	}
}

// failCause classifies a handshake's error.
func failCause(err error) int {
	var rh tls.RecordHeaderError
	var op *net.OpError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return causeEOF
	case isReset(err):
		return causeReset
	case errors.As(err, &rh):
		return causeNotTLS
	case errors.As(err, &op) && op.Op == "remote error":
		return causeRemoteAlert
	case errors.As(err, &cv), errors.As(err, &ua),
		strings.Contains(err.Error(), "certificate"): // a missing one has no type of its own
		return causeCertificate
	}
	return causeTLS
}

// Read is the transport's: in the handshake it reads the socket, waiting
// for the waiter's report while it is empty; in the record phase (the
// caller holds Conn.mu) it hands over the ciphertext the waiter read.
func (t *tlsConn) Read(p []byte) (int, error) {
	if t.hs != nil {
		return t.handshakeRead(p)
	}
	if len(t.in) == 0 {
		if t.sockErr != nil {
			return 0, t.sockErr
		}
		return 0, errWouldBlock
	}
	n := copy(p, t.in)
	t.in = t.in[n:]
	if len(t.in) == 0 {
		t.in, t.ownIn = nil, false
	}
	return n, nil
}

// handshakeRead reads the socket for the handshake's goroutine. While it
// is empty the goroutine gives back its worker, asks for Readable and
// waits for the waiter to see it (or for the end of the connection).
func (t *tlsConn) handshakeRead(p []byte) (int, error) {
	c, hs := t.c, t.hs
	for {
		c.mu.Lock()
		if hs.aborted {
			c.mu.Unlock()
			return 0, hs.why
		}
		if c.state >= stEnding {
			c.mu.Unlock()
			return 0, closedError{"is closed"}
		}
		n, err := read(c.fd, p)
		if n > 0 {
			c.bytesIn.Add(uint64(n))
			c.mu.Unlock()
			if err := c.s.work(hs); err != nil {
				return 0, err
			}
			return n, nil
		}
		if err == nil {
			c.mu.Unlock()
			return 0, io.EOF
		}
		if !isAgain(err) {
			c.mu.Unlock()
			return 0, err
		}
		hs.wantRead = true
		c.updateLocked()
		c.mu.Unlock()
		c.s.idle(hs)
		select {
		case <-hs.ready:
		case <-hs.abort:
		}
	}
}

// Write is the transport's: records go to the connection's queue, in the
// order crypto/tls writes them. In the record phase the caller holds
// Conn.mu; the handshake's goroutine takes it here.
func (t *tlsConn) Write(p []byte) (int, error) {
	c := t.c
	if t.hs != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.state >= stEnding {
			return 0, closedError{"is closed"}
		}
	}
	if t.cork != nil {
		*t.cork = append(*t.cork, p...)
		return len(p), nil
	}
	return c.sendLocked(p, nil, len(p))
}

// Close is the transport's; crypto/tls calls it only from methods conn
// does not use (tls.Conn.Close, a cancelled HandshakeContext).
func (t *tlsConn) Close() error { return nil }

// LocalAddr is the transport's.
func (t *tlsConn) LocalAddr() net.Addr { return sockName(t.c.fd) }

// RemoteAddr is the transport's.
func (t *tlsConn) RemoteAddr() net.Addr { return peerName(t.c.fd) }

// SetDeadline and the like are the transport's: crypto/tls sets a write
// deadline around close_notify, which never blocks here.
func (t *tlsConn) SetDeadline(time.Time) error      { return nil }
func (t *tlsConn) SetReadDeadline(time.Time) error  { return nil }
func (t *tlsConn) SetWriteDeadline(time.Time) error { return nil }

// errWouldBlock is the record phase transport's error once the ciphertext
// read is all taken: temporary, so crypto/tls does not keep it.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "conn: no more ciphertext buffered" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// tlsWriteLocked encrypts b (or bufs) and queues its records as one
// write. The caller holds mu and has checked that the connection takes
// writes.
func (c *Conn) tlsWriteLocked(b []byte, bufs [][]byte, total int) (int, error) {
	t := c.tls
	if t.hs != nil {
		return 0, closedError{"is in its TLS handshake"}
	}
	if bufs != nil && total <= maxCoalesce {
		// Small pieces make one record, not one each.
		plain := getBuf()
		defer putBuf(plain)
		*plain = appendAll((*plain)[:0], nil, bufs)
		b, bufs = *plain, nil
	}
	if bufs != nil || total > oneRecord {
		// Several records: gathered, and sent as one write.
		t.cork = getBuf()
	}
	var err error
	if bufs == nil {
		_, err = t.tc.Write(b)
	} else {
		for _, x := range bufs {
			if _, err = t.tc.Write(x); err != nil {
				break
			}
		}
	}
	if cork := t.cork; cork != nil {
		t.cork = nil
		var serr error
		if len(*cork) > 0 {
			_, serr = c.sendLocked(*cork, nil, len(*cork))
		}
		putBuf(cork)
		if serr != nil {
			return 0, serr
		}
	}
	if err != nil {
		c.setReasonLocked(ReasonError, err)
		c.endLocked()
		return 0, err
	}
	return total, nil
}

// maxCoalesce is the most a Writev copies into one record.
const maxCoalesce = 16 << 10

// oneRecord is a size crypto/tls always writes as one record: less than
// its smallest dynamic record size (a TCP segment's worth, about 1,200
// bytes, less the record's overhead).
const oneRecord = 1000

// bufPool holds the scratch buffers of TLS writes.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func getBuf() *[]byte { b := bufPool.Get().(*[]byte); *b = (*b)[:0]; return b }

func putBuf(b *[]byte) {
	if cap(*b) <= 256<<10 { // a huge one is not kept for small writes
		bufPool.Put(b)
	}
}

// closeNotifyLocked sends close_notify ahead of the FIN, once the
// handshake is complete. The caller holds mu.
func (c *Conn) closeNotifyLocked() {
	if c.flags.Load()&flagTLS == 0 || c.tls.hs != nil {
		return
	}
	c.tls.tc.CloseWrite() // an error here is the socket's: the close reports it
}

// readTLS is read for a TLS connection in the record phase, on its
// waiter: it reads ciphertext as read does, then decrypts and delivers it.
func (s *Server) readTLS(c *Conn, e poller.Event) {
	f := c.flags.Load()
	if f&flagEnding != 0 {
		return
	}
	hup := e.Events&(poller.HangUp|poller.Error) != 0
	sock := e.Events&(poller.Readable|poller.HangUp|poller.Error|poller.ReadHangUp) != 0 &&
		(f&flagReadable != 0 || hup) && f&(flagFinishing|flagReadFinishing) != flagFinishing
	t := c.tls
	c.mu.Lock()
	if c.state >= stEnding {
		c.mu.Unlock()
		return
	}
	if sock && t.sockErr == nil {
		buf := s.readBuf(e.Waiter)
		for {
			n, err := read(c.fd, buf)
			if n > 0 {
				c.bytesIn.Add(uint64(n))
				if len(t.in) == 0 && !hup {
					t.in, t.ownIn = buf[:n], false
				} else {
					t.in, t.ownIn = append(t.own(), buf[:n]...), true
				}
			}
			switch {
			case n > 0 && hup:
				continue // the final event: read all that arrived
			case n > 0:
			case err == nil:
				t.sockErr = io.EOF
			case isAgain(err):
			default:
				t.sockErr = err
			}
			break
		}
		if f&flagDeadlines != 0 {
			c.mu.Unlock()
			c.readProgress()
			c.mu.Lock()
		}
	}
	if c.state == stClosing {
		// Draining the peer after our close_notify: input is dropped.
		// Its FIN, read now or while the connection was open (with
		// records not yet decrypted then), ends reading only: the
		// queue is still flushed.
		t.in, t.ownIn = nil, false
		switch {
		case t.sockErr == nil || c.eof:
		case t.sockErr == io.EOF:
			c.closingEOFLocked()
		default:
			s.readErrs.Add(1)
			c.failLocked(t.sockErr)
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	s.decrypt(c, e.Waiter)
}

// own returns t.in as the connection's own storage, copying it out of a
// waiter's buffer. The caller holds mu.
func (t *tlsConn) own() []byte {
	if t.ownIn || len(t.in) == 0 {
		return t.in
	}
	return append(make([]byte, 0, len(t.in)), t.in...)
}

// decrypt runs tls.Conn.Read over the ciphertext read, and delivers the
// plaintext to OnData in chunks of up to the waiter's plaintext buffer,
// while the connection is open, reading and not above HighWater. What it
// leaves stays in the tls.Conn and in t.in (pending), and the connection
// is decrypted again when it can go on (resume, or the Writable event
// updateLocked asks for).
func (s *Server) decrypt(c *Conn, waiter int) {
	t := c.tls
	if s.tls.plain[waiter] == nil {
		s.tls.plain[waiter] = make([]byte, s.opts.ReadBuffer)
	}
	plain := s.tls.plain[waiter]
	filled := 0
	var end error
	c.mu.Lock()
	if c.eof || len(t.in) == 0 && t.sockErr == nil && !t.pending {
		// Nothing new: a partial record waits for more, and crypto/tls
		// would only repeat an end already reported.
		c.mu.Unlock()
		return
	}
	for {
		if c.state != stOpen || c.paused || c.flags.Load()&flagHigh != 0 {
			t.pending = true
			break
		}
		n, err := t.tc.Read(plain[filled:])
		filled += n
		if err == nil && filled < len(plain) {
			continue
		}
		if filled > 0 {
			c.mu.Unlock()
			s.deliver(c, plain[:filled])
			filled = 0
			c.mu.Lock()
		}
		if err == nil {
			continue
		}
		t.pending = false
		if err != errWouldBlock {
			end = err
		}
		break
	}
	if len(t.in) > 0 && !t.ownIn {
		t.in, t.ownIn = t.own(), true // the waiter's buffer is reused
	}
	c.updateLocked()
	c.mu.Unlock()
	switch {
	case end == nil:
	case errors.Is(end, io.EOF): // close_notify, or the socket's FIN at a record's end
		s.peerClosed(c)
	default:
		s.readErrs.Add(1)
		c.mu.Lock()
		c.failLocked(end)
		c.mu.Unlock()
	}
}

// tlsPendingLocked reports whether a TLS connection has input it
// could deliver now: updateLocked then asks for a Writable event to run
// decrypt.
func (c *Conn) tlsPendingLocked() bool {
	return c.flags.Load()&(flagTLS|flagHandshake|flagHigh) == flagTLS &&
		c.state == stOpen && !c.paused && c.tls.pending
}

// latencyRing keeps the last 1,024 latencies for their quantiles.
type latencyRing struct {
	mu sync.Mutex
	xs [1024]time.Duration
	n  int
}

func (r *latencyRing) add(d time.Duration) {
	r.mu.Lock()
	r.xs[r.n%len(r.xs)] = d
	r.n++
	r.mu.Unlock()
}

// quantiles returns the p50 and p99 of what the ring holds.
func (r *latencyRing) quantiles() (p50, p99 time.Duration) {
	r.mu.Lock()
	xs := append([]time.Duration(nil), r.xs[:min(r.n, len(r.xs))]...)
	r.mu.Unlock()
	if len(xs) == 0 {
		return 0, 0
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	at := func(q float64) time.Duration { return xs[min(int(q*float64(len(xs))), len(xs)-1)] }
	return at(0.50), at(0.99)
}

// tlsStats returns the server's TLS counters. The ends are read before
// Started, and a handshake is counted started before it can end, so
// Started covers every end read, and InProgress, the difference, is never
// negative.
func (s *Server) tlsStats() TLSStats {
	st := TLSStats{
		Handshakes: s.tls.done.Load(),
		Failed:     map[string]uint64{},
		TimedOut:   s.tls.timedOut.Load(),
		Refused:    s.tls.refused.Load(),
	}
	ended := st.Handshakes + st.TimedOut + st.Refused
	for i := range numCauses {
		if n := s.tls.failed[i].Load(); n > 0 {
			st.Failed[causeNames[i]] = n
			ended += n
		}
	}
	st.Started = s.tls.started.Load()
	st.InProgress = int64(st.Started - ended)
	st.Active = s.tls.active.Load()
	st.P50, st.P99 = s.tls.latency.quantiles()
	return st
}
