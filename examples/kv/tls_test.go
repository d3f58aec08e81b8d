//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gracepoll/gracepoll/examples/kv/resp"
	"github.com/gracepoll/gracepoll/internal/selfsigned"
	"github.com/gracepoll/gracepoll/internal/testkit"
)

// kvServer is run serving in the background on a free port of 127.0.0.1.
type kvServer struct {
	addr, port string
	out        *testkit.SyncBuffer
	cancel     context.CancelFunc
	done       chan error
	once       sync.Once
	final      string
}

// serve runs the command with args; the test's cleanup stops it.
func serve(t *testing.T, args ...string) *kvServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &kvServer{out: new(testkit.SyncBuffer), cancel: cancel, done: make(chan error, 1)}
	ready := make(chan net.Addr, 1)
	go func() { s.done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), s.out, s.out, ready) }()
	select {
	case a := <-ready:
		s.addr = a.String()
	case err := <-s.done:
		cancel()
		t.Fatalf("kv %q: %v\n%s", args, err, s.out)
	}
	_, s.port, _ = net.SplitHostPort(s.addr)
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop shuts the server down, once, and returns all it printed.
func (s *kvServer) stop(t *testing.T) string {
	t.Helper()
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("kv: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("kv did not shut down in 30 s:\n%s", s.out)
		}
		s.final = s.out.String()
	})
	return s.final
}

// tlsLine is the TLS line of a statistics report, parsed.
type tlsLine struct {
	handshakes, inProgress, timedOut, refused int
	failed                                    map[string]int
}

// failures adds up the handshakes that failed, whatever the cause.
func (l tlsLine) failures() int {
	n := 0
	for _, v := range l.failed {
		n += v
	}
	return n
}

var tlsLineRE = regexp.MustCompile(`kv: TLS handshakes: (\d+) completed, (\d+) in progress, (\d+) timed out, (\d+) refused \(too many at once\); failed: (none|[^;]*); handshake p50`)

// lastTLSLine parses the last TLS line of out: the final report's, after
// a stop.
func lastTLSLine(t *testing.T, out string) tlsLine {
	t.Helper()
	m := tlsLineRE.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no TLS line in the report:\n%s", out)
	}
	last := m[len(m)-1]
	num := func(s string) int { n, _ := strconv.Atoi(s); return n }
	l := tlsLine{handshakes: num(last[1]), inProgress: num(last[2]), timedOut: num(last[3]), refused: num(last[4]), failed: map[string]int{}}
	for f := range strings.SplitSeq(last[5], ", ") {
		if why, n, ok := strings.Cut(f, " "); ok {
			l.failed[why] = num(n)
		}
	}
	return l
}

// certs are a server certificate and a client certificate, written to a
// temporary directory.
type certs struct {
	server, client                     *selfsigned.Cert
	serverCert, serverKey              string
	clientCert, clientKey, strangerPEM string
	strangerKey                        string
}

func makeCerts(t *testing.T) *certs {
	t.Helper()
	dir := t.TempDir()
	c := &certs{}
	write := func(name string, hosts ...string) (*selfsigned.Cert, string, string) {
		cert, err := selfsigned.New(hosts...)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile, err := cert.WriteFiles(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return cert, certFile, keyFile
	}
	c.server, c.serverCert, c.serverKey = write("server")
	c.client, c.clientCert, c.clientKey = write("client", "kv-test-client")
	// A certificate of the same shape that the server was not told to
	// trust.
	_, c.strangerPEM, c.strangerKey = write("stranger", "kv-test-client")
	return c
}

// tlsClient is a Go RESP client over crypto/tls.
type tlsClient struct {
	t   *testing.T
	c   *tls.Conn
	r   *bufio.Reader
	raw *eofConn
}

// eofConn notes whether a read of its connection met the end of the
// stream. crypto/tls reports a FIN at a record boundary as io.EOF, as it
// does close_notify, but it reads no further after close_notify: so
// io.EOF from the tls.Conn without the end seen here is close_notify.
type eofConn struct {
	net.Conn
	eof atomic.Bool
}

func (c *eofConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		c.eof.Store(true)
	}
	return n, err
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) *tlsClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	raw := &eofConn{Conn: nc}
	c := tls.Client(raw, cfg)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	t.Cleanup(func() { c.Close() })
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return &tlsClient{t, c, bufio.NewReaderSize(c, 64<<10), raw}
}

