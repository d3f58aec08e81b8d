//go:build linux

package conn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

// joinDeadline is Shutdown's context in the join tests: a connection left
// to it holds Shutdown this long.
const joinDeadline = 2 * time.Second

// joinHold holds the first connection that reaches a join hook until
// free is called.
type joinHold struct {
	held     atomic.Bool
	parked   chan struct{} // closed once a connection is held
	release  chan struct{}
	released sync.Once
}

// holdJoin installs the hook at "register" (a connection about to be
// registered: accepted, or dialled) or at "connected" (a pending
// connect's completion, on a waiter). Call it before newServer: its
// restore, a cleanup, then runs after the server's Close.
func holdJoin(t *testing.T, at string) *joinHold {
	t.Helper()
	j := &joinHold{parked: make(chan struct{}), release: make(chan struct{})}
	hold := func() {
		if j.held.CompareAndSwap(false, true) {
			close(j.parked)
			<-j.release
		}
	}
	switch at {
	case "register":
		t.Cleanup(conn.SetJoinHooks(hold, nil))
	case "connected":
		t.Cleanup(conn.SetJoinHooks(nil, hold))
	default:
		t.Fatalf("holdJoin at %q", at)
	}
	return j
}

func (j *joinHold) free() { j.released.Do(func() { close(j.release) }) }

// inWindow runs op (the server's Shutdown or Close) on a goroutine while
// j holds a joining connection: once op has begun (the server is closing),
// and a moment more, enough for an op that did not wait for joining
// connections to list the live ones without this one, the connection is
// let go. It returns op's result and how long op took.
func inWindow(t *testing.T, s *conn.Server, j *joinHold, op func() shutdownResult) (shutdownResult, time.Duration) {
	t.Helper()
	wait(t, j.parked, "a joining connection held")
	done := make(chan shutdownResult, 1)
	start := time.Now()
	go func() { done <- op() }()
	eventually(t, "the server closing", s.Closing)
	time.Sleep(50 * time.Millisecond)
	j.free()
	res := wait(t, done, "Shutdown or Close")
	return res, time.Since(start)
}

// shutdownOp is Shutdown bounded by joinDeadline, as an op for inWindow.
func shutdownOp(s *conn.Server) func() shutdownResult {
	return func() shutdownResult {
		ctx, cancel := context.WithTimeout(context.Background(), joinDeadline)
		defer cancel()
		d, f, err := s.Shutdown(ctx)
		return shutdownResult{d, f, err}
	}
}

// checkQuick fails the test unless Shutdown returned (drained, 0, nil)
// well before its context's deadline.
func checkQuick(t *testing.T, res shutdownResult, took time.Duration, drained int) {
	t.Helper()
	if res.drained != drained || res.forced != 0 || res.err != nil || took > joinDeadline/2 {
		t.Errorf("Shutdown = %d drained, %d forced, %v after %v; want %d, 0, nil, well before its deadline %v",
			res.drained, res.forced, res.err, took.Round(time.Millisecond), drained, joinDeadline)
	}
}

// TestShutdownJoinWindow: a connection that joins the server as Shutdown
// begins, held by a test hook on its way in (before its registration, or
// as its connect completes) until Shutdown has set its closing flag, is
// drained (accepted; dialled and connected), cancelled (a dial still
// connecting) or reset (in its TLS handshake), as one that joined before;
// Shutdown returns at once, not at its context's deadline.
func TestShutdownJoinWindow(t *testing.T) {
	t.Run("accept", func(t *testing.T) {
		forEachNetwork(t, func(t *testing.T, network string) { testJoinAccept(t, network, false) })
	})
	t.Run("accept-tls", func(t *testing.T) { testJoinAccept(t, "tcp", true) })
	t.Run("dial", func(t *testing.T) {
		// TCP: the connect is pending when the connection registers
		// and completes while it is held; Unix: it completed at once.
		forEachNetwork(t, func(t *testing.T, network string) { testJoinDial(t, network, "register") })
	})
	// The connect's completion itself held, on its waiter.
	t.Run("connect", func(t *testing.T) { testJoinDial(t, "tcp", "connected") })
}

