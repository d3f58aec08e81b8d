//go:build linux

package conn_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// The bad input a TLS server meets: not TLS at all, handshakes that stall
// or trickle, a flood of them, and broken records after the handshake.
// In every case the connection ends with an error and the server's other
// connections are served throughout and lose nothing.

// bystander is an established TLS connection that must keep echoing
// while a test abuses the server.
type bystander struct {
	t  testing.TB
	tc *tls.Conn
	n  int
}

func newBystander(t testing.TB, addr net.Addr, cc *tls.Config) *bystander {
	return &bystander{t: t, tc: dialTLS(t, addr, cc)}
}

// check round-trips one message and fails the test if its echo is wrong.
func (b *bystander) check() {
	b.t.Helper()
	b.n++
	msg := []byte(strings.Repeat("bystander ", 1+b.n%50))
	b.tc.SetDeadline(time.Now().Add(timeout))
	if _, err := b.tc.Write(msg); err != nil {
		b.t.Fatalf("bystander write %d: %v", b.n, err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b.tc, got); err != nil || !bytes.Equal(got, msg) {
		b.t.Fatalf("bystander echo %d: %q, %v", b.n, got, err)
	}
}

// handshakeClosed waits for the OnClose of a connection whose handshake
// failed and returns its error.
func handshakeClosed(t testing.TB, rec *recorder) error {
	t.Helper()
	for {
		cl := wait(t, rec.closed, "OnClose of the failed handshake")
		if cl.reason == conn.ReasonHandshake {
			if cl.err == nil {
				t.Fatal("OnClose(handshake) without an error")
			}
			return cl.err
		}
		t.Fatalf("OnClose(%v, %v), want a failed handshake", cl.reason, cl.err)
	}
}

// clientHello returns the first flight of a crypto/tls client: its
// ClientHello record, captured from the Write the handshake makes.
func clientHello(t testing.TB, cc *tls.Config) []byte {
	t.Helper()
	w := &captureConn{}
	tls.Client(w, cc).Handshake() // fails at its first Read, after writing the hello
	if len(w.b) < 100 || w.b[0] != 22 {
		t.Fatalf("captured %d bytes, not a ClientHello", len(w.b))
	}
	return w.b
}

// captureConn records what is written to it; reading it fails.
type captureConn struct {
	net.Conn
	b []byte
}

func (w *captureConn) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
func (w *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (w *captureConn) SetDeadline(time.Time) error { return nil }
func (w *captureConn) Close() error                { return nil }

// TestTLSNotTLS: a client that speaks RESP, HTTP or noise to a TLS port
// ends in OnClose with crypto/tls's error, and no other handler method
// runs for it; the bystander is served before and after.
func TestTLSNotTLS(t *testing.T) {
	noise := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	noise[0] = 0xfe // not a record type: the first 5 bytes are refused
	for _, tc := range []struct{ name, send string }{
		{"RESP", "*1\r\n$4\r\nPING\r\n"},
		{"HTTP", "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"},
		{"noise", string(noise)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t)
			s, addr, cc := newTLSServer(t, rec, conn.Options{}, "tcp")
			by := newBystander(t, addr, cc)
			by.check()
			nc := dial(t, addr)
			if _, err := nc.Write([]byte(tc.send)); err != nil {
				t.Fatal(err)
			}
			err := handshakeClosed(t, rec)
			var rh tls.RecordHeaderError
			if !errors.As(err, &rh) {
				t.Errorf("OnClose's error %v, want a tls.RecordHeaderError", err)
			}
			nc.SetReadDeadline(time.Now().Add(timeout))
			if b, err := io.ReadAll(nc); err != nil && !isReset(err) || len(b) > 64 {
				t.Errorf("the client read %d bytes, %v; want the connection closed", len(b), err)
			}
			by.check()
			if st := s.Stats().TLS; st.Failed["not-tls"] != 1 || st.Handshakes != 1 {
				t.Errorf("TLS stats %+v, want one not-tls failure and the bystander's handshake", st)
			}
		})
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

// TestTLSStalledHandshake: half a ClientHello and then nothing, and a
// ClientHello sent a byte at a time (slowloris), are both reset at
// HandshakeTimeout; the bystander is served meanwhile.
func TestTLSStalledHandshake(t *testing.T) {
	const hsTimeout = 400 * time.Millisecond
	for _, mode := range []string{"half", "trickle"} {
		t.Run(mode, func(t *testing.T) {
			rec := newRecorder(t)
			s, addr, cc := newTLSServer(t, rec, conn.Options{HandshakeTimeout: hsTimeout}, "tcp")
			by := newBystander(t, addr, cc)
			hello := clientHello(t, cc)
			start := time.Now() // before the accept, which starts the timeout
			nc := dial(t, addr)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				if mode == "half" {
					nc.Write(hello[:len(hello)/2])
					return
				}
				for i := range hello {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					if _, err := nc.Write(hello[i : i+1]); err != nil {
						return
					}
				}
			})
			for range 5 {
				by.check()
			}
			err := handshakeClosed(t, rec)
			took := time.Since(start)
			close(stop)
			wg.Wait()
			if !errors.Is(err, conn.ErrHandshakeTimeout) {
				t.Errorf("OnClose's error %v, want ErrHandshakeTimeout", err)
			}
			if took < hsTimeout {
				t.Errorf("reaped after %v, before the timeout of %v", took, hsTimeout)
			}
			by.check()
			// The handshake goroutine counts itself out when its read
			// fails, which may be after the timeout's OnClose.
			eventually(t, "the timed-out handshake counted out", func() bool { return s.Stats().TLS.Active == 0 })
			if st := s.Stats().TLS; st.TimedOut != 1 || st.InProgress != 0 {
				t.Errorf("TLS stats %+v, want one timed out, none in progress", st)
			}
			t.Logf("%s: reaped after %v (timeout %v)", mode, took.Round(time.Millisecond), hsTimeout)
		})
	}
}