func (c *tlsClient) send(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *tlsClient) read() resp.Value {
	c.t.Helper()
	v, err := resp.ReadValue(c.r)
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

func (c *tlsClient) do(args ...string) resp.Value {
	c.t.Helper()
	c.send(resp.AppendCommand(nil, args...))
	return c.read()
}

// clientConfig trusts cert and nothing else.
func clientConfig(cert *selfsigned.Cert) *tls.Config {
	return &tls.Config{RootCAs: cert.Pool(), ServerName: "localhost"}
}

// serveSelfSigned runs the server with -tls-self-signed and args, and
// returns a client configuration that trusts the certificate it wrote
// (-tls-cacert-out) for the name localhost.
func serveSelfSigned(t *testing.T, args ...string) (*kvServer, *tls.Config) {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	s := serve(t, append([]string{"-tls-self-signed", "-tls-cacert-out", ca}, args...)...)
	pool, err := selfsigned.LoadPool(ca)
	if err != nil {
		t.Fatal(err)
	}
	return s, &tls.Config{RootCAs: pool, ServerName: "localhost"}
}

// incrs is n pipelined INCRs of the key n.
func incrs(n int) []byte {
	var pipe []byte
	for range n {
		pipe = resp.AppendCommand(pipe, "INCR", "n")
	}
	return pipe
}

// randomValue is n bytes of every value, reproducible by seed.
func randomValue(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6b76))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestTLSGoClient serves TLS with a certificate from files (-tls-cert,
// -tls-key) to Go clients: commands, a 1 MB value both ways, a pipeline of
// a thousand commands in one write, both protocol versions, and the
// refusal of versions older than TLS 1.2 and of an untrusted certificate.
func TestTLSGoClient(t *testing.T) {
	cs := makeCerts(t)
	s := serve(t, "-tls-cert", cs.serverCert, "-tls-key", cs.serverKey)
	c := dialTLS(t, s.addr, clientConfig(cs.server))
	if st := c.c.ConnectionState(); st.Version != tls.VersionTLS13 || !st.PeerCertificates[0].Equal(cs.server.TLS.Leaf) {
		t.Errorf("negotiated %s with certificate %v", tls.VersionName(st.Version), st.PeerCertificates[0].Subject)
	}
	if v := c.do("PING"); v.Str != "PONG" {
		t.Errorf("PING: %v", v)
	}
	big := randomValue(1<<20, 1)
	if v := c.do("SET", "big", string(big)); v.Str != "OK" {
		t.Fatalf("SET of 1 MB: %v", v)
	}
	if v := c.do("GET", "big"); v.Kind != '$' || v.Str != string(big) {
		t.Errorf("GET of 1 MB: %d bytes back, equal %v", len(v.Str), v.Str == string(big))
	}
	c.send(incrs(1000))
	for i := 1; i <= 1000; i++ {
		if v := c.read(); v.Int != int64(i) {
			t.Fatalf("pipelined INCR %d: %v", i, v)
		}
	}
	old := clientConfig(cs.server)
	old.MaxVersion = tls.VersionTLS12
	c12 := dialTLS(t, s.addr, old)
	if v := c12.do("GET", "n"); v.Str != "1000" || c12.c.ConnectionState().Version != tls.VersionTLS12 {
		t.Errorf("TLS 1.2: GET n = %v over %s", v, tls.VersionName(c12.c.ConnectionState().Version))
	}
	refused := 0
	ancient := clientConfig(cs.server)
	ancient.MinVersion, ancient.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if c, err := tls.Dial("tcp", s.addr, ancient); err == nil {
		c.Close()
		t.Error("a TLS 1.1 client was served")
	} else {
		refused++
	}
	if c, err := tls.Dial("tcp", s.addr, clientConfig(cs.client)); err == nil {
		c.Close()
		t.Error("a client trusting another certificate completed its handshake")
	} else {
		refused++
	}
	// QUIT: +OK, then the server's close_notify before its FIN.
	if v := c12.do("QUIT"); v.Str != "OK" {
		t.Errorf("QUIT: %v", v)
	}
	if b, err := io.ReadAll(c12.r); len(b) > 0 || err != nil || c12.raw.eof.Load() {
		t.Errorf("after QUIT: read %q, %v, end of the TCP stream read %v: want close_notify", b, err, c12.raw.eof.Load())
	}
	c.c.Close()
	l := lastTLSLine(t, s.stop(t))
	if l.handshakes != 2 || l.failures() != refused || l.inProgress != 0 {
		t.Errorf("TLS counters %+v: want 2 handshakes and %d failures", l, refused)
	}
}

// TestTLSNotTLS has clients that do not speak TLS hit the TLS port: one
// sends a plain RESP PING, one connects and sends nothing. Neither is ever
// answered in plaintext, the silent one is closed after
// -tls-handshake-timeout, and a TLS client connected before and one
// connected after are served throughout. INFO's connected_clients counts
// only the TLS clients: a failed handshake never opened a connection.
func TestTLSNotTLS(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s, cfg := serveSelfSigned(t, "-tls-handshake-timeout", timeout.String())
	before := dialTLS(t, s.addr, cfg)
	if v := before.do("SET", "k", "v"); v.Str != "OK" {
		t.Fatalf("SET: %v", v)
	}

	plain, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	silent, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	began := time.Now()
	plain.Write(resp.AppendCommand(nil, "PING"))
	plain.SetDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(plain); isTimeout(err) || bytes.Contains(b, []byte("PONG")) {
		t.Errorf("plain PING to the TLS port: read %q, %v; want it closed without an answer", b, err)
	}
	if v := before.do("GET", "k"); v.Str != "v" {
		t.Errorf("the TLS client connected before, after the plain PING: %v", v)
	}
	silent.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(silent)
	waited := time.Since(began)
	if isTimeout(err) || len(b) > 0 || waited < timeout*2/3 {
		t.Errorf("silent client: read %q, %v after %v; want it closed after the %v handshake timeout", b, err, waited, timeout)
	}
	after := dialTLS(t, s.addr, cfg)
	if v := after.do("GET", "k"); v.Str != "v" {
		t.Errorf("a TLS client connected after: %v", v)
	}
	if v := after.do("INFO"); !strings.Contains(v.Str, "connected_clients:2\r\n") {
		t.Errorf("INFO with 2 TLS clients and 2 failed handshakes:\n%s", v.Str)
	}
	before.c.Close()
	after.c.Close()
	out := s.stop(t)
	l := lastTLSLine(t, out)
	if l.handshakes != 2 || l.timedOut != 1 || l.failed["not-tls"] != 1 || l.inProgress != 0 {
		t.Errorf("TLS counters %+v: want 2 handshakes, 1 timed out, 1 not-tls\n%s", l, out)
	}
	if !strings.Contains(out, "handshake 2") {
		t.Errorf("report lacks the 2 connections closed by their handshake:\n%s", out)
	}
}

// TestTLSMaxHandshakes fills -tls-max-handshakes with clients stalled
// in their handshake (a record header, then nothing): a TLS client beyond
// them is reset at once, and served once one of them has gone. Silent
// clients, which have not begun a handshake, do not count.
func TestTLSMaxHandshakes(t *testing.T) {
	s, cfg := serveSelfSigned(t, "-tls-max-handshakes", "2")
	var stalled []net.Conn
	for i := range 4 {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i < 2 {
			// A handshake record's header (512 bytes to come): the
			// handshake begins and waits for the rest.
			c.Write([]byte{22, 3, 1, 2, 0})
			stalled = append(stalled, c)
		}
	}
	// Give the server a moment to accept them and begin the two
	// handshakes.
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	if c, err := tls.Dial("tcp", s.addr, cfg); err == nil {
		c.Close()
		t.Error("a third handshake was accepted with -tls-max-handshakes 2")
	} else if time.Since(began) > 5*time.Second {
		t.Errorf("refused only after %v: %v", time.Since(began), err)
	}
	stalled[0].Close()
	var served bool
	for deadline := time.Now().Add(10 * time.Second); !served && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c, err := tls.Dial("tcp", s.addr, cfg); err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(resp.AppendCommand(nil, "PING"))
			v, err := resp.ReadValue(bufio.NewReader(c))
			served = err == nil && v.Str == "PONG"
			c.Close()
		}
	}
	if !served {
		t.Error("no TLS client served after one stalled client left")
	}
	stalled[1].Close()
	l := lastTLSLine(t, s.stop(t))
	if l.refused < 1 || l.handshakes < 1 {
		t.Errorf("TLS counters %+v: want a refusal and a handshake", l)
	}
}

