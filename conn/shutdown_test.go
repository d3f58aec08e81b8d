//go:build linux

package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gracepoll/gracepoll/conn"
)

// replySize is the reply to each 8-byte request in the shutdown tests:
// through a 4 KB send buffer most of it queues.
const replySize = 4 << 10

// requestHandler answers each complete 8-byte request with replySize
// bytes of pattern, counting in failed the writes refused other than for
// the connection closing (an OnData racing Shutdown's Close).
func requestHandler(failed *atomic.Int64) func(c *conn.Conn) {
	return func(c *conn.Conn) {
		for c.Buffered() >= 8 {
			c.Discard(8)
			if _, err := c.Write(pattern(replySize)); err != nil && !isClosed(err) {
				failed.Add(1)
			}
		}
	}
}

// requester is a client that sends a request every few milliseconds and
// reads every reply, checking each, until EOF; then it stops sending and
// closes its side, as a well-behaved peer of a closing server does.
type requester struct {
	nc   net.Conn
	got  int   // reply bytes read, valid after done
	err  error // what ended reading other than EOF
	done chan struct{}
}

func startRequester(nc net.Conn) *requester {
	q := &requester{nc: nc, done: make(chan struct{})}
	eof := make(chan struct{})
	go func() { // writer
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := nc.Write([]byte("request\n")); err != nil {
				return
			}
			select {
			case <-eof:
				nc.(interface{ CloseWrite() error }).CloseWrite()
				return
			case <-tick.C:
			}
		}
	}()
	go func() { // reader
		defer close(q.done)
		defer close(eof)
		buf := make([]byte, 64<<10)
		want := pattern(replySize)
		for {
			nc.SetReadDeadline(time.Now().Add(timeout))
			n, err := nc.Read(buf)
			for i := range n {
				if buf[i] != want[(q.got+i)%replySize] {
					q.err = fmt.Errorf("reply byte %d is %q, want %q", q.got+i, buf[i], want[(q.got+i)%replySize])
					return
				}
			}
			q.got += n
			if err == io.EOF {
				return
			}
			if err != nil {
				q.err = err
				return
			}
		}
	}()
	return q
}

// TestShutdownDrains: Shutdown under load, 50 connections each sending a
// request every 5 ms and reading every reply, with 64 KB more queued on
// each (through a 4 KB send buffer) as it starts: every client reads every
// byte the server wrote, then EOF; Shutdown returns (50, 0, nil) once every
// OnClose has run; nothing is lost, and nothing is left: no connection,
// fd (the fd check) or goroutine.
func TestShutdownDrains(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const n = 50
		ignore := goleak.IgnoreCurrent()
		r := newRecorder(t)
		var failed atomic.Int64
		r.data = requestHandler(&failed)
		s, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		clients := make([]*requester, n)
		conns := make([]*conn.Conn, n)
		for i := range n {
			clients[i] = startRequester(dial(t, addr))
			conns[i] = wait(t, r.opened, "OnOpen")
		}
		time.Sleep(200 * time.Millisecond)
		queued, busy := 0, 0
		for _, c := range conns {
			for range 16 { // whole replies, from another goroutine
				if _, err := c.Write(pattern(replySize)); err != nil {
					t.Fatal(err)
				}
			}
			if q := c.Queued(); q > 0 {
				queued += q
				busy++
			}
		}
		if busy < n/2 {
			t.Errorf("only %d connections of %d had output queued as Shutdown began", busy, n)
		}

		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		drained, forced, err := s.Shutdown(ctx)
		took := time.Since(start)
		t.Logf("Shutdown took %v; when it began %d connections had %d bytes queued", took, busy, queued)
		if drained != n || forced != 0 || err != nil {
			t.Errorf("Shutdown = %d drained, %d forced, %v; want %d, 0, nil", drained, forced, err, n)
		}
		select {
		case <-s.Done():
		default:
			t.Errorf("Shutdown returned before Done")
		}
		out := map[*conn.Conn]uint64{}
		for range n {
			cl := wait(t, r.closed, "OnClose") // every one ran before Shutdown returned
			if cl.reason != conn.ReasonShutdown {
				t.Errorf("OnClose reason %v (%v), want shutdown", cl.reason, cl.err)
			}
			out[cl.c] = cl.stats.BytesOut
		}
		for i, q := range clients {
			wait(t, q.done, "client reads to EOF")
			if q.err != nil {
				t.Errorf("client %d: %v, after %d bytes", i, q.err, q.got)
			}
			if w := out[conns[i]]; uint64(q.got) != w {
				t.Errorf("client %d read %d bytes, the server wrote %d", i, q.got, w)
			}
		}
		if st := s.Stats(); st.Open != 0 || st.LostOutput != 0 || failed.Load() != 0 {
			t.Errorf("after Shutdown: %d open, %d bytes lost, %d writes refused; want none", st.Open, st.LostOutput, failed.Load())
		}
		for _, q := range clients {
			q.nc.Close()
		}
		if err := goleak.Find(ignore); err != nil {
			t.Errorf("goroutines left after Shutdown: %v", err)
		}
	})
}

