//go:build linux

package conn

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gracepoll/gracepoll/internal/testkit"
)

// The fd-reuse security test at the connection level (poller's TestFDReuse
// one layer up). Connection A is served by a Server; several goroutines
// keep writing A-tagged records to it with Conn.Write, from outside the
// handler, while A is closed (Close, Abort, or the peer's FIN), and its fd
// number is forced onto a new socket B the moment the poller frees it: B's
// end is duplicated onto exactly that number with F_DUPFD_CLOEXEC (the
// lowest free number at or above it; dup3 would silently replace a socket
// another thread had just been given the number for). The writers go on
// after B took the number. The test fails if
//
//   - any byte reaches B's peer: nobody writes to B, so any byte there is
//     A's (records name their connection); 0 bytes, ever;
//   - B's socket is shut down, reset, closed or given SO_LINGER by anyone:
//     A's layer touched the number after it stopped being A's;
//   - A's fd number stops referring to A's socket before A's OnClose has
//     started: the layer promises the fd is closed only after OnClose,
//     after the grace period;
//   - A's peer receives a record of another connection, or OnClose runs
//     other than once.
//
// The number is freed by the poller right after OnClose returns, and B is
// placed within microseconds: the lane polls the number from the moment it
// starts the close (every 100 µs until OnClose starts, then without
// pause). The test's own sockets are made, and the server accepts, only
// outside every lane's watch (a lock), so B gets the number in practice
// every cycle; a cycle where another socket got it first counts as missed,
// and the test requires three in four forced.
//
// The checks are independent. The layer refuses writes once Close has
// begun (the state check under the connection's mutex), so an fd closed
// too early cannot leak A's bytes by itself: what shows it is A's number
// freed before OnClose, and A's layer later touching B's socket (a flush
// timeout sets SO_LINGER on whatever holds the number). A write that skips
// the state check after the release leaks bytes to B's peer at once.
// mutation_test.go proves both are caught.
//
// A and B are TCP on one lane and Unix sockets on the other.

var (
	fdrCycles = flag.Int("conn.fdreuse.cycles", 10000,
		"TestConnFDReuse: connection fd-number reuse cycles")
	fdrTLSCycles = flag.Int("conn.fdreuse.tlscycles", 1000,
		"TestConnFDReuse/TLS: reuse cycles over TLS, each with a handshake")
)

const (
	fdrRecLen     = 16 // connection id, sequence number: 8 bytes each
	fdrWriters    = 3  // goroutines writing to A
	fdrPostWrites = 2  // writes by each after B took A's number
	fdrLanes      = 2  // concurrent cycles: one TCP, one Unix
	fdrTimeout    = 10 * time.Second
)

// Over TLS (the subtest TLS) A is a TLS connection and its peer a
// crypto/tls client on the raw socket: the writers' records are
// encrypted, close_notify precedes the FIN, and any byte at B's peer, even
// one of ciphertext, is a violation.
func TestConnFDReuse(t *testing.T) {
	t.Run("Plain", func(t *testing.T) { testConnFDReuse(t, *fdrCycles, false) })
	t.Run("TLS", func(t *testing.T) { testConnFDReuse(t, *fdrTLSCycles, true) })
}

func testConnFDReuse(t *testing.T, cycles int, secure bool) {
	start := time.Now()
	res := runConnFDReuse(t, cycles, fdrLanes, false, 0, secure)
	res.summary(t, time.Since(start))
	res.fail(t)
	if n := res.cycles.Load(); n != int64(cycles) {
		t.Errorf("%d cycles done, want %d", n, cycles)
	}
	if f := res.forced.Load(); f < res.cycles.Load()*3/4 {
		t.Errorf("B was forced onto A's number in only %d of %d cycles", f, res.cycles.Load())
	}
	if res.postWrites.Load() == 0 {
		t.Errorf("no write to A after B took its number: the test does not exercise the race")
	}
}

