//go:build linux

package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

func TestMain(m *testing.M) {
	// The runtime's network poller keeps an epoll fd and a wake-up fd
	// for the life of the process: open them now, before any test counts
	// its fds.
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
	goleak.VerifyTestMain(m)
}

// timeout bounds every wait for something that must eventually happen. It
// is generous: the test machine is small and shared.
const timeout = 10 * time.Second

// quiet is how long a test watches for something that must not happen.
const quiet = 150 * time.Millisecond

// networks are the socket families the behaviour tests run on.
var networks = []string{"tcp", "unix"}

// forEachNetwork runs f as a subtest for TCP and Unix sockets.
func forEachNetwork(t *testing.T, f func(t *testing.T, network string)) {
	t.Helper()
	for _, nw := range networks {
		t.Run(nw, func(t *testing.T) { f(t, nw) })
	}
}

// checkFDLeak records the open fds now and, at cleanup (after the cleanups
// registered later, such as the server's Close and the clients' closes),
// fails the test if the set differs. Package net closes a client's fd when
// its last operation returns, so the check allows a moment for that.
func checkFDLeak(t testing.TB) {
	t.Helper()
	testkit.CheckFDLeak(t, 2*time.Second)
}

// listenAddr returns an address to listen on for network: loopback port 0,
// or a fresh socket path short enough for sun_path.
func listenAddr(t testing.TB, network string) string {
	t.Helper()
	switch network {
	case "unix":
		dir, err := os.MkdirTemp("", "conn")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return filepath.Join(dir, "s")
	case "tcp6":
		return "[::1]:0"
	}
	return "127.0.0.1:0"
}

// newServer checks for fd leaks, starts a server for h listening on
// network, and closes it at cleanup (before the leak check and before the
// recorder's checks, which were registered earlier).
func newServer(t testing.TB, h conn.Handler, opts conn.Options, network string) (*conn.Server, net.Addr) {
	t.Helper()
	checkFDLeak(t)
	s, err := conn.NewServer(h, opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { closeServer(t, s) })
	addr, err := s.Listen(network, listenAddr(t, network))
	if err != nil {
		t.Fatalf("Listen(%s): %v", network, err)
	}
	return s, addr
}

// closeServer closes s and fails the test if that does not finish within
// timeout (rather than hanging the test binary).
func closeServer(t testing.TB, s *conn.Server) {
	t.Helper()
	if err := testkit.Within(t, timeout, "Server.Close", s.Close); err != nil {
		t.Errorf("Server.Close: %v", err)
	}
	if st := s.Stats(); st.Open != 0 {
		t.Errorf("after Close: %d connections open", st.Open)
	}
}

// shutdownResult is what Shutdown returned.
type shutdownResult struct {
	drained, forced int
	err             error
}

// shutdownAsync runs s.Shutdown, bounded by timeout, on a goroutine of its
// own and delivers its result.
func shutdownAsync(s *conn.Server) <-chan shutdownResult {
	done := make(chan shutdownResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		d, f, err := s.Shutdown(ctx)
		done <- shutdownResult{d, f, err}
	}()
	return done
}

// dial connects a client to addr and closes it at cleanup.
func dial(t testing.TB, addr net.Addr) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout(addr.Network(), addr.String(), timeout)
	if err != nil {
		t.Fatalf("dial %s %s: %v", addr.Network(), addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// dialSmallReceive is dial with a 4 KB receive buffer.
func dialSmallReceive(t testing.TB, addr net.Addr) net.Conn {
	t.Helper()
	return dialReceive(t, addr, 4096)
}

// dialReceive is dial with a receive buffer of size bytes, set before the
// connection is made (set later, TCP would have advertised a window the
// buffer cannot hold, and stall in retransmission back-off).
func dialReceive(t testing.TB, addr net.Addr, size int) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: timeout, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		})
	}}
	nc, err := d.Dial(addr.Network(), addr.String())
	if err != nil {
		t.Fatalf("dial %s %s: %v", addr.Network(), addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// closeWrite half-closes a client (FIN).
func closeWrite(t testing.TB, nc net.Conn) {
	t.Helper()
	if err := nc.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatalf("client CloseWrite: %v", err)
	}
}

// closeReset closes a client so that the server sees a reset: SO_LINGER 0
// on TCP; on a Unix socket, closing with unread input does it.
func closeReset(t testing.TB, nc net.Conn) {
	t.Helper()
	if tc, ok := nc.(*net.TCPConn); ok {
		if err := tc.SetLinger(0); err != nil {
			t.Fatalf("SetLinger: %v", err)
		}
	}
	nc.Close()
}

// readFull reads exactly n bytes from nc within timeout.
func readFull(t testing.TB, nc net.Conn, n int) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(timeout))
	b := make([]byte, n)
	if got, err := io.ReadFull(nc, b); err != nil {
		t.Fatalf("client read %d of %d bytes: %v", got, n, err)
	}
	return b
}

// readToEOF reads nc until EOF within timeout; err is what ended it other
// than EOF.
func readToEOF(nc net.Conn) ([]byte, error) {
	nc.SetReadDeadline(time.Now().Add(timeout))
	return io.ReadAll(nc)
}

// expectEOF fails the test unless nc's next read is EOF.
func expectEOF(t testing.TB, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(timeout))
	var b [1]byte
	if n, err := nc.Read(b[:]); err != io.EOF {
		t.Fatalf("client read: %d bytes, %v; want EOF", n, err)
	}
}

