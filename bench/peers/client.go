//go:build linux

// Package peers benchmarks echo servers side by side with one client: an
// echo server built on gracepoll's poller (the design of examples/echo),
// Go's net package with a goroutine per connection, gnet v2 and
// cloudwego/netpoll. It is a separate module so that gracepoll's own
// go.mod does not depend on its peers. Run it with bench/run.sh, or
//
//	cd bench/peers && go test -run '^$' -bench . ./...
package peers

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Server is an echo server listening on 127.0.0.1.
type Server interface {
	Addr() string
	Close() error
}

// Result is what a client run measured.
type Result struct {
	Ops        int64         // round trips (PingPong) or connections (Churn)
	Elapsed    time.Duration // wall time of the run
	Mismatches int64         // replies that differ from their request
}

// ioTimeout bounds every client read and write: a broken server shows up
// as an error, not a hang.
const ioTimeout = 10 * time.Second

// Pool is a set of client connections to one server, kept open across
// runs so that PingPong measures messages, not connection set-up.
type Pool struct {
	conns []*net.TCPConn
	size  int
	seq   atomic.Uint64
}

// Dial opens n connections to addr, for messages of size bytes.
func Dial(addr string, n, size int) (*Pool, error) {
	if size < 16 {
		return nil, fmt.Errorf("peers: message size %d, want at least 16", size)
	}
	p := &Pool{size: size}
	for range n {
		c, err := net.DialTimeout("tcp", addr, ioTimeout)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.conns = append(p.conns, c.(*net.TCPConn))
	}
	return p, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// PingPong runs total round trips spread over the pool's connections, each
// connection writing one message and reading its reply at a time, and
// checks every reply byte for byte. Connections take round trips from a
// shared budget, so the run ends when the budget does, with no straggler.
func (p *Pool) PingPong(total int64) (Result, error) {
	var (
		budget     atomic.Int64
		mismatches atomic.Int64
		wg         sync.WaitGroup
		errOnce    sync.Once
		firstErr   error
	)
	budget.Store(total)
	deadline := time.Now().Add(ioTimeout)
	start := time.Now()
	for i, c := range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(deadline)
			msg, reply := make([]byte, p.size), make([]byte, p.size)
			id := uint64(i) + 1
			for budget.Add(-1) >= 0 {
				fill(msg, id, p.seq.Add(1))
				if err := roundTrip(c, msg, reply); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				if !bytes.Equal(msg, reply) {
					mismatches.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	r := Result{Ops: total, Elapsed: time.Since(start), Mismatches: mismatches.Load()}
	return r, firstErr
}

// Churn runs total connection cycles over workers goroutines: dial, one
// round trip of size bytes, close. The client closes first, as the load
// generator of examples/echo does, so the server sees end-of-file.
func Churn(addr string, workers, size int, total int64) (Result, error) {
	var (
		budget     atomic.Int64
		mismatches atomic.Int64
		wg         sync.WaitGroup
		errOnce    sync.Once
		firstErr   error
	)
	budget.Store(total)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, reply := make([]byte, size), make([]byte, size)
			for n := uint64(1); budget.Add(-1) >= 0; n++ {
				err := func() error {
					c, err := net.DialTimeout("tcp", addr, ioTimeout)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(ioTimeout))
					fill(msg, uint64(w)<<32|n, n)
					if _, err := c.Write(msg); err != nil {
						return err
					}
					if _, err := io.ReadFull(c, reply); err != nil {
						return err
					}
					if !bytes.Equal(msg, reply) {
						mismatches.Add(1)
					}
					return nil
				}()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return Result{Ops: total, Elapsed: time.Since(start), Mismatches: mismatches.Load()}, firstErr
}

// largeMessage is the size from which a message is written by a helper
// goroutine while the reply is read: one larger than the socket buffers on
// both sides would otherwise deadlock, the client blocked in write while
// the server waits for it to read.
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

// fill writes the connection id and a sequence number into every 16 bytes
// of msg, so that a reply from another connection or an older message is
// told apart from the request.
func fill(msg []byte, id, seq uint64) {
	var rec [16]byte
	binary.LittleEndian.PutUint64(rec[0:], id)
	binary.LittleEndian.PutUint64(rec[8:], seq)
	for off := 0; off < len(msg); off += len(rec) {
		copy(msg[off:], rec[:])
	}
}