// TestShutdownForces: peers that never read, with 1 MB queued each, hold
// Shutdown until its context's deadline, when they are reset (forced);
// the peers that read drain. Afterwards nothing is open, and no fd (the
// fd check) or goroutine is left.
func TestShutdownForces(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const readers, stalled, deadline = 10, 3, 300 * time.Millisecond
		ignore := goleak.IgnoreCurrent()
		r := newRecorder(t)
		var failed atomic.Int64
		r.data = requestHandler(&failed)
		s, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		var clients []*requester
		for range readers {
			clients = append(clients, startRequester(dial(t, addr)))
			wait(t, r.opened, "OnOpen")
		}
		var stuck []net.Conn
		for range stalled {
			nc := dialSmallReceive(t, addr)
			stuck = append(stuck, nc)
			c := wait(t, r.opened, "OnOpen")
			if _, err := c.Write(pattern(1 << 20)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)

		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		drained, forced, err := s.Shutdown(ctx)
		took := time.Since(start)
		if drained != readers || forced != stalled || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown = %d drained, %d forced, %v; want %d, %d, context.DeadlineExceeded", drained, forced, err, readers, stalled)
		}
		if took < deadline || took > deadline+slack {
			t.Errorf("Shutdown returned after %v, want at its context's deadline %v", took, deadline)
		}
		for range readers + stalled {
			if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
				t.Errorf("OnClose reason %v (%v), want shutdown", cl.reason, cl.err)
			}
		}
		for i, q := range clients {
			wait(t, q.done, "reader reads to EOF")
			if q.err != nil {
				t.Errorf("reader %d: %v, after %d bytes", i, q.err, q.got)
			}
		}
		for i, nc := range stuck {
			b, err := readToEOF(nc)
			// A Unix socket has no reset: the peer reads what was in
			// flight, then EOF.
			if !errors.Is(err, syscall.ECONNRESET) && (network != "unix" || err != nil) || len(b) >= 1<<20 {
				t.Errorf("stalled client %d: read %d bytes, %v; want part of the output, then a reset", i, len(b), err)
			}
		}
		st := s.Stats()
		if st.Open != 0 || st.LostOutput == 0 {
			t.Errorf("after Shutdown: %d open, %d bytes lost; want 0 open, the stalled output lost", st.Open, st.LostOutput)
		}
		wait(t, s.Done(), "Done")
		for _, q := range clients {
			q.nc.Close()
		}
		for _, nc := range stuck {
			nc.Close()
		}
		if err := goleak.Find(ignore); err != nil {
			t.Errorf("goroutines left after Shutdown: %v", err)
		}
	})
}