// fdrConn is one connection A, as the test sees it.
type fdrConn struct {
	id     uint64
	opened chan struct{} // closed by OnOpen
	c      *Conn         // set before opened is closed
	num    int           // its fd number
	st     unix.Stat_t   // its socket's identity

	closeStarted atomic.Bool
	closes       atomic.Int32
	reason       Reason        // set before closed is closed
	closed       chan struct{} // closed by OnClose
}

type fdrResult struct {
	cycles, closes, aborts, peerFINs atomic.Int64
	forced, missed                   atomic.Int64 // B got A's number / another socket did first
	spins                            atomic.Int64 // polls of the number until it was freed
	written, refused, full, failed   atomic.Int64 // A's writes: accepted, net.ErrClosed, ErrQueueFull, other errors
	postWrites                       atomic.Int64 // writes to A after B took its number
	bytesToA                         atomic.Int64 // what A's peer received
	crossBytes                       atomic.Int64 // what B's peer received: must stay 0
	earlyFree                        atomic.Int64 // A's number freed before OnClose: must stay 0
	reasons                          [numReasons]atomic.Int64
	viol, errs                       fdrLog
}

func (r *fdrResult) summary(t testing.TB, took time.Duration) {
	t.Helper()
	var reasons []string
	for i := range numReasons {
		if n := r.reasons[i].Load(); n > 0 {
			reasons = append(reasons, fmt.Sprintf("%v %d", i, n))
		}
	}
	t.Logf("conn fd reuse: %d cycles in %v (%d Close, %d Abort, %d peer FIN; OnClose reasons: %s); "+
		"B forced onto A's number %d times (%d polls until the poller freed it), another socket got it first %d times; "+
		"writes to A: %d accepted, %d refused as closed, %d queue full, %d failed; %d writes after B took the number; "+
		"A's peers received %d bytes; B's peers received %d bytes; %d numbers freed before OnClose; %d violations",
		r.cycles.Load(), took.Round(time.Millisecond), r.closes.Load(), r.aborts.Load(), r.peerFINs.Load(), strings.Join(reasons, ", "),
		r.forced.Load(), r.spins.Load(), r.missed.Load(),
		r.written.Load(), r.refused.Load(), r.full.Load(), r.failed.Load(), r.postWrites.Load(),
		r.bytesToA.Load(), r.crossBytes.Load(), r.earlyFree.Load(), r.viol.Count())
}

func (r *fdrResult) fail(t testing.TB) {
	t.Helper()
	if n := r.viol.Count(); n != 0 {
		t.Errorf("%d violations; the first:\n%s", n, r.viol.String())
	}
	if n := r.errs.Count(); n != 0 {
		t.Errorf("%d unexpected errors; the first:\n%s", n, r.errs.String())
	}
}

// fdrHandler serves the A connections: OnOpen finds a connection's
// fdrConn by its peer's address; input is discarded.
type fdrHandler struct {
	res     *fdrResult
	cc      *tls.Config // A's peers' TLS config; nil: plaintext
	mu      sync.Mutex
	pending map[string]*fdrConn
}

func (h *fdrHandler) OnOpen(c *Conn) {
	sa, err := unix.Getpeername(c.fd)
	if err != nil {
		h.res.errs.Add("getpeername of fd %d: %v", c.fd, err)
		return
	}
	key := fdrKey(sa)
	h.mu.Lock()
	a := h.pending[key]
	delete(h.pending, key)
	h.mu.Unlock()
	if a == nil {
		h.res.viol.Add("connection from unknown peer %q", key)
		return
	}
	c.SetValue(a)
	a.c, a.num = c, c.fd
	if err := unix.Fstat(c.fd, &a.st); err != nil {
		h.res.errs.Add("fstat of connection %d's fd %d: %v", a.id, c.fd, err)
	}
	close(a.opened)
}

func (h *fdrHandler) OnData(c *Conn) { c.Discard(c.Buffered()) }