// testJoinAccept holds an accepted connection before its registration
// while Shutdown begins. A plain one is drained; a TLS one, in its
// handshake, is reset with ReasonHandshake and counted as neither.
func testJoinAccept(t *testing.T, network string, secure bool) {
	ignore := goleak.IgnoreCurrent()
	r := newRecorder(t)
	j := holdJoin(t, "register")
	var s *conn.Server
	var addr net.Addr
	if secure {
		s, addr, _ = newTLSServer(t, r, conn.Options{}, network)
	} else {
		s, addr = newServer(t, r, conn.Options{}, network)
	}
	t.Cleanup(j.free)
	nc := dial(t, addr)
	res, took := inWindow(t, s, j, shutdownOp(s))
	if secure {
		checkQuick(t, res, took, 0)
		if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonHandshake {
			t.Errorf("OnClose %v (%v), want handshake", cl.reason, cl.err)
		}
		if _, err := readToEOF(nc); err != nil && !isReset(err) {
			t.Errorf("client: %v, want EOF or a reset", err)
		}
	} else {
		checkQuick(t, res, took, 1)
		wait(t, r.opened, "OnOpen")
		if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
			t.Errorf("OnClose %v (%v), want shutdown", cl.reason, cl.err)
		}
		if b, err := readToEOF(nc); len(b) != 0 || err != nil {
			t.Errorf("client read %q, %v; want EOF", b, err)
		}
	}
	if st := s.Stats(); st.Open != 0 || st.AcceptErrors != 0 {
		t.Errorf("after Shutdown: %d open, %d accept errors; want none", st.Open, st.AcceptErrors)
	}
	nc.Close()
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left after Shutdown: %v", err)
	}
}

// dialResult is what Server.Dial returned.
type dialResult struct {
	c   *conn.Conn
	err error
}

// testJoinDial holds a Server.Dial's connection at hook at while Shutdown
// begins. Either Shutdown cancels the dial (Dial fails with net.ErrClosed,
// no handler method runs, counted as neither) or the dial completed first
// and the connection is drained like an accepted one.
func testJoinDial(t *testing.T, network, at string) {
	ignore := goleak.IgnoreCurrent()
	r := newRecorder(t)
	j := holdJoin(t, at)
	s, _ := newServer(t, r, conn.Options{}, network)
	t.Cleanup(j.free)
	l, err := net.Listen(network, listenAddr(t, network))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := l.Accept()
		accepted <- nc
	}()
	dialled := make(chan dialResult, 1)
	go func() {
		c, err := s.Dial(context.Background(), network, l.Addr().String(), nil)
		dialled <- dialResult{c, err}
	}()
	res, took := inWindow(t, s, j, shutdownOp(s))
	d := wait(t, dialled, "Dial")
	peer := wait(t, accepted, "the peer's Accept")
	if peer == nil {
		t.Fatal("the peer's Accept failed")
	}
	defer peer.Close()
	switch {
	case d.err == nil:
		t.Logf("dial completed before Shutdown reached it")
		checkQuick(t, res, took, 1)
		if o := wait(t, r.opened, "OnOpen"); o != d.c {
			t.Errorf("OnOpen got another Conn than Dial returned")
		}
		if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
			t.Errorf("OnClose %v (%v), want shutdown", cl.reason, cl.err)
		}
	case isClosed(d.err):
		t.Logf("dial cancelled by Shutdown")
		checkQuick(t, res, took, 0)
		expectNoHandler(t, r, "dial cancelled by Shutdown")
	default:
		t.Errorf("Dial: %v, want a connection or an error matching net.ErrClosed", d.err)
	}
	if b, err := readToEOF(peer); len(b) != 0 || err != nil && !isReset(err) {
		t.Errorf("peer read %q, %v; want EOF", b, err)
	}
	if st := s.Stats(); st.Open != 0 {
		t.Errorf("after Shutdown: %d open", st.Open)
	}
	peer.Close()
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left after Shutdown: %v", err)
	}
}