// TestTLSShutdown stops the server (SIGTERM, in main) while a TLS client
// pipelines 20,000 INCRs: the replies it gets are 1, 2, 3 ... with no gap,
// and the stream ends with the server's close_notify, not a reset.
func TestTLSShutdown(t *testing.T) {
	s, cfg := serveSelfSigned(t)
	c := dialTLS(t, s.addr, cfg)
	pipe := incrs(20000)
	// The server stops reading once the shutdown begins, so the write
	// may never finish: it ends when the connection does.
	go c.c.Write(pipe)
	if v := c.read(); v.Int != 1 {
		t.Fatalf("first reply %v", v)
	}
	stopped := make(chan string, 1)
	go func() { stopped <- s.stop(t) }()
	got := int64(1)
	var end error
	for {
		v, err := resp.ReadValue(c.r)
		if err != nil {
			end = err
			break
		}
		if v.Int != got+1 {
			t.Fatalf("after reply %d: %v", got, v)
		}
		got++
	}
	if end != io.EOF || c.raw.eof.Load() {
		t.Errorf("after %d replies: %v (end of the TCP stream read: %v), want close_notify", got, end, c.raw.eof.Load())
	}
	out := <-stopped
	if !strings.Contains(out, "shut down: 1 connection finished, 0 connections reset") {
		t.Errorf("%d replies; server output:\n%s", got, out)
	}
	t.Logf("%d of 20,000 pipelined INCRs answered before the shutdown closed the connection", got)
}

