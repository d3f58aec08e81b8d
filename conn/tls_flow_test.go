//go:build linux

package conn_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/conn"
)

// TLS under the contracts of plaintext connections: flow control,
// Shutdown and the peer's close, resumption, client certificates, dial
// cancellation, and what only a real TLS peer does (openssl's KeyUpdate
// and renegotiation).

// tlsPipelined is pipelined over TLS: the client is crypto/tls on a socket
// with a small receive buffer; it has sent n requests (from a goroutine:
// the server stops reading when its queue is high).
func tlsPipelined(t *testing.T, n, size int) (*pipeliner, *conn.Server, *tls.Conn) {
	t.Helper()
	p := newPipeliner(size)
	sc, cc := tlsConfigs(t)
	s, addr := newServer(t, p, conn.Options{TLS: sc, HighWater: 256 << 10, SendBuffer: 64 << 10, ReadBuffer: 128 << 10}, "tcp")
	tc := tls.Client(dialSmallReceive(t, addr), cc)
	tc.SetDeadline(time.Now().Add(3 * timeout))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	go tc.Write(requests(n))
	return p, s, tc
}

// TestTLSPipelineFlowControl: TestPipelineFlowControl over TLS: the
// handler is held back by Writable, the queue (of ciphertext) stays
// within HighWater plus one reply's records, and every reply arrives.
func TestTLSPipelineFlowControl(t *testing.T) {
	const n, size = 10000, 1024
	p, s, tc := tlsPipelined(t, n, size)
	time.Sleep(time.Second)
	if p.held.Load() == 0 {
		t.Errorf("the handler was never held back (served %d of %d)", p.served.Load(), n)
	}
	got := make([]byte, n*size)
	if _, err := io.ReadFull(tc, got); err != nil {
		t.Fatal(err)
	}
	checkReplies(t, got, n, size)
	if q, high := p.maxQueued.Load(), s.Options().HighWater; q > int64(high+size+64) {
		t.Errorf("queue reached %d bytes, want at most HighWater+one reply's record = %d", q, high+size+64)
	}
	if e := p.writeErrs.Load(); e != 0 {
		t.Errorf("%d Writes failed", e)
	}
}

// TestTLSPipelineShutdown: Shutdown with requests held back: those
// already received are answered, then close_notify (EOF at the client);
// Shutdown returns (1, 0, nil).
func TestTLSPipelineShutdown(t *testing.T) {
	const n, size = 10000, 1024
	p, s, tc := tlsPipelined(t, n, size)
	eventually(t, "the handler held back", func() bool { return p.held.Load() > 0 })
	done := shutdownAsync(s)
	time.Sleep(300 * time.Millisecond)
	got, err := io.ReadAll(tc)
	if err != nil {
		t.Fatalf("client read %d bytes, then %v; want replies, then close_notify", len(got), err)
	}
	tc.Close()
	served := int(p.served.Load())
	if served == 0 || len(got) != served*size {
		t.Fatalf("client got %d bytes for %d requests answered", len(got), served)
	}
	checkReplies(t, got, served, size)
	if p.draining.Load() == 0 {
		t.Error("no request answered while Draining")
	}
	if cl := wait(t, p.closed, "OnClose"); cl.reason != conn.ReasonShutdown {
		t.Errorf("OnClose reason %v, want shutdown", cl.reason)
	}
	if r := wait(t, done, "Shutdown"); r.drained != 1 || r.forced != 0 || r.err != nil {
		t.Errorf("Shutdown = %d, %d, %v; want 1, 0, nil", r.drained, r.forced, r.err)
	}
}

// TestTLSPipelineCloseNotify: the client sends 10,000 requests and its
// close_notify, and reads slowly: the requests held back by flow control
// when close_notify arrives are still answered, then EOF.
func TestTLSPipelineCloseNotify(t *testing.T) {
	const n, size = 10000, 1024
	p, _, tc := tlsPipelined(t, n, size)
	eventually(t, "the handler held back", func() bool { return p.held.Load() > 0 })
	tc.CloseWrite() // after the requests: tls.Conn serialises the writes
	time.Sleep(300 * time.Millisecond)
	got, err := io.ReadAll(tc)
	if err != nil {
		t.Fatalf("client read %d bytes, then %v", len(got), err)
	}
	if cl := wait(t, p.closed, "OnClose"); cl.reason != conn.ReasonPeerClosed {
		t.Errorf("OnClose(%v, %v), want peer-closed", cl.reason, cl.err)
	}
	checkReplies(t, got, n, size)
}

