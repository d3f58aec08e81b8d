//go:build linux

package peers

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"time"

	"github.com/cloudwego/netpoll"
	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
	"github.com/panjf2000/gnet/v2"
)

// The skew servers echo fixed-size frames, each after the work the frame
// asks for: sleeping (a handler that makes a blocking call, a database or
// a remote service, on some requests) or a busy loop (a handler that
// computes). They are the servers of BenchmarkSkew, which measures how the
// light requests fare behind the slow ones.
//
// A frame is SkewFrameSize bytes:
//
//	bytes 0-7    sequence number, little endian
//	bytes 8-11   work, little endian: bits 0-30 its duration in
//	             microseconds, 0 for a light request; bit 31 (SkewSpin)
//	             set asks for a busy loop instead of a sleep
//	bytes 12-15  the client's index of the connection, little endian
//
// The server echoes every frame unchanged, in order per connection, so the
// client can check each reply byte for byte against what it sent.

// SkewFrameSize is the size of a frame of the skew servers.
const SkewFrameSize = 16

// SkewWaiters is the number of waiters (gracepoll) or event loops (gnet)
// of the skew servers: the benchmark's point is what a few waiters do when
// one of them blocks, so it is fixed, not GOMAXPROCS.
const SkewWaiters = 4

// SkewSpin is the work field's flag for a busy loop.
const SkewSpin = 1 << 31

// PutSkewFrame writes the frame with sequence number seq, work d (rounded
// down to a microsecond, below 2^31 µs; 0 for a light request), a busy
// loop if spin and a sleep otherwise, and connection index ci to
// b[:SkewFrameSize].
func PutSkewFrame(b []byte, seq uint64, d time.Duration, spin bool, ci uint32) {
	work := uint32(d/time.Microsecond) &^ SkewSpin
	if spin {
		work |= SkewSpin
	}
	binary.LittleEndian.PutUint64(b[0:8], seq)
	binary.LittleEndian.PutUint32(b[8:12], work)
	binary.LittleEndian.PutUint32(b[12:16], ci)
}

// SkewWork returns the work frame asks for: its duration (0 for a light
// request) and whether it is a busy loop.
func SkewWork(frame []byte) (d time.Duration, spin bool) {
	w := binary.LittleEndian.Uint32(frame[8:12])
	return time.Duration(w&^SkewSpin) * time.Microsecond, w&SkewSpin != 0
}

// skewHandle is every skew server's work for one frame: sleep or spin if
// it is slow. The frame is echoed afterwards by the caller. The busy loop
// reads the clock, a function call, so the Go scheduler can still preempt
// it as it would any handler that computes.
func skewHandle(frame []byte) {
	d, spin := SkewWork(frame)
	switch {
	case d == 0:
	case spin:
		for t0 := time.Now(); time.Since(t0) < d; {
		}
	default:
		time.Sleep(d)
	}
}

// SkewConn is the skew server on package conn with SkewWaiters waiters on
// the topology it was started with.
type SkewConn struct{ connServer }

// NewSkewConn starts the conn skew server on 127.0.0.1, on a free port,
// with SkewWaiters waiters on topology.
func NewSkewConn(topology poller.Topology) (*SkewConn, error) {
	opts := conn.Options{Poller: poller.Options{Waiters: SkewWaiters, Topology: topology}}
	cs, err := listenConn(skewConnHandler{}, opts)
	if err != nil {
		return nil, err
	}
	return &SkewConn{cs}, nil
}

// skewConnHandler handles the frames buffered, one after the other, on the
// connection's waiter: a slow frame blocks that waiter for its delay.
type skewConnHandler struct{}

// OnOpen does nothing.
func (skewConnHandler) OnOpen(*conn.Conn) {}

// OnData handles every whole frame buffered and leaves a partial one for
// later. The slice Next returns stays valid for the rest of OnData.
func (skewConnHandler) OnData(c *conn.Conn) {
	for c.Buffered() >= SkewFrameSize {
		f, err := c.Next(SkewFrameSize)
		if err != nil {
			c.Abort()
			return
		}
		skewHandle(f)
		if _, err := c.Write(f); err != nil {
			c.Abort() // closed or over MaxQueued: never lose part of the stream
			return
		}
	}
}

// OnClose does nothing.
func (skewConnHandler) OnClose(*conn.Conn, conn.Reason, error) {}

// NewSkewNet starts the skew server on Go's net package, a goroutine per
// connection, on 127.0.0.1, on a free port: a slow frame blocks only its
// own connection's goroutine.
func NewSkewNet() (*NetEcho, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &NetEcho{ln: ln, conns: map[net.Conn]struct{}{}, serveConn: serveSkewNet}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// serveSkewNet handles c's frames one by one until an error.
func serveSkewNet(c net.Conn) {
	f := make([]byte, SkewFrameSize)
	for {
		if _, err := io.ReadFull(c, f); err != nil {
			return
		}
		skewHandle(f)
		if _, err := c.Write(f); err != nil {
			return
		}
	}
}

// SkewGnet is the skew server on gnet v2 with SkewWaiters event loops: a
// slow frame blocks its loop and every connection on it.
type SkewGnet struct{ gnetServer }

// NewSkewGnet starts the gnet skew server on 127.0.0.1, on a free port.
func NewSkewGnet() (*SkewGnet, error) {
	s := &SkewGnet{}
	if err := s.start(s, gnet.WithNumEventLoop(SkewWaiters)); err != nil {
		return nil, err
	}
	return s, nil
}

// OnTraffic handles every whole frame buffered; gnet keeps a partial one
// for the next call.
func (s *SkewGnet) OnTraffic(c gnet.Conn) gnet.Action {
	for c.InboundBuffered() >= SkewFrameSize {
		f, err := c.Next(SkewFrameSize)
		if err != nil {
			return gnet.Close
		}
		skewHandle(f)
		if _, err := c.Write(f); err != nil {
			return gnet.Close
		}
	}
	return gnet.None
}

// SkewNetpoll is the skew server on cloudwego/netpoll with its default
// configuration: handlers run on its goroutine pool, so a slow frame blocks
// one pool goroutine.
type SkewNetpoll struct{ NetpollEcho }

// NewSkewNetpoll starts the netpoll skew server on 127.0.0.1, on a free
// port.
func NewSkewNetpoll() (*SkewNetpoll, error) {
	ln, err := netpoll.CreateListener("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	loop, err := netpoll.NewEventLoop(func(_ context.Context, c netpoll.Connection) error {
		r, w := c.Reader(), c.Writer()
		defer r.Release()
		for r.Len() >= SkewFrameSize {
			f, err := r.Next(SkewFrameSize)
			if err != nil {
				return err
			}
			skewHandle(f)
			if _, err := w.WriteBinary(f); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &SkewNetpoll{NetpollEcho{loop: loop, ln: ln, done: make(chan error, 1)}}
	go func() { s.done <- loop.Serve(ln) }()
	return s, nil
}
