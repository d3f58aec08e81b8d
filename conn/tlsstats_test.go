//go:build linux

package conn_test

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// checkTLSStats fails the test unless st adds up: every handshake started
// has ended once (completed, failed, timed out or refused) or is in
// progress, and a refusal is not counted as a failure too.
func checkTLSStats(t testing.TB, st conn.TLSStats) {
	t.Helper()
	ended := st.Handshakes + st.TimedOut + st.Refused
	for _, n := range st.Failed {
		ended += n
	}
	if st.InProgress < 0 || st.Started != ended+uint64(st.InProgress) {
		t.Errorf("TLS stats %+v: started %d, want %d ended + %d in progress", st, st.Started, ended, st.InProgress)
	}
	if n := st.Failed["cancelled"]; n != 0 {
		t.Errorf("TLS stats %+v: %d handshakes cancelled, and none was", st, n)
	}
}

// TestTLSStatsRefusedOnce: with MaxHandshakes 1, a second ClientHello is
// refused while the first stalls: Refused 1 and no failure; the first
// then times out. The counters add up at each step.
func TestTLSStatsRefusedOnce(t *testing.T) {
	rec := newRecorder(t)
	s, addr, cc := newTLSServer(t, rec, conn.Options{MaxHandshakes: 1, HandshakeTimeout: 500 * time.Millisecond}, "tcp")
	hello := clientHello(t, cc)
	first := dial(t, addr)
	first.Write(hello[:len(hello)/2])
	eventually(t, "the first handshake active", func() bool { return s.Stats().TLS.Active == 1 })
	second := dial(t, addr)
	second.Write(hello[:len(hello)/2])
	if err := handshakeClosed(t, rec); !errors.Is(err, conn.ErrTooManyHandshakes) {
		t.Fatalf("the second connection's OnClose: %v, want ErrTooManyHandshakes", err)
	}
	st := s.Stats().TLS
	checkTLSStats(t, st)
	if st.Started != 2 || st.Refused != 1 || len(st.Failed) != 0 || st.InProgress != 1 || st.Active != 1 {
		t.Errorf("TLS stats %+v: want 2 started, 1 refused, none failed, 1 in progress and active", st)
	}
	if err := handshakeClosed(t, rec); !errors.Is(err, conn.ErrHandshakeTimeout) {
		t.Fatalf("the first connection's OnClose: %v, want ErrHandshakeTimeout", err)
	}
	eventually(t, "the timed-out handshake's goroutine gone", func() bool { return s.Stats().TLS.Active == 0 })
	st = s.Stats().TLS
	checkTLSStats(t, st)
	if st.Started != 2 || st.Refused != 1 || st.TimedOut != 1 || len(st.Failed) != 0 || st.InProgress != 0 {
		t.Errorf("TLS stats %+v: want 2 started, 1 refused, 1 timed out, none failed or in progress", st)
	}
}

// TestTLSStatsFlood: 300 stalled ClientHellos against MaxHandshakes 16,
// with handshakes completing before, during and after: every reading adds
// up and counts no refusal as a failure; at the end each connection the
// server accepted was counted once.
func TestTLSStatsFlood(t *testing.T) {
	const (
		flood     = 300
		maxHS     = 16
		hsTimeout = time.Second
	)
	rec := newRecorder(t)
	drainClosed(t, rec)
	s, addr, cc := newTLSServer(t, rec, conn.Options{HandshakeTimeout: hsTimeout, MaxHandshakes: maxHS}, "tcp")
	hello := clientHello(t, cc)
	newBystander(t, addr, cc).check()

	stop := make(chan struct{})
	var sampler sync.WaitGroup
	readings := 0
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			st := s.Stats().TLS
			readings++
			checkTLSStats(t, st)
			if st.Active > maxHS {
				t.Errorf("%d handshakes active, more than MaxHandshakes %d", st.Active, maxHS)
			}
			if t.Failed() {
				return
			}
		}
	})
	completed := 1
	for i := range flood {
		nc := dial(t, addr)
		nc.Write(hello[:len(hello)/2])
		if i%100 == 99 {
			// A real client, refused while the flood holds every
			// handshake, until a stalled one times out.
			for {
				tc, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr.String(), cc)
				if err == nil {
					tc.Close()
					completed++
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	eventually(t, "every stalled handshake ended", func() bool {
		st := s.Stats().TLS
		return st.InProgress == 0 && st.Active == 0
	})
	newBystander(t, addr, cc).check()
	completed++
	close(stop)
	sampler.Wait()

	st := s.Stats()
	checkTLSStats(t, st.TLS)
	t.Logf("%d readings; stats %+v", readings, st.TLS)
	if st.TLS.Started != uint64(st.Accepted) {
		t.Errorf("TLS stats %+v: %d started, want one per connection accepted (%d)", st.TLS, st.TLS.Started, st.Accepted)
	}
	if st.TLS.Handshakes != uint64(completed) || st.TLS.Refused == 0 || st.TLS.TimedOut == 0 {
		t.Errorf("TLS stats %+v: want %d handshakes, some refused and some timed out", st.TLS, completed)
	}
}
