//go:build linux

// Package echoserver is the echo server of examples/echo, built on
// gracepoll's poller, in a package of its own so that the benchmarks in
// bench/peers measure this very server against net, gnet and netpoll.
//
// Each accepted connection is a registration the poller owns (CloseFD), so
// its fd is closed only after its release, never under a handler. Replies
// that do not fit the socket buffer wait for Writable, pushing back on the
// client. Release latencies are the poller's own (Stats.ReleaseLatency):
// the server adds no per-connection instrumentation of its own.
package echoserver

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/poller"
)

// readBufSize is the most one handler run reads from a connection. Level-
// triggered registrations fire again if more is waiting, so reading once per
// event keeps one busy connection from starving the others on its waiter.
const readBufSize = 64 << 10

// Server is an echo server on a poller: one registration for the listening
// socket, one per accepted connection.
type Server struct {
	p      *poller.Poller
	lfd    int
	addr   string
	sndBuf int // SO_SNDBUF for accepted sockets, 0 for the default

	// bufs holds one read buffer per waiter. A waiter runs one handler at
	// a time, so the buffer indexed by Event.Waiter is never shared.
	bufs [][]byte

	open       atomic.Int64  // connection registrations not yet released
	accepted   atomic.Uint64 // connection registrations added
	released   atomic.Uint64 // connection registrations released
	acceptErrs atomic.Uint64
}

// conn is one connection's state. It lives in the closures of its
// registration rather than in a table keyed by Handle: an event can be
// dispatched before Add has returned the handle, so the state must exist
// before Add, and the closure reaches it without a lookup or a lock. The
// poller runs one registration's handlers one at a time, each happening
// before the next, so out needs no lock of its own.
type conn struct {
	fd  int
	out []byte // unsent reply bytes; while non-empty the server does not read
}

// New starts a poller with opts, listens on 127.0.0.1 on a free port and
// registers the listener. sndBuf sets SO_SNDBUF on accepted sockets (0
// keeps the default); a small one makes nearly every large reply a partial
// write, which tests use.
func New(opts poller.Options, sndBuf int) (*Server, error) {
	p, err := poller.New(opts)
	if err != nil {
		return nil, err
	}
	s := &Server{p: p, lfd: -1, sndBuf: sndBuf}
	s.bufs = make([][]byte, p.MaxWaiters())
	for i := range s.bufs {
		s.bufs[i] = make([]byte, readBufSize)
	}
	if err := s.listen(); err != nil {
		p.Close()
		if s.lfd >= 0 {
			unix.Close(s.lfd)
		}
		return nil, err
	}
	return s, nil
}

func (s *Server) listen() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	s.lfd = fd
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("bind 127.0.0.1: %w", err)
	}
	if err := unix.Listen(fd, 4096); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	s.addr = fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	_, err = s.p.Add(poller.Registration{
		FD:      fd,
		Events:  poller.Readable,
		CloseFD: true,
		OnEvent: s.onAccept,
	})
	if err != nil {
		return fmt.Errorf("register listener: %w", err)
	}
	s.lfd = -1 // the poller owns it now
	return nil
}

// onAccept accepts one pending connection. The listener is level-
// triggered, so epoll reports it again while more wait: accepting one per
// event costs no more system calls than draining the queue (which ends in
// an accept that fails with EAGAIN), and keeps accepting fair to the
// connections on the same waiter.
func (s *Server) onAccept(e poller.Event) {
	fd, err := accept(e.FD)
	switch err {
	case nil:
	case unix.EAGAIN, unix.EINTR, unix.ECONNABORTED:
		return
	default:
		// EMFILE and friends: the listener stays readable and the next
		// event retries.
		s.acceptErrs.Add(1)
		return
	}
	// Small messages are answered at once, not coalesced.
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if s.sndBuf > 0 {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, s.sndBuf)
	}
	c := &conn{fd: fd}
	// Count before Add: once added, the connection may be deleted and
	// released before Add returns.
	s.open.Add(1)
	_, err = s.p.Add(poller.Registration{
		FD:        fd,
		Events:    poller.Readable,
		CloseFD:   true,
		OnEvent:   func(e poller.Event) { s.onConn(c, e) },
		OnRelease: s.onRelease,
	})
	if err != nil {
		s.open.Add(-1)
		s.acceptErrs.Add(1)
		unix.Close(fd)
		return
	}
	s.accepted.Add(1)
}

// accept is accept4(2) with NONBLOCK|CLOEXEC and no peer address: the
// server does not need it, and unix.Accept4 decoding it costs a
// getsockopt(SO_PROTOCOL) per connection.
func accept(lfd int) (int, error) {
	fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// onConn echoes what the connection sent. While a reply is only partly
// written the registration waits for Writable instead of Readable: the
// server stops reading, which pushes back on the client, and keeps at most
// one read buffer of output per connection.
func (s *Server) onConn(c *conn, e poller.Event) {
	if e.Events&(poller.HangUp|poller.Error) != 0 {
		// The poller has already claimed the registration and removed it
		// from epoll; this is its final event. OnRelease drops the state.
		return
	}
	if len(c.out) > 0 {
		n, err := writeAll(c.fd, c.out)
		c.out = c.out[:copy(c.out, c.out[n:])]
		switch {
		case err != nil && err != unix.EAGAIN:
			s.drop(c, e.Handle)
			return
		case len(c.out) > 0:
			return // still blocked; Writable stays armed
		}
		// Flushed: read again. Modify may fail only if the registration
		// is gone (Close); then there is nothing left to do.
		if s.p.Modify(e.Handle, poller.Readable) != nil {
			return
		}
	}
	buf := s.bufs[e.Waiter]
	n, err := unix.Read(c.fd, buf)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return // level-triggered: it fires again when there is data
	case err != nil || n == 0:
		s.drop(c, e.Handle) // peer closed, or reset
		return
	}
	w, err := writeAll(c.fd, buf[:n])
	switch {
	case err != nil && err != unix.EAGAIN:
		s.drop(c, e.Handle)
	case w < n:
		c.out = append(c.out[:0], buf[w:n]...)
		if s.p.Modify(e.Handle, poller.Writable) != nil {
			c.out = c.out[:0]
		}
	}
}

// writeAll writes b until it is all written or the socket would block, and
// returns how much it wrote.
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

// drop deletes a connection's registration. The poller closes the fd after
// OnRelease, once no waiter can hold an event for it. A Delete that fails
// found the connection gone already (hung up, or Close).
func (s *Server) drop(_ *conn, h poller.Handle) { s.p.Delete(h) }

// onRelease runs once per connection after its grace period.
func (s *Server) onRelease(poller.Released) {
	s.open.Add(-1)
	s.released.Add(1)
}

// Close shuts the poller down: every registration still live is released
// (Reason Closed) and its fd closed.
func (s *Server) Close() error { return s.p.Close() }

// Addr returns the listening address, 127.0.0.1:port.
func (s *Server) Addr() string { return s.addr }

// Poller returns the server's poller, for its statistics.
func (s *Server) Poller() *poller.Poller { return s.p }

// Open returns the connections registered and not yet released.
func (s *Server) Open() int64 { return s.open.Load() }

// Accepted returns the connections registered so far.
func (s *Server) Accepted() uint64 { return s.accepted.Load() }

// Released returns the connections released so far.
func (s *Server) Released() uint64 { return s.released.Load() }