// TestShutdownFromHandler: Shutdown from OnData, and from OnClose, returns
// ErrInCallback at once instead of waiting for itself; the shutdown goes
// on, the other connections drain, and Done closes.
func TestShutdownFromHandler(t *testing.T) {
	for _, where := range []string{"OnData", "OnClose"} {
		t.Run(where, func(t *testing.T) {
			r := newRecorder(t)
			var srv atomic.Pointer[conn.Server]
			var once sync.Once
			returned := make(chan error, 1)
			shut := func() {
				once.Do(func() {
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel() // Shutdown goes on without it
					_, _, err := srv.Load().Shutdown(ctx)
					returned <- err
				})
			}
			switch where {
			case "OnData":
				r.data = func(c *conn.Conn) { c.Discard(c.Buffered()); shut() }
			case "OnClose":
				r.close = func(*conn.Conn, conn.Reason, error) { shut() }
			}
			s, addr := newServer(t, r, conn.Options{}, "tcp")
			srv.Store(s)
			trigger := dial(t, addr)
			wait(t, r.opened, "OnOpen")
			var others []net.Conn
			for range 3 {
				others = append(others, dial(t, addr))
				wait(t, r.opened, "OnOpen")
			}
			if where == "OnData" {
				trigger.Write([]byte("shut down"))
			} else {
				trigger.Close()
			}
			if err := wait(t, returned, "Shutdown in "+where+" returns"); !errors.Is(err, conn.ErrInCallback) {
				t.Errorf("Shutdown in %s: %v, want ErrInCallback", where, err)
			}
			for i, nc := range others {
				if b, err := readToEOF(nc); err != nil || len(b) != 0 {
					t.Errorf("client %d: read %q, %v; want EOF", i, b, err)
				}
				nc.Close()
			}
			trigger.Close()
			wait(t, s.Done(), "Done after Shutdown from "+where)
			for range 4 {
				wait(t, r.closed, "OnClose")
			}
			if st := s.Stats(); st.Open != 0 {
				t.Errorf("%d connections open after Done", st.Open)
			}
		})
	}
}

// TestCloseAborts: Close resets every connection at once, output queued
// to peers that do not read included (FlushTimeout would be 5 s), and
// ends a Shutdown waiting for them.
func TestCloseAborts(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, network string) {
		const n = 4
		r := newRecorder(t)
		s, addr := newServer(t, r, conn.Options{SendBuffer: 4096}, network)
		var clients []net.Conn
		for range n {
			nc := dialSmallReceive(t, addr)
			clients = append(clients, nc)
			c := wait(t, r.opened, "OnOpen")
			if _, err := c.Write(pattern(1 << 20)); err != nil {
				t.Fatal(err)
			}
		}
		shut := shutdownAsync(s)
		time.Sleep(quiet) // Shutdown waits for the stalled connections
		select {
		case res := <-shut:
			t.Fatalf("Shutdown returned %v before its stalled connections ended", res)
		default:
		}
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if took := time.Since(start); took > prompt {
			t.Errorf("Close took %v, want at once (within %v)", took, prompt)
		}
		res := wait(t, shut, "Shutdown ended by Close")
		if took := time.Since(start); took > prompt {
			t.Errorf("Shutdown returned %v after Close, want within %v", took, prompt)
		}
		if res.drained+res.forced != n || res.forced != n {
			t.Errorf("Shutdown ended by Close = %d drained, %d forced, %v; want 0, %d", res.drained, res.forced, res.err, n)
		}
		for range n {
			if cl := wait(t, r.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
				t.Errorf("OnClose reason %v (%v), want shutdown", cl.reason, cl.err)
			}
		}
		for i, nc := range clients {
			b, err := readToEOF(nc)
			if !errors.Is(err, syscall.ECONNRESET) && (network != "unix" || err != nil) || bytes.Equal(b, pattern(1<<20)) {
				t.Errorf("client %d: read %d bytes, %v; want part of the output, then a reset", i, len(b), err)
			}
		}
		if st := s.Stats(); st.Open != 0 || st.LostOutput == 0 {
			t.Errorf("after Close: %d open, %d bytes lost; want 0 open, output lost", st.Open, st.LostOutput)
		}
	})
}