// pattern returns n bytes (at most 32 MB) of a sequence whose every 8-byte
// word encodes its offset, so a reordered, lost or duplicated piece is
// told apart. The bytes are shared: do not modify them.
func pattern(n int) []byte {
	patternOnce.Do(func() {
		const hex = "0123456789abcdef"
		patternBytes = make([]byte, 32<<20)
		for i := 0; i < len(patternBytes); i += 8 {
			w := patternBytes[i : i+8]
			for j, v := 6, i&0xfffffff; j >= 0; j, v = j-1, v>>4 {
				w[j] = hex[v&15]
			}
			w[7] = ' '
		}
	})
	return patternBytes[:n:n]
}

var (
	patternOnce  sync.Once
	patternBytes []byte
)

// firstDiff describes where got first differs from want.
func firstDiff(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			lo := max(0, i-16)
			return fmt.Sprintf("at byte %d of %d: got %q, want %q", i, len(want), got[lo:min(len(got), i+16)], want[lo:min(len(want), i+16)])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	return "equal"
}

// wait waits for a value from ch.
func wait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	return testkit.Wait(t, ch, timeout, what)
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}

// isClosed reports err matching net.ErrClosed.
func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// closed is one OnClose call.
type closed struct {
	c      *conn.Conn
	reason conn.Reason
	err    error
	stats  conn.Stats
}

// recorder is a Handler that checks the handler contract for every
// connection (OnOpen first; never two methods at once; OnClose once, and
// nothing after it), reports opens and closes on channels, and runs the
// test's functions. By default OnData echoes. Its checks run at cleanup,
// after the server's Close (register it before newServer).
type recorder struct {
	t testing.TB

	open    func(c *conn.Conn)
	data    func(c *conn.Conn)
	close   func(c *conn.Conn, r conn.Reason, err error)
	drain   func(c *conn.Conn)
	readEOF func(c *conn.Conn)

	opened chan *conn.Conn
	closed chan closed

	mu    sync.Mutex
	conns map[*conn.Conn]*connState
	bad   []string
}

type connState struct {
	busy   atomic.Int32
	opens  int
	closes int
	datas  int
	eofs   int
}

func newRecorder(t testing.TB) *recorder {
	r := &recorder{
		t:      t,
		opened: make(chan *conn.Conn, 1024),
		closed: make(chan closed, 1024),
		conns:  map[*conn.Conn]*connState{},
	}
	t.Cleanup(r.check)
	return r
}

func (r *recorder) violation(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) < 10 {
		r.bad = append(r.bad, fmt.Sprintf(format, a...))
	}
}

// enter checks that method may run for c now and marks c busy.
func (r *recorder) enter(c *conn.Conn, method string) *connState {
	r.mu.Lock()
	st := r.conns[c]
	if st == nil {
		st = &connState{}
		r.conns[c] = st
		if method != "OnOpen" {
			r.bad = append(r.bad, method+" before OnOpen")
		}
	}
	switch method {
	case "OnOpen":
		st.opens++
	case "OnData":
		st.datas++
	case "OnReadEOF":
		st.eofs++
	}
	if st.closes > 0 {
		r.bad = append(r.bad, method+" after OnClose")
	}
	if method == "OnClose" {
		st.closes++
	}
	r.mu.Unlock()
	if !st.busy.CompareAndSwap(0, 1) {
		r.violation("%s while another handler method runs for the connection", method)
	}
	return st
}

func (r *recorder) exit(st *connState) { st.busy.Store(0) }

func (r *recorder) OnOpen(c *conn.Conn) {
	defer r.exit(r.enter(c, "OnOpen"))
	if r.open != nil {
		r.open(c)
	}
	r.opened <- c
}

func (r *recorder) OnData(c *conn.Conn) {
	defer r.exit(r.enter(c, "OnData"))
	if r.data != nil {
		r.data(c)
		return
	}
	b, _ := c.Next(c.Buffered())
	c.Write(b)
}

func (r *recorder) OnClose(c *conn.Conn, reason conn.Reason, err error) {
	if reason == conn.ReasonHandshake {
		// A TLS handshake that failed: the only handler method that
		// runs for the connection.
		r.mu.Lock()
		if r.conns[c] != nil {
			r.bad = append(r.bad, "OnClose(handshake) for a connection that had other methods run")
		}
		r.mu.Unlock()
		r.closed <- closed{c, reason, err, c.Stats()}
		return
	}
	defer r.exit(r.enter(c, "OnClose"))
	if r.close != nil {
		r.close(c, reason, err)
	}
	r.closed <- closed{c, reason, err, c.Stats()}
}

// check reports the contract's violations, and connections opened but
// never closed (the server is closed by now).
func (r *recorder) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c, st := range r.conns {
		if st.opens != 1 || st.closes != 1 {
			r.bad = append(r.bad, fmt.Sprintf("connection %v: OnOpen %d times, OnClose %d times; want once each", c.Handle(), st.opens, st.closes))
		}
	}
	if len(r.bad) > 0 {
		r.t.Errorf("handler contract violated:\n\t%s", strings.Join(r.bad, "\n\t"))
	}
}

// withDrain is a recorder that is a Drainer.
type withDrain struct{ *recorder }

func (r withDrain) OnDrain(c *conn.Conn) {
	defer r.exit(r.enter(c, "OnDrain"))
	if r.drain != nil {
		r.drain(c)
	}
}

// withReadEOF is a recorder that is a HalfCloser.
type withReadEOF struct{ *recorder }

func (r withReadEOF) OnReadEOF(c *conn.Conn) {
	defer r.exit(r.enter(c, "OnReadEOF"))
	if r.readEOF != nil {
		r.readEOF(c)
	}
}

// collector accumulates what OnData consumed, for a test to read.
type collector struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (k *collector) take(c *conn.Conn) {
	b, _ := c.Next(c.Buffered())
	k.mu.Lock()
	k.buf.Write(b)
	k.mu.Unlock()
}

func (k *collector) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.buf.Len()
}

func (k *collector) bytes() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return bytes.Clone(k.buf.Bytes())
}
