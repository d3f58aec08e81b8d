//go:build linux

package poller

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

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

// epollDel removes fd. It reports whether the number no longer named the
// registered file: the caller closed it before Delete (EBADF), and perhaps
// the number went to a file not in the set meanwhile (ENOENT).
func epollDel(epfd, fd int) (closedEarly bool) {
	err := unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, fd, nil)
	return err == unix.EBADF || err == unix.ENOENT
}

// epollWait waits for events; an interrupted wait returns no events.
func epollWait(epfd int, evs []epollEvent, msec int) (int, error) {
	n, err := unix.EpollWait(epfd, evs, msec)
	if err == unix.EINTR {
		return 0, nil
	}
	return n, err
}

// epollWaitNs waits for events for at most ns nanoseconds (epoll_pwait2,
// Linux 5.11; before that, epoll_wait rounded up to a millisecond); an
// interrupted wait returns no events.
func epollWaitNs(epfd int, evs []epollEvent, ns int64) (int, error) {
	if !noPwait2.Load() {
		ts := unix.NsecToTimespec(ns)
		r, _, e := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			return 0, nil
		case unix.ENOSYS:
			noPwait2.Store(true)
		default:
			return 0, e
		}
	}
	return epollWait(epfd, evs, int((ns+999_999)/1_000_000))
}

// noPwait2 is set once the kernel turned epoll_pwait2 down.
var noPwait2 atomic.Bool

// epollEntry is one entry of an epoll set, as /proc/self/fdinfo lists it.
type epollEntry struct {
	fd  int    // the number it was added with
	h   Handle // its data
	ino uint64 // inode of its file, if listed (hasIno)
	dev uint64 // device of its file, in the kernel's encoding (major<<20 | minor)

	hasIno bool
}

// epollEntries lists the entries of epoll set epfd. An fd closed while
// another descriptor shares its open file (dup, fork, SCM_RIGHTS) stays in
// every epoll set it was added to, listed under its old number, which
// EPOLL_CTL_DEL can no longer name.
func epollEntries(epfd int) ([]epollEntry, error) {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(epfd))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// "tfd:        7 events:       19 data:      100000003  pos:0 ino:1d8e sdev:9"
	// (ino and sdev in hex; older kernels list neither)
	var es []epollEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[0] != "tfd:" || fields[4] != "data:" {
			continue
		}
		fd, err1 := strconv.Atoi(fields[1])
		data, err2 := strconv.ParseUint(fields[5], 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		e := epollEntry{fd: fd, h: Handle(data)}
		var okIno, okDev bool
		for _, kv := range fields[6:] {
			if v, ok := strings.CutPrefix(kv, "ino:"); ok {
				e.ino, err1 = strconv.ParseUint(v, 16, 64)
				okIno = err1 == nil
			} else if v, ok := strings.CutPrefix(kv, "sdev:"); ok {
				e.dev, err2 = strconv.ParseUint(v, 16, 64)
				okDev = err2 == nil
			}
		}
		e.hasIno = okIno && okDev
		es = append(es, e)
	}
	return es, sc.Err()
}

// entryAlive reports whether epoll set epfd still holds an entry for fd
// number fd carrying handle h.
func entryAlive(epfd, fd int, h Handle) bool {
	es, _ := epollEntries(epfd)
	for _, e := range es {
		if e.fd == fd && e.h == h {
			return true
		}
	}
	return false
}

// sameFile reports whether e's number still names e's file: it is open
// and, where fdinfo lists the inode, of that inode. A number closed early
// may already belong to another file. Files on an anonymous inode
// (eventfd, timerfd, signalfd) share it with every other such file, so for
// them this tells little more than that the number is open.
func sameFile(e epollEntry) bool {
	var st unix.Stat_t
	if unix.Fstat(e.fd, &st) != nil {
		return false
	}
	if !e.hasIno {
		return true
	}
	return st.Ino == e.ino && uint64(unix.Major(st.Dev)) == e.dev>>20 && uint64(unix.Minor(st.Dev)) == e.dev&(1<<20-1)
}

// replaceFD makes number target refer to fd's file, closing target's old
// file in the same step, so that the number is never free for another
// open; fd stays open.
func replaceFD(fd, target int) error {
	if err := unix.Dup3(fd, target, unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("poller: dup3: %w", err)
	}
	return nil
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

// readable reports whether fd polls readable now; for an epoll fd, whether
// its ready list holds an event.
func readable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(pfd, 0)
	return n > 0 && pfd[0].Revents&unix.POLLIN != 0
}

func closeFD(fd int) { unix.Close(fd) }

func gettid() int { return unix.Gettid() }

