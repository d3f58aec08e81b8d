//go:build linux

package conn_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

// slack is how late a deadline may fire on this small shared machine (and
// under -race) before a test calls it missed.
const slack = time.Second

// withTimeout is a recorder that is a Timeouter: OnTimeout goes through
// the recorder's contract checks (never with another method of the
// connection, never after its OnClose).
type withTimeout struct {
	*recorder
	timeout func(c *conn.Conn)
}

func (r withTimeout) OnTimeout(c *conn.Conn) {
	defer r.exit(r.enter(c, "OnTimeout"))
	if r.timeout != nil {
		r.timeout(c)
	}
}

// goid returns the calling goroutine's id: a poller waiter is one
// goroutine, so two callbacks with the same id ran on the same waiter.
func goid() uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	s = s[:bytes.IndexByte(s, ' ')]
	id, _ := strconv.ParseUint(string(s), 10, 64)
	return id
}

// onceConn maps connections to a value set once, from handler methods.
type perConn[T any] struct {
	mu sync.Mutex
	m  map[*conn.Conn]T
}

func (p *perConn[T]) set(c *conn.Conn, v T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[*conn.Conn]T{}
	}
	p.m[c] = v
}

func (p *perConn[T]) get(c *conn.Conn) (T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.m[c]
	return v, ok
}

// TestDeadlineOnOwnWaiter: an idle deadline fires inside the poller's
// callback, on the goroutine of the waiter that runs the connection's
// OnData, with Stats().Waiter and the poller's Info agreeing, at or after
// the deadline.
func TestDeadlineOnOwnWaiter(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const idle, n = 200 * time.Millisecond, 8
		r := newRecorder(t)
		var srv atomic.Pointer[conn.Server]
		type seen struct {
			g      uint64
			waiter int
			at     time.Time
		}
		var data perConn[seen]
		r.data = func(c *conn.Conn) {
			c.Discard(c.Buffered())
			data.set(c, seen{goid(), c.Stats().Waiter, time.Now()})
			c.Write([]byte("ok"))
		}
		fired := make(chan string, n)
		h := withTimeout{recorder: r, timeout: func(c *conn.Conn) {
			now := time.Now()
			d, ok := data.get(c)
			info, err := srv.Load().Poller().Info(c.Handle())
			switch {
			case !ok:
				fired <- "OnTimeout before any OnData (the client wrote at once)"
			case !srv.Load().Poller().InCallback():
				fired <- "OnTimeout outside the poller's callbacks"
			case goid() != d.g:
				fired <- fmt.Sprintf("OnTimeout on goroutine %d, OnData on %d", goid(), d.g)
			case c.Stats().Waiter != d.waiter || err != nil || info.Waiter != d.waiter:
				fired <- fmt.Sprintf("OnTimeout: Stats().Waiter %d, Info.Waiter %d (%v); OnData's waiter %d", c.Stats().Waiter, info.Waiter, err, d.waiter)
			case now.Sub(d.at) < idle:
				fired <- fmt.Sprintf("OnTimeout %v after the last progress, before the idle timeout %v", now.Sub(d.at), idle)
			default:
				fired <- ""
			}
			c.Close()
		}}
		opts := conn.Options{Poller: poller.Options{Waiters: 2}, IdleTimeout: idle}
		s, addr := newServer(t, h, opts, network)
		srv.Store(s)
		waiters := map[int]bool{}
		var clients []net.Conn
		for range n {
			nc := dial(t, addr)
			clients = append(clients, nc)
			c := wait(t, r.opened, "OnOpen")
			nc.Write([]byte("x"))
			readFull(t, nc, 2)
			d, _ := data.get(c)
			waiters[d.waiter] = true
		}
		for range n {
			if msg := wait(t, fired, "OnTimeout"); msg != "" {
				t.Error(msg)
			}
		}
		for _, nc := range clients {
			expectEOF(t, nc) // OnTimeout's Close
			nc.Close()
		}
		for range n {
			if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonLocalClose {
				t.Errorf("OnClose reason %v (%v), want local-close (OnTimeout closed it)", cl.reason, cl.err)
			}
		}
		if got := s.Stats().Timeouts; got != n {
			t.Errorf("Stats().Timeouts = %d, want %d", got, n)
		}
		t.Logf("connections on waiters %v", waiters)
	})
}