// TestTLSHalfClose pipelines 20,000 INCRs and closes its side at once
// (close_notify, then FIN), as a script piping commands does: every
// command is answered before the server's close_notify.
func TestTLSHalfClose(t *testing.T) {
	s, cfg := serveSelfSigned(t)
	c := dialTLS(t, s.addr, cfg)
	pipe := incrs(20000)
	werr := make(chan error, 1)
	go func() {
		_, err := c.c.Write(pipe)
		if err == nil {
			err = c.c.CloseWrite()
		}
		werr <- err
	}()
	for i := int64(1); i <= 20000; i++ {
		v, err := resp.ReadValue(c.r)
		if err != nil || v.Int != i {
			t.Fatalf("reply %d: %v, %v", i, v, err)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c.r); len(b) > 0 || err != nil || c.raw.eof.Load() {
		t.Errorf("after the last reply: %q, %v, end of the TCP stream read %v: want close_notify", b, err, c.raw.eof.Load())
	}
}

// TestTLSSlowReader pipelines 100 GETs of a 1 MB value over TLS and reads
// nothing for a while: the server holds them in bounded memory and serves
// another client meanwhile; then every reply arrives, byte for byte.
func TestTLSSlowReader(t *testing.T) {
	s, cfg := serveSelfSigned(t)
	a := dialTLS(t, s.addr, cfg)
	value := string(randomValue(1<<20, 3))
	if v := a.do("SET", "big", value); v.Str != "OK" {
		t.Fatal(v)
	}
	runtime.GC()
	rss0 := rss(t)
	var pipe []byte
	for range 100 {
		pipe = resp.AppendCommand(pipe, "GET", "big")
	}
	go a.c.Write(pipe)
	b := dialTLS(t, s.addr, cfg)
	var worst time.Duration
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		began := time.Now()
		if v := b.do("PING"); v.Str != "PONG" {
			t.Fatalf("PING: %v", v)
		}
		worst = max(worst, time.Since(began))
	}
	if grew := rss(t) - rss0; grew > 64<<20 {
		t.Errorf("RSS grew by %d MB while 100 MB of replies were pipelined and unread over TLS, want at most 64 MB", grew>>20)
	}
	if worst > time.Second {
		t.Errorf("another client's PING took up to %v", worst)
	}
	for i := range 100 {
		if v := a.read(); v.Str != value {
			t.Fatalf("reply %d: %d bytes, want the 1 MB value", i, len(v.Str))
		}
	}
	if v := a.do("PING"); v.Str != "PONG" {
		t.Errorf("the slow client after its replies: %v", v)
	}
	a.c.Close()
	b.c.Close()
	if out := s.stop(t); !strings.Contains(out, "lost output 0 B") || strings.Contains(out, "abort") {
		t.Errorf("replies lost or a client aborted:\n%s", out)
	}
}