// TestTLSHalfCloser: a HalfCloser's OnReadEOF runs on the peer's
// close_notify, after OnData had everything before it, and the handler
// can still write.
func TestTLSHalfCloser(t *testing.T) {
	rec := newRecorder(t)
	rec.readEOF = func(c *conn.Conn) {
		c.Write([]byte("bye"))
		c.Close()
	}
	sc, cc := tlsConfigs(t)
	_, addr := newServer(t, withReadEOF{rec}, conn.Options{TLS: sc}, "tcp")
	tc := dialTLS(t, addr, cc)
	tc.Write([]byte("hello"))
	tc.CloseWrite()
	got, err := io.ReadAll(tc)
	if err != nil || string(got) != "hellobye" {
		t.Fatalf("client read %q, %v; want \"hellobye\", then EOF", got, err)
	}
}

// TestTLSResumption: a client with a session cache resumes its second
// connection, in TLS 1.3 and 1.2, and the server sees DidResume.
func TestTLSResumption(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			rec := newRecorder(t)
			states := make(chan tls.ConnectionState, 2)
			rec.open = func(c *conn.Conn) { st, _ := c.ConnectionState(); states <- st }
			_, addr, cc := newTLSServer(t, rec, conn.Options{}, "tcp")
			cc.MaxVersion = v
			cc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			for i := range 2 {
				tc := dialTLS(t, addr, cc)
				tc.Write([]byte("x")) // the echo reads the 1.3 ticket with it
				io.ReadFull(tc, make([]byte, 1))
				st := wait(t, states, "OnOpen")
				if st.Version != v || st.DidResume != (i == 1) || tc.ConnectionState().DidResume != (i == 1) {
					t.Errorf("connection %d: version %x, server DidResume %v, client %v", i, st.Version, st.DidResume, tc.ConnectionState().DidResume)
				}
				tc.Close()
			}
		})
	}
}