// TestDeadlineMoves: a deadline moved later does not fire at its old time,
// one moved earlier fires at its new time, a cleared one (zero time) and
// SetIdleTimeout(0) never fire; controls with the same timers fire. Each
// plan is applied in OnOpen, so the timers are armed before they move.
func TestDeadlineMoves(t *testing.T) {
	const (
		first = 150 * time.Millisecond // the deadline first set
		later = 500 * time.Millisecond // moved later
		idle  = 150 * time.Millisecond // Options.IdleTimeout
		// early allows for the idle deadline starting just before
		// OnOpen, where the plan's time is taken.
		early = 20 * time.Millisecond
	)
	type plan struct {
		name string
		// apply runs in OnOpen with the time it started; want is when
		// OnTimeout is due after that, 0 for never.
		apply func(c *conn.Conn, t0 time.Time) error
		want  time.Duration
	}
	noIdle := func(c *conn.Conn) error { return c.SetIdleTimeout(0) }
	queue := func(c *conn.Conn) error { _, err := c.Write(pattern(1 << 20)); return err }
	plans := []plan{
		{"idle-control", func(c *conn.Conn, t0 time.Time) error { return nil }, idle},
		{"idle-off", func(c *conn.Conn, t0 time.Time) error { return noIdle(c) }, 0},
		{"idle-longer", func(c *conn.Conn, t0 time.Time) error { return c.SetIdleTimeout(later) }, later},
		{"read-control", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), c.SetReadDeadline(t0.Add(first)))
		}, first},
		{"read-later", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), c.SetReadDeadline(t0.Add(first)), c.SetReadDeadline(t0.Add(later)))
		}, later},
		{"read-earlier", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), c.SetReadDeadline(t0.Add(10*time.Second)), c.SetReadDeadline(t0.Add(first)))
		}, first},
		{"read-cleared", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), c.SetReadDeadline(t0.Add(first)), c.SetReadDeadline(time.Time{}))
		}, 0},
		{"write-control", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), queue(c), c.SetWriteDeadline(t0.Add(first)))
		}, first},
		{"write-later", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), queue(c), c.SetWriteDeadline(t0.Add(first)), c.SetWriteDeadline(t0.Add(later)))
		}, later},
		{"write-cleared", func(c *conn.Conn, t0 time.Time) error {
			return errors.Join(noIdle(c), queue(c), c.SetWriteDeadline(t0.Add(first)), c.SetWriteDeadline(time.Time{}))
		}, 0},
	}
	pattern(1) // built once, now, not inside a plan's timing
	forEachNetwork(t, func(t *testing.T, network string) {
		r := newRecorder(t)
		var opened perConn[time.Time]
		var names perConn[string]
		next := make(chan plan, len(plans))
		r.open = func(c *conn.Conn) {
			p := <-next
			names.set(c, p.name)
			t0 := time.Now()
			opened.set(c, t0)
			if err := p.apply(c, t0); err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
		}
		type fire struct {
			name  string
			after time.Duration
		}
		fired := make(chan fire, len(plans))
		h := withTimeout{recorder: r, timeout: func(c *conn.Conn) {
			at, _ := opened.get(c)
			name, _ := names.get(c)
			fired <- fire{name, time.Since(at)}
			c.Abort()
		}}
		_, addr := newServer(t, h, conn.Options{IdleTimeout: idle, SendBuffer: 4096}, network)
		want := map[string]time.Duration{}
		for _, p := range plans {
			next <- p
			want[p.name] = p.want
			dialSmallReceive(t, addr) // never reads: writes stay queued
			wait(t, r.opened, "OnOpen")
		}
		due := 0
		for _, p := range plans {
			if p.want > 0 {
				due++
			}
		}
		got := map[string]time.Duration{}
		for range due {
			f := wait(t, fired, "OnTimeout")
			if _, dup := got[f.name]; dup {
				t.Errorf("%s: OnTimeout twice", f.name)
			}
			got[f.name] = f.after
		}
		time.Sleep(quiet) // the last due one came after every armed timer's first firing
		for len(fired) > 0 {
			f := <-fired
			got[f.name] = f.after
		}
		for _, p := range plans {
			after, ok := got[p.name]
			switch {
			case p.want == 0 && ok:
				t.Errorf("%s: OnTimeout %v after the plan, want none", p.name, after)
			case p.want == 0:
			case !ok:
				t.Errorf("%s: no OnTimeout, want one %v after the plan", p.name, p.want)
			case after < p.want-early:
				t.Errorf("%s: OnTimeout %v after the plan, before its deadline %v", p.name, after, p.want)
			case after > p.want+slack:
				t.Errorf("%s: OnTimeout %v after the plan, want about %v", p.name, after, p.want)
			default:
				t.Logf("%s: OnTimeout %v after the plan (due %v)", p.name, after, p.want)
			}
		}
	})
}