func (h *fdrHandler) OnClose(c *Conn, reason Reason, _ error) {
	a, _ := c.Value().(*fdrConn)
	if a == nil {
		return // closed before its hello
	}
	a.closeStarted.Store(true)
	if n := a.closes.Add(1); n != 1 {
		h.res.viol.Add("connection %d: OnClose ran %d times", a.id, n)
		return
	}
	a.reason = reason
	h.res.reasons[reason].Add(1)
	close(a.closed)
}

// runConnFDReuse runs cycles reuse cycles on lanes concurrent lanes. With
// stopEarly (mutation tests) it ends at the first violation, and with a
// budget after that time.
func runConnFDReuse(t *testing.T, cycles, lanes int, stopEarly bool, budget time.Duration, secure bool) *fdrResult {
	t.Helper()
	res := &fdrResult{}
	fdsBefore := testkit.FDs(t)
	h := &fdrHandler{res: res, pending: map[string]*fdrConn{}}
	opts := Options{
		SendBuffer:   4096, // most writes partial: A has output queued when it closes
		MaxQueued:    16 << 10,
		FlushTimeout: 2 * time.Second,
	}
	if secure {
		opts.TLS, h.cc = testkit.TLSConfigs(t)
	}
	s, err := NewServer(h, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fdr")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addrs := make([]net.Addr, 2)
	if addrs[0], err = s.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if addrs[1], err = s.Listen("unix", filepath.Join(dir, "s")); err != nil {
		t.Fatal(err)
	}
	bl, err := testkit.ListenTCP() // B's TCP pairs
	if err != nil {
		t.Fatal(err)
	}
	var (
		gate   sync.RWMutex // see fdrCycle
		nextID atomic.Uint64
		left   atomic.Int64
		wg     sync.WaitGroup
	)
	left.Store(int64(cycles))
	var deadline time.Time
	if budget > 0 {
		deadline = time.Now().Add(budget)
	}
	seed := uint64(time.Now().UnixNano())
	for lane := range lanes {
		tcp := lane%2 == 0
		addr := addrs[lane%2]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(lane)))
			for left.Add(-1) >= 0 {
				if stopEarly && res.viol.Count() > 0 || budget > 0 && time.Now().After(deadline) {
					return
				}
				a := &fdrConn{id: nextID.Add(1), opened: make(chan struct{}), closed: make(chan struct{})}
				if !fdrCycle(res, h, a, addr, tcp, bl, &gate, rng, stopEarly) {
					return
				}
				res.cycles.Add(1)
			}
		})
	}
	wg.Wait()
	unix.Close(bl)
	if err := testkit.Within(t, fdrTimeout, "Server.Close", s.Close); err != nil {
		t.Errorf("Server.Close: %v", err)
	}
	<-s.Done()
	if st := s.Stats(); st.Open != 0 {
		res.viol.Add("%d connections open after Server.Close", st.Open)
	}
	if !stopEarly { // a mutant may leave fds behind; its child process ends anyway
		testkit.ExpectFDs(t, fdsBefore, 2*time.Second) // allowing a moment for sockets the runtime closes late
	}
	return res
}