// rss returns the process's resident set size in bytes.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestTLSSelfSignedTempFile checks -tls-self-signed without
// -tls-cacert-out: the certificate goes to a temporary file, whose path is
// printed, which a client can trust, and which is gone after the server.
func TestTLSSelfSignedTempFile(t *testing.T) {
	s := serve(t, "-tls-self-signed")
	m := regexp.MustCompile(`its certificate \(PEM\) is (\S+): redis-cli --tls --cacert (\S+) -p (\d+)`).FindStringSubmatch(s.out.String())
	if m == nil || m[1] != m[2] || m[3] != s.port {
		t.Fatalf("no usable redis-cli line in:\n%s", s.out)
	}
	pool, err := selfsigned.LoadPool(m[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range selfsigned.DefaultHosts[:2] { // ::1 may not be configured
		c := dialTLS(t, s.addr, &tls.Config{RootCAs: pool, ServerName: name})
		if v := c.do("PING"); v.Str != "PONG" {
			t.Errorf("as %s: %v", name, v)
		}
		c.c.Close()
	}
	s.stop(t)
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after the server: %v", m[1], err)
	}
}

func TestTLSFlags(t *testing.T) {
	cs := makeCerts(t)
	bad := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(bad, []byte("no PEM here\n"), 0o644)
	for _, args := range [][]string{
		{"-tls-cert", cs.serverCert},
		{"-tls-key", cs.serverKey},
		{"-tls-self-signed", "-tls-cert", cs.serverCert, "-tls-key", cs.serverKey},
		{"-tls-cacert-out", filepath.Join(t.TempDir(), "ca.pem")},
		{"-tls-client-ca", cs.clientCert},
		{"-tls-alpn", "redis"},
		{"-tls-handshake-timeout", "1s"},
		{"-tls-max-handshakes", "10"},
		{"-tls-self-signed", "-tls-max-handshakes", "-1"},
		{"-tls-self-signed", "-tls-handshake-timeout", "-1s"},
		{"-tls-cert", cs.serverCert, "-tls-key", cs.clientKey}, // not its key
		{"-tls-cert", bad, "-tls-key", cs.serverKey},
		{"-tls-self-signed", "-tls-client-ca", bad},
		{"-tls-self-signed", "-tls-cacert-out", filepath.Join(t.TempDir(), "no", "such", "dir")},
	} {
		if err := run(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, args...), io.Discard, io.Discard, nil); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	// Refused for what it means, not as an unknown flag: the name is the
	// one the README and the other examples give.
	err := run(context.Background(), []string{"-tls-cacert-out", "x.pem"}, io.Discard, io.Discard, nil)
	if err == nil || err.Error() != "-tls-cacert-out needs -tls-self-signed" {
		t.Errorf("-tls-cacert-out without -tls-self-signed: %v", err)
	}
	var help bytes.Buffer
	run(context.Background(), []string{"-h"}, io.Discard, &help, nil)
	for _, want := range []string{"-tls-cert", "-tls-key", "-tls-self-signed", "-tls-cacert-out", "-tls-client-ca", "-tls-alpn", "-tls-handshake-timeout", "-tls-max-handshakes"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// tool returns the path of an installed program or skips the test.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian package %s): skipped", name, pkg)
	}
	return p
}

// command runs name with args and stdin, bounded by a minute, and returns
// its combined output and error; a hang fails the test.
func command(t *testing.T, stdin io.Reader, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not finish in a minute:\n%s", name, args, lastLines(string(out), 20))
	}
	return string(out), err
}