// lineHandler consumes complete lines only, echoing each: a peer that
// never finishes a line makes no progress.
func lineHandler(c *conn.Conn) {
	for {
		b, _ := c.Peek(c.Buffered())
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return
		}
		line, _ := c.Next(i + 1)
		c.Write(line)
	}
}

// TestIdleSlowLoris: with a 1 s idle timeout, clients (TCP and Unix at
// once, on one server) trickling a byte a second (or every 300 ms) into a
// line that never completes are closed with ReasonTimeout within 2 s of
// connecting, while clients completing a line every 300 ms, half a line
// at a time, are served for 2.5 s and never closed.
func TestIdleSlowLoris(t *testing.T) {
	const idle, lorises = time.Second, 4
	r := newRecorder(t)
	r.data = lineHandler
	s, tcpAddr := newServer(t, r, conn.Options{IdleTimeout: idle}, "tcp")
	unixAddr, err := s.Listen("unix", listenAddr(t, "unix"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		who string
		err error
	}
	results := make(chan result, 2*lorises+2)
	stopGood := make(chan struct{})
	var reaped sync.Map // *conn.Conn -> who
	// A byte a second, and (so that counting bytes read as progress
	// could not pass) a byte every 300 ms.
	for i, addr := range []net.Addr{tcpAddr, unixAddr, tcpAddr, unixAddr} {
		every := time.Second
		if i >= 2 {
			every = 300 * time.Millisecond
		}
		start := time.Now() // before the server's idle clock starts
		nc := dial(t, addr)
		c := wait(t, r.opened, "OnOpen")
		who := fmt.Sprintf("slow loris over %s, a byte every %v", addr.Network(), every)
		reaped.Store(c, who)
		eof := make(chan time.Duration, 1)
		go func() {
			nc.SetReadDeadline(time.Now().Add(timeout))
			b, err := io.ReadAll(nc)
			if err == nil && len(b) > 0 {
				err = fmt.Errorf("read %q, want nothing", b)
			}
			if err != nil {
				eof <- -1
				results <- result{who, err}
				return
			}
			eof <- time.Since(start)
		}()
		go func() {
			defer nc.Close()
			for {
				if _, err := nc.Write([]byte("a")); err != nil {
					return // the reader reports
				}
				select {
				case took := <-eof:
					switch {
					case took < 0:
					case took < idle:
						results <- result{who, fmt.Errorf("closed %v after connecting, before the idle timeout %v", took, idle)}
					case took > idle+time.Second:
						results <- result{who, fmt.Errorf("closed %v after connecting, want within %v", took, idle+time.Second)}
					default:
						results <- result{who, nil}
						t.Logf("%s: closed %v after connecting", who, took)
					}
					return
				case <-time.After(every):
				}
			}
		}()
	}
	goodStart := time.Now()
	for _, addr := range []net.Addr{tcpAddr, unixAddr} {
		nc := dial(t, addr)
		wait(t, r.opened, "OnOpen")
		who := "good client over " + addr.Network()
		go func() {
			tick := time.NewTicker(300 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				line := fmt.Appendf(nil, "line %d\n", i)
				// Half a line first: progress counts lines, not bytes.
				nc.Write(line[:3])
				time.Sleep(20 * time.Millisecond)
				nc.Write(line[3:])
				nc.SetReadDeadline(time.Now().Add(timeout))
				got := make([]byte, len(line))
				if _, err := io.ReadFull(nc, got); err != nil || !bytes.Equal(got, line) {
					results <- result{who, fmt.Errorf("line %d: read %q, %v; want %q", i, got, err, line)}
					return
				}
				select {
				case <-stopGood:
					results <- result{who, nil}
					return
				case <-tick.C:
				}
			}
		}()
	}
	for range lorises {
		cl := wait(t, r.closed, "slow loris closed")
		who, ok := reaped.Load(cl.c)
		if !ok {
			t.Fatalf("a good client was closed: %v (%v)", cl.reason, cl.err)
		}
		if cl.reason != conn.ReasonTimeout {
			t.Errorf("%s: OnClose reason %v (%v), want timeout", who, cl.reason, cl.err)
		}
	}
	for range lorises {
		if res := wait(t, results, "slow loris result"); res.err != nil {
			t.Errorf("%s: %v", res.who, res.err)
		}
	}
	// Serve the good clients for 2.5 idle timeouts.
	time.Sleep(time.Until(goodStart.Add(idle * 5 / 2)))
	close(stopGood)
	for range 2 {
		if res := wait(t, results, "good client result"); res.err != nil {
			t.Errorf("%s: %v", res.who, res.err)
		}
	}
	select {
	case cl := <-r.closed:
		t.Errorf("a good client was closed: %v (%v)", cl.reason, cl.err)
	default:
	}
	if st := s.Stats(); st.Open != 2 || st.Timeouts != lorises {
		t.Errorf("Stats: %d open, %d timeouts; want the 2 good clients open, %d timeouts", st.Open, st.Timeouts, lorises)
	}
}

// TestReadTimeout: Options.ReadTimeout closes a silent client after it
// (ReasonTimeout), and never a client that sends something more often.
func TestReadTimeout(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const rt = 200 * time.Millisecond
		r := newRecorder(t)
		s, addr := newServer(t, r, conn.Options{ReadTimeout: rt}, network)
		chatty := dial(t, addr)
		chattyC := wait(t, r.opened, "OnOpen")
		start := time.Now()
		silent := dial(t, addr)
		silentC := wait(t, r.opened, "OnOpen")
		stop := make(chan struct{})
		chatted := make(chan error, 1)
		go func() {
			for {
				chatty.Write([]byte("hi"))
				if _, err := io.ReadFull(chatty, make([]byte, 2)); err != nil {
					chatted <- err
					return
				}
				select {
				case <-stop:
					chatted <- nil
					return
				case <-time.After(rt / 3):
				}
			}
		}()
		expectEOF(t, silent)
		took := time.Since(start)
		silent.Close() // the server's Close waits for this FIN
		cl := wait(t, r.closed, "OnClose")
		if cl.c != silentC || cl.reason != conn.ReasonTimeout {
			t.Errorf("OnClose: %v (%v), silent client's %v; want the silent client, timeout", cl.reason, cl.err, cl.c == silentC)
		}
		if took < rt || took > rt+slack {
			t.Errorf("silent client closed %v after connecting, want after ReadTimeout %v", took, rt)
		}
		time.Sleep(2 * rt) // the chatty client outlives several ReadTimeouts
		close(stop)
		if err := wait(t, chatted, "chatty client"); err != nil {
			t.Errorf("chatty client: %v", err)
		}
		if chattyC.Stats().BytesIn < 6 {
			t.Errorf("chatty client sent %d bytes, want several messages", chattyC.Stats().BytesIn)
		}
		if got := s.Stats().Timeouts; got != 1 {
			t.Errorf("Stats().Timeouts = %d, want 1", got)
		}
	})
}