// parker is how a waiter blocks: in the Go runtime's netpoller, on an
// epoll set of its own that holds the waiter's epoll set (an epoll fd polls
// readable while its ready list is not empty), rather than in epoll_wait.
// A goroutine blocked in a system call keeps its P until sysmon takes it
// back, which on an idle process, where sysmon sleeps up to 10 ms between
// looks, can be milliseconds: with GOMAXPROCS=1 a handler's time.Sleep, or
// another waiter's events, then wait that long for the one P. A goroutine
// parked in the netpoller holds no P. Each waiter has its own parker, as an
// *os.File takes one reader at a time, made once: when its set is renewed
// or it stands in on another, it watches the new set instead, and no fd
// number is taken after New but for an extra waiter's first start. The
// parker holds the set only while the waiter parks rather than blocks: a
// nested epoll entry, even a disabled one-shot one, passes every wake-up of
// the set on to the parker, which cost a third of the dispatch rate of one
// busy waiter (BenchmarkDispatchVariants, W=1, K=64: about 400,000 events/s
// instead of 610,000-680,000).
type parker struct {
	f      *os.File
	fd     int
	target int  // the epoll set it watches, -1 if none
	added  bool // its entry is in the parker's set
	// refused: the kernel would not nest the set in this parker (see
	// wait); the waiter blocks in epoll_wait instead, until it watches
	// another set.
	refused bool
}

func newParker() (*parker, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poller: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("poller: epoll fd non-blocking: %w", err)
	}
	return &parker{f: os.NewFile(uintptr(fd), "poller parker"), fd: fd, target: -1}, nil
}

// watch makes k watch epoll set epfd from its next wait, in place of the
// one it watched or of the set a renewal replaced under the same number.
func (k *parker) watch(epfd int) error {
	k.disarm() // ENOENT if a renewal took the old set with its entry
	k.target, k.refused = epfd, false
	return nil
}

// arm adds the set to the parker, unless it holds it already: the kernel
// polls the set at once, so events already there are reported.
func (k *parker) arm() error {
	if k.added {
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(k.fd, unix.EPOLL_CTL_ADD, k.target, &ev); err != nil {
		return fmt.Errorf("poller: parker: watch epoll set: %w", err)
	}
	k.added = true
	return nil
}

// disarm takes the set out of the parker again.
func (k *parker) disarm() {
	if k.added {
		unix.EpollCtl(k.fd, unix.EPOLL_CTL_DEL, k.target, nil)
		k.added = false
	}
}

// wait returns the events ready in the watched set, parking until there
// are some or msec milliseconds have passed (msec < 0: no limit).
//
// Linux bounds the wake-up paths through nested epoll sets (a socket in
// the shared set, the set in a parker, the parker in the Go runtime's
// netpoller: at most 100 such paths, fs/eventpoll.c's reverse_path_check),
// so when more waiters park on one set the kernel refuses to add it to
// another parker (EINVAL). That waiter then blocks in epoll_wait, holding
// its thread as the waiters within GOMAXPROCS do, rather than fail.
func (k *parker) wait(evs []epollEvent, msec int) (int, error) {
	if k.refused {
		return epollWait(k.target, evs, msec)
	}
	rc, err := k.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var deadline time.Time
	if msec >= 0 {
		deadline = time.Now().Add(time.Duration(msec) * time.Millisecond)
	}
	k.f.SetReadDeadline(deadline)
	var n int
	var werr error
	err = rc.Read(func(uintptr) bool {
		if n, werr = epollWait(k.target, evs, 0); n > 0 || werr != nil {
			return true
		}
		// Nothing yet: the parker must hold the set before the runtime
		// parks the goroutine (adding it polls the set, so nothing that
		// came since is missed). A report of the parker now or later wakes
		// it: the netpoller keeps an edge that came before the park.
		werr = k.arm()
		if errors.Is(werr, unix.EINVAL) {
			k.refused, werr = true, nil
		}
		return werr != nil || k.refused
	})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, err
	}
	if k.refused {
		return epollWait(k.target, evs, msec)
	}
	return n, werr
}

// close closes the parker's own set.
func (k *parker) close() { k.f.Close() }

// alarm wakes the Go runtime's netpoller at a precise time: a timerfd,
// non-blocking and so registered in the netpoller by os.NewFile, that
// nobody reads. The runtime sleeps in epoll_pwait with a timeout in whole
// milliseconds, so on an idle process a timer due in 125 µs fires after a
// millisecond; the timerfd's expiry ends that epoll_pwait at its time, and
// the scheduler, awake, runs the timers then due. Nothing needs to read
// it: each expiry is a new edge for the netpoller.
type alarm struct {
	f  *os.File
	fd int
}

func newAlarm() (*alarm, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poller: timerfd_create: %w", err)
	}
	return &alarm{f: os.NewFile(uintptr(fd), "poller monitor alarm"), fd: fd}, nil
}

// set makes the alarm go off d from now, in place of any earlier setting.
func (a *alarm) set(d time.Duration) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	unix.TimerfdSettime(a.fd, 0, &spec, nil)
}

func (a *alarm) close() { a.f.Close() }
