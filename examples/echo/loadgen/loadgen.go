// Package loadgen is the checking load generator of examples/echo and of
// the server benchmarks in bench/peers: client connections that ping-pong
// fixed-size messages with an echo server and check every reply byte for
// byte, with churn (a fraction of the connections closed and reopened
// while traffic flows), connection cycles (dial, one message, close) and
// idle connections (one message each, then nothing).
//
// It is plain client code, one goroutine per connection on package net (the
// cycles use blocking system calls): it is the load, not the system under
// test. With a TLS configuration (Config.TLS, NewTLSCycler, OpenIdleTLS)
// every connection is a crypto/tls client instead, and the check is the
// same on the plaintext.
//
// Every message is a run of 16-byte records, each holding the connection's
// tag (TagMagic and the connection's id, unique for the generator's life),
// the message's sequence number and the record's index. A reply that
// differs from its request is a mismatch; its records that carry another
// connection's tag are bytes that crossed connections (ForeignBytes).
package loadgen

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// RecordSize is the size of one record of a message.
	RecordSize = 16
	// TagMagic is the high half of every connection tag, so that random
	// bytes are not taken for one.
	TagMagic = 0x9e3779b9
)

// Config describes a Gen's connections.
type Config struct {
	Addr      string        // the server, host:port on TCP
	Conns     int           // client connections kept open
	Size      int           // message size in bytes, at least 1
	IOTimeout time.Duration // bounds every dial, read and write; 0 means 10 s
	// TLS, if not nil, makes every connection a TLS client with this
	// configuration: a TCP connection, then the handshake (bounded by
	// IOTimeout, counted as a dial), then the same messages as
	// plaintext. A ServerName left empty is Addr's host, as tls.Dial
	// does. Give it a ClientSessionCache to resume sessions on reopen.
	TLS *tls.Config
}

// Counters are a Gen's totals since New.
type Counters struct {
	Msgs       uint64 // replies received and checked equal to their request
	Opened     uint64 // connections dialled
	Closed     uint64 // connections closed by the client
	Reopened   uint64 // connections closed by churn (then redialled)
	Mismatches uint64 // replies that differ from their request
	Crossed    uint64 // reply bytes carrying another connection's tag
	Errors     uint64 // dial, read or write errors, timeouts
	FirstError string // the first of them, to say what went wrong
}

// Err returns an error describing the first failure (an I/O error or a
// reply that differs from its request), or nil if there was none.
func (c Counters) Err() error {
	switch {
	case c.Errors > 0:
		return fmt.Errorf("loadgen: %d client errors, first: %s", c.Errors, c.FirstError)
	case c.Mismatches > 0:
		return fmt.Errorf("loadgen: %d replies differ from their requests (%d bytes from other connections)", c.Mismatches, c.Crossed)
	}
	return nil
}

// Gen keeps Config.Conns connections busy with request/reply round trips.
// Start runs it until Stop; RunN runs a given number of round trips.
// Connections stay open between runs (a run measures messages, not
// connection set-up) until churn reopens them or Close.
type Gen struct {
	cfg   Config
	tls   *tls.Config // cfg.TLS with ServerName set; nil for plaintext
	stop  atomic.Bool
	slots []slot

	nextID atomic.Uint32 // connection ids, 1-based
	budget atomic.Int64  // round trips left in RunN; unused by Start
	capped bool          // the running run is RunN's

	churnNext int     // next slot to churn
	churnOwed float64 // churn carried over between calls of ChurnFor

	opened, closed, reopened atomic.Uint64
	mismatches, crossed      atomic.Uint64
	errors                   atomic.Uint64
	errOnce                  sync.Once
	firstErr                 atomic.Value // string
	wg                       sync.WaitGroup
	running                  bool
}

// slot is one client connection position: when churn closes a connection
// the slot dials a new one.
type slot struct {
	msgs   atomic.Uint64 // replies checked; read by progress reporters
	reopen atomic.Bool   // churn asks this slot to close and redial
	// c is the connection, owned by the slot's goroutine while a run is
	// on: tcp itself, or a tls.Conn over it.
	c     net.Conn
	tcp   *net.TCPConn
	msg   []byte
	reply []byte
	_     [40]byte // pads a slot to 128 bytes: no two slots' msgs counters share a cache line
}

