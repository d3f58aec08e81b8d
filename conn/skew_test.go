//go:build linux

package conn_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
	"github.com/gracepoll/gracepoll/poller"
)

// sleepyEcho echoes every 4-byte request after sleeping as long as the
// request's first byte says, in milliseconds: a handler that blocks.
type sleepyEcho struct{}

func (h *sleepyEcho) OnOpen(*conn.Conn) {}

func (h *sleepyEcho) OnData(c *conn.Conn) {
	for {
		req, err := c.Peek(4)
		if err != nil {
			return
		}
		time.Sleep(time.Duration(req[0]) * time.Millisecond)
		c.Write(req)
		c.Discard(4)
	}
}

func (h *sleepyEcho) OnClose(*conn.Conn, conn.Reason, error) {}

// TestSharedBlockingHandlers: on a shared set of one waiter (Shared, and
// Stealing's one set), 8 connections whose handlers all block at once are
// answered in about one handler's time (not 8), by extra waiters the
// poller starts; every reply is exact, and the waiters beyond the first
// retire once the load is gone. conn's per-waiter buffers must cover the
// extra waiters (Poller.MaxWaiters).
func TestSharedBlockingHandlers(t *testing.T) {
	for _, topo := range []poller.Topology{poller.Shared, poller.Stealing} {
		t.Run(topo.String(), func(t *testing.T) { testBlockingHandlers(t, topo) })
	}
}

func testBlockingHandlers(t *testing.T, topo poller.Topology) {
	h := &sleepyEcho{}
	s, addr := newServer(t, h, conn.Options{Poller: poller.Options{Topology: topo, Waiters: 1, MaxWaiters: 9}}, "tcp")
	const conns, sleepMs = 8, 100
	ncs := make([]net.Conn, conns)
	for i := range ncs {
		ncs[i] = dial(t, addr)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, nc := range ncs {
		wg.Go(func() {
			req := []byte{sleepMs, byte(i), 'x', 'y'}
			if _, err := nc.Write(req); err != nil {
				errs <- err
				return
			}
			got := make([]byte, 4)
			if _, err := io.ReadFull(nc, got); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, req) {
				errs <- io.ErrUnexpectedEOF
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("client: %v", err)
	}
	took := time.Since(start)
	st := s.Poller().Stats()
	t.Logf("8 handlers of %d ms each answered in %v; %d extra waiters started, %d events handed off", sleepMs, took, st.Grown, st.HandedOff)
	if st.Grown == 0 {
		t.Errorf("no extra waiter started for 8 blocked handlers on one waiter (answered in %v)", took)
	}
	for _, nc := range ncs {
		nc.Close()
	}
	eventually(t, "the extra waiters to retire", func() bool { return s.Poller().Waiters() == 1 })
}