// TestWriteTimeout: with Options.WriteTimeout, a client that stops
// reading while output is queued is closed within about WriteTimeout
// (ReasonTimeout), its queued output counted as lost; a client that reads
// slowly but steadily, for longer than several WriteTimeouts, gets all of
// it and is not closed.
func TestWriteTimeout(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const wt, size = 200 * time.Millisecond, 192 << 10
		r := newRecorder(t)
		r.data = func(c *conn.Conn) {
			c.Discard(c.Buffered())
			if _, err := c.Write(pattern(size)); err != nil {
				t.Errorf("Write: %v", err)
			}
		}
		s, addr := newServer(t, r, conn.Options{WriteTimeout: wt, SendBuffer: 4096}, network)

		stalled := dialSmallReceive(t, addr)
		stalledC := wait(t, r.opened, "OnOpen")
		steady := dialSmallReceive(t, addr)
		wait(t, r.opened, "OnOpen")

		steadyDone := make(chan error, 1)
		var steadyTook time.Duration
		go func() {
			start := time.Now()
			steady.Write([]byte("go"))
			got := make([]byte, 0, size)
			buf := make([]byte, 4096)
			for len(got) < size {
				steady.SetReadDeadline(time.Now().Add(timeout))
				n, err := steady.Read(buf)
				if err != nil {
					steadyDone <- fmt.Errorf("after %d bytes: %w", len(got), err)
					return
				}
				got = append(got, buf[:n]...)
				time.Sleep(15 * time.Millisecond)
			}
			steadyTook = time.Since(start)
			if !bytes.Equal(got, pattern(size)) {
				steadyDone <- fmt.Errorf("read: %s", firstDiff(got, pattern(size)))
				return
			}
			steadyDone <- nil
		}()

		stalled.Write([]byte("go"))
		readFull(t, stalled, 8<<10) // reads a little, then stops
		stoppedAt := time.Now()
		cl := wait(t, r.closed, "stalled client closed")
		took := time.Since(stoppedAt)
		if cl.c != stalledC || cl.reason != conn.ReasonTimeout {
			t.Fatalf("OnClose: %v (%v), the stalled client's: %v; want the stalled client, timeout", cl.reason, cl.err, cl.c == stalledC)
		}
		// The socket's last progress may come a little before the
		// client's last read returns (a read too small to reopen the
		// window), or after it.
		if took < wt-50*time.Millisecond || took > wt+slack {
			t.Errorf("stalled client closed %v after it stopped reading, want about WriteTimeout %v", took, wt)
		}
		if s.Stats().LostOutput == 0 {
			t.Errorf("LostOutput 0, want the stalled client's queued output")
		}
		if _, err := readToEOF(stalled); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("stalled client: %v, want EOF or a reset", err)
		}
		stalled.Close()

		if err := wait(t, steadyDone, "steady reader"); err != nil {
			t.Errorf("steady reader: %v", err)
		}
		if steadyTook < 3*wt {
			t.Errorf("steady reader read for %v only, want over 3 WriteTimeouts (%v) for the test to mean something", steadyTook, 3*wt)
		}
		t.Logf("steady reader read %d bytes in %v; stalled client closed %v after it stopped", size, steadyTook, took)
		select {
		case cl := <-r.closed:
			t.Errorf("steady reader closed: %v (%v)", cl.reason, cl.err)
		default:
		}
	})
}