// TestTLSHandshakeFlood: 1,500 connections each send half a ClientHello
// and stall, against MaxHandshakes 300. At most 300 are ever in their
// handshake and the rest are reset at accept and counted; goroutines stay
// bounded by MaxHandshakes, not by the flood; the bystander's round trips go on throughout;
// and once the timeout passes every flooder is gone.
func TestTLSHandshakeFlood(t *testing.T) {
	const (
		flood     = 1500
		maxHS     = 300
		hsTimeout = 1500 * time.Millisecond
	)
	rec := newRecorder(t)
	drainClosed(t, rec)
	s, addr, cc := newTLSServer(t, rec, conn.Options{HandshakeTimeout: hsTimeout, MaxHandshakes: maxHS}, "tcp")
	by := newBystander(t, addr, cc)
	hello := clientHello(t, cc)
	base := runtime.NumGoroutine()
	var (
		peak, peakG atomic.Int64
		stop        = make(chan struct{})
		sampler     sync.WaitGroup
	)
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if n := s.Stats().TLS.Active; n > peak.Load() {
				peak.Store(n)
			}
			if g := int64(runtime.NumGoroutine() - base); g > peakG.Load() {
				peakG.Store(g)
			}
		}
	})
	ncs := make([]net.Conn, 0, flood)
	for i := range flood {
		nc, err := net.DialTimeout("tcp", addr.String(), hsTimeout)
		if isReset(err) {
			continue // refused before the connect returned
		}
		if err != nil {
			t.Fatalf("flooder %d: %v", i, err)
		}
		ncs = append(ncs, nc)
		nc.Write(hello[:len(hello)/2])
		if i%100 == 0 {
			by.check()
		}
	}
	defer func() {
		for _, nc := range ncs {
			nc.Close()
		}
	}()
	eventually(t, "every flooder reaped", func() bool {
		st := s.Stats()
		return st.TLS.InProgress == 0 && st.Open == 1
	})
	close(stop)
	sampler.Wait()
	by.check()
	st := s.Stats().TLS
	t.Logf("flood of %d: peak %d in handshake (max %d), peak +%d goroutines; stats %+v", flood, peak.Load(), maxHS, peakG.Load(), st)
	if peak.Load() > maxHS {
		t.Errorf("%d handshakes in progress at once, more than MaxHandshakes %d", peak.Load(), maxHS)
	}
	if st.Refused == 0 || st.TimedOut == 0 || st.Refused+st.TimedOut+st.Failed["eof"]+st.Failed["reset"] != flood {
		t.Errorf("refused %d + timed out %d (+ failed %v) != %d flooders", st.Refused, st.TimedOut, st.Failed, flood)
	}
	// A goroutine per handshake in progress, and as the timeouts fire,
	// briefly a timer's goroutine each: bounded by MaxHandshakes, not by
	// the flood.
	if g := peakG.Load(); g > 2*maxHS+50 {
		t.Errorf("goroutines grew by %d during the flood, more than twice MaxHandshakes %d", g, maxHS)
	}
}

