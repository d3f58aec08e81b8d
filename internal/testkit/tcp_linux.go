package testkit

import "golang.org/x/sys/unix"

// ListenTCP returns a blocking loopback TCP listener (127.0.0.1, a port of
// the system's choosing, backlog 64) made with raw system calls.
func ListenTCP() (int, error) {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(l)
		return -1, err
	}
	if err := unix.Listen(l, 64); err != nil {
		unix.Close(l)
		return -1, err
	}
	return l, nil
}

// TCPPair connects a new socket to listener l and accepts it: the accepted
// end and the client end, both non-blocking. On an error it closes what it
// opened.
func TCPPair(l int) (accepted, client int, err error) {
	sa, err := unix.Getsockname(l)
	if err != nil {
		return -1, -1, err
	}
	c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	if err := unix.Connect(c, sa); err != nil {
		unix.Close(c)
		return -1, -1, err
	}
	a, _, err := unix.Accept4(l, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		unix.Close(c)
		return -1, -1, err
	}
	if err := unix.SetNonblock(c, true); err != nil {
		unix.Close(a)
		unix.Close(c)
		return -1, -1, err
	}
	return a, c, nil
}

// CloseRST closes a TCP socket with a reset (SO_LINGER 0), leaving no
// TIME_WAIT behind.
func CloseRST(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	unix.Close(fd)
}
