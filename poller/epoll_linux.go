//go:build linux

package poller

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// This file holds the system calls the poller makes, and nothing else; the
// rest of the package is the same on every system (as runtime/netpoll.go
// and runtime/netpoll_epoll.go divide the Go runtime's netpoller).

// supported says New can work here.
const supported = true

// epollEvent is the kernel's struct epoll_event.
type epollEvent = unix.EpollEvent

func epollCreate() (int, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("poller: epoll_create1: %w", err)
	}
	return fd, nil
}

func epollCtl(epfd, op, fd int, bits uint32, h Handle) error {
	ev := unix.EpollEvent{Events: bits, Fd: int32(uint32(h)), Pad: int32(uint32(h >> 32))}
	return unix.EpollCtl(epfd, op, fd, &ev)
}

// epollAdd registers fd with handle h; errors the caller caused wrap
// ErrInvalid.
func epollAdd(epfd, fd int, bits uint32, h Handle) error {
	err := epollCtl(epfd, unix.EPOLL_CTL_ADD, fd, bits, h)
	switch err {
	case nil:
		return nil
	case unix.EBADF:
		return fmt.Errorf("%w: fd %d is not open: %w", ErrInvalid, fd, err)
	case unix.EPERM:
		return fmt.Errorf("%w: fd %d does not support epoll (a regular file or directory?): %w", ErrInvalid, fd, err)
	case unix.EEXIST:
		return fmt.Errorf("%w: fd %d is already in this epoll set (registered by another epoll user of the same set?): %w", ErrInvalid, fd, err)
	case unix.EINVAL, unix.ELOOP:
		return fmt.Errorf("%w: fd %d cannot be watched by this epoll set: %w", ErrInvalid, fd, err)
	}
	return fmt.Errorf("poller: add fd %d: %w", fd, err)
}

func epollMod(epfd, fd int, bits uint32, h Handle) error {
	return epollCtl(epfd, unix.EPOLL_CTL_MOD, fd, bits, h)
}

// epollDel removes fd. It reports whether fd was no longer open: the
// caller closed it before Delete.
func epollDel(epfd, fd int) (closedEarly bool) {
	return unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, fd, nil) == unix.EBADF
}

// epollWait waits for events; an interrupted wait returns no events.
func epollWait(epfd int, evs []epollEvent, msec int) (int, error) {
	n, err := unix.EpollWait(epfd, evs, msec)
	if err == unix.EINTR {
		return 0, nil
	}
	return n, err
}

// entryAlive reports whether epoll set epfd still holds an entry for fd
// number fd carrying handle h, as /proc/self/fdinfo lists it. An fd closed
// while another descriptor shares its open file (dup, fork, SCM_RIGHTS)
// stays in every epoll set it was added to, and EPOLL_CTL_DEL can no
// longer name it.
func entryAlive(epfd, fd int, h Handle) bool {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(epfd))
	if err != nil {
		return false
	}
	defer f.Close()
	// "tfd:        7 events:       19 data:      100000003  pos:0 ..."
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[0] != "tfd:" || fields[4] != "data:" {
			continue
		}
		tfd, err1 := strconv.Atoi(fields[1])
		data, err2 := strconv.ParseUint(fields[5], 16, 64)
		if err1 == nil && err2 == nil && tfd == fd && Handle(data) == h {
			return true
		}
	}
	return false
}

func newEventfd() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("poller: eventfd: %w", err)
	}
	return fd, nil
}

// signal adds to an eventfd: native-endian 1 on little-endian machines,
// and non-zero, which is all a wake-up needs, elsewhere.
func signal(efd int) {
	one := [8]byte{1}
	unix.Write(efd, one[:])
}

// drain resets an eventfd's counter.
func drain(efd int) {
	var buf [8]byte
	unix.Read(efd, buf[:])
}

func closeFD(fd int) { unix.Close(fd) }

func gettid() int { return unix.Gettid() }