// drainClosed discards rec's OnClose reports until the test's end, for a
// test with too many connections to collect them. Call it before
// newServer, so that it drains the server's Close too.
func drainClosed(t testing.TB, rec *recorder) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-rec.closed:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// TestTLSHandshakeWorkers: with HandshakeWorkers 1, twenty clients
// handshaking at once never have two handshakes computing together
// (GetConfigForClient runs in the computing part), and all complete.
func TestTLSHandshakeWorkers(t *testing.T) {
	sc, cc := tlsConfigs(t)
	var now, most atomic.Int32
	sc.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		n := now.Add(1)
		defer now.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		time.Sleep(2 * time.Millisecond) // a slow certificate lookup: computing, holding its worker
		return nil, nil
	}
	rec := newRecorder(t)
	s, addr, _ := newTLSServer(t, rec, conn.Options{TLS: sc, HandshakeWorkers: 1}, "tcp")
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			tc := dialTLS(t, addr, cc)
			tc.Write([]byte("x"))
			io.ReadFull(tc, make([]byte, 1))
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("%d handshakes computed at once with HandshakeWorkers 1", m)
	}
	if st := s.Stats().TLS; st.Handshakes != 20 {
		t.Errorf("%d handshakes completed, want 20", st.Handshakes)
	}
}

// mangler is a connection whose writes a test can corrupt or cut short
// once crypto/tls's handshake is over.
type mangler struct {
	net.Conn
	mu     sync.Mutex
	mangle func([]byte) []byte
}

func (m *mangler) Write(p []byte) (int, error) {
	m.mu.Lock()
	f := m.mangle
	m.mu.Unlock()
	if f != nil {
		_, err := m.Conn.Write(f(append([]byte(nil), p...)))
		return len(p), err
	}
	return m.Conn.Write(p)
}

// TestTLSBadRecords: after the handshake, a record corrupted in flight, a
// record cut short by the peer's FIN, an oversized record and a peer that
// resets mid-record each end the connection with an error; the bystander
// is served before and after.
func TestTLSBadRecords(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mangle func(p []byte, raw net.Conn) []byte
		reason conn.Reason
		want   string
	}{
		{"corrupted", func(p []byte, _ net.Conn) []byte { p[len(p)-1] ^= 1; return p }, conn.ReasonError, "bad record MAC"},
		{"truncated", func(p []byte, raw net.Conn) []byte {
			raw.Write(p[:len(p)/2])
			raw.(*net.TCPConn).CloseWrite()
			return nil
		}, conn.ReasonError, "unexpected EOF"},
		{"oversized", func([]byte, net.Conn) []byte {
			return append([]byte{23, 3, 3, 0xff, 0xff}, make([]byte, 1000)...)
		}, conn.ReasonError, "oversized record"},
		{"reset", func(p []byte, raw net.Conn) []byte {
			raw.Write(p[:len(p)/2])
			time.Sleep(10 * time.Millisecond) // the half record arrives first
			raw.(*net.TCPConn).SetLinger(0)
			raw.Close()
			return nil
		}, conn.ReasonReset, "reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t)
			_, addr, cc := newTLSServer(t, rec, conn.Options{}, "tcp")
			by := newBystander(t, addr, cc)
			raw := dial(t, addr)
			m := &mangler{Conn: raw}
			client := tls.Client(m, cc)
			client.SetDeadline(time.Now().Add(timeout))
			if err := client.Handshake(); err != nil {
				t.Fatal(err)
			}
			wait(t, rec.opened, "OnOpen")
			wait(t, rec.opened, "OnOpen") // the bystander's and this one's, in either order
			by.check()
			m.mu.Lock()
			m.mangle = func(p []byte) []byte { return tc.mangle(p, raw) }
			m.mu.Unlock()
			client.Write([]byte("a record the server cannot accept"))
			cl := wait(t, rec.closed, "OnClose")
			if cl.reason != tc.reason || cl.err == nil || !strings.Contains(cl.err.Error(), tc.want) {
				t.Errorf("OnClose(%v, %v), want %v with %q", cl.reason, cl.err, tc.reason, tc.want)
			}
			by.check()
		})
	}
}

// TestTLSSilentClients: connections that send nothing do not count
// against MaxHandshakes (they have no goroutine): with 200 of them open
// and MaxHandshakes 50, real clients still complete their handshakes; the
// silent ones are reaped at HandshakeTimeout.
func TestTLSSilentClients(t *testing.T) {
	rec := newRecorder(t)
	drainClosed(t, rec)
	s, addr, cc := newTLSServer(t, rec, conn.Options{HandshakeTimeout: time.Second, MaxHandshakes: 50}, "tcp")
	for range 200 {
		dial(t, addr)
	}
	eventually(t, "the silent clients accepted", func() bool { return s.Stats().Open == 200 })
	for range 3 {
		newBystander(t, addr, cc).check()
	}
	eventually(t, "the silent clients reaped", func() bool { return s.Stats().Open == 3 })
	if st := s.Stats().TLS; st.Refused != 0 || st.TimedOut != 200 || st.Handshakes != 3 {
		t.Errorf("TLS stats %+v, want 200 timed out, 3 handshakes, none refused", st)
	}
}
