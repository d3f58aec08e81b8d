//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator keeps cfg.Conns client connections busy with
// request/reply round trips and checks every reply. It is plain net.Conn
// code, one goroutine per connection: it is the load, not the system under
// test.
//
// Every message is a run of 16-byte records, each holding the connection's
// tag (a magic number and the connection's id, unique for the whole run),
// the message's sequence number and the record's index. A reply that
// differs from its request is a mismatch; its records that carry another
// connection's tag are bytes that crossed connections.
const (
	recordSize = 16
	tagMagic   = 0x9e3779b9 // high half of every tag, so random bytes are not taken for one
)

// loadgen is the client side.
type loadgen struct {
	addr string
	cfg  config
	stop atomic.Bool

	slots  []slot
	nextID atomic.Uint32 // connection ids, 1-based

	opened, closed, reopened atomic.Uint64
	mismatches, crossed      atomic.Uint64
	errors                   atomic.Uint64
	errOnce                  sync.Once
	firstErr                 atomic.Value // string
	wg                       sync.WaitGroup
}

// slot is one client connection position: when churn closes a connection
// the slot dials a new one.
type slot struct {
	msgs   atomic.Uint64 // replies checked; read by the progress reporter
	reopen atomic.Bool   // churn asks this slot to close and redial
	_      [48]byte
}

func newLoadgen(addr string, cfg config) *loadgen {
	return &loadgen{addr: addr, cfg: cfg, slots: make([]slot, cfg.Conns)}
}

// start launches one goroutine per slot.
func (g *loadgen) start() {
	g.wg.Add(len(g.slots))
	for i := range g.slots {
		go g.run(&g.slots[i])
	}
}

// halt stops every slot after its current round trip and waits for them.
func (g *loadgen) halt() {
	g.stop.Store(true)
	g.wg.Wait()
}

// churn asks k slots, taken in rotation from *next, to reopen.
func (g *loadgen) churn(k int, next *int) {
	for range min(k, len(g.slots)) {
		g.slots[*next].reopen.Store(true)
		*next = (*next + 1) % len(g.slots)
	}
}

func (g *loadgen) msgs() uint64 {
	var t uint64
	for i := range g.slots {
		t += g.slots[i].msgs.Load()
	}
	return t
}

func (g *loadgen) fail(err error) {
	g.errors.Add(1)
	g.errOnce.Do(func() { g.firstErr.Store(err.Error()) })
}

func (g *loadgen) firstError() string {
	s, _ := g.firstErr.Load().(string)
	return s
}

// run keeps one connection open in slot s, redialling after churn, until
// the load stops.
func (g *loadgen) run(s *slot) {
	defer g.wg.Done()
	msg := make([]byte, g.cfg.Size)
	reply := make([]byte, g.cfg.Size)
	for !g.stop.Load() {
		c, err := net.DialTimeout("tcp", g.addr, g.cfg.ioTimeout)
		if err != nil {
			g.fail(err)
			time.Sleep(10 * time.Millisecond) // do not spin on a refusing server
			continue
		}
		g.opened.Add(1)
		g.session(c.(*net.TCPConn), s, msg, reply)
		c.Close()
		g.closed.Add(1)
	}
}

// session runs round trips on c until the load stops, churn asks for a
// reopen, or the stream breaks.
func (g *loadgen) session(c *net.TCPConn, s *slot, msg, reply []byte) {
	id := g.nextID.Add(1)
	tag := uint64(tagMagic)<<32 | uint64(id)
	var deadline time.Time
	for seq := uint32(0); ; seq++ {
		if g.stop.Load() {
			return
		}
		if s.reopen.Swap(false) {
			g.reopened.Add(1)
			if id%2 == 0 {
				// Every other churned connection ends with a reset
				// instead of a FIN, as crashing or impatient clients
				// do: the server then sees a hang-up or an error, and
				// the poller's final-event path runs.
				c.SetLinger(0)
			}
			return
		}
		// Refreshing the deadline on every message would cost a timer
		// update per round trip; a quarter of the timeout is plenty.
		if now := time.Now(); deadline.Sub(now) < g.cfg.ioTimeout*3/4 {
			deadline = now.Add(g.cfg.ioTimeout)
			c.SetDeadline(deadline)
		}
		fill(msg, tag, seq)
		if err := roundTrip(c, msg, reply); err != nil {
			g.fail(err)
			return
		}
		if !bytes.Equal(msg, reply) {
			g.mismatches.Add(1)
			g.crossed.Add(foreignBytes(reply, id))
			return // the stream is out of step now: start a new one
		}
		s.msgs.Add(1)
	}
}

// largeMessage is the size from which a message is written by a helper
// goroutine while the reply is read: a message larger than the socket
// buffers on both sides would otherwise deadlock, the client blocked in
// write while the server waits for it to read.
const largeMessage = 32 << 10

func roundTrip(c *net.TCPConn, msg, reply []byte) error {
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

// fill writes msg's records for connection tag and sequence number seq.
func fill(msg []byte, tag uint64, seq uint32) {
	var rec [recordSize]byte
	binary.LittleEndian.PutUint64(rec[0:], tag)
	binary.LittleEndian.PutUint32(rec[8:], seq)
	for i, off := uint32(0), 0; off < len(msg); i, off = i+1, off+recordSize {
		binary.LittleEndian.PutUint32(rec[12:], i)
		copy(msg[off:], rec[:])
	}
}

// foreignBytes counts the bytes of reply that sit in records tagged with
// another connection's id. It looks at every offset, not only multiples of
// the record size: a reply that is out of step is out of alignment too.
func foreignBytes(reply []byte, id uint32) uint64 {
	var n uint64
	for off := 0; off+recordSize <= len(reply); {
		tag := binary.LittleEndian.Uint64(reply[off:])
		if tag>>32 == tagMagic && uint32(tag) != id && uint32(tag) != 0 {
			n += recordSize
			off += recordSize
			continue
		}
		off++
	}
	return n
}