// TestCloseJoinWindow: Close while a connection joins, held as in
// TestShutdownJoinWindow: the connection is reset like the others (OnOpen,
// then OnClose with ReasonShutdown; a dial's Dial returns it) or refused
// before any handler method runs (Dial fails with net.ErrClosed); an
// accepted one refused is no accept error. Close returns at once.
func TestCloseJoinWindow(t *testing.T) {
	for _, how := range []string{"accept", "dial"} {
		t.Run(how, func(t *testing.T) {
			r := newRecorder(t)
			j := holdJoin(t, "register")
			s, addr := newServer(t, r, conn.Options{}, "unix")
			t.Cleanup(j.free)
			dialled := make(chan dialResult, 1)
			var nc net.Conn
			if how == "accept" {
				nc = dial(t, addr)
			} else {
				l, err := net.Listen("unix", listenAddr(t, "unix"))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				go func() {
					c, err := s.Dial(context.Background(), "unix", l.Addr().String(), nil)
					dialled <- dialResult{c, err}
				}()
				if nc, err = l.Accept(); err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
			}
			res, took := inWindow(t, s, j, func() shutdownResult { return shutdownResult{err: s.Close()} })
			if res.err != nil || took > joinDeadline/2 {
				t.Errorf("Close: %v after %v; want nil at once", res.err, took)
			}
			served := true
			if how == "dial" {
				d := wait(t, dialled, "Dial")
				if d.err != nil && !isClosed(d.err) {
					t.Errorf("Dial: %v, want a connection or an error matching net.ErrClosed", d.err)
				}
				served = d.err == nil
			} else {
				served = s.Stats().Accepted == 1
			}
			if served {
				wait(t, r.opened, "OnOpen")
				if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
					t.Errorf("OnClose %v (%v), want shutdown", cl.reason, cl.err)
				}
			} else {
				expectNoHandler(t, r, "connection refused by Close")
			}
			if st := s.Stats(); st.Open != 0 || st.AcceptErrors != 0 {
				t.Errorf("after Close: %d open, %d accept errors; want none", st.Open, st.AcceptErrors)
			}
			if _, err := readToEOF(nc); err != nil && !isReset(err) && !errors.Is(err, io.EOF) {
				t.Errorf("peer: %v, want EOF or a reset", err)
			}
		})
	}
}

// stormHandler counts opens and closes, and closes for another reason
// than Shutdown.
type stormHandler struct {
	conn.BaseHandler
	opens, closes, otherReason atomic.Int64
}

func (h *stormHandler) OnOpen(*conn.Conn) { h.opens.Add(1) }

func (h *stormHandler) OnClose(_ *conn.Conn, reason conn.Reason, _ error) {
	h.closes.Add(1)
	if reason != conn.ReasonShutdown {
		h.otherReason.Add(1)
	}
}

// TestShutdownJoinStorm: rounds of Shutdown on a server that 3 goroutines
// keep dialling out from (Server.Dial) and 3 keep connecting in to, every
// peer reading to EOF, so that connections join as each Shutdown begins:
// every Shutdown returns (n, 0, nil) at once, n being the connections the
// handler opened, each of which closed with ReasonShutdown. TCP and Unix
// sockets alternate, and the rounds go through the topologies. Nothing is
// left: no connection, fd or goroutine.
func TestShutdownJoinStorm(t *testing.T) {
	const rounds = 40
	checkFDLeak(t)
	ignore := goleak.IgnoreCurrent()
	var peers sync.WaitGroup // every peer's goroutine
	targets := map[string]net.Listener{}
	for _, network := range networks {
		l, err := net.Listen(network, listenAddr(t, network))
		if err != nil {
			t.Fatal(err)
		}
		targets[network] = l
		peers.Go(func() {
			for {
				nc, err := l.Accept()
				if err != nil {
					return // closed
				}
				peers.Go(func() { readToEOF(nc); nc.Close() })
			}
		})
	}
	topologies := []poller.Topology{poller.PerWaiter, poller.Shared, poller.Stealing}
	var slowest time.Duration
	total, most := 0, 0
	for round := range rounds {
		network := networks[round%len(networks)]
		topo := topologies[round%len(topologies)]
		drained, took, ok := stormRound(t, network, targets[network].Addr().String(), topo, &peers)
		total, most = total+drained, max(most, drained)
		slowest = max(slowest, took)
		if !ok {
			t.Errorf("round %d (%s, %v) failed", round, network, topo)
			break
		}
	}
	t.Logf("%d connections drained, at most %d in a round; slowest Shutdown %v", total, most, slowest)
	for _, l := range targets {
		l.Close()
	}
	done := make(chan struct{})
	go func() { peers.Wait(); close(done) }()
	wait(t, done, "every peer's end")
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left: %v", err)
	}
}