// fdrCycle runs one cycle: connect A, write to it from several goroutines,
// close it, force B onto its number, write on, check. It reports false if
// the lane must stop.
func fdrCycle(res *fdrResult, h *fdrHandler, a *fdrConn, addr net.Addr, tcp bool, bl int, gate *sync.RWMutex, rng *rand.Rand, stopEarly bool) bool {
	// A: connect; OnOpen finds a by the client's address. Like every
	// fd the test allocates, and every connection the server accepts, this
	// happens outside every lane's watch of a number being freed (gate).
	gate.Lock()
	cli, err := fdrDial(addr, a, h)
	if err != nil {
		gate.Unlock()
		res.errs.Add("connect A: %v", err)
		return false
	}
	var peerA io.Reader = fdStream(cli)
	var tc *tls.Conn
	if h.cc != nil {
		tc = tls.Client(fdStream(cli), h.cc)
		if err := tc.Handshake(); err != nil {
			gate.Unlock()
			res.errs.Add("connection %d: TLS handshake: %v", a.id, err)
			unix.Close(cli)
			return false
		}
		peerA = tc
	}
	select {
	case <-a.opened:
	case <-time.After(fdrTimeout):
		gate.Unlock()
		res.errs.Add("connection %d: no OnOpen within %v", a.id, fdrTimeout)
		unix.Close(cli)
		return false
	}
	// B: a new socket pair; bfd is forced onto A's number, peer is read.
	bfd, peer, err := fdrPair(tcp, bl)
	gate.Unlock()
	if err != nil {
		unix.Close(cli)
		res.errs.Add("B pair: %v", err)
		return false
	}
	// A's peer reads everything, checks every record is A's, and closes
	// at EOF (a TCP one with a reset half the time: 100,000 cycles of
	// TIME_WAIT would exhaust the ports).
	readerDone := make(chan struct{})
	rst := tcp && rng.IntN(2) == 0
	go func() {
		defer close(readerDone)
		fdrReadA(res, a, peerA)
		if rst {
			testkit.CloseRST(cli)
		} else {
			unix.Close(cli)
		}
	}()

	var bst unix.Stat_t
	unix.Fstat(bfd, &bst)

	// Writers: A-tagged records while A is open; once a write fails for
	// another reason than a full queue (A is closing), each waits until B
	// has A's number (or the cycle gives up on that) and writes again.
	var (
		stop          atomic.Bool
		next          = make(chan struct{}) // closed when B has the number, or not
		wrote         atomic.Int64
		writers       sync.WaitGroup
		firstWritesAt = int64(rng.IntN(8))
		forced        bool
	)
	for w := range fdrWriters {
		writers.Go(func() {
			var rec [fdrRecLen]byte
			binary.BigEndian.PutUint64(rec[:8], a.id)
			seq := uint64(w) << 56
			write := func() error {
				seq++
				binary.BigEndian.PutUint64(rec[8:], seq)
				_, err := a.c.Write(rec[:])
				switch {
				case err == nil:
					res.written.Add(1)
				case errors.Is(err, net.ErrClosed):
					res.refused.Add(1)
				case errors.Is(err, ErrQueueFull):
					res.full.Add(1)
				default:
					res.failed.Add(1)
				}
				wrote.Add(1)
				return err
			}
			for !stop.Load() {
				err := write()
				if errors.Is(err, ErrQueueFull) {
					time.Sleep(20 * time.Microsecond) // let A's peer catch up
					continue
				}
				if err != nil {
					break
				}
				runtime.Gosched() // several writers and lanes share two cores
			}
			<-next
			for range fdrPostWrites {
				write()
				if forced {
					res.postWrites.Add(1)
				}
			}
		})
	}
	for wrote.Load() < firstWritesAt {
		runtime.Gosched()
	}
	fdrJitter(rng)

	// Close A one of three ways and watch its number from that moment.
	gate.RLock()
	switch rng.IntN(8) {
	case 0, 1, 2:
		res.closes.Add(1)
		if err := a.c.Close(); err != nil {
			res.errs.Add("Close of connection %d: %v", a.id, err)
		}
	case 3, 4, 5:
		res.aborts.Add(1)
		if err := a.c.Abort(); err != nil {
			res.errs.Add("Abort of connection %d: %v", a.id, err)
		}
	default:
		res.peerFINs.Add(1)
		if tc != nil {
			tc.CloseWrite() // close_notify
		}
		unix.Shutdown(cli, unix.SHUT_WR) // the reader still owns cli
	}
	giveUp := time.Now().Add(fdrTimeout)
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for spins := int64(0); ; spins++ {
		var st unix.Stat_t
		err := unix.Fstat(a.num, &st)
		if err == nil && st.Dev == a.st.Dev && st.Ino == a.st.Ino {
			if time.Now().After(giveUp) {
				res.viol.Add("connection %d: its fd %d still open %v after its close began (OnClose started: %v)", a.id, a.num, fdrTimeout, a.closeStarted.Load())
				break
			}
			if a.closeStarted.Load() {
				runtime.Gosched() // the poller closes it as soon as OnClose returns
			} else {
				select { // an early close is seen at the next tick
				case <-a.closed:
				case <-tick.C:
				}
			}
			continue
		}
		res.spins.Add(spins)
		// The number no longer refers to A's socket: the poller closed
		// it, which it may do only after OnClose started.
		if !a.closeStarted.Load() {
			res.earlyFree.Add(1)
			res.viol.Add("connection %d: its fd %d was closed (%v) before its OnClose started: the number could be reused while the connection was still closing", a.id, a.num, fdrErrName(err))
		}
		if err == unix.EBADF {
			nfd, derr := unix.FcntlInt(uintptr(bfd), unix.F_DUPFD_CLOEXEC, a.num)
			switch {
			case derr != nil:
				res.errs.Add("F_DUPFD: %v", derr)
			case nfd == a.num:
				forced = true
			default:
				unix.Close(nfd) // another socket got the number first
			}
		}
		break
	}
	gate.RUnlock()
	unix.Close(bfd)
	if forced {
		res.forced.Add(1)
	} else {
		res.missed.Add(1)
	}
	stop.Store(true)
	close(next) // the writers write on: to B's number, if forced
	writers.Wait()

	// OnClose must come (it came already, unless the layer freed the
	// number early). A mutant may take FlushTimeout to get there.
	if !(stopEarly && res.viol.Count() > 0) {
		select {
		case <-a.closed:
		case <-time.After(fdrTimeout):
			res.viol.Add("connection %d: no OnClose within %v", a.id, fdrTimeout)
		}
	}

	if forced {
		fdrCheckB(res, a, peer, bst, tcp)
		if tcp {
			testkit.CloseRST(a.num)
		} else {
			unix.Close(a.num)
		}
	}
	unix.Close(peer)
	select {
	case <-readerDone:
	case <-time.After(fdrTimeout):
		res.viol.Add("connection %d: its peer saw no end of stream within %v", a.id, fdrTimeout)
		<-readerDone
	}
	return true
}