// TestTLSClientCertificate: with client certificates required, a client
// with one is served and its certificate is in the state OnOpen reads; a
// client without is refused in the handshake.
func TestTLSClientCertificate(t *testing.T) {
	rec := newRecorder(t)
	peers := make(chan int, 1)
	rec.open = func(c *conn.Conn) { st, _ := c.ConnectionState(); peers <- len(st.PeerCertificates) }
	sc, cc := tlsConfigs(t)
	sc.ClientAuth, sc.ClientCAs = tls.RequireAndVerifyClientCert, cc.RootCAs
	_, addr := newServer(t, rec, conn.Options{TLS: sc}, "tcp")
	with := cc.Clone()
	with.Certificates = sc.Certificates
	tc := dialTLS(t, addr, with)
	tc.Write([]byte("x"))
	if _, err := io.ReadFull(tc, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if n := wait(t, peers, "OnOpen"); n != 1 {
		t.Errorf("server saw %d client certificates, want 1", n)
	}
	without := dialTLS(t, addr, cc) // TLS 1.3: the client learns at its first read
	if _, err := without.Read(make([]byte, 1)); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := handshakeClosed(t, rec); !strings.Contains(err.Error(), "certificate") {
		t.Errorf("OnClose's error %v, want one about the missing certificate", err)
	}
}

// TestTLSDialCancel: a server that accepts and never answers the
// ClientHello: DialTLS ends at its context, at Options.HandshakeTimeout,
// and at Shutdown, running no handler method and leaving no fd.
func TestTLSDialCancel(t *testing.T) {
	checkFDLeak(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	_, cc := tlsConfigs(t)
	cli := newRecorder(t)
	s, err := conn.NewServer(cli, conn.Options{HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer closeServer(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.DialTLS(ctx, "tcp", l.Addr().String(), cc, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("DialTLS with a 100 ms context: %v", err)
	}
	start := time.Now()
	if _, err := s.DialTLS(context.Background(), "tcp", l.Addr().String(), cc, nil); !errors.Is(err, conn.ErrHandshakeTimeout) {
		t.Errorf("DialTLS with HandshakeTimeout 300 ms: %v after %v", err, time.Since(start))
	}
	eventually(t, "both handshakes' goroutines gone", func() bool { return s.Stats().TLS.Active == 0 })
	res := make(chan error, 1)
	go func() {
		_, err := s.DialTLS(context.Background(), "tcp", l.Addr().String(), cc, nil)
		res <- err
	}()
	eventually(t, "the dial in its handshake", func() bool { return s.Stats().TLS.InProgress == 1 })
	wait(t, shutdownAsync(s), "Shutdown")
	if err := wait(t, res, "DialTLS"); !isClosed(err) {
		t.Errorf("DialTLS during Shutdown: %v", err)
	}
	select {
	case <-cli.opened:
		t.Error("a handler method ran for a dial whose handshake never completed")
	default:
	}
	eventually(t, "the handshakes' goroutines gone", func() bool { return s.Stats().TLS.Active == 0 })
	if st := s.Stats().TLS; st.TimedOut != 1 || st.Failed["cancelled"] != 2 {
		t.Errorf("TLS stats %+v, want 1 timed out and 2 cancelled", st)
	}
}

// writeCA writes the test certificate as PEM for openssl's -CAfile.
func writeCA(t *testing.T, cc *tls.Config) string {
	t.Helper()
	sc, _ := tlsConfigs(t)
	leaf, err := x509.ParseCertificate(sc.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sClient is openssl s_client in its interactive mode, where a line "K"
// sends a KeyUpdate asking for ours and "R" renegotiates (TLS 1.2).
type sClient struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startSClient(t *testing.T, addr net.Addr, ca string, args ...string) *sClient {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed (Debian: openssl)")
	}
	cmd := exec.Command("openssl", append([]string{"s_client", "-connect", addr.String(), "-servername", "localhost", "-CAfile", ca, "-verify_return_error"}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := &sClient{t: t, cmd: cmd, in: in, lines: make(chan string, 1024)}
	go func() {
		defer close(sc.lines)
		r := bufio.NewScanner(out)
		for r.Scan() {
			sc.lines <- r.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return sc
}

// expect reads openssl's output until a line containing want, and
// returns the lines before it.
func (s *sClient) expect(want string) []string {
	s.t.Helper()
	var seen []string
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("openssl ended before printing %q; it printed:\n%s", want, strings.Join(seen, "\n"))
			}
			if strings.Contains(line, want) {
				return seen
			}
			seen = append(seen, line)
		case <-deadline:
			s.t.Fatalf("openssl printed no %q within %v; it printed:\n%s", want, timeout, strings.Join(seen, "\n"))
		}
	}
}

func (s *sClient) send(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

// TestTLSOpenSSLKeyUpdate: openssl's KeyUpdate with update_requested makes
// the server's tls.Conn.Read write a KeyUpdate of its own (under the
// connection's mutex, in sequence with the echo's records); the echo goes
// on under the new keys in both directions.
func TestTLSOpenSSLKeyUpdate(t *testing.T) {
	rec := newRecorder(t)
	_, addr, cc := newTLSServer(t, rec, conn.Options{}, "tcp")
	oc := startSClient(t, addr, writeCA(t, cc), "-tls1_3")
	oc.expect("Verify return code: 0 (ok)")
	oc.send("before-the-update")
	oc.expect("before-the-update")
	oc.send("K")
	oc.expect("KEYUPDATE")
	oc.send("after-the-update")
	oc.expect("after-the-update")
	select {
	case cl := <-rec.closed:
		t.Fatalf("the connection ended: %v, %v", cl.reason, cl.err)
	default:
	}
}

// TestTLSOpenSSLRenegotiation: crypto/tls refuses a TLS 1.2 client's
// renegotiation; the connection ends with its error and a bystander is
// served on.
func TestTLSOpenSSLRenegotiation(t *testing.T) {
	rec := newRecorder(t)
	_, addr, cc := newTLSServer(t, rec, conn.Options{}, "tcp")
	by := newBystander(t, addr, cc)
	oc := startSClient(t, addr, writeCA(t, cc), "-tls1_2")
	oc.expect("Verify return code: 0 (ok)")
	oc.send("hello")
	oc.expect("hello")
	oc.send("R")
	cl := wait(t, rec.closed, "OnClose of the renegotiating connection")
	if cl.reason != conn.ReasonError || cl.err == nil || !strings.Contains(cl.err.Error(), "unexpected handshake message") {
		t.Errorf("OnClose(%v, %v), want an error refusing the renegotiation", cl.reason, cl.err)
	}
	by.check()
}

// TestTLSDialResumption: conn's own client takes the TLS 1.3 session
// ticket that arrives after the handshake (a post-handshake message,
// read on the waiter) and resumes with it.
func TestTLSDialResumption(t *testing.T) {
	srv, cli := newRecorder(t), newRecorder(t)
	s, addr, cc := newTLSServer(t, srv, conn.Options{}, "tcp")
	cc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	var k collector
	cli.data = k.take
	for i := range 2 {
		c, err := s.DialTLS(context.Background(), "tcp", addr.String(), cc, cli)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x")) // the echo comes after the ticket
		eventually(t, "the echo", func() bool { return k.len() > i })
		if st, _ := c.ConnectionState(); st.DidResume != (i == 1) {
			t.Errorf("dial %d: DidResume %v", i, st.DidResume)
		}
		c.Close()
	}
}
