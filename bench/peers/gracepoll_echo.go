//go:build linux

package peers

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// GracepollEcho is the echo server of examples/echo, without its
// statistics: one poller registration for the listening socket and one per
// connection, all owned by the poller (CloseFD), a read buffer per waiter,
// and pending output kept per connection while the registration waits for
// Writable instead of Readable.
type GracepollEcho struct {
	p    *poller.Poller
	addr string
	bufs [][]byte
}

// NewGracepollEcho starts the server on 127.0.0.1, on a free port.
func NewGracepollEcho(opts poller.Options) (*GracepollEcho, error) {
	p, err := poller.New(opts)
	if err != nil {
		return nil, err
	}
	s := &GracepollEcho{p: p, bufs: make([][]byte, len(p.Stats().Waiters))}
	for i := range s.bufs {
		s.bufs[i] = make([]byte, 64<<10)
	}
	lfd, port, err := listen()
	if err != nil {
		p.Close()
		return nil, err
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", port)
	if _, err := p.Add(poller.Registration{FD: lfd, Events: poller.Readable, CloseFD: true, OnEvent: s.onAccept}); err != nil {
		unix.Close(lfd)
		p.Close()
		return nil, err
	}
	return s, nil
}

// listen opens a non-blocking listening socket on 127.0.0.1:0.
func listen() (fd, port int, err error) {
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err == nil {
		err = unix.Listen(fd, 4096)
	}
	var sa unix.Sockaddr
	if err == nil {
		sa, err = unix.Getsockname(fd)
	}
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, sa.(*unix.SockaddrInet4).Port, nil
}

// Addr returns the server's address.
func (s *GracepollEcho) Addr() string { return s.addr }

// Close stops the poller, which releases and closes every connection.
func (s *GracepollEcho) Close() error { return s.p.Close() }

// Stats returns the poller's statistics.
func (s *GracepollEcho) Stats() poller.Stats { return s.p.Stats() }

// onAccept drains the accept queue.
func (s *GracepollEcho) onAccept(e poller.Event) {
	for {
		fd, _, err := unix.Accept4(e.FD, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default: // EAGAIN: drained; anything else: retried on the next event
			return
		}
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		c := &echoConn{fd: fd}
		_, err = s.p.Add(poller.Registration{
			FD: fd, Events: poller.Readable, CloseFD: true,
			OnEvent: func(e poller.Event) { s.onConn(c, e) },
		})
		if err != nil {
			unix.Close(fd)
		}
	}
}

// echoConn is one connection's state, reached through its handler's
// closure (events can arrive before Add returns the handle).
type echoConn struct {
	fd  int
	out []byte // unsent reply bytes; while non-empty the server does not read
}

func (s *GracepollEcho) onConn(c *echoConn, e poller.Event) {
	if e.Events&(poller.HangUp|poller.Error) != 0 {
		return // final event: the poller already removed and releases it
	}
	if len(c.out) > 0 {
		n, err := writeAll(c.fd, c.out)
		c.out = c.out[:copy(c.out, c.out[n:])]
		switch {
		case err != nil && err != unix.EAGAIN:
			s.p.Delete(e.Handle)
			return
		case len(c.out) > 0:
			return
		}
		if s.p.Modify(e.Handle, poller.Readable) != nil {
			return
		}
	}
	buf := s.bufs[e.Waiter]
	n, err := unix.Read(c.fd, buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil || n == 0:
		s.p.Delete(e.Handle)
		return
	}
	w, err := writeAll(c.fd, buf[:n])
	switch {
	case err != nil && err != unix.EAGAIN:
		s.p.Delete(e.Handle)
	case w < n:
		c.out = append(c.out[:0], buf[w:n]...)
		if s.p.Modify(e.Handle, poller.Writable) != nil {
			c.out = c.out[:0]
		}
	}
}

func writeAll(fd int, b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Write(fd, b[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}
