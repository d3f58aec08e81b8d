//go:build linux

package peers

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// SkewPoller is the skew server written directly on package poller, with
// SkewWaiters waiters on the topology it was started with and the poller's
// other options at their defaults: a registration for the listener, one per
// connection, and the frames handled in OnEvent on the waiter that
// dispatches it, so a slow frame blocks that waiter. It is the skew
// servers' floor under package conn: the same poller without conn's
// buffers, locks and handler calls.
type SkewPoller struct {
	p    *poller.Poller
	addr string
}

// skewPollerConn is one connection's state, reached from its
// registration's closure: an event may be dispatched before Add returns
// the handle, so the state cannot live in a table keyed by it. The poller
// runs one registration's OnEvent calls one at a time, each happening
// before the next, so the fields need no lock.
type skewPollerConn struct {
	fd int
	// in holds what was read and not yet handled: at most a partial
	// frame between events. It is the connection's own, not the
	// waiter's, because the poller may add waiters while others block
	// (Event.Waiter is not bounded by the initial Waiters()).
	in  []byte
	inN int
	// out holds the replies the socket did not take. While it is not
	// empty the registration waits for Writable only: the server stops
	// reading from that client, which pushes back, and no reply is lost
	// or reordered.
	out []byte
}

// skewPollerRead is the most one OnEvent reads: level-triggered, the
// registration fires again while more is waiting, and a bounded read keeps
// one connection from holding its waiter for long.
const skewPollerRead = 64 * SkewFrameSize

// NewSkewPoller starts the raw-poller skew server on 127.0.0.1, on a free
// port, with SkewWaiters waiters on topology.
func NewSkewPoller(topology poller.Topology) (*SkewPoller, error) {
	p, err := poller.New(poller.Options{Waiters: SkewWaiters, Topology: topology})
	if err != nil {
		return nil, err
	}
	s := &SkewPoller{p: p}
	if err := s.listen(); err != nil {
		p.Close()
		return nil, err
	}
	return s, nil
}

// listen opens a non-blocking listening socket and hands it to the poller.
func (s *SkewPoller) listen() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	sa := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind: %w", err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return fmt.Errorf("listen: %w", err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("getsockname: %w", err)
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", bound.(*unix.SockaddrInet4).Port)
	if _, err := s.p.Add(poller.Registration{FD: fd, Events: poller.Readable, CloseFD: true, OnEvent: s.accept}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("register the listener: %w", err)
	}
	return nil
}

// accept takes one connection per event; the listener is level-triggered,
// so the next waiter comes back for the rest of the queue.
func (s *SkewPoller) accept(e poller.Event) {
	fd, _, err := unix.Accept4(e.FD, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return // EAGAIN (another waiter took it), or a transient error to retry on the next event
	}
	// A reply is one small write: send it now, not after Nagle's delay.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		unix.Close(fd)
		return
	}
	c := &skewPollerConn{fd: fd, in: make([]byte, skewPollerRead+SkewFrameSize)}
	if _, err := s.p.Add(poller.Registration{
		FD:      fd,
		Events:  poller.Readable,
		CloseFD: true,
		OnEvent: func(e poller.Event) { s.serve(c, e) },
	}); err != nil {
		unix.Close(fd)
	}
}

// serve handles one event of connection c.
func (s *SkewPoller) serve(c *skewPollerConn, e poller.Event) {
	if e.Events&(poller.HangUp|poller.Error) != 0 {
		return // the final event: the poller releases the registration and closes the fd
	}
	if len(c.out) > 0 {
		if !s.flush(c, e.Handle) || len(c.out) > 0 {
			return
		}
		if s.p.Modify(e.Handle, poller.Readable) != nil {
			return // deleted meanwhile (the poller is closing)
		}
	}
	n, err := unix.Read(c.fd, c.in[c.inN:c.inN+skewPollerRead])
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil || n == 0:
		s.p.Delete(e.Handle) // the client closed or reset the connection
		return
	}
	c.inN += n
	done := 0
	for ; c.inN-done >= SkewFrameSize; done += SkewFrameSize {
		f := c.in[done : done+SkewFrameSize]
		skewHandle(f)
		if len(c.out) > 0 {
			c.out = append(c.out, f...) // behind a reply still waiting
			continue
		}
		w, err := unix.Write(c.fd, f)
		if err != nil && err != unix.EAGAIN {
			s.p.Delete(e.Handle)
			return
		}
		if w < len(f) {
			c.out = append(c.out, f[max(w, 0):]...)
		}
	}
	c.inN = copy(c.in, c.in[done:c.inN])
	if len(c.out) > 0 && s.p.Modify(e.Handle, poller.Writable) != nil {
		return // deleted meanwhile
	}
}

// flush writes as much of c.out as the socket takes. It returns false if
// the connection failed and was deleted.
func (s *SkewPoller) flush(c *skewPollerConn, h poller.Handle) bool {
	n, err := unix.Write(c.fd, c.out)
	if err != nil && err != unix.EAGAIN {
		s.p.Delete(h)
		return false
	}
	c.out = c.out[:copy(c.out, c.out[max(n, 0):])]
	return true
}

// Addr returns the listening address, 127.0.0.1:port.
func (s *SkewPoller) Addr() string { return s.addr }

// Close closes the poller, every connection's fd and the listener's with it.
func (s *SkewPoller) Close() error { return s.p.Close() }

// Poller returns the server's poller, for its statistics.
func (s *SkewPoller) Poller() *poller.Poller { return s.p }