// New returns a generator for cfg; it dials nothing until a run.
func New(cfg Config) (*Gen, error) {
	if cfg.Conns < 1 || cfg.Size < 1 {
		return nil, fmt.Errorf("loadgen: %d connections of %d-byte messages: want at least 1 of each", cfg.Conns, cfg.Size)
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 10 * time.Second
	}
	t, err := clientConfig(cfg.TLS, cfg.Addr)
	if err != nil {
		return nil, err
	}
	g := &Gen{cfg: cfg, tls: t, slots: make([]slot, cfg.Conns)}
	for i := range g.slots {
		g.slots[i].msg = make([]byte, cfg.Size)
		g.slots[i].reply = make([]byte, cfg.Size)
	}
	return g, nil
}

// Start launches one goroutine per connection, each dialling (or reusing
// its open connection) and running round trips until Stop.
func (g *Gen) Start() {
	if g.running {
		panic("loadgen: Start while running")
	}
	g.running, g.capped = true, false
	g.stop.Store(false)
	g.wg.Add(len(g.slots))
	for i := range g.slots {
		go g.run(&g.slots[i])
	}
}

// Stop stops every connection after its current round trip and waits for
// them. The connections stay open for the next run; Close closes them.
func (g *Gen) Stop() {
	g.stop.Store(true)
	g.wg.Wait()
	g.running = false
}

// Close stops the generator if it runs and closes every connection.
func (g *Gen) Close() {
	if g.running {
		g.Stop()
	}
	for i := range g.slots {
		if c := g.slots[i].c; c != nil {
			c.Close()
			g.slots[i].c, g.slots[i].tcp = nil, nil
			g.closed.Add(1)
		}
	}
}