// lastLines keeps the last n lines of out, each the final redraw of a
// line redis-benchmark -q rewrites with carriage returns.
func lastLines(out string, n int) string {
	var lines []string
	for line := range strings.Lines(out) {
		parts := strings.Split(strings.TrimRight(line, "\r\n"), "\r")
		if l := strings.TrimSpace(parts[len(parts)-1]); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestTLSRedisCLI drives the TLS server with redis-cli --tls: commands, a
// 1 MB binary value set from standard input and read back byte for byte,
// and 20,000 commands through redis-cli --pipe.
func TestTLSRedisCLI(t *testing.T) {
	cli := tool(t, "redis-cli", "redis-tools")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	s := serve(t, "-tls-self-signed", "-tls-cacert-out", ca)
	base := []string{"--tls", "--cacert", ca, "-h", "127.0.0.1", "-p", s.port}
	redis := func(stdin io.Reader, args ...string) string {
		t.Helper()
		out, err := command(t, stdin, cli, append(base, args...)...)
		if err != nil {
			t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
		}
		return out
	}
	if out := redis(nil, "PING"); out != "PONG\n" {
		t.Errorf("PING: %q", out)
	}
	big := randomValue(1<<20, 2)
	if out := redis(bytes.NewReader(big), "-x", "SET", "big"); out != "OK\n" {
		t.Errorf("SET big (1 MB from stdin): %q", out)
	}
	if out := redis(nil, "STRLEN", "big"); out != "1048576\n" {
		t.Errorf("STRLEN big: %q", out)
	}
	// Not a terminal: redis-cli prints the bulk string raw, then a newline.
	if out := redis(nil, "GET", "big"); out != string(big)+"\n" {
		t.Errorf("GET big: %d bytes, want the 1,048,576 set and a newline; equal to the value: %v", len(out), strings.TrimSuffix(out, "\n") == string(big))
	}
	// A pipeline: 10,000 SETs of distinct values and 10,000 INCRs of one
	// counter, which must end at 10,000 if no command was lost or run
	// twice.
	var pipe []byte
	for i := range 10000 {
		pipe = resp.AppendCommand(pipe, "SET", fmt.Sprintf("key:%d", i), fmt.Sprintf("value:%d", i*7))
		pipe = resp.AppendCommand(pipe, "INCR", "counter")
	}
	out := redis(bytes.NewReader(pipe), "--pipe")
	if !strings.Contains(out, "errors: 0, replies: 20000") {
		t.Errorf("redis-cli --pipe of 20,000 commands:\n%s", out)
	}
	if out := redis(nil, "GET", "counter"); out != "10000\n" {
		t.Errorf("counter after the pipeline: %q", out)
	}
	for _, i := range []int{0, 4321, 9999} {
		if out, want := redis(nil, "GET", fmt.Sprintf("key:%d", i)), fmt.Sprintf("value:%d\n", i*7); out != want {
			t.Errorf("key:%d: %q, want %q", i, out, want)
		}
	}
	if out := redis(nil, "DBSIZE"); out != "10002\n" {
		t.Errorf("DBSIZE: %q", out)
	}
	// Commands on standard input, one a line, as a script pipes them.
	if out := redis(strings.NewReader("set piped 1\nincr piped\nget piped\n")); out != "OK\n2\n2\n" {
		t.Errorf("piped commands: %q", out)
	}
	l := lastTLSLine(t, s.stop(t))
	if l.failures() != 0 || l.handshakes < 10 {
		t.Errorf("TLS counters %+v: want at least 10 handshakes (one a redis-cli), none failed", l)
	}
}

// TestTLSRedisBenchmark runs redis-benchmark --tls with 50 clients
// pipelining 16 commands each: every request must be answered.
func TestTLSRedisBenchmark(t *testing.T) {
	bench := tool(t, "redis-benchmark", "redis-tools")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	s := serve(t, "-tls-self-signed", "-tls-cacert-out", ca)
	out, err := command(t, nil, bench, "--tls", "--cacert", ca, "-h", "127.0.0.1", "-p", s.port, "-n", "20000", "-P", "16", "-t", "set,get", "-q")
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, lastLines(out, 20))
	}
	final := lastLines(out, 20)
	for _, test := range []string{"SET", "GET"} {
		if !regexp.MustCompile(`(?m)^` + test + `: [0-9.]+ requests per second`).MatchString(final) {
			t.Errorf("redis-benchmark output lacks %s's requests per second:\n%s", test, final)
		}
	}
	if strings.Contains(out, "rror") || strings.Contains(out, "WARN") {
		t.Errorf("redis-benchmark reported errors:\n%s", final)
	}
	t.Logf("redis-benchmark --tls -n 20000 -P 16 (server under the test's build):\n%s", final)
	report := s.stop(t)
	l := lastTLSLine(t, report)
	if l.failures() != 0 || l.handshakes < 100 || l.inProgress != 0 {
		t.Errorf("TLS counters %+v: want at least 100 handshakes (50 clients a test), none failed", l)
	}
	if !strings.Contains(report, "lost output 0 B") {
		t.Errorf("replies were lost:\n%s", report)
	}
}