// TestTimeouter: OnTimeout runs instead of the close; extending the
// deadline there keeps the connection, which stays usable, until the
// extended deadline fires OnTimeout again, where the handler closes it.
func TestTimeouter(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const rt, ext = 200 * time.Millisecond, 300 * time.Millisecond
		r := newRecorder(t)
		var n atomic.Int32
		var last atomic.Pointer[time.Time]
		gaps := make(chan time.Duration, 2)
		h := withTimeout{recorder: r, timeout: func(c *conn.Conn) {
			now := time.Now()
			gaps <- now.Sub(*last.Load())
			last.Store(&now)
			if n.Add(1) == 1 {
				if err := c.SetReadDeadline(now.Add(ext)); err != nil {
					t.Errorf("SetReadDeadline in OnTimeout: %v", err)
				}
				if _, err := c.Write([]byte("extended\n")); err != nil {
					t.Errorf("Write in OnTimeout: %v", err)
				}
				return
			}
			c.Write([]byte("bye\n"))
			c.Close()
		}}
		s, addr := newServer(t, h, conn.Options{ReadTimeout: rt}, network)
		now := time.Now() // before the server's read deadline starts
		last.Store(&now)
		nc := dial(t, addr)
		wait(t, r.opened, "OnOpen")
		if got := string(readFull(t, nc, 9)); got != "extended\n" {
			t.Fatalf("client read %q, want the first OnTimeout's write", got)
		}
		// (Input now would move the read deadline to ReadTimeout from
		// it, as documented, and so is not sent.)
		b, err := readToEOF(nc)
		nc.Close()
		if err != nil || string(b) != "bye\n" {
			t.Errorf("client read %q, %v; want the second OnTimeout's write, then EOF", b, err)
		}
		if g := <-gaps; g < rt || g > rt+slack {
			t.Errorf("first OnTimeout %v after connecting, want about ReadTimeout %v", g, rt)
		}
		if g := <-gaps; g < ext || g > ext+slack {
			t.Errorf("second OnTimeout %v after the first, want about the extension %v", g, ext)
		}
		cl := wait(t, r.closed, "OnClose")
		if cl.reason != conn.ReasonLocalClose {
			t.Errorf("OnClose reason %v (%v), want local-close: the hook closed it, no timeout did", cl.reason, cl.err)
		}
		if got, st := n.Load(), s.Stats(); got != 2 || st.Timeouts != 2 || st.Closed["timeout"] != 0 {
			t.Errorf("%d OnTimeouts, Stats().Timeouts %d, closed by timeout %d; want 2, 2, 0", got, st.Timeouts, st.Closed["timeout"])
		}
	})
}