// RunN runs n round trips over the connections, each taking round trips
// from a shared budget so that the run ends with no straggler, while
// reopening churn times the number of connections per second. It returns
// the wall time of the run and an error if any round trip failed or any
// reply differed from its request during it.
func (g *Gen) RunN(n int64, churn float64) (time.Duration, error) {
	if g.running {
		panic("loadgen: RunN while running")
	}
	before := g.Counters()
	g.budget.Store(n)
	g.running, g.capped = true, true
	g.stop.Store(false)
	start := time.Now()
	g.wg.Add(len(g.slots))
	for i := range g.slots {
		go g.run(&g.slots[i])
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	if churn > 0 {
		tick := time.NewTicker(100 * time.Millisecond)
		last := start
	wait:
		for {
			select {
			case <-done:
				break wait
			case now := <-tick.C:
				g.ChurnFor(now.Sub(last), churn)
				last = now
			}
		}
		tick.Stop()
	} else {
		<-done
	}
	wall := time.Since(start)
	g.running = false
	after := g.Counters()
	switch {
	case after.Errors > before.Errors:
		return wall, fmt.Errorf("loadgen: %d client errors, first: %s", after.Errors-before.Errors, after.FirstError)
	case after.Mismatches > before.Mismatches:
		return wall, fmt.Errorf("loadgen: %d replies differ from their requests", after.Mismatches-before.Mismatches)
	}
	return wall, nil
}

// Churn asks k connections, taken in rotation, to close and reopen.
func (g *Gen) Churn(k int) {
	for range min(k, len(g.slots)) {
		g.slots[g.churnNext].reopen.Store(true)
		g.churnNext = (g.churnNext + 1) % len(g.slots)
	}
}

// ChurnFor reopens fraction times the number of connections per second of
// elapsed, carrying fractions of a connection over to the next call. Call
// it from one goroutine, with the time elapsed since the last call (not a
// tick count: a ticker drops ticks when the machine is too busy).
func (g *Gen) ChurnFor(elapsed time.Duration, fraction float64) {
	g.churnOwed += fraction * float64(len(g.slots)) * elapsed.Seconds()
	k := int(g.churnOwed)
	g.churnOwed -= float64(k)
	g.Churn(k)
}

// Msgs returns the replies checked so far, cheaply (for progress lines).
func (g *Gen) Msgs() uint64 {
	var t uint64
	for i := range g.slots {
		t += g.slots[i].msgs.Load()
	}
	return t
}

// Open returns the client connections open now.
func (g *Gen) Open() uint64 { return g.opened.Load() - g.closed.Load() }

// Counters returns the generator's totals.
func (g *Gen) Counters() Counters {
	s, _ := g.firstErr.Load().(string)
	return Counters{
		Msgs: g.Msgs(), Opened: g.opened.Load(), Closed: g.closed.Load(), Reopened: g.reopened.Load(),
		Mismatches: g.mismatches.Load(), Crossed: g.crossed.Load(), Errors: g.errors.Load(), FirstError: s,
	}
}

func (g *Gen) fail(err error) {
	g.errors.Add(1)
	g.errOnce.Do(func() { g.firstErr.Store(err.Error()) })
}

// more reports whether the slot should run another round trip.
func (g *Gen) more() bool {
	if g.stop.Load() {
		return false
	}
	if g.capped && g.budget.Add(-1) < 0 {
		g.stop.Store(true)
		return false
	}
	return true
}

// run keeps one connection open in slot s, redialling after churn or an
// error, until the run ends.
func (g *Gen) run(s *slot) {
	defer g.wg.Done()
	for !g.stop.Load() {
		if s.c == nil {
			c, tcp, err := dial(g.cfg.Addr, g.tls, g.cfg.IOTimeout)
			if err != nil {
				g.fail(err)
				if g.capped {
					g.stop.Store(true) // a counted run fails at once
					return
				}
				time.Sleep(10 * time.Millisecond) // do not spin on a refusing server
				continue
			}
			g.opened.Add(1)
			s.c, s.tcp = c, tcp
		}
		if g.session(s) {
			return // the run is over; the connection stays open
		}
		s.c.Close()
		s.c, s.tcp = nil, nil
		g.closed.Add(1)
	}
}

// session runs round trips on s.c until the run ends (it returns true) or
// churn asks for a reopen or the stream breaks (false: close it).
func (g *Gen) session(s *slot) bool {
	c := s.c
	id := g.nextID.Add(1)
	tag := uint64(TagMagic)<<32 | uint64(id)
	var deadline time.Time
	for seq := uint32(0); ; seq++ {
		if s.reopen.Swap(false) {
			g.reopened.Add(1)
			if id%2 == 0 {
				// Every other churned connection ends with a reset
				// instead of a FIN, as crashing or impatient clients
				// do: the server then sees a hang-up or an error.
				// Over TLS it is closed with no close_notify either:
				// the client just vanishes.
				s.tcp.SetLinger(0)
				s.c = s.tcp
			}
			return false
		}
		if !g.more() {
			return true
		}
		// Refreshing the deadline on every message would cost a timer
		// update per round trip; a quarter of the timeout is plenty.
		if now := time.Now(); deadline.Sub(now) < g.cfg.IOTimeout*3/4 {
			deadline = now.Add(g.cfg.IOTimeout)
			c.SetDeadline(deadline)
		}
		Fill(s.msg, tag, seq)
		if err := RoundTrip(c, s.msg, s.reply); err != nil {
			g.fail(err)
			if g.capped {
				g.stop.Store(true)
			}
			return false
		}
		if !bytes.Equal(s.msg, s.reply) {
			g.mismatches.Add(1)
			g.crossed.Add(ForeignBytes(s.reply, id))
			return false // the stream is out of step now: start a new one
		}
		s.msgs.Add(1)
	}
}

// clientConfig returns config ready for tls.Client to reach addr: a clone
// with ServerName set to addr's host if it was empty. A nil config stays
// nil (plaintext).
func clientConfig(config *tls.Config, addr string) (*tls.Config, error) {
	if config == nil || config.ServerName != "" || config.InsecureSkipVerify {
		return config, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("loadgen: server address %q: %w", addr, err)
	}
	config = config.Clone()
	config.ServerName = host
	return config, nil
}

// dial connects to addr on TCP and, with config, runs a TLS handshake as
// its client, all within timeout. It returns the connection to use (the
// TCP one, or a tls.Conn over it) and the TCP connection.
func dial(addr string, config *tls.Config, timeout time.Duration) (net.Conn, *net.TCPConn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, nil, err
	}
	tcp := c.(*net.TCPConn)
	if config == nil {
		return tcp, tcp, nil
	}
	tc := tls.Client(tcp, config)
	tcp.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		tcp.Close()
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, tcp, nil
}