// sClient runs openssl s_client against the server, verifying its
// certificate against ca for the name localhost, sends a PING and a QUIT,
// and reads until the server closes. It returns the output and whether
// s_client exited successfully.
func sClient(t *testing.T, openssl, port, ca string, args ...string) (string, bool) {
	t.Helper()
	args = append([]string{"s_client", "-connect", "127.0.0.1:" + port, "-CAfile", ca,
		"-verify_return_error", "-verify_hostname", "localhost", "-ign_eof"}, args...)
	out, err := command(t, strings.NewReader("PING\r\nQUIT\r\n"), openssl, args...)
	return out, err == nil
}

// served reports whether s_client's session carried the PING and the QUIT
// and ended with the server's close_notify (s_client prints "closed"; a
// bare FIN is an error to OpenSSL 3, "unexpected eof while reading").
func served(out string) bool {
	return strings.Contains(out, "+PONG\r\n") && strings.Contains(out, "+OK\r\n") && strings.Contains(out, "\nclosed\n") &&
		strings.Contains(out, "Verify return code: 0 (ok)") && !strings.Contains(out, "unexpected eof")
}

var protocolRE = regexp.MustCompile(`Protocol\s*:\s*(\S+)`)

// TestTLSOpenSSL connects with openssl s_client: TLS 1.3 and TLS 1.2 each
// negotiate and carry commands, ALPN picks the server's preferred
// protocol among those offered and refuses a client offering none of them,
// and sessions resume with either version.
func TestTLSOpenSSL(t *testing.T) {
	openssl := tool(t, "openssl", "openssl")
	cs := makeCerts(t)
	s := serve(t, "-tls-cert", cs.serverCert, "-tls-key", cs.serverKey, "-tls-alpn", "redis,x-kv")
	sc := func(args ...string) (string, bool) {
		t.Helper()
		return sClient(t, openssl, s.port, cs.serverCert, args...)
	}
	handshakes, failures := 0, 0
	for _, v := range []struct{ flag, name string }{{"-tls1_3", "TLSv1.3"}, {"-tls1_2", "TLSv1.2"}} {
		out, ok := sc(v.flag)
		handshakes++
		if m := protocolRE.FindStringSubmatch(out); !ok || m == nil || m[1] != v.name || !served(out) {
			t.Errorf("s_client %s: protocol %q, exit ok %v, served %v:\n%s", v.flag, m, ok, served(out), out)
		}
		if !strings.Contains(out, "No ALPN negotiated") {
			t.Errorf("s_client %s without -alpn: ALPN negotiated:\n%s", v.flag, out)
		}
	}
	for _, a := range []struct{ offer, want string }{{"redis", "redis"}, {"x-kv,redis", "redis"}, {"h2,x-kv", "x-kv"}} {
		out, ok := sc("-alpn", a.offer)
		handshakes++
		if !ok || !strings.Contains(out, "ALPN protocol: "+a.want+"\n") || !served(out) {
			t.Errorf("s_client -alpn %s: want ALPN protocol %s:\n%s", a.offer, a.want, out)
		}
	}
	out, ok := sc("-alpn", "h2,http/1.1")
	failures++
	if ok || strings.Contains(out, "+PONG") || !strings.Contains(out, "no application protocol") {
		t.Errorf("s_client -alpn h2,http/1.1 (none the server speaks): want the handshake refused:\n%s", out)
	}
	for _, v := range []string{"-tls1_3", "-tls1_2"} {
		sess := filepath.Join(t.TempDir(), "session.pem")
		first, _ := sc(v, "-sess_out", sess)
		second, _ := sc(v, "-sess_in", sess)
		handshakes += 2
		if !served(first) || !served(second) || !strings.Contains(first, "\nNew, TLS") || !strings.Contains(second, "\nReused, TLS") {
			t.Errorf("s_client %s: the second connection did not resume the first's session:\nfirst:\n%s\nsecond:\n%s", v, first, second)
		}
	}
	l := lastTLSLine(t, s.stop(t))
	if l.handshakes != handshakes || l.failures() != failures {
		t.Errorf("TLS counters %+v: want %d handshakes and %d failures", l, handshakes, failures)
	}
}