// TestTimeoutAfterOnOpen: an accepted connection's OnOpen runs on the
// waiter that accepted it, while its deadline's timer fires on the
// connection's own waiter. A deadline that expires during a slow OnOpen
// must wait for it: OnTimeout runs after OnOpen, never beside it.
func TestTimeoutAfterOnOpen(t *testing.T) {
	const n = 8 // connections spread over the waiters, most not the listener's
	r := newRecorder(t)
	r.open = func(*conn.Conn) { time.Sleep(20 * time.Millisecond) }
	var fired atomic.Int64
	h := withTimeout{recorder: r, timeout: func(c *conn.Conn) {
		fired.Add(1)
		c.Abort() // Close would wait for the peer's FIN
	}}
	s, addr := newServer(t, h, conn.Options{ReadTimeout: time.Millisecond, Poller: poller.Options{Waiters: 4}}, "tcp")
	for range n {
		dial(t, addr)
	}
	for range n {
		wait(t, r.opened, "OnOpen")
		wait(t, r.closed, "OnClose")
	}
	closeServer(t, s)
	if fired.Load() != n {
		t.Errorf("%d OnTimeouts, want %d: every read deadline expired during OnOpen", fired.Load(), n)
	}
}

// TestDeadlineRacesEnd: deadlines firing every few milliseconds (a
// Timeouter re-arming a short read deadline) while connections end every
// way at once: peer FIN, peer reset, Close, Abort, server Close. The
// recorder fails the test if OnTimeout runs with another method of the
// connection or after its OnClose.
func TestDeadlineRacesEnd(t *testing.T) {
	const n = 64
	r := newRecorder(t)
	var fired atomic.Int64
	h := withTimeout{recorder: r, timeout: func(c *conn.Conn) {
		fired.Add(1)
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
	}}
	s, addr := newServer(t, h, conn.Options{ReadTimeout: time.Millisecond}, "tcp")
	clients := make([]net.Conn, n)
	conns := make([]*conn.Conn, n)
	for i := range n {
		clients[i] = dial(t, addr)
		conns[i] = wait(t, r.opened, "OnOpen")
	}
	time.Sleep(20 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range n - 8 {
		wg.Go(func() {
			time.Sleep(time.Duration(i%16) * time.Millisecond)
			switch i % 4 {
			case 0:
				clients[i].Close()
			case 1:
				closeReset(t, clients[i])
			case 2:
				conns[i].Close()
				clients[i].Close()
			case 3:
				conns[i].Abort()
			}
		})
	}
	wg.Wait()
	for range n - 8 {
		wait(t, r.closed, "OnClose")
	}
	time.Sleep(quiet) // any OnTimeout after an OnClose shows now
	closeServer(t, s) // the rest end by the server's Close, timers armed
	for range 8 {
		wait(t, r.closed, "OnClose")
	}
	if fired.Load() < n {
		t.Errorf("%d OnTimeouts, want many (each connection's deadline every millisecond)", fired.Load())
	}
	t.Logf("%d OnTimeouts", fired.Load())
}