// largeMessage is the size from which a message is written by a helper
// goroutine while the reply is read: a message larger than the socket
// buffers on both sides would otherwise deadlock, the client blocked in
// write while the server waits for it to read.
const largeMessage = 32 << 10

// RoundTrip writes msg on c and reads len(reply) bytes back into reply.
func RoundTrip(c net.Conn, msg, reply []byte) error {
	if len(msg) < largeMessage {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(c, reply)
		return err
	}
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		werr <- err
	}()
	_, rerr := io.ReadFull(c, reply)
	if rerr != nil {
		c.Close() // unblock the writer
	}
	if err := <-werr; rerr == nil {
		return err
	}
	return rerr
}

// Fill writes msg's records for connection tag and sequence number seq.
func Fill(msg []byte, tag uint64, seq uint32) {
	var rec [RecordSize]byte
	binary.LittleEndian.PutUint64(rec[0:], tag)
	binary.LittleEndian.PutUint32(rec[8:], seq)
	for i, off := uint32(0), 0; off < len(msg); i, off = i+1, off+RecordSize {
		binary.LittleEndian.PutUint32(rec[12:], i)
		copy(msg[off:], rec[:])
	}
}

// ForeignBytes counts the bytes of reply that sit in records tagged with
// another connection's id than id. It looks at every offset, not only
// multiples of the record size: a reply that is out of step is out of
// alignment too.
func ForeignBytes(reply []byte, id uint32) uint64 {
	var n uint64
	for off := 0; off+RecordSize <= len(reply); {
		tag := binary.LittleEndian.Uint64(reply[off:])
		if tag>>32 == TagMagic && uint32(tag) != id && uint32(tag) != 0 {
			n += RecordSize
			off += RecordSize
			continue
		}
		off++
	}
	return n
}

// Idle is a set of connections that each echoed one message and then stay
// open and silent: what a server keeps per idle connection.
type Idle struct {
	conns []net.Conn
}

// OpenIdle opens n connections to addr over workers goroutines, each
// echoing one size-byte message (checked) before it goes idle. On error
// the connections opened so far are closed.
func OpenIdle(addr string, n, size, workers int, timeout time.Duration) (*Idle, error) {
	return OpenIdleTLS(addr, n, size, workers, timeout, nil)
}

// OpenIdleTLS is OpenIdle with TLS client connections of config (nil:
// plaintext, as OpenIdle); its ServerName defaults to addr's host.
func OpenIdleTLS(addr string, n, size, workers int, timeout time.Duration, config *tls.Config) (*Idle, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	config, err := clientConfig(config, addr)
	if err != nil {
		return nil, err
	}
	conns := make([]net.Conn, n)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for w := range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, reply := make([]byte, size), make([]byte, size)
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				err := func() error {
					c, _, err := dial(addr, config, timeout)
					if err != nil {
						return err
					}
					conns[i] = c
					c.SetDeadline(time.Now().Add(timeout))
					Fill(msg, uint64(TagMagic)<<32|uint64(i+1), uint32(w))
					if err := RoundTrip(c, msg, reply); err != nil {
						return err
					}
					if !bytes.Equal(msg, reply) {
						return errors.New("reply differs from its request")
					}
					return c.SetDeadline(time.Time{})
				}()
				if err != nil {
					errOnce.Do(func() { first = fmt.Errorf("idle connection %d of %d: %w", i+1, n, err) })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	idle := &Idle{conns: conns}
	if first != nil {
		idle.Close()
		return nil, first
	}
	return idle, nil
}

// Len returns the number of connections.
func (i *Idle) Len() int { return len(i.conns) }

// Close closes every connection.
func (i *Idle) Close() {
	for _, c := range i.conns {
		if c != nil {
			c.Close()
		}
	}
	i.conns = nil
}