// stormRound runs one round of TestShutdownJoinStorm: a server on network
// with topology topo, whose dialled connections go to target. It returns
// what Shutdown drained, how long it took, and whether the round passed.
func stormRound(t *testing.T, network, target string, topo poller.Topology, peers *sync.WaitGroup) (drained int, took time.Duration, ok bool) {
	t.Helper()
	const lanes = 3
	h := &stormHandler{}
	s, err := conn.NewServer(h, conn.Options{Poller: poller.Options{Topology: topo}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Listen(network, listenAddr(t, network))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		shutdownResult
		took time.Duration
	}
	shut := make(chan result, 1)
	// The lane that brings both counts to 4 runs Shutdown, while the
	// others go on joining. (Were the test's goroutine to start it, it
	// might wait for a P until thousands had joined.)
	var dialled, connected atomic.Int64
	var started atomic.Bool
	joined := func(n *atomic.Int64) {
		n.Add(1)
		if dialled.Load() < 4 || connected.Load() < 4 || !started.CompareAndSwap(false, true) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), joinDeadline)
		defer cancel()
		start := time.Now()
		d, f, err := s.Shutdown(ctx)
		shut <- result{shutdownResult{d, f, err}, time.Since(start)}
	}
	// A direction 100 ahead waits for the other, so that a round holds a
	// few hundred descriptors at most.
	ahead := func(n *atomic.Int64) bool {
		if n.Load() < 100 || started.Load() {
			return false
		}
		time.Sleep(100 * time.Microsecond)
		return true
	}
	var lanesWG sync.WaitGroup
	for range lanes {
		lanesWG.Go(func() { // dialling out
			for !s.Closing() {
				if ahead(&dialled) {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				_, err := s.Dial(ctx, network, target, nil)
				cancel()
				switch {
				case err == nil:
					joined(&dialled)
				case !isClosed(err):
					t.Errorf("Dial: %v", err)
					return
				}
			}
		})
		lanesWG.Go(func() { // connecting in
			for !s.Closing() {
				if ahead(&connected) {
					continue
				}
				nc, err := net.DialTimeout(network, addr.String(), timeout)
				if err != nil {
					continue // refused as the listener closes
				}
				peers.Go(func() { readToEOF(nc); nc.Close() })
				joined(&connected)
			}
		})
	}
	res := wait(t, shut, "Shutdown")
	lanesWG.Wait()
	ok = true
	if opens := int(h.opens.Load()); res.drained != opens || res.forced != 0 || res.err != nil || res.took > joinDeadline/2 {
		t.Errorf("Shutdown = %d drained, %d forced, %v after %v; want %d (the connections opened), 0, nil, well before its deadline %v",
			res.drained, res.forced, res.err, res.took.Round(time.Millisecond), opens, joinDeadline)
		ok = false
	}
	if opens, closes, other := h.opens.Load(), h.closes.Load(), h.otherReason.Load(); closes != opens || other != 0 {
		t.Errorf("after Shutdown: %d OnOpen, %d OnClose, %d of them not for shutdown; want as many OnClose as OnOpen, all for shutdown", opens, closes, other)
		ok = false
	}
	if st := s.Stats(); st.Open != 0 || st.AcceptErrors != 0 {
		t.Errorf("after Shutdown: %d open, %d accept errors; want none", st.Open, st.AcceptErrors)
		ok = false
	}
	return res.drained, res.took, ok
}