// TestTLSClientCertificates serves mutual TLS (-tls-client-ca): openssl
// s_client with the client certificate is served over either version;
// without one, or with a certificate the server was not told to trust, it
// is refused before any command runs.
func TestTLSClientCertificates(t *testing.T) {
	openssl := tool(t, "openssl", "openssl")
	cs := makeCerts(t)
	s := serve(t, "-tls-cert", cs.serverCert, "-tls-key", cs.serverKey, "-tls-client-ca", cs.clientCert)
	sc := func(args ...string) (string, bool) {
		t.Helper()
		return sClient(t, openssl, s.port, cs.serverCert, args...)
	}
	for _, v := range []string{"-tls1_3", "-tls1_2"} {
		if out, ok := sc(v, "-cert", cs.clientCert, "-key", cs.clientKey); !ok || !served(out) {
			t.Errorf("s_client %s with the client certificate: not served:\n%s", v, out)
		}
		for _, refused := range [][]string{{v}, {v, "-cert", cs.strangerPEM, "-key", cs.strangerKey}} {
			// Over TLS 1.3 the client sends its PING before the server
			// has checked the certificate; it must never be answered.
			if out, ok := sc(refused...); ok || strings.Contains(out, "+PONG") || !strings.Contains(out, "alert") {
				t.Errorf("s_client %q: want the handshake refused with an alert:\n%s", refused, out)
			}
		}
	}
	// Go's client too: the certificate a connection presented is what
	// the server saw.
	cfg := clientConfig(cs.server)
	cfg.Certificates = []tls.Certificate{cs.client.TLS}
	if v := dialTLS(t, s.addr, cfg).do("PING"); v.Str != "PONG" {
		t.Errorf("Go client with its certificate: %v", v)
	}
	out := s.stop(t)
	l := lastTLSLine(t, out)
	if l.handshakes != 3 || l.failures() != 4 {
		t.Errorf("TLS counters %+v: want 3 handshakes, 4 failures\n%s", l, out)
	}
}