// fdrCheckB checks B after A ended: its peer received nothing, not even an
// end of stream, and A's number still holds B's socket, without SO_LINGER.
func fdrCheckB(res *fdrResult, a *fdrConn, peer int, bst unix.Stat_t, tcp bool) {
	var buf [4096]byte
	for {
		n, err := unix.Read(peer, buf[:])
		if err == unix.EINTR {
			continue
		}
		if n > 0 {
			res.crossBytes.Add(int64(n))
			what := ""
			if n >= fdrRecLen {
				what = fmt.Sprintf(", the first a record of connection %d", binary.BigEndian.Uint64(buf[:8]))
			}
			res.viol.Add("%d bytes reached the peer of B, which took connection %d's fd %d%s", n, a.id, a.num, what)
			continue
		}
		switch {
		case err == unix.EAGAIN:
		case err == nil:
			res.viol.Add("B's peer saw an end of stream: B, on connection %d's old fd %d, was shut down or closed by someone else", a.id, a.num)
		default:
			res.viol.Add("B's peer: %v: B, on connection %d's old fd %d, was reset by someone else", err, a.id, a.num)
		}
		break
	}
	var st unix.Stat_t
	if err := unix.Fstat(a.num, &st); err != nil || st.Dev != bst.Dev || st.Ino != bst.Ino {
		res.viol.Add("fd %d, B's since connection %d ended, no longer refers to B (%v): someone closed it", a.num, a.id, fdrErrName(err))
	}
	if tcp {
		if l, err := unix.GetsockoptLinger(a.num, unix.SOL_SOCKET, unix.SO_LINGER); err == nil && l.Onoff != 0 {
			res.viol.Add("B, on connection %d's old fd %d, has SO_LINGER set: someone reset it", a.id, a.num)
		}
	}
}

