//go:build linux

package conn

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The system calls the connection layer makes, and nothing else.

func read(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

// write writes b until the socket would block, and returns how much it
// took.
func write(fd int, b []byte) (int, error) {
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

// writev writes bufs with one writev(2) where it can, until the socket
// would block.
func writev(fd int, bufs [][]byte) (int, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	done := 0
	for done < total {
		n, err := unix.Writev(fd, bufs)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
		for len(bufs) > 0 && n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		if len(bufs) > 0 && n > 0 {
			bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
		}
	}
	return done, nil
}

func shutdownWrite(fd int) error {
	if err := unix.Shutdown(fd, unix.SHUT_WR); err != nil && err != unix.ENOTCONN {
		return err
	}
	return nil
}

// setLingerZero makes close reset the connection (RST) at once.
func setLingerZero(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
}

// setNoDelay sets TCP_NODELAY; on a Unix socket it fails, harmlessly.
func setNoDelay(fd int) { unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) }

func setSendBuffer(fd, n int) { unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n) }

// accept is accept4(2) with NONBLOCK|CLOEXEC and no peer address, which
// RemoteAddr reads when asked.
func accept(lfd int) (int, error) {
	for {
		fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EINTR:
			continue
		}
		return -1, errno
	}
}

func isAgain(err error) bool { return err == unix.EAGAIN }

func isReset(err error) bool {
	return errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ETIMEDOUT)
}

// isNoFDs reports the process or the system out of file descriptors (or
// socket buffers), when accepting later may succeed.
func isNoFDs(err error) bool {
	return err == unix.EMFILE || err == unix.ENFILE || err == unix.ENOBUFS || err == unix.ENOMEM
}

func closeFD(fd int) { unix.Close(fd) }

// dupListener returns a non-blocking, close-on-exec duplicate of l's
// socket.
func dupListener(l net.Listener) (int, error) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%w: listener %T has no file descriptor", ErrInvalid, l)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if derr != nil {
		return -1, fmt.Errorf("conn: duplicate listener: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("conn: listener: %w", err)
	}
	return fd, nil
}

func sockName(fd int) net.Addr {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil
	}
	return toAddr(sa)
}

func peerName(fd int) net.Addr {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return nil
	}
	return toAddr(sa)
}

func toAddr(sa unix.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: a.Name, Net: "unix"}
	}
	return nil
}

// connect starts a non-blocking connect; pending says it completes later
// (EINPROGRESS), with a Writable event.
func connect(sa sockAddr) (fd int, pending bool, err error) {
	var domain int
	var usa unix.Sockaddr
	switch {
	case sa.unix != "":
		domain, usa = unix.AF_UNIX, &unix.SockaddrUnix{Name: sa.unix}
	case sa.ip.Addr().Is4():
		domain, usa = unix.AF_INET, &unix.SockaddrInet4{Addr: sa.ip.Addr().As4(), Port: int(sa.ip.Port())}
	default:
		domain, usa = unix.AF_INET6, &unix.SockaddrInet6{Addr: sa.ip.Addr().As16(), Port: int(sa.ip.Port())}
	}
	fd, err = unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("conn: dial: socket: %w", err)
	}
	for {
		err = unix.Connect(fd, usa)
		if err != unix.EINTR {
			break
		}
	}
	switch err {
	case nil:
		return fd, false, nil
	case unix.EINPROGRESS, unix.EAGAIN: // EAGAIN: a Unix socket's backlog is full
		return fd, true, nil
	}
	unix.Close(fd)
	return -1, false, fmt.Errorf("conn: dial: %w", err)
}

// connectResult reads a completed connect's outcome.
func connectResult(fd int) error {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return err
	}
	if v != 0 {
		return unix.Errno(v)
	}
	return nil
}

// discardInput reads and drops what input is pending, at most 1 MB, and
// returns how much: close(2) on a socket with unread input sends a reset.
func discardInput(fd int) int {
	var buf [16 << 10]byte
	total := 0
	for total < 1<<20 {
		n, err := read(fd, buf[:])
		if n <= 0 || err != nil {
			break
		}
		total += n
	}
	return total
}

// unacked returns the output the socket holds that the peer has not
// acknowledged (TCP) or read (Unix): SIOCOUTQ. On error it returns 1: not
// known to be delivered.
func unacked(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.SIOCOUTQ)
	if err != nil {
		return 1
	}
	return n
}

// waitWritable waits in poll(2), at most d, until fd can take output (or
// has failed, which the next write reports).
func waitWritable(fd int, d time.Duration) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	for {
		if _, err := unix.Poll(fds, ms); err != unix.EINTR {
			return
		}
	}
}
