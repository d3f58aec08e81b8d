//go:build linux

package peers

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// skewClient is BenchmarkSkew's open-loop client: its connections to one
// server, driven by one loop on one OS thread over an epoll set of its own.
//
// The first version of this client, a nanosleep-paced sender thread and a
// goroutine per connection reading (GOMAXPROCS=2 on the client's one CPU),
// used about 70 µs of client CPU per request and saw a light p99 of
// 3-4 ms without skew for every server. Here a reply is read by the thread
// that waits, as soon as epoll reports it, and between sends the loop waits
// for the next scheduled one with epoll_pwait2 and a timer slack of 1 ns.
//
// The loop must not poll instead of waiting. A version that polled epoll
// between sends kept its CPU 100 % busy and, with idle polling (pollIdle)
// on the server's CPU, both virtual CPUs: on the 2-vCPU machine of
// bench/run.sh the hypervisor then took them away for milliseconds at a
// time (steal 6-7 % of the wall time, the client's own sends 1.3-1.5 ms
// late at p99), and the light p99 without skew was 2.7 ms for conn on the
// shared set, 2.5 ms for net and 0.28 ms for gnet; the same servers
// minutes later with this loop waiting: 64-86 µs, sends about 35 µs late
// at p99, steal 0.25 %.
type skewClient struct {
	conns []*skewConn
}

// skewConn is one connection of the client.
type skewConn struct {
	fd      int
	pending []skewSent // frames sent whose replies have not come, oldest first
	in      []byte     // reply bytes read, not yet a whole frame
	out     []byte     // frames the socket did not take yet
}

// skewSent is a frame sent, as its connection expects its reply.
type skewSent struct {
	seq  uint64
	d    time.Duration // its work; 0 for a light request
	spin bool
	due  time.Duration // its scheduled send, since the run's start
}

// skewResult is what one run of the client measured.
type skewResult struct {
	light []time.Duration // the light requests' latencies, sorted
	lag   []time.Duration // every write's lateness behind its schedule, sorted
	// stalls counts the server's stalls: 1 ms windows of the schedule in
	// which stallSlow or more light requests took over stallLatency
	// while every send was less than stallLag late (see stallWindow).
	stalls int
	slow   int           // slow requests
	wall   time.Duration // first scheduled send to last reply
}

// dialSkew opens n connections to addr, non-blocking, with TCP_NODELAY.
func dialSkew(addr string, n int) (*skewClient, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("dial %q: not an IPv4 host:port", addr)
	}
	sa := &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	cl := &skewClient{}
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			cl.close()
			return nil, err
		}
		cl.conns = append(cl.conns, &skewConn{fd: fd, in: make([]byte, 0, 64*SkewFrameSize)})
		// The connect blocks (a loopback handshake), bounded by the send
		// timeout; then the socket turns non-blocking for the loop.
		tv := unix.NsecToTimeval(ioTimeout.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			cl.close()
			return nil, err
		}
		if err := unix.Connect(fd, sa); err != nil {
			cl.close()
			return nil, fmt.Errorf("connect %s: %w", addr, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			cl.close()
			return nil, err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			cl.close()
			return nil, err
		}
	}
	return cl, nil
}

// close closes every connection.
func (cl *skewClient) close() {
	for _, c := range cl.conns {
		unix.Close(c.fd)
	}
}