// fdrReadA reads A's stream to its end and checks every record is A's.
func fdrReadA(res *fdrResult, a *fdrConn, r io.Reader) {
	buf := make([]byte, 32<<10)
	have := 0 // bytes of a partial record at the start of buf
	for {
		n, _ := r.Read(buf[have:])
		if n <= 0 {
			return // EOF or a reset: the connection ended
		}
		res.bytesToA.Add(int64(n))
		have += n
		full := have - have%fdrRecLen
		for i := 0; i < full; i += fdrRecLen {
			if id := binary.BigEndian.Uint64(buf[i:]); id != a.id {
				res.viol.Add("A's peer (connection %d) received a record of connection %d", a.id, id)
				return
			}
		}
		have = copy(buf, buf[full:have])
	}
}

// fdrDial connects a blocking client socket for a to addr, from an
// address of its own that OnOpen looks a up by.
func fdrDial(addr net.Addr, a *fdrConn, h *fdrHandler) (int, error) {
	var sa, local unix.Sockaddr
	domain := unix.AF_INET
	switch ad := addr.(type) {
	case *net.TCPAddr:
		sa4 := &unix.SockaddrInet4{Port: ad.Port}
		copy(sa4.Addr[:], ad.IP.To4())
		sa, local = sa4, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	case *net.UnixAddr:
		domain, sa = unix.AF_UNIX, &unix.SockaddrUnix{Name: ad.Name}
		local = &unix.SockaddrUnix{Name: fmt.Sprintf("@gracepoll-fdr-%d-%d", os.Getpid(), a.id)} // abstract
	default:
		return -1, fmt.Errorf("address %v", addr)
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, local); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if local, err = unix.Getsockname(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	key := fdrKey(local)
	h.mu.Lock()
	h.pending[key] = a
	h.mu.Unlock()
	if err := unix.Connect(fd, sa); err != nil {
		h.mu.Lock()
		delete(h.pending, key)
		h.mu.Unlock()
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// fdrKey names a client by its address.
func fdrKey(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return "tcp:" + strconv.Itoa(a.Port)
	case *unix.SockaddrUnix:
		return "unix:" + a.Name
	}
	return fmt.Sprintf("%T", sa)
}

// fdrPair returns B: its end, and its peer, non-blocking; a TCP pair from
// bl, or a Unix socket pair. The caller holds the gate exclusively.
func fdrPair(tcp bool, bl int) (end, peer int, err error) {
	if !tcp {
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, -1, err
		}
		return p[0], p[1], nil
	}
	return testkit.TCPPair(bl)
}

func fdrErrName(err error) string {
	if err == nil {
		return "now another file"
	}
	return err.Error()
}

// fdrJitter sweeps the moment of the close against the writes.
func fdrJitter(rng *rand.Rand) {
	switch rng.IntN(4) {
	case 0:
	case 1:
		runtime.Gosched()
	case 2:
		for range rng.IntN(2000) {
			_ = rng.Uint32()
		}
	case 3:
		time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
	}
}

// fdrLog counts reports and keeps the first few.
type fdrLog = testkit.Log

// fdStream is a blocking socket as a net.Conn, to read A's stream
// directly or to run crypto/tls's client on, while the test keeps the
// number for its raw system calls (shutdown, SO_LINGER, close).
type fdStream int

func (f fdStream) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(f), p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (f fdStream) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		n, err := unix.Write(int(f), p[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return len(p), nil
}

func (fdStream) Close() error                     { return nil } // the test closes the number itself
func (fdStream) LocalAddr() net.Addr              { return nil }
func (fdStream) RemoteAddr() net.Addr             { return nil }
func (fdStream) SetDeadline(time.Time) error      { return nil }
func (fdStream) SetReadDeadline(time.Time) error  { return nil }
func (fdStream) SetWriteDeadline(time.Time) error { return nil }