// run sends frames on schedule, one every 1/rate s for d, each to a
// connection chosen at random and slow by cell.d with probability cell.p,
// reads and checks every reply, and returns once all have come. The
// schedule is fixed in advance: a frame whose time has come is sent even
// if the client is late, and its latency counts from its scheduled time.
func (cl *skewClient) run(d time.Duration, rate float64, cell skewCell) (skewResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The kernel's default timer slack lets a timed wait end up to 50 µs
	// late; the schedule wants the wake-up on time. The setting is this
	// thread's, and the thread is this loop's until it unlocks.
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		return skewResult{}, fmt.Errorf("PR_SET_TIMERSLACK: %w", err)
	}
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, 0, 0, 0, 0) // back to the default
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return skewResult{}, err
	}
	defer unix.Close(epfd)
	for i, c := range cl.conns {
		c.pending, c.in, c.out = c.pending[:0], c.in[:0], c.out[:0]
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			return skewResult{}, err
		}
	}
	total := int(math.Ceil(d.Seconds() * rate))
	interval := float64(time.Second) / rate
	due := func(i int) time.Duration { return time.Duration(float64(i) * interval) }
	// The last reply may come after every slow frame of one connection
	// in a row, and a margin.
	limit := d + time.Duration(cell.p*float64(total))*cell.d + ioTimeout

	r := skewResult{light: make([]time.Duration, 0, total), lag: make([]time.Duration, 0, total)}
	windows := make([]stallWindow, d/time.Millisecond+1)
	rng := rand.New(rand.NewPCG(16, uint64(len(cl.conns))))
	seqs := make([]uint64, len(cl.conns))
	frame := make([]byte, SkewFrameSize)
	want := make([]byte, SkewFrameSize)
	buf := make([]byte, 64<<10)
	events := make([]unix.EpollEvent, 256)
	var last time.Duration
	sent, outstanding := 0, 0
	start := time.Now()
	for sent < total || outstanding > 0 {
		now := time.Since(start)
		for ; sent < total && due(sent) <= now; sent++ {
			ci := rng.IntN(len(cl.conns))
			c := cl.conns[ci]
			s := skewSent{seq: seqs[ci], due: due(sent)}
			if rng.Float64() < cell.p {
				s.d, s.spin = cell.d, cell.spin
			}
			seqs[ci]++
			PutSkewFrame(frame, s.seq, s.d, s.spin, uint32(ci))
			c.pending = append(c.pending, s)
			outstanding++
			if err := cl.send(epfd, ci, frame); err != nil {
				return r, err
			}
			lag := time.Since(start) - s.due
			r.lag = append(r.lag, lag)
			w := &windows[s.due/time.Millisecond]
			w.lag = max(w.lag, lag)
		}
		var wait time.Duration
		if sent < total {
			wait = max(due(sent)-time.Since(start), 0)
		} else if wait = limit - time.Since(start); wait <= 0 {
			return r, fmt.Errorf("%d replies missing %v after the first send", outstanding, limit)
		}
		n, err := epollWaitFor(epfd, events, wait)
		if err != nil {
			return r, err
		}
		for _, ev := range events[:n] {
			ci := int(ev.Fd)
			c := cl.conns[ci]
			if ev.Events&unix.EPOLLOUT != 0 {
				if err := cl.send(epfd, ci, nil); err != nil {
					return r, err
				}
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
				continue
			}
			m, err := unix.Read(c.fd, buf)
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			at := time.Since(start)
			if err != nil {
				return r, fmt.Errorf("connection %d: read: %w", ci, err)
			}
			if m == 0 {
				return r, fmt.Errorf("connection %d: the server closed it with %d replies to come", ci, len(c.pending))
			}
			c.in = append(c.in, buf[:m]...)
			done := 0
			for ; len(c.in)-done >= SkewFrameSize; done += SkewFrameSize {
				got := c.in[done : done+SkewFrameSize]
				if len(c.pending) == 0 {
					return r, fmt.Errorf("connection %d: reply % x to no frame", ci, got)
				}
				s := c.pending[0]
				c.pending = c.pending[1:]
				outstanding--
				PutSkewFrame(want, s.seq, s.d, s.spin, uint32(ci))
				if !bytes.Equal(got, want) {
					return r, fmt.Errorf("connection %d: reply % x to frame % x", ci, got, want)
				}
				if s.d > 0 {
					r.slow++
				} else {
					r.light = append(r.light, at-s.due)
					if at-s.due > stallLatency {
						windows[s.due/time.Millisecond].slow++
					}
				}
				last = at
			}
			c.in = c.in[:copy(c.in, c.in[done:])]
		}
	}
	for _, w := range windows {
		if w.slow >= stallSlow && w.lag < stallLag {
			r.stalls++
		}
	}
	slices.Sort(r.light)
	slices.Sort(r.lag)
	r.wall = last
	return r, nil
}

// send writes frame (nil: only what is queued) to connection ci, behind
// anything the socket did not take before. A remainder is queued and the
// connection watched for Writable until it is gone; at the benchmark's
// rates a connection's frames of a whole run fit its socket buffer, so
// this is for correctness, not for speed.
func (cl *skewClient) send(epfd, ci int, frame []byte) error {
	c := cl.conns[ci]
	queued := len(c.out) > 0
	c.out = append(c.out, frame...)
	n, err := unix.Write(c.fd, c.out)
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		return fmt.Errorf("connection %d: write: %w", ci, err)
	}
	c.out = c.out[:copy(c.out, c.out[max(n, 0):])]
	if blocked := len(c.out) > 0; blocked != queued {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(ci)}
		if blocked {
			ev.Events |= unix.EPOLLOUT
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			return err
		}
	}
	return nil
}

// epollWaitFor waits up to d for events on epfd with epoll_pwait2(2),
// whose timeout is in nanoseconds, where epoll_wait's is in whole
// milliseconds; on a kernel without it (before 5.11) it falls back to
// epoll_wait with d rounded up to a millisecond. EINTR is no events.
func epollWaitFor(epfd int, events []unix.EpollEvent, d time.Duration) (int, error) {
	if !noPwait2 {
		ts := unix.NsecToTimespec(d.Nanoseconds())
		n, _, errno := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		switch errno {
		case 0:
			return int(n), nil
		case unix.EINTR:
			return 0, nil
		case unix.ENOSYS:
			noPwait2 = true
		default:
			return 0, errno
		}
	}
	n, err := unix.EpollWait(epfd, events, int((d+time.Millisecond-1)/time.Millisecond))
	if errors.Is(err, unix.EINTR) {
		return 0, nil
	}
	return n, err
}

// noPwait2 records that the kernel lacks epoll_pwait2; only the client's
// loop, one at a time, reads and writes it.
var noPwait2 bool

// A stall of the server, as the client sees it: in one millisecond of the
// schedule (about ten requests at 10,000/s) at least stallSlow light
// requests took over stallLatency, while every send of that millisecond
// left less than stallLag late. Requests sent on time and all answered
// late at once were held up together on the server's side (its CPU, its
// runtime, its design); a late client would have made them late itself.
const (
	stallLatency = 400 * time.Microsecond
	stallSlow    = 5
	stallLag     = 100 * time.Microsecond
)

// stallWindow is one millisecond of the schedule.
type stallWindow struct {
	slow int           // light requests sent then that took over stallLatency
	lag  time.Duration // the latest send's lateness
}
